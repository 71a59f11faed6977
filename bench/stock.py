"""The stock approach, written the way TorchServe's `VisionHandler` works, for comparison.

Per frame: decode to float (`ToTensor`-style), `.to(device)` one by one, then `torch.stack` to
collate, which fails as soon as two frames of a batch differ in size. Imports nothing from `ts`,
so the GPU check can run it without TorchServe. The stages are module functions that `handle`
looks up at call time, so the bench can time each one.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image


def decode_frame(body: bytes | bytearray, content_type: str | None) -> torch.Tensor:
    """One body -> `Tensor[3, H, W] float32` (0-255) on the host."""
    if content_type == "application/x-npy":
        pixels = np.load(io.BytesIO(bytes(body)), allow_pickle=False)
    else:
        pixels = np.array(Image.open(io.BytesIO(body)).convert("RGB"))  # ToTensor copies too
    return torch.from_numpy(pixels).permute(2, 0, 1).float()


def transfer(frames: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    return [frame.to(device) for frame in frames]


def collate(frames: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(frames)


def infer(model, batch: torch.Tensor) -> dict[str, torch.Tensor]:
    sizes = torch.tensor([list(batch.shape[2:])] * batch.shape[0], device=batch.device)
    with torch.inference_mode():
        return model(batch, sizes)


def encode(outputs: dict[str, torch.Tensor], count: int) -> list[str]:
    host = {name: value.cpu() for name, value in outputs.items()}
    return [json.dumps({name: float(value[i]) for name, value in host.items()}) for i in range(count)]


def handle(bodies: Sequence[bytes | bytearray], content_types: Sequence[str | None], model,
           device: torch.device) -> list[str]:
    """One batch, stock style; raises (failing the whole batch) on mixed sizes."""
    frames = [decode_frame(body, ct) for body, ct in zip(bodies, content_types)]
    batch = collate(transfer(frames, device))
    return encode(infer(model, batch), len(bodies))
