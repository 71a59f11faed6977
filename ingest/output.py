"""Results and events as JSON lines (one object a line, flushed), every text redacted."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from ingest.clock import WallClock
from ingest.redact import Redactor


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

    def write(self, lines: list[dict[str, Any]]) -> None:
        if not lines:
            return
        text = "".join(self._redact(json.dumps(line, separators=(", ", ": "))) + "\n" for line in lines)
        with self._lock:
            self._out.write(text)
            self._out.flush()

    def event(self, camera: str | None, event: str, **fields: Any) -> None:
        """One event line: `{"camera": ..., "event": ..., "time": ..., **fields}`."""
        self.write([{"camera": camera, "event": event, "time": round(self._now(), 6), **fields}])

    def close(self) -> None:
        with self._lock:
            self._out.flush()
            if self._owned:
                self._out.close()
