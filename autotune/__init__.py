"""video-autotune: measure and tune TorchServe's batchSize / maxBatchDelay for live video."""
