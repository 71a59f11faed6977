"""`video-ingest`: pulls camera streams (RTSP, files, HTTP MJPEG) and feeds them to TorchServe.

DESIGN.md section 4c. One process carries many cameras; each camera is a reader (connect, demux,
cut or sample, reconnect with backoff) and `max_in_flight` senders behind a bounded queue.
Imports `tskeys`/`tsutil` and nothing of the handler beyond its ground floor; nothing imports it.
"""
