"""Benchmarks that compare the video handler with a stock-style and a no-op handler in one run."""
