"""A camera's answers, in capture order, through its tracker, zones and lines (`ingest.scene`).

Called with each unit's result lines once they are in sequence order (the camera's sequencer
holds them back until then): adds `track_id` to the detections it writes, the zone and line
events after the frame they happened in, the metrics, and the `--snapshot` picture.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from ingest.counting import Counting, Tracked
from ingest.metrics import Metrics
from ingest.scene import Scene
from ingest.snapshot import Snapshots
from ingest.tracking import Tracks
from ingest.units import Unit

logger = logging.getLogger(__name__)

Line = dict[str, Any]


class Analytics:
    """One camera's tracks and counts. Thread-safe (`release` and `reconfigure` may race).

    Args:
        camera: the camera's name.
        scene: its tracking, zones and lines.
        metrics: the process's metrics.
        snapshots: `--snapshot DIR`, or None.
    """

    def __init__(self, camera: str, scene: Scene, metrics: Metrics, snapshots: Path | None = None) -> None:
        self._camera = camera
        self._metrics = metrics
        self._lock = threading.Lock()
        self._scene = scene
        self._tracks = Tracks(scene.lost_track_seconds, scene.track_threshold)
        self._counting = Counting(
            scene.zones, scene.lines, scene.lost_track_seconds,
            lambda zone, label, n: self._metrics.zone_objects(self._camera, zone, label, n),
            lambda line, direction, label: self._metrics.crossed(self._camera, line, direction, label))
        self._snapshots = Snapshots(snapshots, camera, scene.snapshot_seconds) if snapshots else None
        self._where: tuple[int, tuple[int, int]] | None = None  # (session, size) the tracker follows
        self._pts = float("-inf")
        self._warned = False
        self._failures = 0

    def reconfigure(self, scene: Scene) -> None:
        """New settings from a reload: the tracks go on (unless tracking was turned off)."""
        with self._lock:
            if not scene.track:
                self._tracks.reset()
                self._where = None
            self._tracks.lost_track_seconds = scene.lost_track_seconds  # from the next tracker on
            self._tracks.threshold = scene.track_threshold
            for zone in self._counting.reconfigure(scene.zones, scene.lines, scene.lost_track_seconds):
                self._metrics.remove_zone(self._camera, zone)
            if self._snapshots is not None:
                self._snapshots.every_s = scene.snapshot_seconds
            self._scene = scene

    def release(self, unit: Unit | None, lines: list[Line], now: float) -> list[Line]:
        """`lines` (one unit's, in order) with track ids, followed each by its frame's events."""
        with self._lock:
            if not self._scene.track and self._snapshots is None:
                return lines
            out: list[Line] = []
            for line in lines:
                out.append(line)
                if line.get("status") != 200 or unit is None:
                    continue
                if self._scene.track:
                    out += self._guarded(unit, line, now)
            if self._snapshots is not None and unit is not None and lines and lines[0].get("status") == 200:
                self._snapshots.offer(unit, lines[0], self._scene)
            return out

    def _guarded(self, unit: Unit, line: Line, now: float) -> list[Line]:
        """`_frame`, whose failure (a bug) is logged and never stops the camera's results."""
        try:
            return self._frame(unit, line, now)
        except Exception:
            self._failures += 1
            if self._failures in (1, 10, 100) or self._failures % 1000 == 0:
                logger.exception("camera %s: tracking failed on a frame (%d so far); its line is written untracked",
                                 self._camera, self._failures)
            return []

    def _frame(self, unit: Unit, line: Line, now: float) -> list[Line]:
        detections = line.get("detections")
        if not isinstance(detections, list):
            if not self._warned:
                logger.warning("camera %s: track is on but the answers carry no `detections`: "
                               "serve a detection model (task: detection) to it", self._camera)
                self._warned = True
            return []
        events = []
        where = (unit.session, (int(line["width"]), int(line["height"])))
        pts = float(line["pts"])
        if where != self._where or pts <= self._pts:
            if self._where is not None:
                events += self._counting.end()
            self._tracks.reset()
            self._where = where
        self._pts = pts
        capture = float(line["capture_time"])
        # The stream's own clock (for the tracker and the zones' dwell): a dropped segment is a gap
        # in it; capture times may re-anchor on the wall clock (ingest.clock) and look like one.
        ids = self._tracks.update(detections, pts)
        tracked, written = [], []
        for detection, track_id in zip(detections, ids):
            if track_id is None:
                continue
            tracked.append(Tracked(track_id, tuple(detection["box"]), str(detection.get("label", "")),
                                   detection.get("class_id")))
            if float(detection.get("score", 1.0)) >= self._scene.display_threshold:
                written.append({**detection, "track_id": track_id})
        line["detections"] = written
        self._metrics.tracks_active(self._camera, len(tracked))
        events += self._counting.frame(tracked, where[1], capture, pts)
        return [{"camera": self._camera, **event, "time": round(now, 6)} for event in events]
