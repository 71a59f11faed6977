"""One camera's tracker: ByteTrack over all of a frame's tracks at once, driven by stream time.

The algorithm and its constants are those of Roboflow's `trackers` 2.6 `ByteTrackTracker` (the
tracker this bridge used before, chosen by measurement: docs/ingest.md, "Tracks"): a
constant-velocity Kalman filter on the box corners, high-score boxes matched first by IoU
(optimal assignment), then the low-score ones to the tracks left, new tracks from unmatched
high-score boxes, an id on a track's second consecutive match, and a track ended once unseen for
`lost_track_seconds` of stream time. The difference is the arithmetic: that library runs one
8x8 numpy Kalman filter (with a 4x4 inverse) per track per frame. With its noise (P = I,
Q = 0.01 I, R = 0.1 I) every matrix is block-diagonal in the four (coordinate, velocity) pairs
and all four pairs of a track share one covariance, so a track's filter is 8 numbers of state
and the 3 of one symmetric 2x2 covariance, and a frame's predict and update are a few array
operations over every track together (docs/ingest.md, "Performance", for the figures).

Ids are the camera's own, from 1, and never repeat while the camera runs: a reset (a reconnect,
a new resolution, stream time going back) ends every track, and new tracks get new ids.

Motion first (issue 48): a frame the model looked at only in places (`regions`), or not at all,
says nothing of the tracks elsewhere. A track out of view that was matched at its last look is
frozen: not predicted, not aged, not matched, its state as it was, so a parked car keeps its id
through minutes unlooked at and is matched again at the next look. A track that was looked for
and missed ages by stream time as always, in view or not: what vanished ends
`lost_track_seconds` after it was missed, whatever the model looks at meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

#: The frame rate the filter's noise is tuned for: a gap of k / FPS seconds is a step of k frames.
FPS = 30.0
#: Steps this close to one frame (4 ms at 30 fps) keep the one-frame process noise.
_NOMINAL = 0.004 * FPS
_Q = 0.01  # process noise per frame, position and velocity
_R = 0.1  # measurement noise
_MIN_IOU = 0.1  # a match needs at least this overlap
_CONFIRM = 2  # consecutive matches that give a track its id
#: The detections of one frame the tracker takes at most, the highest-scoring first: its IoU matrix
#: and optimal assignment grow faster than their number (issue 38: 17 ms a frame at 300, 501 ms at
#: 2,000; a one-off `python -m bench.ingest --caps-only`, `git show 1524e55:bench/ingest.py`) while the handler answers up to 100,000
#: (docs/ingest.md, "Tracking").
MAX_DETECTIONS = 300
# The columns of a track's row (`Tracks._rows`).
_POS, _VEL = slice(0, 4), slice(4, 8)
_P00, _P01, _P11, _UNSEEN_S, _MISSED, _RUN, _ID = range(8, 15)
_COLUMNS = 15

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
#: What the model saw of a frame: boxes (x1, y1, x2, y2) in frame pixels; None: all of it.
Regions = Sequence[Sequence[float]] | None


class Tracks:
    """Track ids for each frame's boxes, in capture order.

    Args:
        lost_track_seconds: a track unseen this long (stream time) ends.
        threshold: boxes scoring at least this start tracks and are matched first; lower ones
            only keep tracks alive.
        max_detections: a frame's detections taken at most, the highest-scoring first (equal
            scores: the earlier first); the rest are not tracked.

    Attributes:
        ended: the ids of the tracks that the last `update` or `reset` ended (a counting layer
            closes them: their zones' `left`, their sides of lines forgotten).
        dropped: the detections the last `update` left out (over `max_detections`).
        frozen: the confirmed tracks the last `update` kept as they were, out of its `regions`
            (still tracked: `video_ingest_tracks_active` counts them).
    """

    def __init__(self, lost_track_seconds: float = 1.0, threshold: float = 0.5,
                 max_detections: int = MAX_DETECTIONS) -> None:
        if max_detections < 1:
            raise ValueError(f"max_detections = {max_detections}: use 1 or more")
        self.lost_track_seconds = lost_track_seconds
        self.threshold = threshold
        self.max_detections = max_detections
        self._issued = 0
        self.ended: list[int] = []
        self.dropped = 0
        self.frozen = 0
        self._clear()

    def _clear(self) -> None:
        self._last: float | None = None
        # A row a track: x1, y1, x2, y2, their velocities, the 2x2 covariance (p00, p01, p11),
        # stream seconds and frames since its last match, consecutive matches, its id (0 until
        # confirmed). One array, so that a frame's predict, update, spawn and prune are one
        # operation each over every track.
        self._rows: Floats = np.zeros((0, _COLUMNS))
        self._steps: dict[float, tuple[Floats, Floats]] = {}  # a step's (transition, offset)

    @property
    def issued(self) -> int:
        """The camera's last id given (0: none yet)."""
        return self._issued

    def configure(self, lost_track_seconds: float, threshold: float) -> None:
        """New settings (a reload), applied from the next frame: the tracks go on."""
        self.lost_track_seconds = lost_track_seconds
        self.threshold = threshold

    def reset(self) -> list[int]:
        """Every track ends; the next frame starts anew (ids go on from `issued`). Returns (and
        sets `ended` to) the ids of the tracks that ended."""
        ids = self._rows[:, _ID]
        self.ended = ids[ids > 0].astype(np.int64).tolist()
        self._clear()
        return self.ended

    def update(self, detections: Sequence[dict[str, Any]], seconds: float,
               regions: Regions = None) -> list[int | None]:
        """The track id of each detection (None: not tracked, e.g. a box seen once, or one past
        `max_detections`: `dropped` counts those).

        Args:
            detections: the frame's detections, each with `box` (x1, y1, x2, y2) and `score`;
                a box or score that is not finite is not tracked.
            seconds: the frame's stream time: a gap in it is a gap in time, across which tracks
                are predicted; the same time again is a frame at no distance; an earlier time
                (the stream started again) ends every track first.
            regions: what the model saw of the frame, boxes in frame pixels: a track is in view
                when its box (as last known, or as predicted for this frame) lies wholly inside
                one of them (`[]`: nothing was in view). None: all of the frame was.
        """
        n = len(detections)
        boxes = np.array([d["box"] for d in detections], dtype=np.float64).reshape(n, 4)
        scores = np.array([d.get("score", 1.0) for d in detections], dtype=np.float64)
        kept = _highest(scores, self.max_detections)
        self.dropped = n - len(kept)
        if self.dropped:
            boxes, scores = boxes[kept], scores[kept]
        ids = self._step(boxes, scores, seconds, regions)
        if self.dropped:
            every = np.zeros(n, dtype=np.int64)
            every[kept] = ids
            ids = every
        return [int(i) or None for i in ids.tolist()]

    def _step(self, boxes: Floats, scores: Floats, seconds: float, regions: Regions) -> Ints:
        """The frame's tracker step: the track id of each box (0: none)."""
        ended = self.reset() if self._last is not None and seconds < self._last else []
        elapsed = 1.0 / FPS if self._last is None else seconds - self._last
        self._last = seconds
        ids = np.zeros(len(boxes), dtype=np.int64)
        in_view = self._advance(elapsed, regions)
        alive = self._rows[:, _UNSEEN_S] <= self.lost_track_seconds
        ended += self._keep(alive)
        if len(boxes):
            self._match(boxes, scores, np.flatnonzero(in_view[alive]), ids)
        rows = self._rows
        ended += self._keep((rows[:, _UNSEEN_S] <= self.lost_track_seconds) & ((rows[:, _ID] > 0) | (rows[:, _MISSED] == 0)))
        self.ended = ended
        return ids

    def _advance(self, elapsed: float, regions: Regions) -> Bools:
        """Every track `elapsed` seconds on, but those out of `regions` that were matched at their
        last look (frozen: kept as they were). Returns which tracks are in view: their box as
        last known or as predicted lies wholly inside a region."""
        before = self._rows
        if elapsed > 0 and len(before):
            self._predict(elapsed)
        if regions is None:
            self.frozen = 0
            return np.ones(len(self._rows), dtype=bool)
        area = np.array(regions, dtype=np.float64).reshape(-1, 4)
        # As last known too: a frozen track kept the velocity of its last look, and one step of it
        # may carry its box out of the region where it starts to move again.
        in_view = within(before[:, _POS], area) | within(self._rows[:, _POS], area)
        frozen = ~in_view & (before[:, _MISSED] == 0)
        self._rows[frozen] = before[frozen]
        self.frozen = int(np.count_nonzero(frozen & (before[:, _ID] > 0)))
        return in_view

    def _match(self, boxes: Floats, scores: Floats, looking: Ints, ids: Ints) -> None:
        """ByteTrack's two associations of the frame's boxes to the tracks `looking` (rows in
        view), then new tracks from the high-score boxes left."""
        usable = np.isfinite(boxes).all(axis=1) & np.isfinite(scores)
        strong = scores >= self.threshold
        high, low = np.flatnonzero(usable & strong), np.flatnonzero(usable & ~strong)
        (tracks, found), rest, fresh = _associate(self._rows[looking, _POS], boxes[high])
        self._correct(looking[tracks], boxes[high[found]], high[found], ids)
        (tracks, found), _, _ = _associate(self._rows[looking[rest], _POS], boxes[low])
        self._correct(looking[rest[tracks]], boxes[low[found]], low[found], ids)
        self._spawn(boxes[high[fresh]])

    def _predict(self, elapsed: float) -> None:
        """Every track one step of `elapsed` seconds on: its box by its velocity, its covariance
        by the motion and the process noise, its clocks (one product: all of it is linear)."""
        step = round(elapsed * FPS, 9)
        if step not in self._steps:
            if len(self._steps) > 64:
                self._steps.clear()
            self._steps[step] = _transition(step, elapsed)
        matrix, offset = self._steps[step]
        r = self._rows
        r[r[:, _MISSED] > 0, _RUN] = 0
        self._rows = r @ matrix + offset

    def _correct(self, tracks: Ints, boxes: Floats, detections: Ints, ids: Ints) -> None:
        """Kalman update of the rows `tracks` with their matched `boxes`; `ids[detections]` their ids."""
        if not len(tracks):
            return
        r = self._rows[tracks]
        p00, p01, p11 = r[:, _P00], r[:, _P01], r[:, _P11]
        s = p00 + _R
        innovation = boxes - r[:, _POS]
        r[:, _POS] += (p00 / s)[:, None] * innovation
        r[:, _VEL] += (p01 / s)[:, None] * innovation
        r[:, _P11] = p11 - p01 * p01 / s
        r[:, _P01] = p01 * (_R / s)
        r[:, _P00] = p00 * (_R / s)
        r[:, _UNSEEN_S:_RUN] = 0.0
        r[:, _RUN] += 1
        confirmed = (r[:, _ID] == 0) & (r[:, _RUN] >= _CONFIRM)
        count = int(np.count_nonzero(confirmed))
        if count:  # in row order, as the library gives them
            r[confirmed, _ID] = np.arange(self._issued + 1, self._issued + 1 + count)
            self._issued += count
        ids[detections] = r[:, _ID]
        self._rows[tracks] = r

    def _spawn(self, boxes: Floats) -> None:
        if not len(boxes):
            return
        new = np.zeros((len(boxes), _COLUMNS))
        new[:, _POS] = boxes
        new[:, _P00] = new[:, _P11] = new[:, _RUN] = 1.0
        self._rows = np.concatenate([self._rows, new])

    def _keep(self, alive: npt.NDArray[np.bool_]) -> list[int]:
        """Keeps the tracks where `alive`; returns the ids of the confirmed ones that ended."""
        if alive.all():
            return []
        ids = self._rows[~alive, _ID]
        self._rows = self._rows[alive]
        ended: list[int] = ids[ids > 0].astype(np.int64).tolist()
        return ended


def _transition(step: float, elapsed: float) -> tuple[Floats, Floats]:
    """(matrix, offset) such that `rows @ matrix + offset` is every track `step` frames (`elapsed`
    seconds) on: x += step v; P = F P F' + Q on the shared 2x2 covariance; its clocks advance."""
    if abs(step - 1.0) <= _NOMINAL:
        q00, q01, q11 = _Q, 0.0, _Q
    else:  # a gap (or a short step): discrete white-noise acceleration over `step` frames
        q00, q01, q11 = _Q * step**4 / 4, _Q * step**3 / 2, _Q * step**2
    matrix = np.eye(_COLUMNS)
    for k in range(4):
        matrix[4 + k, k] = step  # x_k += step * v_k
    matrix[_P01, _P00] = 2 * step  # p00 += 2 step p01 + step^2 p11
    matrix[_P11, _P00] = step * step
    matrix[_P11, _P01] = step  # p01 += step p11
    offset = np.zeros(_COLUMNS)
    offset[[_P00, _P01, _P11, _UNSEEN_S, _MISSED]] = q00, q01, q11, elapsed, 1.0
    return matrix, offset


def iou(a: Floats, b: Floats) -> Floats:
    """`[len(a), len(b)]` intersection over union of boxes (x1, y1, x2, y2); 0 where the union is
    empty. (Column by column: on a few boxes, numpy's cost is per call, not per element.)"""
    ax1, ay1, ax2, ay2 = a[:, 0, None], a[:, 1, None], a[:, 2, None], a[:, 3, None]
    bx1, by1, bx2, by2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    overlap = (np.maximum(np.minimum(ax2, bx2) - np.maximum(ax1, bx1), 0)
               * np.maximum(np.minimum(ay2, by2) - np.maximum(ay1, by1), 0))
    union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - overlap
    similarity: Floats = np.divide(overlap, union, out=np.zeros_like(overlap), where=union > 0)
    return similarity


def within(boxes: Floats, regions: Floats) -> Bools:
    """`[len(boxes)]`: whether each box (x1, y1, x2, y2) lies wholly inside one of `regions`."""
    b, r = boxes[:, None, :], regions[None, :, :]
    inside = (b[..., 0] >= r[..., 0]) & (b[..., 1] >= r[..., 1]) & (b[..., 2] <= r[..., 2]) & (b[..., 3] <= r[..., 3])
    return cast(Bools, inside.any(axis=1))


def _associate(tracks: Floats, boxes: Floats) -> tuple[tuple[Ints, Ints], Ints, Ints]:
    """The optimal IoU assignment of `boxes` to `tracks` (pairs overlapping at least `_MIN_IOU`):
    ((track rows, box rows) matched, tracks unmatched, boxes unmatched), each in row order."""
    empty = np.zeros(0, np.int64)
    if not len(tracks) or not len(boxes):
        return (empty, empty), np.arange(len(tracks)), np.arange(len(boxes))
    from scipy.optimize import linear_sum_assignment  # type: ignore[import-untyped]

    similarity = iou(tracks, boxes)
    rows, cols = linear_sum_assignment(similarity, maximize=True)
    good = similarity[rows, cols] >= _MIN_IOU
    rows, cols = rows[good].astype(np.int64), cols[good].astype(np.int64)
    return (rows, cols), _others(len(tracks), rows), _others(len(boxes), cols)


def _highest(scores: Floats, most: int) -> Ints:
    """The indices of the `most` highest `scores` (a score that is not a number last; equal ones:
    the earlier first), in index order; all of them when there are no more than `most`."""
    if len(scores) <= most:
        return np.arange(len(scores))
    order = np.argsort(-scores, kind="stable")  # -NaN is NaN: sorted last
    return np.sort(order[:most])


def _others(n: int, taken: Ints) -> Ints:
    """0 .. n-1 without `taken`, in order."""
    free = np.ones(n, dtype=bool)
    free[taken] = False
    return np.flatnonzero(free)
