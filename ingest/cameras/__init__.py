"""Cameras in: open a camera (RTSP, file, HTTP MJPEG), read and cut or sample it, reconnect with
backoff, queue its units, and send them to the model server (`client`). The lowest room: it
imports the top's `config` and nothing of the other rooms."""
