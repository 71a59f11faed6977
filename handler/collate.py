"""Shape buckets, the padded batch that knows its frames' sizes, letterboxing and cropping back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from handler.config import Normalize


def bucket(height: int, width: int, divisor: int) -> tuple[int, int]:
    """Rounds a frame size up to the size divisor, so few shapes reach the model."""
    return -(-height // divisor) * divisor, -(-width // divisor) * divisor


@dataclass(frozen=True, slots=True)
class PaddedBatch:
    """Frames copied into one allocation, each in the top-left corner of its slot.

    Attributes:
        tensor: `Tensor[R, Hb, Wb, 3]` (uint8, or float32 when collated for a CPU model),
            R >= len(sizes); rows past len(sizes) and pixels outside a frame are zero.
        sizes: each frame's true (h, w).
    """

    tensor: torch.Tensor
    sizes: tuple[tuple[int, int], ...]

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> torch.Tensor:
        """The i-th frame without its padding: `Tensor[h, w, 3]` (a view)."""
        h, w = self.sizes[i]
        return self.tensor[i, :h, :w]

    @property
    def padding_ratio(self) -> float:
        """Padded pixels / all pixels of the tensor."""
        rows, height, width, _ = self.tensor.shape
        valid = sum(h * w for h, w in self.sizes)
        return 1.0 - valid / (rows * height * width)


def collate(frames: list[np.ndarray], shape: tuple[int, int], rows: int | None = None,
            out: torch.Tensor | None = None) -> PaddedBatch:
    """Copies frames into one `[rows, Hb, Wb, 3]` uint8 tensor: one allocation, one copy each.

    Args:
        frames: `[h, w, 3]` uint8 arrays, each no larger than `shape`.
        shape: the slot size (Hb, Wb).
        rows: slots to allocate (>= len(frames)); extra rows are zero (static-batch engines).
        out: a buffer to fill instead of allocating, `[rows, Hb, Wb, 3]`; a float32 one gets
            the pixel values converted in the same copy.
    """
    rows = len(frames) if rows is None else rows
    height, width = shape
    if out is None:
        out = torch.empty((rows, height, width, 3), dtype=torch.uint8)
    slots = out.numpy()
    for slot, frame in zip(slots, frames):
        h, w = frame.shape[:2]
        np.copyto(slot[:h, :w], frame)
        slot[h:].fill(0)
        slot[:h, w:].fill(0)
    slots[len(frames):].fill(0)
    return PaddedBatch(out, tuple(f.shape[:2] for f in frames))


def to_model_input(pixels: torch.Tensor, normalize: Normalize) -> torch.Tensor:
    """`Tensor[N, H, W, 3]` uint8 (or float32) on the device -> `Tensor[N, 3, H, W] float32`, normalised.

    The result is in channels-last memory format: converting without transposing is one
    sequential pass, and convolutions run channels-last natively.
    """
    x = pixels.to(torch.float32).permute(0, 3, 1, 2)
    if not normalize.is_identity:
        mean = torch.tensor(normalize.mean, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(normalize.std, device=x.device).view(1, 3, 1, 1)
        x.mul_(normalize.scale).sub_(mean).div_(std)
    return x


def letterbox_size(height: int, width: int, target: tuple[int, int]) -> tuple[int, int]:
    """The (h, w) a frame takes inside `target` after an aspect-preserving resize."""
    scale = min(target[0] / height, target[1] / width)
    return max(1, min(target[0], round(height * scale))), max(1, min(target[1], round(width * scale)))


def letterbox(x: torch.Tensor, sizes: tuple[tuple[int, int], ...], target: tuple[int, int]
              ) -> tuple[torch.Tensor, tuple[tuple[int, int], ...]]:
    """Resizes each frame to fit `target`, keeping its aspect, and pads (top-left) with zeros.

    Args:
        x: `Tensor[R, 3, Hb, Wb] float`, frame i in `x[i, :, :h, :w]`.
        sizes: each frame's (h, w).
        target: the engine's (H, W).

    Returns:
        `Tensor[R, 3, H, W] float` and each frame's (h, w) inside it.
    """
    out = x.new_zeros((x.shape[0], 3, *target))
    fitted = tuple(letterbox_size(h, w, target) for h, w in sizes)
    by_size: dict[tuple[int, int], list[int]] = {}
    for i, size in enumerate(sizes):
        by_size.setdefault(size, []).append(i)
    for (h, w), rows in by_size.items():
        nh, nw = fitted[rows[0]]
        index = torch.tensor(rows, device=x.device)
        source = x.index_select(0, index)[:, :, :h, :w]
        if (nh, nw) != (h, w):
            source = F.interpolate(source, size=(nh, nw), mode="bilinear", antialias=True,
                                   align_corners=False)
        out[index, :, :nh, :nw] = source
    return out, fitted


def unpad(output: torch.Tensor, padded_hw: tuple[int, int], sizes: tuple[tuple[int, int], ...],
          original: tuple[tuple[int, int], ...] | None = None) -> list[Any]:
    """Splits one model output into per-frame values.

    Args:
        output: `Tensor[R, ...]` on the CPU; rows past `len(sizes)` are dropped.
        padded_hw: the (H, W) the model saw.
        sizes: each frame's (h, w) inside the model input.
        original: each frame's own (h, w) when the model saw it resized (letterbox); dense
            maps are then resized back to it.

    Returns:
        One value per frame: a number for `[R]`, a list for `[R, K]`, and for dense maps
        `[R, ..., H/s, W/s]` (stride s >= 1) the map cropped to the frame's own area.
    """
    output = output[: len(sizes)]
    if output.dim() == 1:
        return output.tolist()
    stride = _dense_stride(output.shape, padded_hw)
    if stride is None:
        return [row.tolist() for row in output]
    values = []
    for i, (h, w) in enumerate(sizes):
        crop = output[i, ..., : -(-h // stride), : -(-w // stride)]
        if original is not None:
            oh, ow = original[i]
            crop = _resize_nearest(crop, (-(-oh // stride), -(-ow // stride)))
        values.append(crop.tolist())
    return values


def _dense_stride(shape: torch.Size, padded_hw: tuple[int, int]) -> int | None:
    if len(shape) < 3:
        return None
    oh, ow = shape[-2:]
    if oh == 0 or ow == 0 or padded_hw[0] % oh or padded_hw[1] % ow:
        return None
    stride = padded_hw[0] // oh
    return stride if padded_hw[1] // ow == stride else None


def _resize_nearest(crop: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    lead = crop.shape[:-2]
    flat = crop.reshape(1, -1, *crop.shape[-2:]).float()
    return F.interpolate(flat, size=size, mode="nearest").reshape(*lead, *size).to(crop.dtype)
