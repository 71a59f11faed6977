"""The padded batch that knows its frames' sizes, collating into it, and the input normalisation.

Where each frame goes and how outputs map back is the layout's (`handler.layout`); this module
does the copying and the conversion.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from handler.clip import Deferred, Frame
from handler.config import Normalize
from handler.errors import FrameError
from handler.layout import Placement


@dataclass(frozen=True, slots=True)
class PaddedBatch:
    """Frames copied into one allocation, each at its corner of its slot (`placement.offsets`).

    Attributes:
        tensor: `Tensor[R, H, W, 3]` (uint8, or float32 when collated for a CPU model), or
            `Tensor[R, 3, H, W]` float32 when `planar`; R = placement.rows; rows past the
            frames and pixels outside a frame are `pad_value`.
        placement: the layout's answer for this chunk (slot, rows, sizes, original sizes).
        failed: rows whose deferred frame could not be decoded (their slot is zero).
        planar: collated channel by channel, for a model that takes contiguous `[N, 3, H, W]`
            (an ONNX graph on the CPU): it gets this buffer as is.
    """

    tensor: torch.Tensor
    placement: Placement
    failed: dict[int, FrameError] = field(default_factory=dict)
    planar: bool = False

    def __len__(self) -> int:
        return len(self.placement.sizes)


def collate(frames: Sequence[Frame], placement: Placement, out: torch.Tensor | None = None,
            parallel: Callable[[Callable[[int], None], range], Iterable[None]] = map,
            later: frozenset[int] = frozenset(), pad_value: int = 0, planar: bool = False) -> PaddedBatch:
    """Copies frames into one `[rows, H, W, 3]` tensor (`[rows, 3, H, W]` when `planar`), one copy each.

    Args:
        frames: `[h, w, 3]` uint8 arrays of `placement.sizes`, or deferred frames decoded
            straight into their slot (one that fails to decode is recorded in `failed`).
        placement: the slot, rows and sizes from the layout.
        out: a buffer to fill instead of allocating, `[rows, H, W, 3]` uint8 or float32; a
            float32 one gets the pixel values converted in the same copy.
        parallel: a `map` that runs the (independent) per-row copies, e.g. a thread pool's.
        later: rows left as padding here, filled on the device after the upload (`handler.fills`).
        pad_value: every pixel outside a frame (Ultralytics trains with 114).
        planar: `out` is `[rows, 3, H, W]`; each frame is copied into it channel-first.

    Raises:
        ValueError: a frame's size is not the one the placement gives it.
    """
    for frame, size in zip(frames, placement.sizes):
        if tuple(frame.shape[:2]) != size:
            raise ValueError(f"frame of {frame.shape[:2]} does not match its placement {size}")
    if out is None:
        out = torch.empty((placement.rows, *placement.slot, 3), dtype=torch.uint8)
    slots = out.numpy()
    failed: dict[int, FrameError] = {}

    def fill(i: int) -> None:
        frame = frames[i] if i < len(frames) and i not in later else None
        if isinstance(frame, torch.Tensor):
            raise TypeError(f"row {i} is on the device: collate it `later`")
        slot = slots[i].transpose(1, 2, 0) if planar else slots[i]  # [H, W, 3], a view either way
        error = slot.fill(pad_value) if frame is None else _fill(
            slot, frame, placement.sizes[i], placement.offset(i), pad_value)
        if error is not None:
            failed[i] = error

    for _ in parallel(fill, range(placement.rows)):
        pass
    return PaddedBatch(out, placement, failed, planar)


def _fill(slot: np.ndarray, frame: np.ndarray | Deferred, size: tuple[int, int], offset: tuple[int, int],
          pad_value: int) -> FrameError | None:
    """Copies (or decodes) one frame into its area of the slot and pads the rest with
    `pad_value`. Returns the error of a deferred frame that failed to decode."""
    (h, w), (top, left) = size, offset
    area = slot[top:top + h, left:left + w]
    error = None
    if isinstance(frame, np.ndarray):
        np.copyto(area, frame)
    else:
        try:
            _decode_into(frame, area)
        except FrameError as err:
            error = err.detached()
            area.fill(pad_value)
    slot[:top].fill(pad_value)
    slot[top + h:].fill(pad_value)
    slot[top:top + h, :left].fill(pad_value)
    slot[top:top + h, left + w:].fill(pad_value)
    return error


_scratch = threading.local()


def _decode_into(frame: Deferred, out: np.ndarray) -> None:
    """Decodes a deferred frame into `out`: in place when `out` is contiguous uint8 (full-width
    rows of a uint8 slot), else through this thread's reused uint8 buffer, converted while the
    frame is still in cache (a float32 slot on the CPU: one decode, one converting copy, no
    frame-sized allocation)."""
    if out.dtype == np.uint8 and out.flags.c_contiguous:
        frame.decode_into(out)
        return
    size = math.prod(out.shape)
    buffer: np.ndarray | None = getattr(_scratch, "buffer", None)
    if buffer is None or buffer.size < size:
        buffer = _scratch.buffer = None  # free the old one before allocating the larger
        buffer = _scratch.buffer = np.empty(size, dtype=np.uint8)
    assert buffer is not None
    pixels = buffer[:size].reshape(out.shape)
    frame.decode_into(pixels)
    np.copyto(out, pixels)


class Normalizer:
    """`Tensor[N, H, W, 3]` uint8 (or float32) -> `Tensor[N, 3, H, W] float32`, normalised.

    `(pixel * scale - mean) / std` is folded into `pixel / d - b` with `d = std / scale` and
    `b = mean / std`, computed once per device rather than once per chunk. A division, not a
    multiplication by its reciprocal: `scale: 1/255` is then `pixel / 255` in float32, bit for bit
    what Ultralytics and torchvision's `ToTensor` feed (a reciprocal is off by one ulp for about
    half of the 256 values).
    """

    def __init__(self, normalize: Normalize, device: torch.device) -> None:
        self.normalize = normalize
        self._d: torch.Tensor | None = None
        self._b: torch.Tensor | None = None
        if not normalize.is_identity:
            std = torch.tensor(normalize.std, dtype=torch.float64)
            d = std / normalize.scale
            b = torch.tensor(normalize.mean, dtype=torch.float64) / std
            self._d = d.to(torch.float32).view(1, 3, 1, 1).to(device)
            self._b = b.to(torch.float32).view(1, 3, 1, 1).to(device)

    def __call__(self, pixels: torch.Tensor, planar: bool = False) -> torch.Tensor:
        """The model input, in channels-last memory format (contiguous from a `planar` batch).

        Converting without transposing is one sequential pass, and convolutions run
        channels-last natively. A float32 input is normalised in place.
        """
        x = pixels.to(torch.float32)
        x = x if planar else x.permute(0, 3, 1, 2)
        if self._d is not None and self._b is not None:
            x.div_(self._d).sub_(self._b)
        return x
