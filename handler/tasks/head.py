"""What every task's head does with a chunk (`Head`), and what heads share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch

from handler.clip import FrameResult
from handler.layout import Layout, Placement
from handler.outputs import Gathered

#: Copies a small host tensor (per-frame geometry) to the chunk's device without a host sync.
Upload = Callable[[torch.Tensor], torch.Tensor]


class Head(Protocol):
    """A task's side of running one chunk."""

    def call(self, model: Callable[..., Any], x: torch.Tensor, placement: Placement,
             sizes: torch.Tensor | None) -> Any:
        """The model's outputs for a chunk.

        Args:
            model: the loaded model.
            x: `Tensor[R, 3, H, W] float32`, normalised, on the device.
            placement: the chunk's placement.
            sizes: `Tensor[R, 2] int64` of each row's (h, w) in its slot when `pass_sizes` is set.
        """
        ...

    def gather(self, raw: Any, placement: Placement, frames: int, upload: Upload) -> Gathered:
        """The outputs an answer needs, for the first `frames` rows, still on the device."""
        ...

    def per_frame(self, outputs: list[tuple[str, torch.Tensor]], placement: Placement,
                  layout: Layout) -> list[FrameResult]:
        """Each frame's result, from `gather`'s tensors on the host."""
        ...



def forward(model: Callable[..., Any], x: torch.Tensor, sizes: torch.Tensor | None) -> Any:
    """The model on a batched chunk: `model(x)`, or `model(x, sizes)` with `pass_sizes`."""
    return model(x) if sizes is None else model(x, sizes)


def first_tensor(raw: Any) -> torch.Tensor:
    """The model's first output tensor (of a tensor, a tuple or a dict)."""
    if isinstance(raw, torch.Tensor):
        return raw
    if isinstance(raw, Mapping):
        raw = list(raw.values())
    if isinstance(raw, (list, tuple)) and raw and isinstance(raw[0], torch.Tensor):
        return raw[0]
    raise TypeError("the model returned no tensor")


def describe(raw: Any) -> str:
    """A model's outputs in a line: types and shapes, for messages."""
    if isinstance(raw, torch.Tensor):
        return f"Tensor{list(raw.shape)}"
    if isinstance(raw, Mapping):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in list(raw.items())[:8]) + "}"
    if isinstance(raw, (list, tuple)):
        inner = ", ".join(describe(v) for v in raw[:4]) + (", ..." if len(raw) > 4 else "")
        return f"{type(raw).__name__}[{inner}]"
    return type(raw).__name__
