"""Simulated cameras posting frames to TorchServe, open loop, with a latency report (`video-loadgen`)."""
