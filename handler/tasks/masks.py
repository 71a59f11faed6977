"""Instance masks of YOLO segment models: 32 mask coefficients per detection and the chunk's
prototypes `[N, 32, H/4, W/4]`, answered in the frame's own pixels as Ultralytics'
`process_mask_native` (`retina_masks=True`) makes them: the prototypes' mix cropped to the frame's
area, resized bilinearly to the frame, kept inside the box, above 0. Only the box's window is
computed and sent: a mask is zero outside its box."""

from __future__ import annotations

import math

import torch

from handler.layout import Placement


def windows(boxes: torch.Tensor) -> torch.Tensor:
    """`Tensor[M, 4] int64` x0, y0, x1, y1: the pixels a box's mask may set (centres inside it:
    `x0 <= x < x1` with `x0 = ceil(x1_box)`, as Ultralytics' `crop_mask` compares)."""
    return torch.cat((boxes[:, :2].ceil(), boxes[:, 2:].ceil()), dim=1).long()


def window_bits(coefficients: torch.Tensor, frames: torch.Tensor, boxes: torch.Tensor, protos: torch.Tensor,
                placement: Placement) -> tuple[torch.Tensor, torch.Tensor]:
    """Each detection's mask inside its window, flat, and the windows.

    Args:
        coefficients: `Tensor[M, 32]`.
        frames: `Tensor[M] int64`, each detection's row in the chunk.
        boxes: `Tensor[M, 4]` in the frame's pixels (clipped to it).
        protos: `Tensor[n, 32, h, w]`, the prototypes at a stride of the slot.
        placement: the chunk's placement (each frame's area in the slot).

    Returns:
        `Tensor[sum of window areas] bool` (row-major per window) and `Tensor[M, 4]` windows.
    """
    spans = windows(boxes)
    bits = []
    stride = placement.slot[0] / protos.shape[2]
    areas = [_frame_area(placement, frame, stride, protos.shape[2:]) for frame in range(protos.shape[0])]
    for i, (frame, window) in enumerate(zip(frames.tolist(), spans.tolist())):
        bits.append((_window_logits(coefficients[i], protos[frame], areas[frame], placement.original[frame], window)
                     > 0).reshape(-1))
    flat = torch.cat(bits) if bits else torch.zeros(0, dtype=torch.bool, device=protos.device)
    return flat, spans


def _frame_area(placement: Placement, frame: int, stride: float, shape: torch.Size) -> tuple[int, int, int, int]:
    """Rows and columns of the prototypes that cover the frame (the padding cut off as
    Ultralytics' `scale_masks` cuts it: the borders rounded after a 0.1 nudge inwards)."""
    (top, left), (h, w) = placement.offset(frame), placement.sizes[frame]
    bottom, right = placement.slot[0] - top - h, placement.slot[1] - left - w
    return (round(top / stride - 0.1), shape[0] - round(bottom / stride + 0.1),
            round(left / stride - 0.1), shape[1] - round(right / stride + 0.1))


def _window_logits(coefficients: torch.Tensor, protos: torch.Tensor, area: tuple[int, int, int, int],
                   size: tuple[int, int], window: list[int]) -> torch.Tensor:
    """`F.interpolate(coefficients @ protos[area], size, "bilinear")[window]` (align_corners=False,
    as Ultralytics' `scale_masks`) from the prototype cells under the window alone: the mix of
    those cells, then each window pixel interpolated from its four, separably (rows, then
    columns). Nothing frame-sized, and a few hundred cells mixed instead of the whole map.

    Args:
        coefficients: `Tensor[32]`.
        protos: `Tensor[32, ph, pw]`, one frame's prototypes.
        area: rows and columns of the prototypes that cover the frame (`_frame_area`).
        size: the frame's (h, w).
        window: x0, y0, x1, y1 in the frame.
    """
    x0, y0, x1, y1 = window
    top, bottom, left, right = area
    if x1 <= x0 or y1 <= y0:
        return protos.new_zeros((max(0, y1 - y0), max(0, x1 - x0)))
    (ah, aw), (h, w) = (bottom - top, right - left), size
    _, iy0, iy1, wy = _source(y0, y1, ah, h, protos.device)
    _, ix0, ix1, wx = _source(x0, x1, aw, w, protos.device)
    r0, r1 = _cells(y0, y1, ah, h)
    c0, c1 = _cells(x0, x1, aw, w)
    cells = protos[:, top + r0:top + r1, left + c0:left + c1].float()
    logits = (coefficients.float() @ cells.flatten(1)).view(r1 - r0, c1 - c0)
    rows = logits[iy0 - r0] * (1 - wy)[:, None] + logits[iy1 - r0] * wy[:, None]  # [window h, cells w]
    return rows[:, ix0 - c0] * (1 - wx) + rows[:, ix1 - c0] * wx


def _source(start: int, stop: int, cells: int, pixels: int,
            device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Where output pixels `start .. stop - 1` sample `cells` input cells (bilinear,
    align_corners=False): the source positions, their two cells and the second one's weight."""
    src = ((torch.arange(start, stop, device=device, dtype=torch.float32) + 0.5) * (cells / pixels) - 0.5).clamp(min=0)
    low = src.floor().long().clamp(max=cells - 1)
    return src, low, (low + 1).clamp(max=cells - 1), src - low


def _cells(start: int, stop: int, cells: int, pixels: int) -> tuple[int, int]:
    """The input cells (a range, one to spare each side) that output pixels `start .. stop - 1` read."""
    first = max(0.0, (start + 0.5) * cells / pixels - 0.5)
    last = max(0.0, (stop - 0.5) * cells / pixels - 0.5)
    return max(0, math.floor(first) - 1), min(cells, math.floor(last) + 3)


def prototypes(raw: object) -> torch.Tensor | None:
    """The prototypes among the model's outputs: a second output of 4 dimensions."""
    if isinstance(raw, (tuple, list)) and len(raw) == 2 and isinstance(raw[1], torch.Tensor) and raw[1].dim() == 4:
        return raw[1]
    return None

