"""`task: raw`: the model's named outputs per frame, dense maps cropped to the frame."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from handler.clip import FrameResult
from handler.layout import Layout, Placement
from handler.outputs import Gathered, gather, per_frame
from handler.tasks.head import Upload, forward


class RawHead:
    """Today's answers: every output, per frame (`outputs`)."""

    def __init__(self, names: tuple[str, ...] | None, dense_outputs: tuple[str, ...] | None) -> None:
        self._names = names
        self._dense = dense_outputs

    def call(self, model: Callable[..., Any], x: torch.Tensor, placement: Placement,
             sizes: torch.Tensor | None) -> Any:
        return forward(model, x, sizes)

    def gather(self, raw: Any, placement: Placement, frames: int, upload: Upload) -> Gathered:
        return gather(raw, self._names, placement, frames)

    def per_frame(self, outputs: list[tuple[str, torch.Tensor]], placement: Placement,
                  layout: Layout) -> list[FrameResult]:
        return per_frame(outputs, placement, layout, self._dense)
