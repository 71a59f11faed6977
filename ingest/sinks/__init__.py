"""Sinks out: the results file, Prometheus metrics, MQTT (with Home Assistant discovery), and the
redaction every line passes through. Imports `cameras` (a unit, an answer), never `analytics` or `web`."""
