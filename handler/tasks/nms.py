"""Class-aware non-maximum suppression over a whole chunk: torchvision's kernel where torchvision
is installed, a pure-torch greedy one (same answers, slower) where it is not."""

from __future__ import annotations

import torch

from handler.loading import has_torchvision


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
