"""Chunk geometry, owned in one place: what is allocated, what the model sees, how outputs map back.

A `Layout` is chosen once at `initialize` from the config (`pad` or `letterbox`). The planner,
the memory budget, the learned out-of-memory limits, collate, the padding metrics and `unpad`
all ask it, so their numbers cannot drift apart.

- `PadLayout`: each frame keeps its resolution; frames are grouped by their slot, their size
  rounded up to `size_divisor`.
- `LetterboxLayout`: each frame is resized on the host, in uint8, to fit the engine's
  `input_size` keeping its aspect (the JPEG decoder already shrinks it in the DCT domain where it
  can); every chunk's slot is `input_size` (`rect`: the resized size rounded up to `size_divisor`),
  and dense outputs are resized back to the frame.

With a `static_batch`, every chunk allocates exactly that many rows whatever its frame count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from handler.clip import Frame, Size, Value, letterbox_size
from handler.config import HandlerConfig, LetterboxPad, Resize, round_up


@dataclass(frozen=True, slots=True)
class Placement:
    """How one chunk's frames sit in its allocation and map back.

    Attributes:
        slot: (H, W) of every row of the allocation; also the model input's (H, W).
        rows: rows allocated and passed to the model (the static batch when set).
        sizes: each frame's (h, w) inside its slot.
        original: each frame's own (h, w), as sent.
        offsets: each frame's (top, left) corner in its slot; None: all at (0, 0).
        scales: each frame's scale from its own pixels to the slot's (1.0 when not resized).
        back: each frame's (top, left) as the inverse takes it off; None: `offsets`. Ultralytics'
            `scale_boxes` computes it again from the unrounded scaled size, which can differ by a
            pixel from where its letterbox put the frame: its answers are undone its way.
    """

    slot: Size
    rows: int
    sizes: tuple[Size, ...]
    original: tuple[Size, ...]
    offsets: tuple[Size, ...] | None = None
    scales: tuple[float, ...] | None = None
    back: tuple[Size, ...] | None = None

    def offset(self, i: int) -> Size:
        """Frame i's (top, left) corner in its slot."""
        return (0, 0) if self.offsets is None else self.offsets[i]

    def to_frame(self) -> torch.Tensor:
        """`Tensor[n, 6] float32`: per frame `left, top, scale, width, height, 0`, so that a point
        `(x', y')` of the model's input is `((x' - left) / scale, (y' - top) / scale)` in the
        frame's own pixels, clipped to `[0, width] x [0, height]`."""
        rows = []
        for i, (h, w) in enumerate(self.original):
            top, left = self.offset(i) if self.back is None else self.back[i]
            rows.append((left, top, 1.0 if self.scales is None else self.scales[i], w, h, 0.0))
        return torch.tensor(rows, dtype=torch.float32).reshape(len(rows), 6)

    @staticmethod
    def points_back(x: torch.Tensor, y: torch.Tensor, geometry: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Points of the model's input in their frames' own pixels, clipped to the frame.

        Args:
            x: `Tensor[M, K]`, the x of K points of each of M rows (a box's corners, a pose's keypoints).
            y: `Tensor[M, K]`, their y.
            geometry: `Tensor[M, 6]`, the `to_frame` row of each row's frame, on the points' device.
        """
        left, top, scale, width, height = (geometry[:, i:i + 1] for i in range(5))
        low = torch.zeros_like(left)
        return ((x.float() - left) / scale).clamp(low, width), ((y.float() - top) / scale).clamp(low, height)

    def area(self, i: int, stride: float, cover: bool = True) -> tuple[int, int, int, int]:
        """Frame i's rows and columns `[top, bottom) x [left, right)` in a map of the slot at
        `stride` (the slot's pixels per cell).

        Args:
            i: the frame's index in the chunk.
            stride: the map's stride (a float where the map is not an integer division of the slot).
            cover: True: every cell the frame touches (floor and ceiling: dense maps, answered at
                `ceil(h / stride)` rows for the frame's h); False: the cells mostly inside it, as
                Ultralytics' `scale_masks` cuts the padding off prototypes (each pad rounded after
                a 0.1 nudge inwards; at least one cell each way, where Ultralytics would fail on a frame
                thinner than half a cell).
        """
        (top, left), (h, w) = self.offset(i), self.sizes[i]
        if cover:
            return (math.floor(top / stride), math.ceil((top + h) / stride),
                    math.floor(left / stride), math.ceil((left + w) / stride))
        rows, columns = round(self.slot[0] / stride), round(self.slot[1] / stride)
        bottom, right = self.slot[0] - top - h, self.slot[1] - left - w
        first, last = min(round(top / stride - 0.1), rows - 1), rows - round(bottom / stride + 0.1)
        start, stop = min(round(left / stride - 0.1), columns - 1), columns - round(right / stride + 0.1)
        return first, max(last, first + 1), start, max(stop, start + 1)  # a frame thinner than a cell keeps one

    def crops(self, stride: int = 1) -> list[tuple[slice, slice]]:
        """Each frame's area (`cover`) in a map of the slot at `stride`: `(rows, columns)` slices."""
        return [(slice(top, bottom), slice(left, right))
                for top, bottom, left, right in (self.area(i, stride) for i in range(len(self.sizes)))]

    @property
    def tensor_pixels(self) -> int:
        """Pixels of the model input: rows x H x W."""
        return self.rows * self.slot[0] * self.slot[1]

    @property
    def padded_pixels(self) -> int:
        """Pixels of the model input that belong to no frame (padding and padded rows)."""
        return self.tensor_pixels - sum(h * w for h, w in self.sizes)

    @property
    def resized(self) -> bool:
        return self.sizes != self.original


class Layout:
    """Geometry shared by both modes; `slot`, `fitted` and `fit` are the mode's own."""

    def __init__(self, static_batch: int | None) -> None:
        self.static_batch = static_batch

    def slot(self, height: int, width: int) -> Size:
        """The slot a frame of this size goes to; frames of one slot share chunks."""
        raise NotImplementedError

    def fitted(self, height: int, width: int) -> Size:
        """The (h, w) a frame of this size takes inside its slot."""
        raise NotImplementedError

    def fit(self, frame: Frame, original: Size) -> Frame:
        """The frame as it goes into its slot: `[h, w, 3]` uint8 of `fitted(*original)`.

        Args:
            frame: `[h', w', 3]` uint8, the frame as decoded (possibly already shrunk), or a
                deferred one (pad only: it is decoded at its own size).
            original: the frame's own (h, w), as sent.
        """
        return frame

    def rows(self, frames: int) -> int:
        """Rows allocated for a chunk of `frames` frames."""
        return max(frames, self.static_batch or 0)

    def place(self, slot: Size, original: Sequence[Size]) -> Placement:
        """The placement of a chunk of frames (given by their own sizes) in `slot`."""
        return Placement(slot, self.rows(len(original)), tuple(self.fitted(h, w) for h, w in original),
                         tuple(original))

    def chunk_pixels(self, slot: Size, frames: int) -> int:
        """Input pixels of a chunk of `frames` frames in `slot`: what a forward's memory scales with."""
        return self.rows(frames) * slot[0] * slot[1]

    def max_frames(self, slot: Size, budget_bytes: int, bytes_per_pixel: int, cap: int) -> int:
        """Most frames (at most `cap`, at least 1) whose chunk stays within `budget_bytes`.

        A static-batch chunk costs the same for any frame count: the budget cannot shrink it.
        """
        per_row = slot[0] * slot[1] * bytes_per_pixel
        if self.static_batch is not None:
            return cap
        return max(1, min(cap, budget_bytes // per_row))

    def split_helps(self, slot: Size, frames: int) -> bool:
        """Whether running `frames` frames as two chunks allocates less per chunk (OOM retry)."""
        return frames > 1 and self.chunk_pixels(slot, frames // 2) < self.chunk_pixels(slot, frames)

    def unpad(self, output: torch.Tensor, placement: Placement, dense: bool | None = None) -> list[Value]:
        """Splits one model output (`Tensor[n, ...]` on the CPU, padded rows dropped) per frame.

        Args:
            output: the model output's real rows, on the host.
            placement: the chunk's placement (slot, each frame's size in it, its own size).
            dense: True: the output is a dense map of the slot (a ValueError names the shapes when
                it is not); False: it is returned whole per frame; None: a dense map when its last
                two dimensions divide the slot by one integer stride (handler `dense_outputs: auto`).

        Returns:
            One value per frame: a number for `[n]`, a list for `[n, K]`, and for dense maps
            `[n, ..., H/s, W/s]` (stride s >= 1) the map cropped to the frame's area inside its
            slot, resized back (nearest) to the frame's own size when the frame was resized.
            Values that are not finite (NaN, inf) become None (JSON `null`).
        """
        finite = output.is_floating_point() is False or bool(torch.isfinite(output).all())
        if output.dim() == 1 and not dense:
            return [_json_safe(v, finite) for v in output.tolist()]
        stride = _dense_stride(output.shape, placement.slot) if dense is not False else None
        if dense and stride is None:
            raise ValueError(
                f"an output listed in handler.dense_outputs has shape {list(output.shape)}, not a map "
                f"of the {placement.slot[0]}x{placement.slot[1]} input at one integer stride: "
                "take its name out of dense_outputs")
        if stride is None:
            return [_json_safe(row, finite) for row in output.tolist()]
        values = []
        for i, (rows, columns) in enumerate(placement.crops(stride)):
            crop = output[i, ..., rows, columns]
            if placement.resized:
                oh, ow = placement.original[i]
                crop = _resize_nearest(crop, (-(-oh // stride), -(-ow // stride)))
            values.append(_json_safe(crop.tolist(), finite))
        return values


class PadLayout(Layout):
    """Frames keep their resolution; slots are their size rounded up to `divisor`."""

    def __init__(self, divisor: int, static_batch: int | None = None) -> None:
        super().__init__(static_batch)
        self.divisor = divisor

    def slot(self, height: int, width: int) -> Size:
        return round_up(height, width, self.divisor)

    def fitted(self, height: int, width: int) -> Size:
        return height, width


class LetterboxLayout(Layout):
    """Frames are resized (uint8, on the host) to fit `input_size`; every slot is `input_size`, or
    with a `stride` the frame's fitted size rounded up to it (Ultralytics' minimum rectangle).

    With `center`, a frame sits in the middle of its slot as Ultralytics places it: the left
    border is `round((W - w) / 2 - 0.1)`, the top likewise; boxes come back as its `scale_boxes`
    takes them back (`Placement.back`).
    """

    def __init__(self, input_size: Size, static_batch: int | None = None, center: bool = False,
                 antialias: bool = True, stride: int | None = None) -> None:
        super().__init__(static_batch)
        self.input_size = input_size
        self.center = center
        self.antialias = antialias
        self.stride = stride

    def place(self, slot: Size, original: Sequence[Size]) -> Placement:
        sizes = tuple(self.fitted(h, w) for h, w in original)
        scales = tuple(min(slot[0] / h, slot[1] / w) for h, w in original)
        offsets = back = None
        if self.center:
            offsets = tuple((round((slot[0] - h) / 2 - 0.1), round((slot[1] - w) / 2 - 0.1)) for h, w in sizes)
            back = tuple((round((slot[0] - h * r) / 2 - 0.1), round((slot[1] - w * r) / 2 - 0.1))
                         for (h, w), r in zip(original, scales))
        return Placement(slot, self.rows(len(original)), sizes, tuple(original), offsets, scales, back)

    def slot(self, height: int, width: int) -> Size:
        if self.stride is None:
            return self.input_size
        return round_up(*self.fitted(height, width), self.stride)

    def fitted(self, height: int, width: int) -> Size:
        return letterbox_size(height, width, self.input_size)

    def fit(self, frame: Frame, original: Size) -> Frame:
        if not isinstance(frame, np.ndarray):
            raise TypeError("a letterbox engine resizes decoded pixels: decode with lazy=False")
        size = self.fitted(*original)
        if frame.shape[:2] == size:
            return frame
        return resize_uint8(frame, size, self.antialias)


def layout_for(config: HandlerConfig) -> Layout:
    """The layout the config asks for; chosen once, at `initialize`."""
    if config.letterboxed:
        assert config.input_size is not None  # HandlerConfig checks this
        return LetterboxLayout(config.input_size, config.static_batch, config.letterbox_pad is LetterboxPad.CENTER,
                               config.resize_antialias, config.size_divisor if config.resize is Resize.RECT else None)
    return PadLayout(config.size_divisor, config.static_batch)


def resize_uint8(frame: np.ndarray, size: Size, antialias: bool = True) -> np.ndarray:
    """`[h, w, 3]` uint8 -> `[H, W, 3]` uint8, bilinear, without going to float: with antialiasing
    (torch's vectorised uint8 kernel), or without it exactly as OpenCV's `INTER_LINEAR` does it, bit
    for bit (`resize_like_opencv`: Ultralytics' letterbox resizes with it)."""
    if not antialias:
        return resize_like_opencv(frame, size)
    if not frame.flags.writeable:  # a view of a `bytes` body; torch wants writable memory
        frame = frame.copy()
    source = torch.from_numpy(np.ascontiguousarray(frame)).permute(2, 0, 1)[None]
    out = F.interpolate(source, size=size, mode="bilinear", antialias=True, align_corners=False)
    return out[0].permute(1, 2, 0).contiguous().numpy()


def resize_like_opencv(frame: np.ndarray, size: Size) -> np.ndarray:
    """`cv2.resize(frame, (W, H), interpolation=cv2.INTER_LINEAR)` for uint8, bit for bit, in torch.

    OpenCV's fixed point: 11-bit weights rounded from float32 (columns clamped at the borders, rows
    not), a horizontal pass kept in int32, then its vectorised vertical pass, which drops 4 bits of
    each row before the 16-bit multiply and rounds once at the end. torch's own bilinear differs from
    it by one level in a fifth to a third of the pixels, enough to move a detector's boxes.
    """
    (h, w), (height, width) = frame.shape[:2], size
    if (h, w) == (height, width):
        return frame
    if not frame.flags.writeable:
        frame = frame.copy()
    x0, x1, a0, a1 = _opencv_weights(w, width, clamp=True)
    y0, y1, b0, b1 = _opencv_weights(h, height, clamp=False)
    source = torch.from_numpy(np.ascontiguousarray(frame))

    def across(rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:  # `[H, w, 3]` -> `[H, W, 3]` int32
        picked = source.index_select(0, rows)
        out = picked.index_select(1, x0).to(torch.int32).mul_(a0[:, None])
        out.add_(picked.index_select(1, x1).to(torch.int32).mul_(a1[:, None])).bitwise_right_shift_(4)
        return out.mul_(weight[:, None, None]).bitwise_right_shift_(16)

    out = across(y0, b0).add_(across(y1, b1)).add_(2).bitwise_right_shift_(2)
    return out.clamp_(0, 255).to(torch.uint8).numpy()


def _opencv_weights(source: int, target: int, clamp: bool) -> tuple[torch.Tensor, ...]:
    """Per target pixel: its two source pixels and their 11-bit weights, as OpenCV computes them."""
    scale = 1.0 / (target / source)  # OpenCV's double scale_x = 1 / inv_scale_x
    f = ((torch.arange(target, dtype=torch.float64) + 0.5) * scale - 0.5).to(torch.float32)
    first = torch.floor(f).to(torch.int64)
    f = f - first.to(torch.float32)
    if clamp:  # a column outside the frame takes the border's pixel whole
        outside = (first < 0) | (first >= source - 1)
        f = torch.where(outside, torch.zeros_like(f), f)
    second = (first + 1).clamp(0, source - 1)
    first = first.clamp(0, source - 1)
    weights = [torch.round(v * 2048).to(torch.int32) for v in (1 - f, f)]  # cvRound: half to even
    return first, second, *weights


def _json_safe(value: Value, finite: bool) -> Value:
    if finite:
        return value
    if isinstance(value, list):
        return [_json_safe(v, False) for v in value]
    return value if value is not None and math.isfinite(value) else None


def _dense_stride(shape: torch.Size, slot: Size) -> int | None:
    if len(shape) < 3:
        return None
    oh, ow = shape[-2:]
    if oh == 0 or ow == 0 or slot[0] % oh or slot[1] % ow:
        return None
    stride = slot[0] // oh
    return stride if slot[1] // ow == stride else None


def _resize_nearest(crop: torch.Tensor, size: Size) -> torch.Tensor:
    lead = crop.shape[:-2]
    flat = crop.reshape(1, -1, *crop.shape[-2:]).float()
    return F.interpolate(flat, size=size, mode="nearest").reshape(*lead, *size).to(crop.dtype)
