"""Capture times: wall clock, from the stream's own timestamps, monotonic per camera forever.

Within a connection a packet's capture time is its pts plus an offset: the smallest
`arrival - pts` seen so far. Packets that come late (in a burst after the stream's headers were
probed, or after a network hiccup) so do not look late: the offset comes from the packet that came
soonest, and no capture time is ever after the packet's arrival. When stream time falls more than
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

    def observe(self, pts_s: float) -> None:
        """A packet with `pts_s` seconds of stream time arrived now."""
        offset = self._now() - pts_s
        if self._offset is None or offset < self._offset or offset - self._offset > DRIFT_S:
            self._offset = offset

    def capture(self, pts_s: float | None, span_s: float = 0.0) -> float:
        """The capture time of the frame at `pts_s` (None: now), later than every one before.

        Args:
            pts_s: the frame's stream time.
            span_s: stream time after it that is being stamped too (a segment's other frames):
                the next capture time comes after that.
        """
        at = self._now() if pts_s is None or self._offset is None else pts_s + self._offset
        at = max(at, self._last + EPSILON_S)
        self._last = at + max(0.0, span_s)
        return at

    def stamp(self, pts_s: float | None) -> float:
        """`observe` then `capture`: a packet that arrived now."""
        if pts_s is not None:
            self.observe(pts_s)
        return self.capture(pts_s)
