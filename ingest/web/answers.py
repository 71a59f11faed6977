"""What a web request ends as, as values the server writes: a JSON answer, a file to send (with
the byte range asked for), or a refusal (the JSON error body)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request refused: its status, `type` and message (the JSON error body)."""

    status: int
    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class Answer:
    """A JSON answer."""

    status: int
    body: Any


@dataclass(frozen=True, slots=True)
class Media:
    """A file to send, found from an index row (never from a request's path).

    Attributes:
        path: the file.
        kind: its `Content-Type`.
        name: the file name a browser saves it as.
    """

    path: Path
    kind: str
    name: str


Outcome = Answer | Media | Refusal

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def byte_range(header: str | None, size: int) -> tuple[int, int] | Refusal | None:
    """`Range: bytes=A-B` (`A-`, `-N`: the last N) of a file of `size` bytes as (first, last),
    both included; None: the whole file (no header, or one this server ignores: several ranges,
    another unit, as RFC 9110 allows); a `Refusal` (416) for a range wholly past the end."""
    found = _RANGE.match((header or "").replace(" ", ""))
    if found is None or not (found[1] or found[2]):
        return None
    if not found[1]:
        suffix = int(found[2])
        return (max(0, size - suffix), size - 1) if suffix and size else _unsatisfiable(header, size)
    first = int(found[1])
    last = min(int(found[2]), size - 1) if found[2] else size - 1
    if found[2] and int(found[2]) < first:
        return None  # an invalid range is ignored, not refused (RFC 9110 14.1.1)
    return (first, last) if first < size else _unsatisfiable(header, size)


def _unsatisfiable(header: str | None, size: int) -> Refusal:
    return Refusal(416, "RangeNotSatisfiable", f"{header}: the file has {size} bytes (ask from 0 to {size - 1})")
