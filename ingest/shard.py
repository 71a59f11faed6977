"""`--shard K/N`: a stable share of the cameras, for several instances (a StatefulSet's pods).

Rendezvous hashing: camera `name` belongs to the shard with the highest hash of (shard, name), so
every instance agrees without talking, and going from N to N+1 shards moves only about 1/(N+1) of
the cameras.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_SPEC = re.compile(r"^(\d+)/(\d+)$")


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard `index` of `count` (0 <= index < count)."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index}/{self.count}: use K/N with 0 <= K < N, e.g. 0/3")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`K/N`, e.g. `2/4`.

        Raises:
            ValueError: naming the text and the form.
        """
        match = _SPEC.match(text.strip())
        if not match:
            raise ValueError(f"--shard {text!r}: use K/N with 0 <= K < N, e.g. 0/3")
        return cls(int(match[1]), int(match[2]))

    def owner(self, name: str) -> int:
        """The shard that carries camera `name`."""
        return max(range(self.count), key=lambda k: hashlib.sha256(f"{k}/{name}".encode()).digest())

    def includes(self, name: str) -> bool:
        return self.count == 1 or self.owner(name) == self.index
