"""Recordings, event clips and snapshots (`--record DIR`, docs/ingest.md "Recordings")."""
