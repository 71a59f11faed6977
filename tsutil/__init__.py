"""TorchServe plumbing shared by serve.sh, the tests, the bench and video-autotune (not in the .mar)."""
