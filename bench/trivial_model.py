"""The bench's trivial model: the per-frame mean of its input, so the handler's own cost shows.

The bench packs it with `archive.sh trivial trivial.pt bench/trivial.yaml`, the way for your own
model (docs/models.md).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn


class Trivial(nn.Module):
    """`forward(x: Tensor[N, 3, H, W] float) -> Tensor[N]`: one read of the input, nothing else."""

    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=(1, 2, 3))


def build(out: Path) -> Path:
    """Writes the trivial model to `out` as TorchScript."""
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.script(Trivial().eval()).save(str(out))
    return out
