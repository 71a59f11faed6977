"""Detectors, a classifier and a segmenter built from code that find planted objects exactly:
pure red, green and blue rectangles (classes 0, 1, 2), so that tests can assert exact boxes.

Each is scripted (`torch.jit.script`) and takes `Tensor[N, 3, H, W]` of pixel values / 255
(`normalize: {scale: 1/255}`). A pixel is of class c when its channel c is above 0.5 and the
other two below; black (0) and grey (114) padding is of none.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import torch
from torch import Tensor, nn

COLOURS = ((255, 0, 0), (0, 255, 0), (0, 0, 255))
#: Score of each class's box, and of its shifted duplicate (IoU about 0.9: NMS removes it).
SCORES = (0.9, 0.85, 0.8)
SHIFTED = (0.8, 0.75, 0.7)
LOW = 0.2  # under the default score_threshold (0.25)
ANCHORS = 64  # more anchors than rows, as a YOLO head has


def masks(x: Tensor) -> Tensor:
    """`[N, 3, H, W]` -> `[N, 3, H, W]` bool: pixels of each class."""
    on = x > 0.5
    red = on[:, 0] & ~on[:, 1] & ~on[:, 2]
    green = on[:, 1] & ~on[:, 0] & ~on[:, 2]
    blue = on[:, 2] & ~on[:, 0] & ~on[:, 1]
    return torch.stack([red, green, blue], dim=1)


def boxes(x: Tensor) -> Tuple[Tensor, Tensor]:
    """Each class's bounding box in input pixels `[N, 3, 4]` (x1, y1, x2, y2) and presence `[N, 3]`."""
    m = masks(x)
    rows = m.any(dim=3).to(torch.int32)  # [N, 3, H]
    cols = m.any(dim=2).to(torch.int32)  # [N, 3, W]
    h, w = rows.shape[2], cols.shape[2]
    y1 = rows.argmax(dim=2)
    y2 = h - rows.flip(2).argmax(dim=2)
    x1 = cols.argmax(dim=2)
    x2 = w - cols.flip(2).argmax(dim=2)
    present = rows.amax(dim=2) > 0
    return torch.stack([x1, y1, x2, y2], dim=2).to(torch.float32), present


def _xywh(b: Tensor) -> Tensor:
    return torch.stack([(b[..., 0] + b[..., 2]) / 2, (b[..., 1] + b[..., 3]) / 2,
                        b[..., 2] - b[..., 0], b[..., 3] - b[..., 1]], dim=-1)


class Yolo(nn.Module):
    """Ultralytics v8/11 raw output `[N, 4 + 3 (+ 6), 64]`: per class its box (score SCORES[c]),
    a duplicate shifted by 5% of its width (SHIFTED[c]), and a low one (LOW); with `pose`, two
    keypoints per anchor: the box's top-left (score 0.9) and bottom-right (0.8). With `floor`, a
    box narrower or lower than that many input pixels is not found (a real detector's smallest
    object)."""

    def __init__(self, pose: bool = False, floor: float = 0.0) -> None:
        super().__init__()
        self.pose = pose
        self.floor = floor
        self.anchors = ANCHORS
        self.scores = [list(SCORES), list(SHIFTED), [LOW] * 3]

    def forward(self, x: Tensor) -> Tensor:
        b, present = boxes(x)
        present = present & (b[..., 2] - b[..., 0] >= self.floor) & (b[..., 3] - b[..., 1] >= self.floor)
        n = b.shape[0]
        shift = (b[..., 2] - b[..., 0]) * 0.05
        shifted = b + torch.stack([shift, torch.zeros_like(shift), shift, torch.zeros_like(shift)], dim=-1)
        rows = 4 + 3 + (6 if self.pose else 0)
        out = torch.zeros(n, self.anchors, rows, device=x.device)
        on = present.to(torch.float32)
        for c in range(3):
            for k, box in enumerate([b, shifted, b]):
                score = self.scores[k][c]
                a = c + 3 * k
                out[:, a, :4] = _xywh(box[:, c])
                out[:, a, 4 + c] = score * on[:, c]
                if self.pose:
                    out[:, a, 7:13] = torch.stack([box[:, c, 0], box[:, c, 1], torch.full_like(on[:, c], 0.9),
                                                   box[:, c, 2], box[:, c, 3], torch.full_like(on[:, c], 0.8)], dim=1)
        return out.transpose(1, 2).contiguous()


class End2End(nn.Module):
    """`[N, 6, 6]`: x1, y1, x2, y2, score, class for each class's box, then 3 low rows."""

    def __init__(self) -> None:
        super().__init__()
        self.scores = list(SCORES)
        self.low = LOW

    def forward(self, x: Tensor) -> Tensor:
        b, present = boxes(x)
        on = present.to(torch.float32)
        rows: List[Tensor] = []
        for c in range(3):
            rows.append(torch.cat([b[:, c], (self.scores[c] * on[:, c])[:, None], torch.full_like(on[:, c:c + 1], c)], dim=1))
        for c in range(3):
            rows.append(torch.cat([b[:, c], (self.low * on[:, c])[:, None], torch.full_like(on[:, c:c + 1], c)], dim=1))
        return torch.stack(rows, dim=1)


class EfficientNms(nn.Module):
    """TensorRT EfficientNMS outputs: 3 valid rows (one per class) and a fourth past
    `num_detections` that must be ignored."""

    def __init__(self) -> None:
        super().__init__()
        self.scores = list(SCORES)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        b, present = boxes(x)
        n = b.shape[0]
        on = present.to(torch.float32)
        scores = torch.tensor(self.scores, device=x.device)[None, :] * on
        junk = torch.tensor([[0.0, 0.0, 10.0, 10.0]], device=x.device).expand(n, 1, 4)
        detection_boxes = torch.cat([b, junk], dim=1)
        detection_scores = torch.cat([scores, torch.full((n, 1), 0.99, device=x.device)], dim=1)
        detection_classes = torch.tensor([0, 1, 2, 0], dtype=torch.int32, device=x.device)[None, :].expand(n, 4)
        num = torch.full((n, 1), 3, dtype=torch.int32, device=x.device)
        return num, detection_boxes, detection_scores, detection_classes


class Classifier(nn.Module):
    """Logits `[N, 3]`: 10 x the mean of each channel (over the whole input)."""

    def forward(self, x: Tensor) -> Tensor:
        return 10.0 * x.mean(dim=(2, 3))


class Segmenter(nn.Module):
    """Class scores `[N, 4, H, W]`: background 0.5, then one channel per colour (its mask)."""

    def forward(self, x: Tensor) -> Tensor:
        m = masks(x).to(torch.float32)
        background = torch.full_like(m[:, :1], 0.5)
        return torch.cat([background, m], dim=1)


def script(module: nn.Module) -> torch.jit.ScriptModule:
    return torch.jit.script(module.eval())


def scene(height: int, width: int, rects: dict[int, tuple[int, int, int, int]], background: int = 40) -> np.ndarray:
    """A `[height, width, 3]` uint8 frame, dark grey, with rectangles `{class: (x1, y1, x2, y2)}`."""
    frame = np.full((height, width, 3), background, dtype=np.uint8)
    for c, (x1, y1, x2, y2) in rects.items():
        frame[y1:y2, x1:x2] = COLOURS[c]
    return frame


class TorchvisionStyle(nn.Module):
    """Answers as torchvision's detectors do: called with a list of `[3, h, w]` frames, returns a
    list of dicts with `boxes`, `labels` (class + 1: 0 is the background), `scores`, `masks`
    `[k, 1, h, w]` and `keypoints` `[k, 2, 3]` with `keypoints_scores`; a batched tensor is refused
    as by a scripted torchvision model."""

    def forward(self, images: List[Tensor]) -> List[Dict[str, Tensor]]:
        out: List[Dict[str, Tensor]] = []
        for image in images:
            b, present = boxes(image[None])
            m = masks(image[None])[0]
            keep = present[0].nonzero().squeeze(1)
            corners = torch.stack([b[0, keep, :2], b[0, keep, 2:]], dim=1)  # [k, 2, 2]
            out.append({"boxes": b[0, keep], "labels": keep + 1, "scores": 0.9 - 0.05 * keep.to(torch.float32),
                        "masks": m[keep].to(torch.float32)[:, None],
                        "keypoints": torch.cat([corners, torch.ones_like(corners[..., :1])], dim=-1),
                        "keypoints_scores": torch.full(corners.shape[:2], 3.5)})
        return out


class YoloSeg(nn.Module):
    """Ultralytics' segment variant: `([N, 4 + 3 + 32, 64], protos [N, 32, H/4, W/4])`. Prototype c
    is +1 where a 4x4 cell is all of class c, -1 elsewhere; each class's box mixes exactly its
    prototype, so a rectangle on the 4-pixel grid comes back as its own mask."""

    def __init__(self) -> None:
        super().__init__()
        self.yolo = Yolo()

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        pred = self.yolo(x)  # [N, 7, 64]
        n = pred.shape[0]
        cells = torch.nn.functional.avg_pool2d(masks(x).to(torch.float32), 4)  # [N, 3, H/4, W/4]
        protos = torch.cat([(cells == 1.0).to(torch.float32) * 2 - 1, torch.zeros_like(cells[:, :1]).expand(
            n, 29, cells.shape[2], cells.shape[3])], dim=1)
        coefficients = torch.zeros(n, 32, pred.shape[2], device=x.device)
        for c in range(3):
            for k in range(3):
                coefficients[:, c, c + 3 * k] = 1.0
        return torch.cat([pred, coefficients], dim=1), protos


class TinyYolo(nn.Module):
    """A YOLO-layout detector with fixed random weights (seed 0) rather than planted answers: three
    strides (8, 16, 32), `[N, 4 + 3, A]` rows of centre x, y, w, h in input pixels and sigmoid class
    scores (each class's logits scaled to spread about -4.5, so that a photograph has tens to hundreds of
    anchors above 0.25). Every box depends on every pixel near it, so a resize one level off, or a
    border of padding, moves its boxes: what an exactness test needs."""

    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.SiLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.SiLU(),
                                  nn.Conv2d(16, 16, 3, 2, 1), nn.SiLU())
        self.down = nn.ModuleList([nn.Sequential(nn.Conv2d(16, 16, 3, 2, 1), nn.SiLU()) for _ in range(2)])
        self.heads = nn.ModuleList([nn.Conv2d(16, 4 + classes, 1) for _ in range(3)])
        ramp = torch.linspace(0, 1, 256)
        probe = torch.stack([ramp[None, :].expand(256, 256), ramp[:, None].expand(256, 256),
                             (ramp[None, :] * ramp[:, None]).sqrt()])[None]
        with torch.no_grad():
            logits = [out[:, 4:] for out in self._levels(probe)]
        self.register_buffer("mean", torch.stack([t.mean(dim=(0, 2, 3)) for t in logits]))
        self.register_buffer("std", torch.stack([t.std(dim=(0, 2, 3)) for t in logits]))

    def _levels(self, x: Tensor) -> List[Tensor]:
        features = [self.stem(x)]
        for down in self.down:
            features.append(down(features[-1]))
        return [head(feature) for feature, head in zip(features, self.heads)]

    def forward(self, x: Tensor) -> Tensor:
        rows: List[Tensor] = []
        for level, out in enumerate(self._levels(x)):
            stride = 8 * 2 ** level
            n, _, h, w = out.shape
            ys = torch.arange(h, dtype=x.dtype, device=x.device)[:, None].expand(h, w) + 0.5
            xs = torch.arange(w, dtype=x.dtype, device=x.device)[None, :].expand(h, w) + 0.5
            ltrb = nn.functional.softplus(out[:, :4]) * 2
            cx = (xs + (ltrb[:, 2] - ltrb[:, 0]) / 2) * stride
            cy = (ys + (ltrb[:, 3] - ltrb[:, 1]) / 2) * stride
            wh = (ltrb[:, 0:2] + ltrb[:, 2:4]) * stride
            logits = (out[:, 4:] - self.mean[level][:, None, None]) / self.std[level][:, None, None] * 1.5 - 4.5
            rows.append(torch.cat([cx[:, None], cy[:, None], wh, logits.sigmoid()], dim=1).reshape(n, -1, h * w))
        return torch.cat(rows, dim=2)


class PooledClassifier(nn.Module):
    """A classifier as modern ones end: convolutions, a global average pool, a linear layer (fixed
    random weights, seed 0). Padding a frame averages the padding into every logit."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x)
