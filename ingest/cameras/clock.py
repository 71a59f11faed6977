"""Capture times: wall clock, from the stream's own timestamps, monotonic per camera forever.

Within a connection a frame's capture time is its pts plus an offset, the smallest
`arrival - pts` seen so far, and never later than the frame's own arrival. Packets that come late
(in a burst after the stream's headers were probed, or after a network hiccup) so do not look
late: the offset comes from the packet that came soonest. When stream time falls more than
`DRIFT_S` behind arrival (a camera clock slower than ours, a pts reset) the offset re-anchors on
arrival. Every capture time handed out is later than the one before, across reconnects, for the
camera's whole life. The wall clock is read once; later times follow the monotonic clock, so an
NTP step does not reorder them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Stream time this far behind arrival time re-anchors the offset.
DRIFT_S = 2.0
#: The smallest step between two capture times of one camera.
EPSILON_S = 1e-6


class WallClock:
    """`time.time()` at construction, advanced by `time.monotonic()` since."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._monotonic = monotonic
        self._origin = wall() - monotonic()

    def __call__(self) -> float:
        return self._origin + self._monotonic()


class CaptureClock:
    """Capture times for one camera (one per camera, kept across its reconnects)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._offset: float | None = None  # wall time - pts, for this connection
        self._last = float("-inf")

    def reconnected(self) -> None:
        """A new connection: its pts start anew."""
        self._offset = None

    def observe(self, pts_s: float) -> float:
        """A packet with `pts_s` seconds of stream time arrived now; returns its arrival time."""
        arrived = self._now()
        offset = arrived - pts_s
        if self._offset is None or offset < self._offset or offset - self._offset > DRIFT_S:
            self._offset = offset
        return arrived

    def capture(self, pts_s: float, arrived: float) -> float:
        """The capture time of the frame at `pts_s` that arrived at `arrived`: its stream time on
        the wall clock, never after its arrival, and later than every capture time before."""
        at = arrived if self._offset is None else min(pts_s + self._offset, arrived)
        self._last = max(at, self._last + EPSILON_S)
        return self._last

    def stamp(self, pts_s: float) -> float:
        """`observe` then `capture`: a frame that arrived now."""
        return self.capture(pts_s, self.observe(pts_s))
