"""A zone's inside test at the cost of its own outline, not of the frame.

supervision's `PolygonZone` keeps a mask from the frame's top left corner to the polygon's far
corner: a zone over a whole 1080p frame holds 2 MB (4K: 8 MB), and 200 of them took 494 MB on
their first frame. `Region` gives the same answers (the same rasteriser, OpenCV's `fillPoly`
through supervision's `polygon_to_mask`, the same rounding of a point to its nearest pixel) but
fills the polygon's bounding box only, once, and keeps the mask as its runs: the flat indices
where the row-major mask, framed by a false border, changes. A point is inside when an odd number
of changes lie at or before its index; a point off the box is moved onto the border (outside).
A row holds two changes a run (a convex polygon: two a row); the bounding box is allocated only
while the runs are taken, one zone at a time.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]
Indices = npt.NDArray[np.int32]  # a framed mask's flat indices: at most 16,387 x 16,387 (scene.MAX_PIXELS)
#: the mask's elements framed at a time while its runs are taken (bounds the temporaries)
_CHUNK = 1 << 20


class Region:
    """The pixels of a polygon as supervision's `PolygonZone` fills them.

    Args:
        points: `[n, 2]` integer vertices (x, y) in frame pixels, n >= 3, none negative.

    Attributes:
        origin: the top left corner (x, y) of the polygon's bounding box.
        size: the box's width and height in pixels.
        changes: `[k]` int32, sorted: the flat indices where the box's mask, framed by a false
            border a pixel wide, changes (row-major).
    """

    __slots__ = ("origin", "size", "changes", "_corner", "_far", "_strides")

    def __init__(self, points: Ints) -> None:
        import supervision as sv  # OpenCV with it: only a camera with zones loads it

        points = np.asarray(points, dtype=np.int64)
        low, high = points.min(axis=0), points.max(axis=0)
        width, height = (int(v) for v in high - low + 1)
        self.origin = (int(low[0]), int(low[1]))
        self.size = (width, height)
        self.changes = _changes(sv.polygon_to_mask(points - low, resolution_wh=(width, height)))
        self._corner = low.astype(np.float64) - 1  # the framed mask's top left, in frame pixels
        self._far = np.array([width + 1, height + 1], dtype=np.float64)  # its bottom right border
        self._strides = np.array([1.0, width + 2.0])

    def inside(self, xy: Floats) -> Bools:
        """`[m, 2]` points (x, y) -> `[m]`: whether the pixel nearest each point (`np.rint`, as
        `PolygonZone.trigger` rounds) is filled; a point off the polygon's box, or not finite, is
        outside (`fmax`/`fmin` put NaN on the border too)."""
        framed = np.fmin(np.fmax(np.rint(xy) - self._corner, 0.0), self._far)
        flat = (framed @ self._strides).astype(np.int32)
        answer: Bools = np.searchsorted(self.changes, flat, side="right") % 2 == 1
        return answer

    @property
    def nbytes(self) -> int:
        """What the region keeps, in bytes (its runs)."""
        return int(self.changes.nbytes)


def _changes(mask: npt.NDArray[np.uint8]) -> Indices:
    """The flat indices where `mask` (`[h, w]`, 0 or 1), framed by zeros, changes value, some
    rows at a time: `[k]` sorted. (Each framed row starts and ends with 0: no run crosses rows.)"""
    height, width = mask.shape
    rows = max(1, _CHUNK // (width + 2))
    found = [np.zeros(0, np.int64)]
    for top in range(0, height, rows):
        part = mask[top:top + rows]
        framed = np.zeros((len(part), width + 2), dtype=np.uint8)
        framed[:, 1:-1] = part
        flat = framed.reshape(-1)
        found.append(np.flatnonzero(flat[1:] != flat[:-1]) + 1 + (top + 1) * (width + 2))
    return np.concatenate(found).astype(np.int32)
