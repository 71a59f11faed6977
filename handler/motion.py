"""Motion (DESIGN section 15): which parts of a frame changed, on a small grey copy of its luma.

Frigate's first check, with its names and defaults: the luma plane sampled down to `frame_height`
rows, compared with a running background (not only the previous frame, so a slow mover adds up),
pixels over `threshold` changed unless a mask covers them, changed pixels joined into boxes by a
coarse dilation, a box kept when it holds `contour_area` changed pixels. A change over
`lightning_threshold` of the frame at once (lights, clouds, IR on or off) is lighting: the
background takes the new frame and nothing moved; so does a change of the whole picture's gain
(clouds, a dimmer: dark pixels move less than the threshold, bright ones more), found as the
median ratio of frame to background and taken out before the difference, so that a mover seen
through it still counts. A pixel that differs from the background but
has not changed for `SETTLE` frames is taken into the background at once: what a mover left
behind (its ghost) or an object that stopped is not motion for long (a stopped object's track
waits, frozen, in `video-ingest`), while a slow mover's edges keep changing.

Knows nothing of models or wires: the handler (video segments) and `video-ingest` (frames mode)
both use it; NumPy and Pillow (to fill mask polygons) only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

#: x1, y1, x2, y2 in frame pixels (x2, y2 exclusive).
Box = tuple[int, int, int, int]
Polygon = tuple[tuple[float, float], ...]
#: Small-image pixels a side of the cells that changed pixels are joined in (the dilation).
CELL = 4
_MAX_MASKS = 64
#: Frames in a row of a whole look: a tracker gives a still object its id on its second sighting.
WHOLE_LOOK = 2
#: Frames a pixel stays unchanged (within `threshold` of the frame before) before the background
#: takes it, whatever the running average says.
SETTLE = 5
#: A whole-picture gain this far from 1 (the median of frame / background) is lighting.
GAIN = 0.08


@dataclass(frozen=True, slots=True)
class MotionSettings:
    """How motion is found, and how often the whole frame is looked at regardless.

    Attributes:
        threshold: luma difference (0-255) from the background that counts as changed.
        contour_area: changed pixels of the small copy a motion box needs.
        lightning_threshold: changed fraction of the (unmasked) frame that is lighting, not motion.
        frame_height: rows of the small grey copy.
        frame_alpha: how much of each frame the background takes (its running average's weight).
        refresh_seconds: a whole-frame look at least this often (stationary objects; the producer
            keeps this clock).
        max_regions: a frame needing more regions than this is looked at whole instead (each region
            is a model input: with 1, a frame never costs more than with motion off).
        mask: polygons (fractions of the frame, like zones) where nothing counts as motion.
    """

    threshold: int = 30
    contour_area: int = 10
    lightning_threshold: float = 0.8
    frame_height: int = 120
    frame_alpha: float = 0.02
    refresh_seconds: float = 10.0
    max_regions: int = 1
    mask: tuple[Polygon, ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, Any], where: str = "motion") -> MotionSettings:
        """The settings from a mapping (the camera list's `motion:`, the `X-Motion` header).

        Raises:
            ValueError: an unknown key or a value out of range, naming the key and the fix.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"{where + ': ' if where else ''}unknown setting {unknown[0]!r}; "
                             f"the settings are {', '.join(sorted(known))}")
        values = {name: _CHECKS[name](f"{where}.{name}" if where else name, raw[name]) for name in known if name in raw}
        return cls(**values)

    def wire(self) -> dict[str, Any]:
        """The settings as the `X-Motion` header carries them (JSON-ready)."""
        return {f.name: ([[list(p) for p in poly] for poly in self.mask] if f.name == "mask"
                         else getattr(self, f.name)) for f in fields(self)}


def _number(low: float, high: float, whole: bool = False) -> Any:
    def check(name: str, value: Any) -> float | int:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if ok and whole and value != int(value):
            ok = False
        if not ok or not low <= value <= high:
            kind = "a whole number" if whole else "a number"
            raise ValueError(f"{name} is {value!r}: use {kind} from {low:g} to {high:g}")
        return int(value) if whole else float(value)

    return check


def _polygons(name: str, value: Any) -> tuple[Polygon, ...]:
    fix = f"{name}: use a list of polygons, each a list of 3 or more [x, y] points, fractions of the frame (0 to 1)"
    if not isinstance(value, list) or len(value) > _MAX_MASKS:
        raise ValueError(f"{fix}, at most {_MAX_MASKS}")
    out = []
    for poly in value:
        if not isinstance(poly, list) or len(poly) < 3:
            raise ValueError(fix)
        points = []
        for point in poly:
            if not (isinstance(point, list) and len(point) == 2 and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 for v in point)):
                raise ValueError(f"{fix}; {point!r} is not")
            points.append((float(point[0]), float(point[1])))
        out.append(tuple(points))
    return tuple(out)


_CHECKS = {"threshold": _number(1, 255, whole=True), "contour_area": _number(1, 10**6, whole=True),
           "lightning_threshold": _number(0.01, 1), "frame_height": _number(16, 1080, whole=True),
           "frame_alpha": _number(0, 1), "refresh_seconds": _number(0.1, 86400),
           "max_regions": _number(1, 64, whole=True), "mask": _polygons}


@dataclass(frozen=True, slots=True)
class Found:
    """One frame's motion: its boxes in frame pixels, and whether lighting reset the background."""

    boxes: tuple[Box, ...] = ()
    lighting: bool = False


class Motion:
    """One stream's background and the motion of each next frame against it."""

    def __init__(self, settings: MotionSettings) -> None:
        self.settings = settings
        self._background: npt.NDArray[np.float32] | None = None
        self._shape: tuple[int, int] | None = None  # the frame's (h, w) the background is of
        self._masked: npt.NDArray[np.bool_] | None = None
        self._previous: npt.NDArray[np.float32] | None = None
        self._still: npt.NDArray[np.int16] | None = None  # frames each pixel has not changed

    def reset(self) -> None:
        """Forgets the background: the next frame starts a new one (a reconnect)."""
        self._background = None

    def find(self, luma: npt.NDArray[np.uint8]) -> Found:
        """The motion of `luma` (`[H, W]` uint8, a view is fine); the background follows it.

        The first frame (and the first of a new size) seeds the background and has none.
        """
        step = max(1, luma.shape[0] // self.settings.frame_height)
        small = _small(luma, step)
        if self._background is None or self._shape != luma.shape:
            self._shape = luma.shape
            self._masked = _mask(self.settings.mask, small.shape)
            self._background, self._previous, self._still = small, small, np.zeros(small.shape, np.int16)
            return Found()
        threshold = self.settings.threshold
        changed = (np.abs(small - self._background) > threshold) & ~self._masked  # type: ignore[operator]
        if changed.sum() > self.settings.lightning_threshold * max(1, int((~self._masked).sum())):  # type: ignore[operator]
            return self._recalibrated(small, Found(lighting=True))
        gain = self._gain(small)
        if abs(gain - 1) > GAIN:  # lighting: the background takes the picture, movers still count
            changed = (np.abs(small - self._background * gain) > threshold) & ~self._masked  # type: ignore[operator]
            return self._recalibrated(small, Found(tuple(_boxes(changed, self.settings.contour_area, step,
                                                                luma.shape)), lighting=True))
        settled = self._settled(small, threshold)
        self._background += self.settings.frame_alpha * (small - self._background)
        self._background[settled] = small[settled]
        return Found(tuple(_boxes(changed & ~settled, self.settings.contour_area, step, luma.shape)))

    def _recalibrated(self, small: npt.NDArray[np.float32], found: Found) -> Found:
        """`found`, the background now `small` (a lighting change)."""
        self._background, self._previous = small, small
        self._still[:] = 0  # type: ignore[index]
        return found

    def _gain(self, small: npt.NDArray[np.float32]) -> float:
        """The picture's gain against the background: the median ratio over unmasked pixels
        bright enough to tell (1 when too few are)."""
        assert self._background is not None and self._masked is not None
        lit = (self._background > 16) & ~self._masked
        if lit.sum() < 0.25 * lit.size:
            return 1.0
        return float(np.median(small[lit] / self._background[lit]))

    def _settled(self, small: npt.NDArray[np.float32], threshold: int) -> npt.NDArray[np.bool_]:
        """The pixels unchanged for `SETTLE` frames (counting this one)."""
        assert self._previous is not None and self._still is not None
        still = np.abs(small - self._previous) <= threshold
        self._still = np.where(still, np.minimum(self._still + 1, SETTLE), 0).astype(np.int16)
        self._previous = small
        return self._still >= SETTLE


def _small(luma: npt.NDArray[np.uint8], step: int) -> npt.NDArray[np.float32]:
    """Every `step`-th row and column, each the mean of 4 samples of its cell (sensor noise
    halved at the cost of 4 strided copies, not a full-size blur)."""
    h, w = (luma.shape[0] // step) * step, (luma.shape[1] // step) * step
    half = step // 2
    out = luma[:h:step, :w:step].astype(np.float32)
    if step > 1:
        out += luma[half:h:step, :w:step]
        out += luma[:h:step, half:w:step]
        out += luma[half:h:step, half:w:step]
        out *= 0.25
    return out


def _mask(polygons: tuple[Polygon, ...], shape: tuple[int, ...]) -> npt.NDArray[np.bool_]:
    """The small image's masked pixels (True: not motion)."""
    masked = np.zeros(shape[:2], dtype=bool)
    if not polygons:
        return masked
    from PIL import Image, ImageDraw

    h, w = shape[:2]
    image = Image.new("1", (w, h), 0)
    draw = ImageDraw.Draw(image)
    for poly in polygons:
        draw.polygon([(x * w, y * h) for x, y in poly], fill=1, outline=1)
    return np.asarray(image, dtype=bool)


def _boxes(changed: npt.NDArray[np.bool_], area: int, step: int, frame: tuple[int, ...]) -> list[Box]:
    """Changed pixels joined by cells (a cell and its 8 neighbours), each group holding at least
    `area` of them as its box in frame pixels, largest first."""
    h, w = changed.shape
    ch, cw = -(-h // CELL), -(-w // CELL)
    padded = np.zeros((ch * CELL, cw * CELL), dtype=bool)
    padded[:h, :w] = changed
    counts = padded.reshape(ch, CELL, cw, CELL).sum(axis=(1, 3))
    labels = _components(counts > 0)
    boxes = []
    for label in np.unique(labels[labels > 0]):
        cells = labels == label
        if counts[cells].sum() < area:
            continue
        pixels = padded & np.repeat(np.repeat(cells, CELL, axis=0), CELL, axis=1)
        rows, cols = np.flatnonzero(pixels.any(axis=1)), np.flatnonzero(pixels.any(axis=0))
        boxes.append((int(cols[0]) * step, int(rows[0]) * step,
                      min(frame[1], (int(cols[-1]) + 1) * step), min(frame[0], (int(rows[-1]) + 1) * step)))
    return sorted(boxes, key=lambda b: (-(b[2] - b[0]) * (b[3] - b[1]), b))


def _components(active: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """Labels of the groups of active cells at most two cells apart (0: none): the active cells
    grown by one, then each grown cell takes the largest label of its 3x3 neighbourhood until none
    changes."""
    grown = _grown(active)
    labels = np.where(grown, np.arange(1, active.size + 1).reshape(active.shape), 0)
    while True:
        padded = np.pad(labels, 1)
        spread = labels.copy()
        for dy in range(3):
            for dx in range(3):
                np.maximum(spread, padded[dy:dy + labels.shape[0], dx:dx + labels.shape[1]], out=spread)
        spread[~grown] = 0
        if np.array_equal(spread, labels):
            return labels
        labels = spread


def _grown(active: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """`active` and every cell next to one: the dilation that joins the parts of one mover."""
    padded = np.pad(active, 1)
    out = np.zeros_like(active)
    for dy in range(3):
        for dx in range(3):
            out |= padded[dy:dy + active.shape[0], dx:dx + active.shape[1]]
    return out


def luma(frame: Any) -> npt.NDArray[np.uint8]:
    """A decoded PyAV frame's luma plane `[H, W]` uint8: a view of its first plane for the YUV
    and grey formats (no conversion), else converted."""
    if frame.format.name in _Y_FIRST:
        plane = frame.planes[0]
        return np.frombuffer(memoryview(plane), np.uint8).reshape(plane.height, plane.line_size)[:, :plane.width]
    return frame.to_ndarray(format="gray")  # type: ignore[no-any-return]


_Y_FIRST = frozenset({"yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "nv12", "gray"})
