"""Region geometry (DESIGN section 15): motion boxes -> the crops a detector looks at, and its
boxes back.

A letterbox detector sees a region at its own input size: a square of at least that side around
the motion, clamped to the frame, so a small far object is seen at full resolution instead of
shrunk with the whole frame. A moving box the model finds against a region's inner edge was
cut: a region around it runs again (Frigate's rule), and a cut box is never answered. The same object found in two overlapping
regions is one detection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from handler.motion import Box

Size = tuple[int, int]
#: Pixels from a region's inner edge within which a box counts as cut by it.
EDGE = 2
#: Overlap (IoU) over which two boxes of one class from overlapping regions are one object.
SAME = 0.5


def whole(size: Size) -> Box:
    """The whole frame of `size` (h, w) as a region."""
    return 0, 0, size[1], size[0]


def regions_for(motion: Sequence[Box], size: Size, side: int | None, most: int) -> tuple[Box, ...]:
    """The regions to look at for `motion` in a frame of `size` (h, w): none without motion; the
    whole frame where the model takes any size (`side` None), where the frame fits in one region,
    or where the squares would be more than `most` or cover the frame; else a square of at least
    `side` around each box not already inside one, largest boxes first."""
    if not motion:
        return ()
    if side is None or (size[0] <= side and size[1] <= side):
        return (whole(size),)
    out: list[Box] = []
    for box in sorted(motion, key=lambda b: -area(b)):
        if not any(inside(box, region) for region in out):
            out.append(square(box, side, size))
    if len(out) > most or sum(area(r) for r in out) >= size[0] * size[1]:
        return (whole(size),)
    return tuple(out)


def square(box: Box, side: int, size: Size) -> Box:
    """A square of at least `side` (and at least the box's longer side) centred on `box`, moved
    inside the frame; a frame narrower than it gives that whole dimension."""
    s = max(side, box[2] - box[0], box[3] - box[1])
    x1, x2 = _span((box[0] + box[2]) / 2, s, size[1])
    y1, y2 = _span((box[1] + box[3]) / 2, s, size[0])
    return x1, y1, x2, y2


def _span(centre: float, length: int, limit: int) -> tuple[int, int]:
    if length >= limit:
        return 0, limit
    start = min(max(0, round(centre - length / 2)), limit - length)
    return start, start + length


def cut(box: Sequence[float], region: Box, size: Size) -> bool:
    """Whether a box found in `region` (frame pixels) touches one of its edges that is not the
    frame's: the object may go on past it."""
    x1, y1, x2, y2 = region
    return ((x1 > 0 and box[0] - x1 < EDGE) or (y1 > 0 and box[1] - y1 < EDGE)
            or (x2 < size[1] and x2 - box[2] < EDGE) or (y2 < size[0] and y2 - box[3] < EDGE))


def inside(box: Sequence[float], region: Box) -> bool:
    """Whether `box` lies wholly inside `region`."""
    return region[0] <= box[0] and region[1] <= box[1] and box[2] <= region[2] and box[3] <= region[3]


def area(box: Sequence[float]) -> float:
    """A box's area (0 when empty)."""
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def moved(detection: dict[str, Any], dx: int, dy: int) -> dict[str, Any]:
    """A detection found in a region whose corner is at (dx, dy), in frame pixels."""
    out = dict(detection)
    x1, y1, x2, y2 = detection["box"]
    out["box"] = [round(x1 + dx, 2), round(y1 + dy, 2), round(x2 + dx, 2), round(y2 + dy, 2)]
    if "keypoints" in detection:
        out["keypoints"] = [[round(x + dx, 2), round(y + dy, 2), s] for x, y, s in detection["keypoints"]]
    return out


def merged(detections: list[dict[str, Any]], most: int) -> list[dict[str, Any]]:
    """One detection per object across overlapping regions: by score, best first, a box of the
    same class overlapping a kept one by more than `SAME` is dropped; at most `most` kept."""
    kept: list[dict[str, Any]] = []
    for detection in sorted(detections, key=lambda d: -float(d.get("score", 0.0))):
        if not any(k.get("class_id") == detection.get("class_id") and iou(k["box"], detection["box"]) > SAME
                   for k in kept):
            kept.append(detection)
            if len(kept) == most:
                break
    return kept


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Intersection over union of two boxes."""
    inter = area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))
    union = area(a) + area(b) - inter
    return inter / union if union > 0 else 0.0
