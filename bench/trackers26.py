"""The baseline tracker of the tracking benches: Roboflow's `trackers` 2.6 `ByteTrackTracker`,
built and read exactly as video-ingest used it before its own (ingest/analytics/tracking.py, which runs the
same algorithm over every track at once), so that the figures compare with today's code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Update = Callable[[list[dict[str, Any]], float], list[int | None]]


def bytetrack(lost_track_seconds: float = 1.0, threshold: float = 0.5) -> Update:
    """An `update(detections, seconds) -> ids` like `ingest.analytics.tracking.Tracks.update`: each
    detection's id (the camera's, from 1) or None, driven by stream time."""
    import supervision as sv
    from trackers import ByteTrackTracker

    tracker = ByteTrackTracker(lost_track_buffer=max(1, round(lost_track_seconds * 30)), frame_rate=30.0,
                               track_activation_threshold=threshold, high_conf_det_threshold=threshold)
    camera_ids: dict[int, int] = {}

    def update(detections: list[dict[str, Any]], seconds: float) -> list[int | None]:
        n = len(detections)
        frame = sv.Detections(xyxy=np.array([d["box"] for d in detections], dtype=np.float64).reshape(n, 4),
                              confidence=np.array([float(d.get("score", 1.0)) for d in detections], dtype=np.float64),
                              data={"index": np.arange(n)})
        result = tracker.update(frame, timestamp=seconds)
        ids: list[int | None] = [None] * n
        if result.tracker_id is None or len(result) == 0:  # (an empty answer carries no `index`)
            return ids
        for index, tracker_id in zip(result.data["index"], result.tracker_id):
            if tracker_id >= 0:
                ids[int(index)] = camera_ids.setdefault(int(tracker_id), len(camera_ids) + 1)
        return ids

    return update
