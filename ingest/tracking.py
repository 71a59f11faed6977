"""One camera's tracker: Roboflow's `trackers` ByteTrack, driven by the frames' times.

Chosen over supervision's `ByteTrack` by measurement (docs/ingest.md, "Tracks"): 2.5 to 3.6 times
cheaper a frame, and its timestamp mode makes a dropped segment a gap in time (the Kalman filter
predicts across it), where a frame-counting tracker sees one skipped frame and loses every fast
object. supervision deprecated its tracker for this one and removed it in 0.31.

Ids are the camera's own, from 1, and never repeat while the camera runs: `reset` (a reconnect,
a new resolution) starts a new tracker, whose ids map to fresh ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from trackers import ByteTrackTracker

#: `trackers` counts its lost-track buffer in frames of a 30 fps video.
_BUFFER_FPS = 30.0


class Tracks:
    """Track ids for each frame's boxes, in capture order.

    Args:
        lost_track_seconds: a track unseen this long ends.
        threshold: boxes scoring at least this start tracks and are matched first; lower ones
            only keep tracks alive. (Both apply from the next reset.)
    """

    def __init__(self, lost_track_seconds: float = 1.0, threshold: float = 0.5) -> None:
        self.lost_track_seconds = lost_track_seconds
        self.threshold = threshold
        self._tracker: ByteTrackTracker | None = None
        self._ids: dict[int, int] = {}  # the tracker's id -> the camera's
        self._issued = 0
        self._last: float | None = None

    @property
    def issued(self) -> int:
        """The camera's last id given (0: none yet)."""
        return self._issued

    def reset(self) -> None:
        """Every track ends; the next frame starts a new tracker (ids go on from `issued`)."""
        self._tracker = None
        self._ids = {}
        self._last = None

    def update(self, detections: Sequence[dict[str, Any]], seconds: float) -> list[int | None]:
        """The track id of each detection (None: not tracked, e.g. a box seen once).

        Args:
            detections: the frame's detections, each with `box` (x1, y1, x2, y2) and `score`.
            seconds: the frame's time (its stream time, in seconds): a gap in it is a gap in
                time, across which tracks are predicted; a frame not later than the last one is
                not tracked.
        """
        import supervision as sv

        if self._last is not None and seconds <= self._last:
            return [None] * len(detections)
        self._last = seconds
        tracker = self._tracker or self._new()
        n = len(detections)
        frame = sv.Detections(
            xyxy=np.array([d["box"] for d in detections], dtype=np.float64).reshape(n, 4),
            confidence=np.array([float(d.get("score", 1.0)) for d in detections], dtype=np.float64),
            data={"index": np.arange(n)})
        result = tracker.update(frame, timestamp=seconds)
        ids: list[int | None] = [None] * n
        if len(self._ids) > 2 * len(tracker.tracks) + 64:  # memory stays flat over a long run
            alive = {t.tracker_id for t in tracker.tracks}
            self._ids = {k: v for k, v in self._ids.items() if k in alive}
        if result.tracker_id is None or len(result) == 0:  # (an empty answer carries no `index`)
            return ids
        for index, tracker_id in zip(result.data["index"], result.tracker_id):
            if tracker_id >= 0:
                ids[int(index)] = self._camera_id(int(tracker_id))
        return ids

    def _new(self) -> ByteTrackTracker:
        from trackers import ByteTrackTracker

        # One threshold for both (the library's defaults, 0.7 to start a track and 0.6 to be matched
        # first, are MOT17's: most detectors' people and cars score lower).
        self._tracker = ByteTrackTracker(lost_track_buffer=max(1, round(self.lost_track_seconds * _BUFFER_FPS)),
                                         frame_rate=_BUFFER_FPS, track_activation_threshold=self.threshold,
                                         high_conf_det_threshold=self.threshold)
        return self._tracker

    def _camera_id(self, tracker_id: int) -> int:
        found = self._ids.get(tracker_id)
        if found is None:
            self._issued += 1
            found = self._ids[tracker_id] = self._issued
        return found
