"""A trivial model for the bench: the per-frame mean of its input, so the handler's own cost shows.

`python -m bench.trivial_model OUT.pt` writes it as TorchScript; the bench packages it with
`archive.sh trivial OUT.pt bench/trivial.yaml`, the way for your own model (docs/models.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import Tensor, nn


class Trivial(nn.Module):
    """`forward(x: Tensor[N, 3, H, W] float) -> Tensor[N]`: one read of the input, nothing else."""

    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=(1, 2, 3))


def build(out: Path) -> Path:
    torch.jit.script(Trivial().eval()).save(str(out))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out", type=Path)
    build(p.parse_args().out)


if __name__ == "__main__":
    main()
