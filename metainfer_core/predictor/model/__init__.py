"""The cost model itself: the kernel-level CatBoost, the model-level correction, the latency statistic it learns."""
