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


#: Successful full chunks at a learned limit before it is doubled again (then twice as many
#: after each raise that ran out of memory again).
RECOVER_AFTER = 16


@dataclass(slots=True)
class _Learned:
    """The most frames of one slot to try, after an out-of-memory error."""

    limit: int
    successes: int = 0
    needed: int = RECOVER_AFTER
    raised: bool = False


class ChunkPlanner:
    """Splits a batch's frames into chunks; learns the chunk size that fits after an OOM.

    Every size comes from the layout: the slot a frame goes to, the rows a chunk allocates and
    what that costs, so the budget and the learned limits are about what is really allocated.
    A learned limit is not forever (the OOM may have been transient: another process, a
    fragmented cache): after `RECOVER_AFTER` full chunks in a row succeed at it, it doubles.
    """

    def __init__(self, config: HandlerConfig, layout: Layout) -> None:
        self._config = config
        self._layout = layout
        self._learned: dict[tuple[int, int], _Learned] = {}

    def limit(self, slot: tuple[int, int]) -> int:
        """Most frames of `slot` one forward may take."""
        learned = self._learned.get(slot)
        limit = self._config.max_chunk if learned is None else min(self._config.max_chunk, learned.limit)
        if self._config.memory_budget_bytes is not None:
            limit = self._layout.max_frames(slot, self._config.memory_budget_bytes,
                                            self._config.bytes_per_pixel, limit)
        return max(1, limit)

    def learn(self, slot: tuple[int, int], fits: int) -> None:
        """Records that `fits` frames of `slot` is the most to try for now.

        Running out again before a raise has held for as many chunks as it took doubles the
        successes the next raise needs; a raise that held resets that.
        """
        learned = self._learned.setdefault(slot, _Learned(max(1, fits)))
        if learned.raised:
            learned.needed *= 2
            learned.raised = False
        learned.limit = min(learned.limit, max(1, fits))
        learned.successes = 0

    def succeeded(self, slot: tuple[int, int], frames: int) -> None:
        """Counts a chunk of `frames` frames of `slot` that ran; enough full ones raise the limit."""
        learned = self._learned.get(slot)
        if learned is None or frames < learned.limit:
            return
        learned.successes += 1
        if learned.successes < learned.needed:
            return
        learned.successes = 0
        if learned.raised:  # the last raise held for `needed` full chunks: back to the first pace
            learned.raised = False
            learned.needed = RECOVER_AFTER
        if learned.limit < self._config.max_chunk:
            learned.limit = min(self._config.max_chunk, learned.limit * 2)
            learned.raised = True

    def capacity(self) -> int:
        """Most elements (rows x H x W x 3) one chunk's input can have: what staging holds."""
        top = self._layout.slot(self._config.max_height, self._config.max_width)
        most = self._layout.chunk_pixels(top, self._config.max_chunk)
        if self._config.memory_budget_bytes is not None:
            budgeted = self._config.memory_budget_bytes // self._config.bytes_per_pixel
            most = min(most, max(budgeted, self._layout.chunk_pixels(top, self.limit(top))))
        return 3 * most

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
    """Host buffers that chunks are collated into, used in turn, and their uploads.

    On CUDA there are two, pinned uint8, each allocated once at the planned capacity (pinned
    blocks are never given back to the system, so a grown buffer would leave each outgrown
    block cached and unused): chunk k+1 is collated into one while chunk k's upload and
    forward use the other, and a buffer is reused only after its upload's event. On the CPU
    the device is the host: one float32 buffer (collating converts in the same pass), grown as
    needed, since freed host memory goes back to the allocator.
    """

    def __init__(self, device: torch.device, capacity: int | None = None, depth: int | None = None) -> None:
        """Buffers for chunks that run on `device`; none is allocated before the first `take`.

        Args:
            device: where chunks run.
            capacity: elements each buffer holds (`ChunkPlanner.capacity`); None: grown as needed.
            depth: buffers used in turn; default 2 on CUDA, 1 on the CPU.
        """
        self._device = device
        self._pinned = device.type == "cuda"
        self.dtype = torch.float32 if device.type == "cpu" else torch.uint8
        self.depth = depth or (2 if self._pinned else 1)
        self._capacity = capacity
        self._buffers: list[torch.Tensor | None] = [None] * self.depth
        self._copied: list[torch.cuda.Event | None] = [None] * self.depth
        self._turn = 0  # the buffer the next `take` uses

    @property
    def allocated_bytes(self) -> int:
        """Host bytes the buffers hold now."""
        return sum(b.numel() * b.element_size() for b in self._buffers if b is not None)

    def take(self, shape: tuple[int, ...]) -> torch.Tensor:
        """A tensor of `shape` over the next buffer; waits until that buffer's last upload left it."""
        turn = self._turn
        self._turn = (turn + 1) % self.depth
        copied = self._copied[turn]
        if copied is not None:
            copied.synchronize()
            self._copied[turn] = None
        numel = math.prod(shape)
        buffer = self._buffers[turn]
        if buffer is None or buffer.numel() < numel:
            self._buffers[turn] = None  # free the old one before allocating the larger
            size = max(numel, self._capacity or 0)
            buffer = self._buffers[turn] = torch.empty(size, dtype=self.dtype, pin_memory=self._pinned)
        return buffer[:numel].view(shape)

    def upload(self, tensor: torch.Tensor) -> torch.Tensor:
        """The tensor last taken, on the device: asynchronous from pinned memory on CUDA, itself
        on the CPU; its buffer is reused once the copy has run (an event on the device's stream)."""
        if self._device.type == "cpu":
            return tensor
        moved = tensor.to(self._device, non_blocking=self._pinned)
        if self._pinned:
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(torch.cuda.current_stream(self._device))
            self._copied[(self._turn - 1) % self.depth] = event  # the buffer last taken
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
