"""`task: segmentation`: each frame's class map (argmax on the device, back to the frame's size,
nearest), answered as one COCO RLE mask per class present."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from handler.clip import FrameResult
from handler.config import HandlerConfig
from handler.errors import ConfigError
from handler.layout import Layout, Placement
from handler.outputs import Gathered, pack
from handler.tasks import rle
from handler.tasks.head import Upload, describe, first_tensor, forward
from handler.tasks.labels import Labels


class SegmentationHead:
    """`[N, C, H/s, W/s]` class scores (or torchvision's `{"out": ...}`) -> `segments` per frame."""

    def __init__(self, config: HandlerConfig, labels: Labels, layout: Layout) -> None:
        self._config = config
        self._labels = labels
        self._allowed = None if config.classes is None else set(labels.ids(list(config.classes), "classes"))

    def call(self, model: Callable[..., Any], x: torch.Tensor, placement: Placement,
             sizes: torch.Tensor | None) -> Any:
        return forward(model, x, sizes)

    def gather(self, raw: Any, placement: Placement, frames: int, upload: Upload) -> Gathered:
        scores = raw["out"] if isinstance(raw, Mapping) and "out" in raw else first_tensor(raw)
        stride = _stride(scores, placement)
        if stride is None:
            raise ConfigError(f"handler.task = segmentation takes class scores [N, C, H/s, W/s] for the "
                              f"{placement.slot[0]}x{placement.slot[1]} input; the model returned {describe(raw)}")
        scores = scores[:frames]
        if scores.shape[1] == 1:
            classes = (scores[:, 0].float().sigmoid() > self._config.mask_threshold).to(torch.uint8)
        else:
            classes = scores.argmax(dim=1).to(torch.uint8 if scores.shape[1] <= 256 else torch.int32)
        maps = []
        for i, (rows, columns) in enumerate(placement.crops(stride)):
            crop = classes[i, rows, columns]
            if crop.shape != placement.original[i]:
                crop = F.interpolate(crop[None, None].float(), size=placement.original[i], mode="nearest")[0, 0]
            maps.append(crop.to(classes.dtype).reshape(-1))
        return pack({"maps": torch.cat(maps)})

    def per_frame(self, outputs: list[tuple[str, torch.Tensor]], placement: Placement,
                  layout: Layout) -> list[FrameResult]:
        flat = dict(outputs)["maps"].numpy()
        results, start = [], 0
        for h, w in placement.original:
            classes = flat[start:start + h * w].reshape(h, w)
            start += h * w
            areas = np.bincount(classes.ravel())
            segments = [{"class_id": c, "label": self._labels.name(c), "area": int(areas[c]),
                         "mask": rle.encode(classes == c)}
                        for c in np.flatnonzero(areas).tolist() if self._allowed is None or c in self._allowed]
            results.append(FrameResult(w, h, answer={"segments": segments}))
        return results


def _stride(scores: torch.Tensor, placement: Placement) -> int | None:
    if scores.dim() != 4 or scores.shape[0] != placement.rows:
        return None
    (sh, sw), (h, w) = placement.slot, scores.shape[2:]
    if h == 0 or w == 0 or sh % h or sw % w or sh // h != sw // w:
        return None
    return sh // h
