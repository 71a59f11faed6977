"""`frame_quality`: a camera-health model with exactly defined outputs (DESIGN section 5).

Over each frame's valid pixels only, with luma Y = 0.299 R + 0.587 G + 0.114 B:
brightness = mean(Y), contrast = population std(Y), sharpness = population variance of the
4-neighbour Laplacian of Y over the interior pixels (0 when the frame has no interior).

The whole chunk is computed at once with masks built on the device from `sizes`: no value is
read back to the host per frame, so a CUDA forward never waits on the device.
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
        n, height, width = pixels.shape[0], pixels.shape[2], pixels.shape[3]
        luma = pixels.permute(0, 2, 3, 1) @ self.luma  # [N, H, W]; one pass on channels-last input
        h = sizes[:, 0].clamp(0, height).view(n, 1, 1)
        w = sizes[:, 1].clamp(0, width).view(n, 1, 1)
        rows = torch.arange(height, device=luma.device).view(1, height, 1)
        cols = torch.arange(width, device=luma.device).view(1, 1, width)
        # Padding never enters a sum: statistics over each frame's own (h, w) only.
        valid = ((rows < h) & (cols < w)).to(luma.dtype)
        count = (h * w).view(n).to(luma.dtype)
        brightness, variance = _mean_var(luma, valid, count)
        contrast = variance.sqrt()
        sharpness = torch.zeros_like(brightness)
        if height >= 3 and width >= 3:
            lap = luma[:, :-2, 1:-1] + luma[:, 2:, 1:-1]
            lap.add_(luma[:, 1:-1, :-2]).add_(luma[:, 1:-1, 2:]).add_(luma[:, 1:-1, 1:-1], alpha=-4.0)
            # Laplacian index (r, c) is the pixel (r + 1, c + 1): interior when r < h - 2, c < w - 2.
            interior = ((rows[:, : height - 2] < h - 2) & (cols[:, :, : width - 2] < w - 2)).to(luma.dtype)
            inner = ((h - 2).clamp(min=0) * (w - 2).clamp(min=0)).view(n).to(luma.dtype)
            _, sharpness = _mean_var(lap, interior, inner)
        return {"brightness": brightness, "contrast": contrast, "sharpness": sharpness}


def _mean_var(values: Tensor, mask: Tensor, count: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row masked mean and population variance of `values[N, H, W]`, two-pass; 0 where count is 0."""
    safe = count.clamp(min=1.0)
    mean = (values * mask).sum(dim=(1, 2)) / safe
    deviation = (values - mean.view(-1, 1, 1)).mul_(mask)
    variance = deviation.square_().sum(dim=(1, 2)) / safe
    empty = count <= 0
    return mean.masked_fill(empty, 0.0), variance.masked_fill(empty, 0.0)


def build() -> torch.jit.ScriptModule:
    """The TorchScript module shipped in `frame_quality.mar` (no weights to train)."""
    return torch.jit.script(FrameQuality().eval())
