"""`fixed_batch_cnn`: a small CNN exported with a static batch, like TensorRT engines and traced models.

Its exported graph accepts exactly `Tensor[16, 3, 128, 128] float` and returns per-frame `scores`
(`Tensor[16, 10]`); any other batch fails a shape guard, which is the seed's overflow.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

BATCH = 16
INPUT_SIZE = (128, 128)
CLASSES = 10
SEED = 20261130


class SmallCNN(nn.Module):
    """Three strided convolutions and a linear head: `[16, 3, 128, 128]` -> `[16, CLASSES]` scores."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        )
        self.head = nn.Linear(64, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        scores: Tensor = self.head(self.features(x).mean(dim=(2, 3)))
        return scores


def build() -> torch.export.ExportedProgram:
    """The static-batch program shipped in `fixed_batch_cnn.mar`, same weights every build."""
    torch.manual_seed(SEED)
    model = SmallCNN().eval()
    example = torch.zeros(BATCH, 3, *INPUT_SIZE)
    return torch.export.export(model, (example,))
