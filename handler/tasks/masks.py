"""Instance masks of YOLO segment models: 32 mask coefficients per detection and the chunk's
prototypes `[N, 32, H/4, W/4]`, answered in the frame's own pixels as Ultralytics'
`process_mask_native` (`retina_masks=True`) makes them: the prototypes' mix cropped to the frame's
area, resized bilinearly to the frame, kept inside the box, above 0. Only the box's window is
computed and sent: a mask is zero outside its box."""

from __future__ import annotations

import torch
import torch.nn.functional as F

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
    for i, (frame, window) in enumerate(zip(frames.tolist(), spans.tolist())):
        area = _frame_area(placement, frame, stride, protos.shape[2:])
        logits = (coefficients[i].float() @ protos[frame].float().flatten(1)).view(protos.shape[2:])
        logits = logits[area[0]:area[1], area[2]:area[3]]
        bits.append((_sample(logits, placement.original[frame], window) > 0).reshape(-1))
    flat = torch.cat(bits) if bits else torch.zeros(0, dtype=torch.bool, device=protos.device)
    return flat, spans


def _frame_area(placement: Placement, frame: int, stride: float, shape: torch.Size) -> tuple[int, int, int, int]:
    """Rows and columns of the prototypes that cover the frame (the padding cut off as
    Ultralytics' `scale_masks` cuts it: the borders rounded after a 0.1 nudge inwards)."""
    (top, left), (h, w) = placement.offset(frame), placement.sizes[frame]
    bottom, right = placement.slot[0] - top - h, placement.slot[1] - left - w
    return (round(top / stride - 0.1), shape[0] - round(bottom / stride + 0.1),
            round(left / stride - 0.1), shape[1] - round(right / stride + 0.1))


def _sample(logits: torch.Tensor, size: tuple[int, int], window: list[int]) -> torch.Tensor:
    """`F.interpolate(logits, size, "bilinear")[window]` without the whole frame: the window's
    pixels sampled where interpolate would sample them (align_corners=False, borders clamped)."""
    x0, y0, x1, y1 = window
    if x1 <= x0 or y1 <= y0:
        return logits.new_zeros((max(0, y1 - y0), max(0, x1 - x0)))
    (ph, pw), (h, w) = logits.shape, size
    ys = ((torch.arange(y0, y1, device=logits.device) + 0.5) * (ph / h) - 0.5).clamp(min=0)
    xs = ((torch.arange(x0, x1, device=logits.device) + 0.5) * (pw / w) - 0.5).clamp(min=0)
    gy = (2 * ys + 1) / ph - 1
    gx = (2 * xs + 1) / pw - 1
    grid = torch.stack(torch.meshgrid(gx, gy, indexing="xy"), dim=-1)[None]
    out = F.grid_sample(logits[None, None], grid, mode="bilinear", padding_mode="border", align_corners=False)
    return out[0, 0]


def prototypes(raw: object) -> torch.Tensor | None:
    """The prototypes among the model's outputs: a second output of 4 dimensions."""
    if isinstance(raw, (tuple, list)) and len(raw) == 2 and isinstance(raw[1], torch.Tensor) and raw[1].dim() == 4:
        return raw[1]
    return None

