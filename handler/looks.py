"""Motion first in the handler (DESIGN section 15): for a request that asks for it (`X-Motion`),
what the model looks at in each frame, the regions cut out for it, and its answers put back
together frame by frame.

A video segment carries what its motion needs: its first frame starts the background, and is
looked at whole, with the second (a tracker confirms a still object on its second sighting), unless
the producer says a whole look is not due (`"full": false`); then it is looked at where its second
frame shows motion. An image has no background: its producer sends the
motion boxes it found (`"boxes"`, `video-ingest`'s frames mode). Regions are rows of the same
batch as whole frames; their boxes come back through the same inverse and are then moved by the
region's corner and merged (`handler.regions`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from handler.clip import Clip, Frame, FrameResult, Look, Meta, Size
from handler.config import HandlerConfig, Resize, Task
from handler.errors import BadHeader
from handler.motion import WHOLE_LOOK, Box, Motion, MotionSettings
from handler.regions import cut, inside, iou, merged, moved, regions_for, square, whole

T = TypeVar("T")
_FIX = "send a JSON object of motion settings, `full` and (for an image) `boxes`: docs/motion.md"


@dataclass(frozen=True, slots=True)
class Watch:
    """What a request's `X-Motion` asks.

    Attributes:
        settings: how motion is found.
        full: the first frame is looked at whole (a whole look is due).
        boxes: an image's motion boxes, found by its producer (frame pixels); None for video.
    """

    settings: MotionSettings
    full: bool = True
    boxes: tuple[Box, ...] | None = None

    @classmethod
    def of(cls, meta: Meta) -> Watch | None:
        """The request's `X-Motion`, or None without one (every frame looked at whole).

        Raises:
            BadHeader: not a JSON object, or a setting out of range, saying which and the fix.
        """
        if meta.motion is None:
            return None
        try:
            value = json.loads(meta.motion)
        except ValueError:
            raise BadHeader(f"X-Motion is not JSON: {_FIX}") from None
        if not isinstance(value, dict):
            raise BadHeader(f"X-Motion is not a JSON object: {_FIX}")
        full = value.pop("full", True)
        if not isinstance(full, bool):
            raise BadHeader("X-Motion: `full` must be true or false")
        boxes = _boxes(value.pop("boxes", None))
        try:
            return cls(MotionSettings.parse(value, "X-Motion"), full, boxes)
        except ValueError as err:
            raise BadHeader(str(err)) from None


def _boxes(raw: Any) -> tuple[Box, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(
            isinstance(b, list) and len(b) == 4 and all(isinstance(v, int) and not isinstance(v, bool) for v in b)
            and b[0] < b[2] and b[1] < b[3] for b in raw):
        raise BadHeader("X-Motion: `boxes` must be a list of [x1, y1, x2, y2] whole pixels with x1 < x2 and y1 < y2")
    return tuple((b[0], b[1], b[2], b[3]) for b in raw)


def region_side(config: HandlerConfig) -> int | None:
    """The side of a region: a letterbox detector's input; None (whole frames) for a model that
    takes any size, or a task whose answer is not boxes."""
    if config.task is not Task.DETECTION or config.resize is not Resize.LETTERBOX or config.input_size is None:
        return None
    return max(config.input_size)


class SegmentLooks(Generic[T]):
    """Decides, frame after frame of one segment, what the model looks at; a decided frame
    comes back with its look (the first one waits for the second's motion)."""

    def __init__(self, watch: Watch, side: int | None) -> None:
        self._watch = watch
        self._side = side
        self._motion = Motion(watch.settings)
        self._pending: tuple[T, Size] | None = None
        self._seen = 0

    def add(self, frame: T, luma: Any, size: Size) -> list[tuple[Look, T]]:
        """The frames decided by `frame` (whose luma plane `[H, W]` uint8 is `luma`)."""
        found = self._motion.find(luma)
        self._seen += 1
        if self._watch.full and self._seen <= WHOLE_LOOK:
            return [(Look(size, (whole(size),), found.boxes, found.lighting), frame)]
        if self._seen == 1:
            self._pending = frame, size
            return []
        out = []
        if self._pending is not None:
            first, first_size = self._pending
            self._pending = None
            out.append((self._look(first_size, found.boxes if first_size == size else ()), first))
        out.append((self._look(size, found.boxes, found.lighting), frame))
        return out

    def finish(self) -> list[tuple[Look, T]]:
        """The last undecided frame (a segment of one frame, not due a whole look): not looked at."""
        if self._pending is None:
            return []
        frame, size = self._pending
        self._pending = None
        return [(Look(size), frame)]

    def _look(self, size: Size, boxes: tuple[Box, ...], lighting: bool = False) -> Look:
        return Look(size, regions_for(boxes, size, self._side, self._watch.settings.max_regions), boxes, lighting)


def image_look(watch: Watch, size: Size, side: int | None) -> Look:
    """An image's look: whole when due, else regions around its producer's boxes."""
    if watch.full:
        return Look(size, (whole(size),), watch.boxes or ())
    h, w = size
    boxes = tuple((max(0, x1), max(0, y1), min(w, x2), min(h, y2)) for x1, y1, x2, y2 in watch.boxes or ()
                  if x1 < w and y1 < h and x2 > 0 and y2 > 0)
    return Look(size, regions_for(boxes, size, side, watch.settings.max_regions), boxes)


def crops(frame: Frame, look: Look) -> list[Frame]:
    """The regions of a frame in the look's order: views, not copies, or the frame itself for
    a whole look (a deferred JPEG stays deferred)."""
    every = whole(look.size)
    return [frame if region == every else frame[region[1]:region[3], region[0]:region[2]]  # type: ignore[index]
            for region in look.regions]


def images(clip: Clip, watch: Watch, side: int | None) -> Clip:
    """An image clip as its looks and their regions."""
    looks = tuple(image_look(watch, size, side) for size in clip.own_sizes)
    looked = [frame for frame, look in zip(clip.frames, looks) if look.regions]
    regions = [crop for frame, look in zip(looked, (lk for lk in looks if lk.regions)) for crop in crops(frame, look)]
    return dataclasses.replace(clip, frames=regions, sizes=None, looks=looks, originals=tuple(looked))


def regrown(look: Look, parts: Sequence[FrameResult], side: int) -> Look:
    """The look with a region added around each moving box a region cut and no region holds
    whole (Frigate's rule: the model looks again, with the object in the middle). A still object
    cut by a region is left out: its track waits (`video-ingest`'s tracker)."""
    if look.regions == (whole(look.size),):
        return look
    regions = list(look.regions)
    for region, part in zip(look.regions, parts):
        for detection in (part.answer or {}).get("detections", []):
            box = moved(detection, region[0], region[1])["box"]
            if (cut(box, region, look.size) and any(iou(box, m) > 0 for m in look.motion)
                    and not any(inside(box, r) and not cut(box, r, look.size) for r in regions)):
                regions.append(square(tuple(int(v) for v in box), side, look.size))  # type: ignore[arg-type]
    return dataclasses.replace(look, regions=tuple(regions))


def answered(look: Look, parts: Sequence[FrameResult], pts: float | None, most: int) -> FrameResult:
    """One frame's result from its regions' results: the detections moved into the frame's
    pixels, those a region cut left out (seen in part), the rest merged; nothing (not `no
    objects`) for a frame not looked at."""
    h, w = look.size
    if not look.regions:
        return FrameResult(w, h, pts=pts, look=look)
    if look.regions == (whole(look.size),):
        part = parts[0]
        part.pts, part.look = pts, look
        return part
    found = [d for region, part in zip(look.regions, parts)
             for d in (moved(d, region[0], region[1]) for d in (part.answer or {}).get("detections", []))
             if not cut(d["box"], region, look.size)]
    return FrameResult(w, h, answer={"detections": merged(found, most)}, pts=pts, extras=parts[0].extras, look=look)
