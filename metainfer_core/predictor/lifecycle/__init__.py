"""A predictor's life: the train_predictor stage, revisions on disk, offline training and validation, fine-tuning, the calibration check."""
