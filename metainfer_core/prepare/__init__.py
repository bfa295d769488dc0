"""The normalize stage: the run's model loaded, bound and normalized (normalize/), its validation
inputs and fp32 reference outputs, the accuracy metric, the feature map (stage: prepare)."""
