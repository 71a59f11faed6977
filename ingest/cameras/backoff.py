"""Reconnect delays: capped, jittered exponential backoff, reset after a healthy minute."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class Backoff:
    """Delays of about `first_s * 2**n` seconds (times a random 0.5 to 1.5), within `first_s` to `cap_s`.

    Attributes:
        first_s: the first delay (before jitter).
        cap_s: the largest delay.
        healthy_s: a connection that lived this long resets the delays to `first_s`.
        attempts: reconnects since the last reset.
    """

    first_s: float = 0.5
    cap_s: float = 30.0
    healthy_s: float = 60.0
    attempts: int = 0
    _random: random.Random = field(default_factory=random.Random, repr=False)

    def next_delay(self, connected_for_s: float) -> float:
        """The wait before the next attempt, after a connection that lasted `connected_for_s`."""
        if connected_for_s >= self.healthy_s:
            self.attempts = 0
        ceiling = min(self.cap_s, self.first_s * 2 ** min(self.attempts, 30))
        self.attempts += 1
        return float(max(self.first_s, min(self.cap_s, ceiling * (0.5 + self._random.random()))))
