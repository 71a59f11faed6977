"""Results and events as JSON lines (one object a line, flushed), every text redacted."""

from __future__ import annotations

import json
import logging
import math
import secrets
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, TextIO

from ingest.cameras.clock import WallClock
from ingest.sinks.redact import Redactor

logger = logging.getLogger(__name__)


class Sink(Protocol):
    """Another reader of the lines (MQTT): `offer` queues and returns at once."""

    def offer(self, lines: Iterable[tuple[Mapping[str, Any], str]]) -> None: ...


class Lines:
    """Writes JSON lines to a file (appended) or standard output. Thread-safe.

    Args:
        path: the file, or None for standard output.
        redact: masks secrets in every line (applied to the JSON text: nothing escapes it).
        now: the wall clock for events' `time`.
    """

    def __init__(self, path: Path | None, redact: Redactor, now: WallClock) -> None:
        self._out: TextIO = sys.stdout if path is None else Path(path).open("a", buffering=1)  # noqa: SIM115 (kept open; close() closes it)
        self._owned = path is not None
        self._redact = redact
        self._now = now
        self._lock = threading.Lock()
        self._run = secrets.token_hex(4)
        self._sequence: dict[str | None, int] = {}
        self._sinks: list[Sink] = []
        self._annotators: list[Callable[[dict[str, Any]], None]] = []

    def add_sink(self, sink: Sink) -> None:
        """`sink` gets every line written from now on, with its text, in the order written."""
        with self._lock:
            self._sinks.append(sink)

    def annotate(self, annotator: Callable[[dict[str, Any]], None]) -> None:
        """`annotator` may add fields to every line before it is written (the recorder's
        `has_snapshot` and `has_clip`), after its `event_id`."""
        with self._lock:
            self._annotators.append(annotator)

    def write(self, lines: list[dict[str, Any]]) -> None:
        """Writes `lines`, each event given its `event_id`: `<run>:<camera>:<n>`, n counting the
        camera's events (the process's own under an empty camera) from 1, run new each start."""
        if not lines:
            return
        with self._lock:
            for line in lines:
                if "event" in line:
                    camera = line.get("camera")
                    n = self._sequence[camera] = self._sequence.get(camera, 0) + 1
                    line["event_id"] = f"{self._run}:{camera or ''}:{n}"
                for annotator in self._annotators:
                    annotator(line)
            written = [strict_json(line) for line in lines]
            texts = [self._redact(text) for text, _ in written]
            self._out.write("".join(text + "\n" for text in texts))
            self._out.flush()
            for sink in self._sinks:
                sink.offer(zip([line for _, line in written], texts))

    def event(self, camera: str | None, event: str, **fields: Any) -> None:
        """One event line: `{"camera": ..., "event": ..., "time": ..., **fields}`."""
        self.write([{"camera": camera, "event": event, "time": round(self._now(), 6), **fields}])

    def close(self) -> None:
        with self._lock:
            self._out.flush()
            if self._owned:
                self._out.close()


def strict_json(line: dict[str, Any], separators: tuple[str, str] = (", ", ": ")) -> tuple[str, dict[str, Any]]:
    """`line` as strict JSON text (RFC 8259: no NaN or Infinity), and the line that text holds.

    Nothing non-finite should reach here (the client refuses such answers); if a bug lets one
    through, it is written as null and logged rather than as a `NaN` no strict reader parses.
    """
    try:
        return json.dumps(line, separators=separators, allow_nan=False), line
    except ValueError:
        finite = _finite(line)
        logger.error("a line held a non-finite number, written as null (a bug): camera %s, keys %s",
                     line.get("camera"), sorted(map(str, line)))
        return json.dumps(finite, separators=separators, allow_nan=False), finite


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
