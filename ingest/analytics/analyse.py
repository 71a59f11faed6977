"""A camera's answers, in capture order, through its tracker, zones and lines (`ingest.analytics.scene`).

Called with each unit's result lines once they are in sequence order (the camera's sequencer
holds them back until then): adds `track_id` to the detections it writes, the zone and line
events after the frame they happened in, the metrics, and the `--snapshot` picture (drawn and
written by a background writer, never on this path).

When tracks end (DESIGN section 13): the tracker ends them (unseen `lost_track_seconds` of
stream time), it starts anew (a new connection, a new frame size, stream time going back: the
one rule for time is the tracker's), or the camera goes down (`end`, after the lines of the
connection's last units). Their zones' `left` events follow at once.

Motion first (issue 48): a line with `looked: false` (nothing moved: the model did not look) is
a frame with nothing in view, not a frame without objects; one with `regions` had only those in
view. The tracker keeps the tracks out of view as they were (`ingest.analytics.tracking`), so
they keep their zones and dwell. Lines without `looked` (motion off) are tracked as ever.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from ingest.analytics.counting import Counting, Tracked
from ingest.analytics.scene import Scene
from ingest.analytics.snapshot import Snapshots
from ingest.analytics.tracking import Regions, Tracks
from ingest.cameras.units import Unit
from ingest.sinks.metrics import Metrics

logger = logging.getLogger(__name__)

Line = dict[str, Any]


class Analytics:
    """One camera's tracks and counts. Thread-safe (`release`, `end` and `reconfigure` may race).

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
            scene.zones, scene.lines,
            lambda zone, label, n: self._metrics.zone_objects(self._camera, zone, label, n),
            lambda line, direction, label: self._metrics.crossed(self._camera, line, direction, label),
            self._failed)
        self._snapshots = Snapshots(snapshots, camera, scene.snapshot_seconds, self._failed) if snapshots else None
        self._where: tuple[int, tuple[int, int]] | None = None  # (session, size) the tracker follows
        self._active: int | None = None  # what video_ingest_tracks_active says
        self._warned = False
        self._warned_cap = False
        self._failures = 0
        self._closed = False

    def reconfigure(self, scene: Scene, now: float) -> list[Line]:
        """New settings from a reload, for the next frame: the tracks go on, with the tracker's
        new `lost_track_seconds` and `track_threshold` (unless tracking was turned off: then
        every track ends). Returns the events of the tracks that ended."""
        with self._lock:
            events = []
            if not scene.track:
                events = self._end_all()
            self._tracks.configure(scene.lost_track_seconds, scene.track_threshold)
            for zone in self._counting.reconfigure(scene.zones, scene.lines):
                self._metrics.remove_zone(self._camera, zone)
            if self._snapshots is not None:
                self._snapshots.every_s = scene.snapshot_seconds
            self._scene = scene
            return self._stamped(events, now)

    def release(self, unit: Unit | None, lines: list[Line], now: float) -> list[Line]:
        """`lines` (one unit's, in order) with track ids, followed each by its frame's events."""
        with self._lock:
            if self._closed:
                return lines
            self._count_looks(lines)
            if not self._scene.track and self._snapshots is None:
                return lines
            out: list[Line] = []
            for line in lines:
                out.append(line)
                if line.get("status") != 200 or unit is None:
                    continue
                if self._scene.track:
                    out += self._guarded(unit, line, now)
            if (self._snapshots is not None and unit is not None and lines and lines[0].get("status") == 200
                    and lines[0].get("looked") is not False):  # a frame not looked at has no boxes to draw
                self._snapshots.offer(unit, lines[0], self._scene)
            return out

    def _count_looks(self, lines: list[Line]) -> None:
        """`video_ingest_motion_*`: the frames the model looked at, their regions, the frames it
        skipped (lines with `looked`: the camera's motion is on)."""
        for line in lines:
            if line.get("status") == 200 and "looked" in line:
                looked = line["looked"] is not False
                self._metrics.looked(self._camera, looked, len(line.get("regions") or ()) if looked else 0)

    def end(self, now: float, close: bool = False) -> list[Line]:
        """The camera went down (or stops, `close`): every track ends; its zones' `left` events
        are returned, the zone gauges and `video_ingest_tracks_active` go to 0. After `close`
        nothing is counted or set again."""
        with self._lock:
            if self._closed:
                return []
            events = self._stamped(self._end_all(), now)
            if close:
                self._closed = True
                if self._snapshots is not None:
                    self._snapshots.close()
            return events

    def _end_all(self) -> list[dict[str, Any]]:
        self._tracks.reset()
        self._where = None
        events = self._counting.end()
        self._show_active(0)
        return events

    def _guarded(self, unit: Unit, line: Line, now: float) -> list[Line]:
        """`_frame`, whose failure (a bug) is logged and never stops the camera's results."""
        try:
            return self._frame(unit, line, now)
        except Exception as exc:
            self._failed("tracking", "", exc)
            return []

    def _failed(self, stage: str, name: str, exc: Exception) -> None:
        """A stage (tracking, zone, line, snapshot) failed on a frame: counted, and logged at the
        1st, 10th, 100th, then every 1000th failure."""
        self._failures += 1
        self._metrics.analytics_error(self._camera, stage)
        if self._failures in (1, 10, 100) or self._failures % 1000 == 0:
            what = f"{stage} {name!r}" if name else stage
            logger.error("camera %s: %s failed on a frame (%d failures so far; the rest goes on): %s: %s",
                         self._camera, what, self._failures, type(exc).__name__, exc, exc_info=exc)

    def _frame(self, unit: Unit, line: Line, now: float) -> list[Line]:
        looked = line.get("looked") is not False
        detections = line.get("detections") if looked else []
        if not isinstance(detections, list):
            if not self._warned:
                logger.warning("camera %s: track is on but the answers carry no `detections`: "
                               "serve a detection model (task: detection) to it", self._camera)
                self._warned = True
            return []
        size = (int(line["width"]), int(line["height"]))
        events = self._follow((unit.session, size))
        capture = float(line["capture_time"])
        # The stream's own clock (for the tracker and the zones' dwell): a dropped segment is a gap
        # in it; capture times may re-anchor on the wall clock (ingest.cameras.clock) and look like one.
        pts = float(line["pts"])
        ids = self._tracks.update(detections, pts, _in_view(line, size))
        if self._tracks.dropped:
            self._dropped(len(detections))
        events += self._counting.end_tracks(self._tracks.ended)
        tracked, written = [], []
        display = self._scene.display_threshold
        for detection, track_id in zip(detections, ids):
            if track_id is None:
                continue
            tracked.append(Tracked(track_id, tuple(detection["box"]), str(detection.get("label", "")),
                                   detection.get("class_id")))
            if float(detection.get("score", 1.0)) >= display:
                written.append({**detection, "track_id": track_id})
        if looked:  # a frame not looked at has no answer to write: it is not a frame without objects
            line["detections"] = written
        self._show_active(len(tracked) + self._tracks.frozen)
        events += self._counting.frame(tracked, size, capture, pts)
        return self._stamped(events, now)

    def _follow(self, where: tuple[int, tuple[int, int]]) -> list[Line]:
        """The tracker follows (connection, frame size) `where`: a new one ends every track first."""
        events = []
        if where != self._where:
            if self._where is not None:
                self._tracks.reset()
                events = self._counting.end()
            self._where = where
        return events

    def _dropped(self, detections: int) -> None:
        """A frame brought more detections than the tracker takes: the rest are counted, and the
        first time told in the log."""
        dropped = self._tracks.dropped
        self._metrics.detections_dropped(self._camera, dropped)
        if not self._warned_cap:
            logger.warning("camera %s: a frame brought %d detections; the tracker takes the %d highest-scoring and "
                           "leaves the rest untracked and unwritten (video_ingest_detections_dropped_total): raise "
                           "the model's score_threshold or lower its max_detections", self._camera, detections,
                           detections - dropped)
            self._warned_cap = True

    def _show_active(self, tracks: int) -> None:
        if tracks != self._active:
            self._metrics.tracks_active(self._camera, tracks)
            self._active = tracks

    def _stamped(self, events: list[dict[str, Any]], now: float) -> list[Line]:
        return [{"camera": self._camera, **event, "time": round(now, 6)} for event in events]


def _in_view(line: Line, size: tuple[int, int]) -> Regions:
    """What the model saw of the line's frame, for the tracker: None all of it (no `looked`:
    motion is off; or a region that covers the frame), `[]` nothing (`looked: false`), else
    its `regions`."""
    if "looked" not in line:
        return None
    if line["looked"] is False:
        return []
    regions = line.get("regions")
    if not isinstance(regions, list):
        return None
    width, height = size
    if any(x1 <= 0 and y1 <= 0 and x2 >= width and y2 >= height for x1, y1, x2, y2 in regions):
        return None  # a whole look: tracked as the whole frame, exactly as with motion off
    return regions
