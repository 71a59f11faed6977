"""`frame_quality`: a camera-health model with exactly defined outputs (DESIGN section 5).

Over each frame's valid pixels only, with luma Y = 0.299 R + 0.587 G + 0.114 B:
brightness = mean(Y), contrast = population std(Y), sharpness = population variance of the
4-neighbour Laplacian of Y over the interior pixels (0 when the frame has no interior).
"""

from __future__ import annotations

from typing import Dict

import torch
from torch import Tensor, nn


class FrameQuality(nn.Module):
    """`forward(pixels: Tensor[N, 3, H, W] float 0..255, sizes: Tensor[N, 2] int64 (h, w))`."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("luma", torch.tensor([0.299, 0.587, 0.114]))

    def forward(self, pixels: Tensor, sizes: Tensor) -> Dict[str, Tensor]:
        luma = pixels.permute(0, 2, 3, 1) @ self.luma  # [N, H, W]; one pass on channels-last input
        brightness = torch.zeros(pixels.shape[0], dtype=luma.dtype, device=luma.device)
        contrast = torch.zeros_like(brightness)
        sharpness = torch.zeros_like(brightness)
        # Per frame over its own crop: padding never enters a sum, whatever the batch-mates.
        for i in range(pixels.shape[0]):
            h, w = int(sizes[i, 0]), int(sizes[i, 1])
            if h <= 0 or w <= 0:
                continue
            y = luma[i, :h, :w]
            variance, mean = torch.var_mean(y, unbiased=False)
            brightness[i] = mean
            contrast[i] = variance.sqrt()
            if h >= 3 and w >= 3:
                lap = y[:-2, 1:-1] + y[2:, 1:-1]  # in place from here: one temporary per frame
                lap.add_(y[1:-1, :-2]).add_(y[1:-1, 2:]).add_(y[1:-1, 1:-1], alpha=-4.0)
                sharpness[i] = torch.var(lap, unbiased=False)
        return {"brightness": brightness, "contrast": contrast, "sharpness": sharpness}


def build() -> torch.jit.ScriptModule:
    """The TorchScript module shipped in `frame_quality.mar` (no weights to train)."""
    return torch.jit.script(FrameQuality().eval())
