"""Chunk planning under the model's batch limit and a memory budget; pinned staging; OOM limits."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from handler.config import HandlerConfig
from handler.layout import Layout


@dataclass(frozen=True, slots=True)
class Chunk:
    """Frames that go through one forward together.

    Attributes:
        slot: the layout's slot (H, W) for these frames (`Layout.slot`).
        items: indexes into the batch's flat list of frames.
    """

    slot: tuple[int, int]
    items: tuple[int, ...]


class ChunkPlanner:
    """Splits a batch's frames into chunks; remembers the chunk size that fit after an OOM.

    Every size comes from the layout: the slot a frame goes to, the rows a chunk allocates and
    what that costs, so the budget and the learned limits are about what is really allocated.
    """

    def __init__(self, config: HandlerConfig, layout: Layout) -> None:
        self._config = config
        self._layout = layout
        self._learned: dict[tuple[int, int], int] = {}

    def limit(self, slot: tuple[int, int]) -> int:
        """Most frames of `slot` one forward may take."""
        limit = min(self._config.max_chunk, self._learned.get(slot, self._config.max_chunk))
        if self._config.memory_budget_bytes is not None:
            limit = self._layout.max_frames(slot, self._config.memory_budget_bytes,
                                            self._config.bytes_per_pixel, limit)
        return max(1, limit)

    def learn(self, slot: tuple[int, int], fits: int) -> None:
        """Records that `fits` frames of `slot` is the most to try from now on."""
        self._learned[slot] = min(self._learned.get(slot, fits), max(1, fits))

    def plan(self, sizes: Sequence[tuple[int, int]]) -> list[Chunk]:
        """Chunks for frames of the given (h, w), grouped by slot, each at most `limit(slot)` long."""
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (h, w) in enumerate(sizes):
            groups.setdefault(self._layout.slot(h, w), []).append(i)
        chunks: list[Chunk] = []
        for slot, items in groups.items():
            size = self.limit(slot)
            chunks.extend(Chunk(slot, tuple(items[i:i + size])) for i in range(0, len(items), size))
        return chunks


class Staging:
    """A host buffer reused across chunks through views.

    On CUDA it is pinned uint8: frames travel as bytes and become float on the device. On the
    CPU the device is the host, so the buffer is float32 and collating converts in the same pass.
    """

    def __init__(self, device: torch.device) -> None:
        self._device = device
        self._pinned = device.type == "cuda"
        self.dtype = torch.float32 if device.type == "cpu" else torch.uint8
        self._buffer: torch.Tensor | None = None
        self._copied: torch.cuda.Event | None = None

    def take(self, shape: tuple[int, ...]) -> torch.Tensor:
        """A tensor of `shape` over the buffer; waits until the last upload has left it."""
        if self._copied is not None:
            self._copied.synchronize()
            self._copied = None
        numel = math.prod(shape)
        if self._buffer is None or self._buffer.numel() < numel:
            self._buffer = None  # free the old one before allocating the larger
            self._buffer = torch.empty(numel, dtype=self.dtype, pin_memory=self._pinned)
        return self._buffer[:numel].view(shape)

    def upload(self, tensor: torch.Tensor) -> torch.Tensor:
        """The tensor on the device: asynchronous from pinned memory on CUDA, itself on CPU."""
        if self._device.type == "cpu":
            return tensor
        moved = tensor.to(self._device, non_blocking=self._pinned)
        if self._pinned:
            self._copied = torch.cuda.Event()  # type: ignore[no-untyped-call]
            self._copied.record()
        return moved

    def upload_small(self, tensor: torch.Tensor) -> torch.Tensor:
        """A small host tensor on the device without a host sync (pinned, non-blocking on CUDA)."""
        if self._device.type == "cpu":
            return tensor
        # The caching host allocator keeps the pinned block until the copy has run.
        return tensor.pin_memory().to(self._device, non_blocking=True)


def peak_memory(device: torch.device) -> int:
    """Peak allocated device memory since the last reset, in bytes; 0 off CUDA."""
    if device.type != "cuda":
        return 0
    return torch.cuda.max_memory_allocated(device)


def reset_peak_memory(device: torch.device) -> None:
    """Starts a new peak (CUDA); nothing off CUDA."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
