"""`--record DIR`: every recording camera's segments written as they arrive (no re-encode), its
events indexed with a snapshot and a clip, old recordings deleted (`ingest.record.retention`).

One writer thread owns the files and the index's writes, in the order things happened: a
segment, then the answers and events of its frames (the events' lines come after their segment,
so an event's snapshot finds its frame recorded). The cameras' threads only queue; a full queue
drops the segment (counted), never waits. Clips and snapshots are made on another thread
(`ingest.record.jobs`).

Layout: `DIR/index.sqlite3`; `DIR/CAMERA/YYYY-MM-DD/HH/<start>.ts` (UTC, segments back to back, a
new file every `FILE_SECONDS`); `DIR/CAMERA/clips/<id>.mp4`; `DIR/CAMERA/snapshots/<event>.jpg`.
"""

from __future__ import annotations

import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest.cameras.units import Recorded, Unit
from ingest.record import retention
from ingest.record.index import EVENTS, event_row
from ingest.record.jobs import Jobs
from ingest.record.metrics import RecordMetrics
from ingest.record.reconcile import reconcile
from ingest.record.settings import RecordMode, RecordSettings
from ingest.record.store import Store
from ingest.sinks.output import Lines

logger = logging.getLogger(__name__)

#: A recording file holds at most this many seconds of segments, and at most 1 / FILES_PER_CAP of
#: the cap's bytes (the cap deletes whole files: it is kept to within that share).
FILE_SECONDS = 60.0
FILES_PER_CAP = 20
#: Seconds beyond pre + post an events-mode (or motion-less) recording waits for a late event.
BUFFER_S = 300.0
#: Things waiting for the writer (segments, answers); beyond, a segment is dropped.
QUEUE = 4000
#: Seconds between the writer's checkpoints and retention passes.
TICK_S = 5.0
#: Tracks whose last box is remembered, per camera (the box an event's snapshot shows).
BOXES = 1000


@dataclass(slots=True)
class _File:
    rel: str
    start: float
    fd: int
    size: int
    written: float = 0.0  # monotonic time of the last write


class Recorder(Store):
    """Writes and indexes the recordings under `directory` (`Store` holds what its threads share).

    Args:
        directory: `--record DIR` (made if missing).
        cap: `--record-cap` in bytes, or None (90% of the file system's size).
        lines: the results, for the `clip` update of each event and `has_snapshot`/`has_clip`.
        metrics: the recorder's metrics.
        results: the results file (events missing from the index after a crash are taken from it).
    """

    def __init__(self, directory: Path, cap: int | None, lines: Lines, metrics: RecordMetrics,
                 results: Path | None = None) -> None:
        super().__init__(directory, cap, lines, metrics, results)
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(QUEUE)
        self._files: dict[str, _File] = {}
        self._boxes: dict[str, dict[int, tuple[list[float], int, int]]] = {}
        self._motion: dict[str, list[float]] = {}  # camera -> [first, last] capture time of its motion now
        self.jobs = Jobs(self)
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)
        self._next_tick = 0.0

    # --- the cameras' side: queue and return ------------------------------------------------

    def stamp(self, line: dict[str, Any]) -> None:
        """An event line's `has_snapshot` (one will be made: the camera records, and has
        recorded, so its codec is one that is) and `has_clip` (not yet: a `clip` line follows when
        it is ready), before it is written (`Lines.annotate`)."""
        camera = line.get("camera")
        if line.get("event") in EVENTS and camera is not None:
            line["has_snapshot"] = self.settings(camera) is not None and camera in self.recorded_to
            line["has_clip"] = False

    def segment(self, camera: str, unit: Unit, stream: Recorded) -> None:
        """A segment of a recording camera, as it was cut (the reader's thread)."""
        if self.settings(camera) is None:
            return
        try:
            self._queue.put_nowait(("segment", (camera, unit, stream)))
        except queue.Full:
            self.metrics.dropped.labels(camera, "behind").inc()

    def offer(self, lines: Iterable[tuple[Mapping[str, Any], str]]) -> None:
        """Every line written (a `Lines` sink): answers for motion and boxes, events for clips."""
        wanted = [line for line, _ in lines if self.settings(line.get("camera")) is not None]
        if wanted:
            try:
                self._queue.put_nowait(("lines", wanted))
            except queue.Full:  # a stalled disk: the events are still in the results file, taken at the next start
                logger.warning("recorder: behind; %d lines not indexed now", len(wanted))

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Recorder:
        """Reconciles the index with the disk (and the results file), then starts writing."""
        used, snapshots = reconcile(self)
        self.add_used(used)
        for event_id in snapshots:
            self.jobs.snapshot(event_id)
        self._thread.start()
        self.jobs.start()
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Writes what is queued, closes the files, makes the clips still waiting."""
        self._queue.put(("stop", None))
        self._thread.join(timeout)
        self.jobs.close(timeout)
        self.index.close()

    def over_cap(self) -> None:
        self._queue.put(("cap", None))

    # --- the writer's thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                kind, item = self._queue.get(timeout=TICK_S)
            except queue.Empty:
                kind, item = "idle", None
            if kind == "stop":
                self._close_files()
                return
            try:
                if kind == "segment":
                    self._write(*item)
                elif kind == "lines":
                    self._lines_in(item)
                elif kind == "cap":
                    retention.under_cap(self, 0)
                elif kind == "checkpoint":
                    self.index.set_meta("results", f"{self.results}\t{item}")
            except Exception as exc:  # the recorder must never stop: logged, and the next item goes on
                if retention.disk_is_full(exc):
                    retention.warn_full(self)
                    continue
                logger.error("recorder: %s failed: %s: %s", kind, type(exc).__name__, exc, exc_info=exc)
            if time.monotonic() >= self._next_tick:
                self._tick()

    def _tick(self) -> None:
        self._next_tick = time.monotonic() + TICK_S
        for camera, file in list(self._files.items()):  # a camera that stopped: its file may go by age
            if time.monotonic() - file.written > FILE_SECONDS:
                os.close(file.fd)
                del self._files[camera]
        for camera in list(self._motion):
            self._flush_motion(camera, keep_open=True)
        retention.by_age(self, time.time())
        retention.under_cap(self, 0)
        if self.results is not None:
            try:
                size = self.results.stat().st_size
            except OSError:
                return
            self._queue.put(("checkpoint", size))  # every line before `size` is queued before it

    def _write(self, camera: str, unit: Unit, stream: Recorded) -> None:
        """Records a segment; a full disk first frees room (the oldest recordings) and tries once more."""
        settings = self.settings(camera)
        if settings is None:
            return
        for attempt in (1, 2):
            try:
                self._record(camera, unit, stream, settings)
                return
            except (OSError, sqlite3.OperationalError) as exc:
                full = retention.disk_is_full(exc)
                if not full or attempt == 2:
                    self.metrics.dropped.labels(camera, "disk").inc()
                    if not full:
                        logger.error("recorder: camera %s: a segment was not recorded: %s", camera, exc)
                    return
                retention.disk_full(self, len(unit.body), exclude=self.open_files())

    def _record(self, camera: str, unit: Unit, stream: Recorded, settings: RecordSettings) -> None:
        start, end = _span(unit)
        file = self._file(camera, start)
        keep = start + (settings.retain_continuous * 86400 if settings.mode is RecordMode.CONTINUOUS
                        else settings.pre_seconds + settings.post_seconds + BUFFER_S)
        offset = file.size
        self.index.add_segment(camera, start, end, file.rel, offset, len(unit.body), unit.pts, stream.codec,
                               stream.width, stream.height, keep)
        try:
            _write_all(file.fd, unit.body)
        except OSError:
            os.ftruncate(file.fd, offset)
            retention.drop_segment(self, camera, file.rel, offset, len(unit.body))
            raise
        file.size += len(unit.body)
        file.written = time.monotonic()
        self.add_used(len(unit.body))
        self.metrics.written.labels(camera).inc(len(unit.body))
        self.recorded_to[camera] = end
        retention.under_cap(self, 0)
        self.jobs.wake()

    def _file(self, camera: str, start: float) -> _File:
        """The camera's open file, or a new one (the first; one `FILE_SECONDS` old or full; a new hour)."""
        file = self._files.get(camera)
        stamp = time.gmtime(start)
        if (file is not None and start - file.start < FILE_SECONDS and time.gmtime(file.start)[:4] == stamp[:4]
                and file.size < self.cap // FILES_PER_CAP):
            return file
        if file is not None:
            os.close(file.fd)
        rel = f"{camera}/{time.strftime('%Y-%m-%d/%H', stamp)}/{start:.3f}.ts"
        path = inside(self.directory, rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        file = self._files[camera] = _File(rel, start, fd, os.fstat(fd).st_size)
        return file

    def open_files(self) -> set[str]:
        """The files being written (never deleted)."""
        return {f.rel for f in self._files.values()}

    def _close_files(self) -> None:
        for camera in list(self._motion):
            self._flush_motion(camera)
        for file in self._files.values():
            os.close(file.fd)
        self._files.clear()

    def _lines_in(self, lines: Sequence[Mapping[str, Any]]) -> None:
        for line in lines:
            camera = str(line.get("camera"))
            if "event" not in line:
                self._answer(camera, line)
            elif line["event"] in EVENTS:
                self._event(camera, line)

    def _answer(self, camera: str, line: Mapping[str, Any]) -> None:
        """An answered frame: its tracks' boxes, and its motion (recordings kept in mode motion)."""
        if line.get("status") != 200:
            return
        boxes = self._boxes.setdefault(camera, {})
        for detection in line.get("detections") or ():
            if "track_id" in detection:
                boxes.pop(detection["track_id"], None)
                boxes[detection["track_id"]] = (detection["box"], line.get("width") or 0, line.get("height") or 0)
        while len(boxes) > BOXES:
            boxes.pop(next(iter(boxes)))
        settings = self.settings(camera)
        if settings is not None and settings.mode is RecordMode.MOTION and line.get("looked") is not False:
            self._moved(camera, float(line["capture_time"]), settings)

    def _moved(self, camera: str, at: float, settings: RecordSettings) -> None:
        window = self._motion.get(camera)
        if window is not None and at - window[1] > settings.pre_seconds + settings.post_seconds:
            self._flush_motion(camera)
            window = None
        if window is None:
            self._motion[camera] = [at, at]
        else:
            window[1] = max(window[1], at)

    def _flush_motion(self, camera: str, keep_open: bool = False) -> None:
        window = self._motion.get(camera) if keep_open else self._motion.pop(camera, None)
        settings = self._settings.get(camera)
        if window is None or settings is None:
            return
        self.index.keep(camera, window[0] - settings.pre_seconds, window[1] + settings.post_seconds,
                        window[0] + settings.retain_motion * 86400)

    def _event(self, camera: str, line: Mapping[str, Any]) -> None:
        settings = self.settings(camera)
        if settings is None or "event_id" not in line:
            return
        track = line.get("track_id")
        box = self._boxes.get(camera, {}).get(track) if track is not None else None
        row = event_row(line, box)
        if self.index.add_event(row):
            self.index.clip_for(row["id"], camera, track, row["at"] - settings.pre_seconds,
                                row["at"] + settings.post_seconds)
            self.jobs.snapshot(row["id"])


def _span(unit: Unit) -> tuple[float, float]:
    """A segment's first frame's capture time and its end (its last frame's plus a frame)."""
    times = [capture for _, capture in unit.frame_times] or [unit.capture_time]
    if len(times) < 2:
        return times[0], times[0] + 0.04
    step = (times[-1] - times[0]) / (len(times) - 1)
    return times[0], times[-1] + step


def _write_all(fd: int, body: bytes) -> None:
    view = memoryview(body)
    while view:
        view = view[os.write(fd, view):]


def inside(directory: Path, relative: str) -> Path:
    """`directory / relative`, refused if it would leave `directory` (a camera named `../x`).

    Raises:
        ValueError: the path escapes.
    """
    path = (directory / relative).resolve()
    if directory not in path.parents:
        raise ValueError(f"{relative!r} is outside the recordings' directory")
    return path
