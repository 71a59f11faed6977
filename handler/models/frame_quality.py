"""`frame_quality`: a camera-health model with exactly defined outputs (DESIGN section 5).

Over each frame's valid pixels only, with luma Y = 0.299 R + 0.587 G + 0.114 B:
brightness = mean(Y), contrast = population std(Y), sharpness = population variance of the
4-neighbour Laplacian of Y over the interior pixels (0 when the frame has no interior).

On the CPU each frame is computed on its own valid area (a view of the input): no pixel of
padding or of a batch-mate is read, the temporaries are one frame's size (they stay in cache and
in the allocator's pool; chunk-sized ones cost page faults on every forward) and every
statistic is two passes over memory at most. On an accelerator the whole chunk is computed at
once: each frame's area is a row mask and a column mask built on the device from `sizes`, and
every sum runs along rows, so a frame's values do not depend on its batch-mates and no value is
read back to the host (a CUDA forward never waits on the device).
"""

from __future__ import annotations

from typing import Dict, List

import torch
from torch import Tensor, nn


class FrameQuality(nn.Module):
    """`forward(pixels: Tensor[N, 3, H, W] float 0..255, sizes: Tensor[N, 2] int64 (h, w))`."""

    def __init__(self) -> None:
        super().__init__()
        luma = torch.tensor([0.299, 0.587, 0.114])
        self.register_buffer("luma", luma)
        # Four channels-last pixels at once: [..., 12] @ [12, 4] is a small GEMM that vectorises,
        # where [..., 3] @ [3] is a GEMV over a 3-wide row (about 4x slower on the CPU).
        luma4 = torch.zeros(12, 4)
        for pixel in range(4):
            luma4[3 * pixel:3 * pixel + 3, pixel] = luma
        self.register_buffer("luma4", luma4)

    def forward(self, pixels: Tensor, sizes: Tensor) -> Dict[str, Tensor]:
        if pixels.device.type == "cpu":
            return self._per_frame(pixels, sizes)
        return self._batched(pixels, sizes)

    def _per_frame(self, pixels: Tensor, sizes: Tensor) -> Dict[str, Tensor]:
        """Frame by frame on its own area: `sizes` is on the host, reading it costs nothing."""
        height, width = pixels.shape[2], pixels.shape[3]
        hw: List[List[int]] = sizes.clamp(min=0).tolist()
        channels_last = pixels.permute(0, 2, 3, 1)  # [N, H, W, 3]: a view of channels-last input
        zero = torch.zeros((), dtype=pixels.dtype)
        brightness: List[Tensor] = []
        contrast: List[Tensor] = []
        sharpness: List[Tensor] = []
        for i in range(pixels.shape[0]):
            h, w = min(hw[i][0], height), min(hw[i][1], width)
            if h == 0 or w == 0:
                brightness.append(zero)
                contrast.append(zero)
                sharpness.append(zero)
                continue
            luma = self._luma(pixels[i, :, :h], channels_last[i, :h])[:, :w]
            mean, variance = _mean_var(luma)
            brightness.append(mean)
            contrast.append(variance.sqrt())
            if h >= 3 and w >= 3:
                lap = luma[:-2, 1:-1] + luma[2:, 1:-1]
                lap.add_(luma[1:-1, :-2]).add_(luma[1:-1, 2:]).add_(luma[1:-1, 1:-1], alpha=-4.0)
                sharpness.append(_mean_var(lap, in_place=True)[1])
            else:
                sharpness.append(zero)
        return {"brightness": torch.stack(brightness), "contrast": torch.stack(contrast),
                "sharpness": torch.stack(sharpness)}

    def _luma(self, planes: Tensor, rows: Tensor) -> Tensor:
        """Y of full-width rows (`planes` [3, h, W] and `rows` [h, W, 3] view the same pixels): one
        pass over channels-last input four pixels at a time, or a weighted sum of the planes; the
        columns past a frame's width are cut from the (much smaller) result."""
        height, width = rows.shape[0], rows.shape[1]
        if rows.is_contiguous() and width % 4 == 0:
            return (rows.reshape(height * width // 4, 12) @ self.luma4).view(height, width)
        if rows.is_contiguous():
            return rows @ self.luma
        return (self.luma.view(1, 3) @ planes.reshape(3, height * width)).view(height, width)

    def _batched(self, pixels: Tensor, sizes: Tensor) -> Dict[str, Tensor]:
        """The whole chunk at once with row/column masks: no per-frame read of `sizes`."""
        height, width = pixels.shape[2], pixels.shape[3]
        luma = pixels.permute(0, 2, 3, 1) @ self.luma  # [N, H, W]; one pass on channels-last input
        h = sizes[:, 0].clamp(0, height)
        w = sizes[:, 1].clamp(0, width)
        brightness, variance = _masked_mean_var(luma, h, w)
        sharpness = torch.zeros_like(brightness)
        if height >= 3 and width >= 3:
            lap = luma[:, :-2, 1:-1] + luma[:, 2:, 1:-1]
            lap.add_(luma[:, 1:-1, :-2]).add_(luma[:, 1:-1, 2:]).add_(luma[:, 1:-1, 1:-1], alpha=-4.0)
            # Laplacian index (r, c) is the pixel (r + 1, c + 1): interior when r < h - 2, c < w - 2.
            _, sharpness = _masked_mean_var(lap, (h - 2).clamp(min=0), (w - 2).clamp(min=0))
        return {"brightness": brightness, "contrast": variance.sqrt(), "sharpness": sharpness}


def _mean_var(values: Tensor, in_place: bool = False) -> tuple[Tensor, Tensor]:
    """Mean and population variance of a non-empty tensor, two-pass (`in_place`: `values`
    is a temporary and may hold the deviations afterwards)."""
    mean = values.mean()
    deviation = values.sub_(mean) if in_place else values - mean
    return mean, deviation.square_().mean()


def _masked_mean_var(values: Tensor, h: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and population variance of `values[i, :h[i], :w[i]]` for each i, two-pass; 0 where empty.

    Padding never enters a sum: columns past a frame's width are zeroed by a column mask before
    each row is summed, rows past its height by a row mask on the row sums. Every sum runs along
    one frame's rows, so a frame's result does not depend on its batch-mates.
    """
    n, height, width = values.shape[0], values.shape[1], values.shape[2]
    rows = (torch.arange(height, device=values.device).view(1, height) < h.view(n, 1)).to(values.dtype)
    cols = (torch.arange(width, device=values.device).view(1, 1, width) < w.view(n, 1, 1)).to(values.dtype)
    count = (h * w).to(values.dtype)
    safe = count.clamp(min=1.0)
    mean = ((values * cols).sum(dim=2) * rows).sum(dim=1) / safe
    deviation = (values - mean.view(n, 1, 1)).mul_(cols).square_()
    variance = (deviation.sum(dim=2) * rows).sum(dim=1) / safe
    empty = count <= 0
    return mean.masked_fill(empty, 0.0), variance.masked_fill(empty, 0.0)


def build() -> torch.jit.ScriptModule:
    """The TorchScript module shipped in `frame_quality.mar` (no weights to train)."""
    return torch.jit.script(FrameQuality().eval())
