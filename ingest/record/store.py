"""What the recorder's threads share (the writer, the clips' thread, retention, reconcile): the
directory, the index, the metrics, the cap and the bytes held, the cameras' settings."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

from ingest.config import Camera
from ingest.record.index import Index
from ingest.record.metrics import RecordMetrics
from ingest.record.settings import RecordSettings
from ingest.sinks.output import Lines


class Store:
    """The recordings under `directory`: see `ingest.record.recorder.Recorder`, which writes them."""

    def __init__(self, directory: Path, cap: int | None, lines: Lines, metrics: RecordMetrics,
                 results: Path | None = None) -> None:
        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cap = cap if cap is not None else int(shutil.disk_usage(self.directory).total * 0.9)
        self.metrics = metrics
        self.metrics.cap.set(self.cap)
        self.index = Index(self.directory / "index.sqlite3")
        self.results = results
        self.recorded_to: dict[str, float] = {}  # camera -> end of its latest recorded segment
        self.used = 0
        self.warned_full = False
        self._lines = lines
        self._settings: dict[str, RecordSettings] = {}
        self._cameras: dict[str, Camera] = {}
        self._lock = threading.Lock()

    def configure(self, cameras: list[Camera] | tuple[Camera, ...] | Any) -> None:
        """The cameras and their settings (at start and after each reload)."""
        with self._lock:
            for camera in cameras:
                self._cameras[camera.name] = camera
                self._settings[camera.name] = camera.record or RecordSettings()

    def settings(self, camera: str | None) -> RecordSettings | None:
        """The camera's recording settings, or None when it does not record."""
        found = self._settings.get(camera or "")
        return found if found is not None and found.on else None

    def recording(self) -> list[tuple[str, RecordSettings]]:
        """The cameras that record, with their settings."""
        with self._lock:
            return [(name, s) for name, s in self._settings.items() if s.on]

    def camera(self, name: str) -> Camera | None:
        return self._cameras.get(name)

    def lines_event(self, camera: str, event: str, **fields: Any) -> None:
        """An event line of the recorder's (a clip made), written as every other."""
        self._lines.event(camera, event, **fields)

    def add_used(self, size: int) -> None:
        with self._lock:
            self.used += size
        self.metrics.used.set(self.used)

    def made(self, size: int) -> None:
        """A clip or snapshot of `size` bytes was written (the clips' thread): over the cap, the
        writer is asked to delete the oldest recordings at once (it deletes; the others never do)."""
        self.add_used(size)
        if self.used > self.cap:
            self.over_cap()

    def over_cap(self) -> None:
        """Asks the writer to bring the bytes held under the cap."""

    def open_files(self) -> set[str]:
        """The files being written (never deleted)."""
        return set()
