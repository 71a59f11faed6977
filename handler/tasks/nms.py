"""Class-aware non-maximum suppression, frame by frame: torchvision's kernel where torchvision is
installed, a pure-torch greedy one (same answers, slower) where it is not.

Per frame, not over the chunk: NMS compares every box with every other, so one call over 16
frames x 5,000 candidates (a detector at `score_threshold: 0.1`) is 6.4e9 IoUs and, on CUDA, an
800 MB suppression mask; per frame it is 16 x 25e6."""

from __future__ import annotations

import torch

from handler.loading import has_torchvision


def per_frame_nms(boxes: torch.Tensor, scores: torch.Tensor, groups: torch.Tensor, frames: torch.Tensor,
                  count: int, iou: float) -> torch.Tensor:
    """Indexes of the boxes kept, frame by frame (`batched_nms` on each frame's boxes).

    Args:
        boxes: `Tensor[M, 4]` x1, y1, x2, y2.
        scores: `Tensor[M]`.
        groups: `Tensor[M] int64`, the class of each box (or one value: class-agnostic).
        frames: `Tensor[M] int64`, each box's frame.
        count: the chunk's frames.
        iou: a box is dropped when its IoU with a kept box of its frame and group is above this.
    """
    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.int64, device=boxes.device)
    order = torch.argsort(frames, stable=True)  # (the decoders give them so already: a no-op then)
    sizes = torch.bincount(frames, minlength=count).tolist()  # the one host sync of the split
    kept, start = [], 0
    for size in sizes:
        if size:
            rows = order[start:start + size]
            kept.append(rows[batched_nms(boxes[rows], scores[rows], groups[rows], iou)])
            start += size
    return torch.cat(kept)


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, groups: torch.Tensor, iou: float) -> torch.Tensor:
    """Indexes of the boxes kept, by descending score; boxes of different groups never suppress
    each other.

    One NMS over the chunk, each group's boxes moved apart from the others': the groups are
    renumbered 0, 1, 2, ... and the boxes shifted in float64, where a shift of group x largest
    coordinate stays exact (torchvision's own `batched_nms` shifts in float32 by the raw group
    ids, which collapses boxes of large ids, or runs one NMS per group past 1000 boxes).

    Args:
        boxes: `Tensor[M, 4]` x1, y1, x2, y2.
        scores: `Tensor[M]`.
        groups: `Tensor[M] int64`, e.g. `frame * classes + class`.
        iou: a box is dropped when its IoU with a kept box of its group is above this.
    """
    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.int64, device=boxes.device)
    if not has_torchvision():
        return greedy_nms(boxes.float(), scores.float(), groups, iou)
    import torchvision

    dense = torch.unique(groups, return_inverse=True)[1]
    spaced = boxes.double()
    spaced = spaced + (dense.double() * (spaced.max() - spaced.min() + 1))[:, None]
    kept: torch.Tensor = torchvision.ops.nms(spaced, scores.double(), iou)
    return kept


def greedy_nms(boxes: torch.Tensor, scores: torch.Tensor, groups: torch.Tensor, iou: float) -> torch.Tensor:
    """Greedy NMS in pure torch: one step per kept box, each against the boxes left of its group."""
    order = torch.argsort(scores, descending=True, stable=True)
    boxes, groups = boxes[order], groups[order]
    areas = (boxes[:, 2] - boxes[:, 0]).clamp(min=0) * (boxes[:, 3] - boxes[:, 1]).clamp(min=0)
    keep = []
    left = torch.arange(len(order), device=boxes.device)
    while left.numel():
        i = left[0]
        keep.append(i)
        rest = left[1:]
        if not rest.numel():
            break
        lt = torch.maximum(boxes[i, :2], boxes[rest, :2])
        rb = torch.minimum(boxes[i, 2:], boxes[rest, 2:])
        inter = (rb - lt).clamp(min=0).prod(dim=1)
        overlap = inter / (areas[i] + areas[rest] - inter)
        left = rest[~(overlap > iou) | (groups[rest] != groups[i])]  # 0/0 (two empty boxes) keeps, as torchvision
    return order[torch.stack(keep)]
