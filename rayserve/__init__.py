"""`video-ray`: the handler's core on Ray Serve, serving the same `.mar` archives and doors as TorchServe."""
