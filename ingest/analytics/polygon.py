"""A zone's inside test at the cost of its own outline, not of the frame.

supervision's `PolygonZone` keeps a mask from the frame's top left corner to the polygon's far
corner: a zone over a whole 1080p frame holds 2 MB (4K: 8 MB), and 200 of them took 494 MB on
their first frame. `Region` gives the same answers (the same rasteriser, OpenCV's `fillPoly`
through supervision's `polygon_to_mask`, the same rounding of a point to its nearest pixel) but
fills the polygon's bounding box only, once, and keeps the mask as its runs: the flat indices
where the row-major mask changes. A point is inside when an odd number of changes lie at or
before its index. A rectangle is 2 numbers, any polygon at most 2 per row and edge crossing;
the bounding box is allocated only while the runs are taken, one zone at a time.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]
Indices = npt.NDArray[np.int32]  # a mask's flat indices: at most 16,385 x 16,385 (scene.MAX_PIXELS)
#: the mask's elements compared at a time while its runs are taken (bounds the temporaries)
_CHUNK = 1 << 20


class Region:
    """The pixels of a polygon as supervision's `PolygonZone` fills them.

    Args:
        points: `[n, 2]` integer vertices (x, y) in frame pixels, n >= 3, none negative.

    Attributes:
        origin: the top left corner (x, y) of the polygon's bounding box.
        size: the box's width and height in pixels.
        changes: `[k]` int32, sorted: the flat indices in the box (row-major) where the mask changes.
    """

    __slots__ = ("origin", "size", "changes")

    def __init__(self, points: Ints) -> None:
        import supervision as sv  # OpenCV with it: only a camera with zones loads it

        points = np.asarray(points, dtype=np.int64)
        low, high = points.min(axis=0), points.max(axis=0)
        width, height = (int(v) for v in high - low + 1)
        self.origin = (int(low[0]), int(low[1]))
        self.size = (width, height)
        mask = sv.polygon_to_mask(points - low, resolution_wh=(width, height))
        self.changes = _changes(mask.reshape(-1))

    def inside(self, xy: Floats) -> Bools:
        """`[m, 2]` points (x, y) -> `[m]`: whether the pixel nearest each point (`np.rint`, as
        `PolygonZone.trigger` rounds) is filled; a point off the polygon's box, or not finite, is
        outside."""
        (x0, y0), (width, height) = self.origin, self.size
        pixels = np.rint(xy) - (x0, y0)
        x, y = pixels[:, 0], pixels[:, 1]
        on_box = (x >= 0) & (x < width) & (y >= 0) & (y < height)
        flat = np.where(on_box, y * width + x, -1).astype(np.int32)  # -1: before every change, outside
        answer: Bools = np.searchsorted(self.changes, flat, side="right") % 2 == 1
        return answer

    @property
    def nbytes(self) -> int:
        """What the region keeps, in bytes (its runs)."""
        return int(self.changes.nbytes)


def _changes(flat: npt.NDArray[np.uint8]) -> Indices:
    """The indices where `flat` (0 or 1, taken as 0 before its start) changes value, a chunk
    at a time: `[k]` sorted."""
    found = []
    before = np.uint8(0)
    for start in range(0, len(flat), _CHUNK):
        chunk = flat[start:start + _CHUNK]
        edges = np.flatnonzero(chunk[1:] != chunk[:-1]) + 1
        if chunk[0] != before:
            edges = np.concatenate([[0], edges])
        found.append(edges + start)
        before = chunk[-1]
    return np.concatenate(found).astype(np.int32) if found else np.zeros(0, np.int32)
