"""Recordings, event clips and snapshots (`--record DIR`, docs/ingest.md "Recordings"). Below the
web view, above analytics: it takes the cameras' units, the sinks' lines and the snapshots'
drawing, and only the web view (and the CLI) import it."""
