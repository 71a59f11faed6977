"""Motion first in the bridge (DESIGN section 15): the `X-Motion` header a camera's requests carry.

A segment's motion is found by the handler, which decodes it; the bridge keeps the one clock a
segment cannot: when a whole-frame look is next due (the first unit of a connection, then every
`refresh_seconds` of stream time), so that still objects are seen again now and then. In frames
mode the bridge decodes, so it finds each frame's motion itself (`handler.motion`, the same
check) before encoding: a frame where nothing moved and no whole look is due is not sent at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from handler.motion import WHOLE_LOOK, Box, Motion, MotionSettings, luma


@dataclass(frozen=True, slots=True)
class Look:
    """A frames-mode frame's motion: the header to send it with, or None to not send it."""

    header: str | None
    boxes: tuple[Box, ...] = ()
    lighting: bool = False


class Looking:
    """One camera's motion state in the bridge, for one connection at a time."""

    def __init__(self, settings: MotionSettings) -> None:
        self._settings = settings
        self._wire = settings.wire()
        self._motion = Motion(settings)
        self._last_whole: float | None = None
        self._whole_left = 0  # frames of the whole look under way still to send whole

    def reconnected(self) -> None:
        """A new connection: a whole look first, and a new background (frames mode)."""
        self._motion.reset()
        self._last_whole = None

    def segment(self, pts: float) -> str:
        """The `X-Motion` of a segment starting at stream time `pts`."""
        full = self._refresh(pts)
        self._whole_left = 0  # the handler looks at the segment's first frames whole
        return json.dumps({**self._wire, "full": full}, separators=(",", ":"))

    def frame(self, frame: Any, pts: float) -> Look:
        """A decoded frame's motion (frames mode), and whether and how to send it."""
        found = self._motion.find(luma(frame))
        whole = self._due(pts)
        if not whole and not found.boxes:
            return Look(None, (), found.lighting)
        header = {"full": whole, "boxes": [list(b) for b in found.boxes], "max_regions": self._settings.max_regions}
        return Look(json.dumps(header, separators=(",", ":")), found.boxes, found.lighting)

    def _due(self, pts: float) -> bool:
        """Whether a whole look is due at `pts` (frames mode: it takes `WHOLE_LOOK` frames in a row,
        as the tracker confirms a still object on its second sighting)."""
        if self._refresh(pts):
            self._whole_left = WHOLE_LOOK
        if self._whole_left:
            self._whole_left -= 1
            return True
        return False

    def _refresh(self, pts: float) -> bool:
        """Whether `refresh_seconds` have passed since the last whole look (or none was made)."""
        last = self._last_whole
        if last is None or pts < last or pts - last >= self._settings.refresh_seconds:
            self._last_whole = pts
            return True
        return False
