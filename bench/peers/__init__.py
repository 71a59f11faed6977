"""Peer engines for `python -m bench.engines`: their servers, run in their own virtual environments."""
