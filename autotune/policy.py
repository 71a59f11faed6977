"""What batch size the observed traffic needs, and when a change has lasted long enough to act."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from autotune.fit import LatencyFit

LADDER = (1, 2, 4, 8, 16, 32)


def batch_for(frame_rate: float, fit: LatencyFit | None, max_batch_delay_ms: int,
              ladder: Sequence[int] = LADDER, margin: float = 0.3) -> int:
    """The smallest batch size of `ladder` that keeps up with `frame_rate` with `margin` to spare.

    With a latency fit: the smallest B whose full-batch capacity `1000 B / (a B + b)` is at least
    `frame_rate * (1 + margin)`; a smaller batch means less waiting for it to fill. Without one:
    the frames that arrive within one `max_batch_delay_ms`, with the margin, rounded up the ladder.
    The largest rung when nothing is enough.
    """
    if not ladder or any(b < 1 for b in ladder):
        raise ValueError(f"ladder {list(ladder)}: give batch sizes of 1 or more")
    if frame_rate < 0 or margin < 0:
        raise ValueError(f"frame_rate {frame_rate}, margin {margin}: use 0 or more")
    rungs = sorted(set(ladder))
    need = frame_rate * (1.0 + margin)
    for b in rungs:
        if fit is not None:
            if fit.capacity_fps(b) >= need:
                return b
        elif b >= math.ceil(need * max_batch_delay_ms / 1000.0):
            return b
    return rungs[-1]


@dataclass(slots=True)
class Hysteresis:
    """Acts on a new target only after it has been asked for continuously for `hold_s`, and not
    within `cooldown_s` of the last change, so a short burst or a noisy window does not flap the
    deployment (each change costs a worker start)."""

    hold_s: float
    cooldown_s: float
    _candidate: int | None = field(default=None, init=False)
    _since: float = field(default=0.0, init=False)
    _last_change: float = field(default=-math.inf, init=False)

    def update(self, t: float, desired: int, current: int) -> int | None:
        """Feeds the target wanted at time `t`; returns the batch size to switch to now, or None."""
        if desired == current:
            self._candidate = None
            return None
        if desired != self._candidate:
            self._candidate, self._since = desired, t
        if t - self._since >= self.hold_s and t - self._last_change >= self.cooldown_s:
            return desired
        return None

    def switched(self, t: float) -> None:
        """Records that a change was applied at `t`."""
        self._last_change = t
        self._candidate = None
