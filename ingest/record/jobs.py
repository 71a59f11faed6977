"""The recorder's second thread: each event's snapshot as soon as its frame is recorded, each clip
once its `post_seconds` are (or, for a camera that stopped sending, `LATE_S` after its end).

A clip made is told as a `clip` line (results and MQTT) for each of its events:
`{"camera": ..., "event": "clip", "of": <the event's event_id>, "has_snapshot": ..., "has_clip": true,
"clip_start": ..., "clip_end": ...}`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest.analytics.scene import Scene
from ingest.analytics.snapshot import draw
from ingest.record import clips, retention

if TYPE_CHECKING:
    from ingest.record.index import Clip
    from ingest.record.store import Store

logger = logging.getLogger(__name__)

#: Seconds past a clip's end after which it is made with what was recorded (the camera went quiet).
LATE_S = 20.0
#: Seconds a snapshot waits for its frame to be recorded.
SNAPSHOT_WAIT_S = 30.0
POLL_S = 0.5


def file_name(event_id: str) -> str:
    """An event id as a file name (`run:camera:n` -> `run_camera_n`; camera names are safe)."""
    return event_id.replace(":", "_").replace("/", "_")


class Jobs:
    """Snapshots and clips of one recorder, on one thread."""

    def __init__(self, recorder: Store) -> None:
        self._recorder = recorder
        self._ready = threading.Condition()
        self._snapshots: deque[tuple[str, float]] = deque()  # (event id, give up at)
        self._closed = False
        self._deadline = float("inf")
        self._thread = threading.Thread(target=self._run, name="recorder-clips", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float) -> None:
        """Stops after making the clips still waiting, with what is recorded (within `timeout`)."""
        self._deadline = time.monotonic() + timeout / 2
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._thread.join(timeout)

    def snapshot(self, event_id: str) -> None:
        with self._ready:
            self._snapshots.append((event_id, time.monotonic() + SNAPSHOT_WAIT_S))
            self._ready.notify()

    def wake(self) -> None:
        with self._ready:
            self._ready.notify()

    def _run(self) -> None:
        while True:
            with self._ready:
                if self._closed:
                    break
                self._ready.wait(POLL_S)
                waiting, self._snapshots = list(self._snapshots), deque()
            later = [job for job in waiting if not self._guarded(self._snapshot, *job)]
            with self._ready:
                self._snapshots.extendleft(reversed(later))
            for clip in self._recorder.index.pending_clips():
                if self._due(clip):
                    self._guarded(self._clip, clip)
        for clip in self._recorder.index.pending_clips():  # stopping: each with what is recorded
            if time.monotonic() > self._deadline:
                return
            self._guarded(self._clip, clip)

    def _guarded(self, job: Any, *args: Any) -> bool:
        """Runs a job; True when done (made, or failed for good), False to try again later."""
        try:
            return bool(job(*args))
        except Exception as exc:  # a job must never stop the others
            if retention.disk_is_full(exc):
                retention.warn_full(self._recorder)
                return True
            logger.warning("recorder: %s failed: %s: %s", job.__name__.strip("_"), type(exc).__name__, exc)
            return True

    def _due(self, clip: Clip) -> bool:
        return self._recorder.recorded_to.get(clip.camera, 0.0) >= clip.end or time.time() > clip.end + LATE_S

    def _snapshot(self, event_id: str, give_up: float) -> bool:
        recorder = self._recorder
        event = recorder.index.event(event_id)
        if event is None:
            return True  # deleted meanwhile
        held = recorder.index.segments(event["camera"], event["at"], event["at"])
        if not held or recorder.recorded_to.get(event["camera"], 0.0) < event["at"]:
            return time.monotonic() > give_up  # its frame is not recorded yet
        image = clips.frame_at(recorder.directory, held[0], event["at"])
        if image is None:
            return True
        camera = recorder.camera(event["camera"])
        detections = _detection(event, image.size)
        data = draw(image, detections, camera.scene if camera is not None else Scene())
        rel = f"{event['camera']}/snapshots/{file_name(event_id)}.jpg"
        _write(recorder.directory / rel, data)
        if recorder.index.snapshot_done(event_id, rel, len(data)):
            recorder.made(len(data))
        else:  # the event was deleted while its snapshot was made
            (recorder.directory / rel).unlink(missing_ok=True)
        return True

    def _clip(self, clip: Clip) -> bool:
        recorder = self._recorder
        rel = f"{clip.camera}/clips/{clip.id}.mp4"
        out = recorder.directory / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        try:
            first = clips.remux(recorder.directory, recorder.index.segments(clip.camera, clip.start, clip.end),
                                clip.start, clip.end, out)
        except Exception as exc:
            if retention.disk_is_full(exc):
                retention.warn_full(recorder)
            else:
                logger.warning("recorder: camera %s: clip %d (%.3f to %.3f) not made: %s: %s", clip.camera, clip.id,
                               clip.start, clip.end, type(exc).__name__, exc)
            recorder.index.clip_done(clip.id, None, 0, "failed", time.time())
            recorder.metrics.clip_failures.labels(clip.camera).inc()
            recorder.add_used(-clip.bytes)  # a clip made before, grown: its file is left for the next start
            return True
        size = out.stat().st_size
        recorder.metrics.build.observe(time.monotonic() - began)
        events = recorder.index.clip_done(clip.id, rel, size, "ready", time.time(), first)
        if events is None:  # its events were deleted while it was made
            out.unlink(missing_ok=True)
            return True
        recorder.made(size - clip.bytes)  # a clip made again, longer, replaced its file
        made = recorder.index.clip(clip.id)
        for event_id in events:
            self._told(event_id, made or clip)
        return True

    def _told(self, event_id: str, clip: Clip) -> None:
        event = self._recorder.index.event(event_id)
        if event is None:
            return
        self._recorder.metrics.clips.labels(clip.camera).inc()
        self._recorder.metrics.ready.observe(max(0.0, time.time() - event["at"]))
        self._recorder.lines_event(clip.camera, "clip", of=event_id, has_snapshot=event["has_snapshot"],
                                   has_clip=True, clip_start=round(clip.start, 6), clip_end=round(clip.end, 6))


def _detection(event: dict[str, Any], size: tuple[int, int]) -> list[dict[str, Any]]:
    """The event's box, in the snapshot's pixels (the answer's frame may have been scaled)."""
    found = event.get("box")
    if not found or not found.get("width"):
        return []
    sx, sy = size[0] / found["width"], size[1] / found["height"]
    x1, y1, x2, y2 = found["box"]
    return [{"box": [x1 * sx, y1 * sy, x2 * sx, y2 * sy], "track_id": event.get("track_id"),
             "label": event.get("label", "")}]


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.part")
    partial.write_bytes(data)
    os.replace(partial, path)
