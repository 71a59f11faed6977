"""`video-ingest`: pulls camera streams (RTSP, files, HTTP MJPEG) and feeds them to TorchServe.

DESIGN.md section 4c. One process carries many cameras; each camera is a reader (connect, demux,
cut or sample, reconnect with backoff) and `max_in_flight` senders behind a bounded queue.
Imports `tskeys`/`tsutil` and nothing of the handler beyond its ground floor; nothing imports it.

Four rooms under the CLI (`cli`), the camera list (`config`) and the loop that ties a camera's
rooms together (`camera`, `fleet`, `shard`): `cameras` (in), `analytics`, `sinks` (out) and
`web`. A room imports only rooms below it (web > analytics > sinks > cameras) and, from the top,
only `config`; tests/unit/test_ingest_layers.py holds the rule.
"""
