"""A camera's `record:` settings (in `defaults:` too), and `--record-cap`.

    record:
      mode: events          # events (around each event), motion (while something moves), continuous, off
      pre_seconds: 5        # a clip starts this long before its event (from the key frame at or before)
      post_seconds: 5       # and ends this long after it
      retain_days: {events: 10, motion: 3, continuous: 2}   # or one number for all
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class RecordMode(enum.Enum):
    """What of a camera's video is kept (event clips and snapshots are made in every mode but off)."""

    EVENTS = "events"
    MOTION = "motion"
    CONTINUOUS = "continuous"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class RecordSettings:
    """One camera's recording.

    Attributes:
        mode: what is kept (`RecordMode`).
        pre_seconds: a clip's video before its event.
        post_seconds: after it; the clip is made once this has passed.
        retain_events: days an event, its snapshot and its clip are kept.
        retain_motion: days recordings with motion are kept (mode motion).
        retain_continuous: days every recording is kept (mode continuous).
    """

    mode: RecordMode = RecordMode.EVENTS
    pre_seconds: float = 5.0
    post_seconds: float = 5.0
    retain_events: float = 10.0
    retain_motion: float = 3.0
    retain_continuous: float = 2.0

    @property
    def on(self) -> bool:
        return self.mode is not RecordMode.OFF


_KEYS = ("mode", "pre_seconds", "post_seconds", "retain_days")
#: A clip's window on either side of its event, at most (a longer one is a typo: 600 for 60).
MAX_WINDOW_S = 300.0


def parse(raw: Any) -> RecordSettings:
    """`record:` as written: `off`, or a mapping of `_KEYS`.

    Raises:
        ValueError: naming the key and the fix.
    """
    if raw is False or raw == "off":
        return RecordSettings(mode=RecordMode.OFF)
    if raw is True or raw == "on":
        return RecordSettings()
    if not isinstance(raw, Mapping):
        raise ValueError("use off, or a mapping of mode, pre_seconds, post_seconds, retain_days")
    unknown = set(raw) - set(_KEYS)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(sorted(map(str, unknown)))}: use {', '.join(_KEYS)}")
    try:
        mode = RecordMode(str(raw.get("mode", "events")).lower())
    except ValueError:
        raise ValueError(f"mode: use one of {', '.join(m.value for m in RecordMode)}") from None
    values: dict[str, Any] = {"mode": mode}
    for key in ("pre_seconds", "post_seconds"):
        if key in raw:
            values[key] = _seconds(raw[key], key, 0.0, MAX_WINDOW_S)
    days = raw.get("retain_days")
    if days is not None:
        given = {"events": days, "motion": days, "continuous": days} if not isinstance(days, Mapping) else days
        unknown = set(given) - {"events", "motion", "continuous"}
        if unknown:
            raise ValueError(f"retain_days: unknown key(s) {', '.join(sorted(map(str, unknown)))}: "
                             "use events, motion, continuous (or one number for all)")
        for key, value in given.items():
            values[f"retain_{key}"] = _seconds(value, f"retain_days.{key}", 0.0, 3650.0, above=True)
    return RecordSettings(**values)


def _seconds(raw: Any, key: str, low: float, high: float, above: bool = False) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise ValueError(f"{key} = {raw!r}: use a number, e.g. 5")
    if not (low < raw if above else low <= raw) or raw > high:
        raise ValueError(f"{key} = {raw!r}: use a number {'above' if above else 'from'} {low:g} to {high:g}")
    return float(raw)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """`--record-cap`: bytes from `500M`, `20G`, `1.5T` or a plain number of bytes.

    Raises:
        ValueError: naming the fix.
    """
    found = _SIZE.match(text)
    if not found:
        raise ValueError(f"--record-cap {text!r}: write a size such as 500M, 20G or 1.5T")
    size = int(float(found[1]) * 1024 ** "bkmgt".index((found[2] or "b").lower()))
    if size < 64 << 10:
        raise ValueError(f"--record-cap {text!r}: give at least 64K")
    return size
