"""Running one chunk: collate into staging, upload, normalise, forward; on device out-of-memory,
halve the chunk (when that allocates less), remember the limit, and retry."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from handler.clip import Frame, FrameResult, Size
from handler.collate import Normalizer, PaddedBatch, collate
from handler.config import HandlerConfig
from handler.errors import DeviceOutOfMemory, FrameError, InternalError
from handler.layout import Layout, Placement
from handler.memory import Chunk, ChunkPlanner, Staging
from handler.metrics import BatchStats
from handler.outputs import Gathered, gather, per_frame

logger = logging.getLogger(__name__)

# Below this many input pixels a chunk is copied on the calling thread: handing rows to the
# pool costs more than it saves.
_PARALLEL_COLLATE_PIXELS = 1 << 20
Result = FrameResult | FrameError
ParallelMap = Callable[[Callable[[int], None], range], Iterable[None]]


class ChunkRunner:
    """Runs chunks of one model on one device."""

    def __init__(self, model: Callable[..., Any], config: HandlerConfig, device: torch.device,
                 layout: Layout, planner: ChunkPlanner, parallel: ParallelMap) -> None:
        self._model = model
        self._config = config
        self._device = device
        self._layout = layout
        self._planner = planner
        self._parallel = parallel
        self._staging = Staging(device)
        self._normalizer = Normalizer(config.normalize, device)

    def run(self, chunk: Chunk, frames: Sequence[Frame], originals: Sequence[Size],
            stats: BatchStats) -> list[Result]:
        """Each of the chunk's frames' results, in order (`chunk.items` index `frames`).

        Statistics are counted once the chunk succeeded; a model error fails this chunk alone.
        """
        placement = self._layout.place(chunk.slot, [originals[i] for i in chunk.items])
        try:
            results = self._forward([frames[i] for i in chunk.items], placement)
        except torch.cuda.OutOfMemoryError:
            logger.warning("device out of memory on %d frames in %s", len(chunk.items), chunk.slot)
        except Exception:
            logger.exception("the model failed on a chunk of %d frames", len(chunk.items))
            return [InternalError("the model failed on this frame's chunk; see the worker log")
                    ] * len(chunk.items)
        else:
            stats.chunks += 1
            stats.tensor_pixels += placement.tensor_pixels
            stats.padded_pixels += placement.padded_pixels
            return results
        # Outside the except block, so the failed attempt's tensors are already released.
        return self._split(chunk, placement, frames, originals, stats)

    def _split(self, chunk: Chunk, placement: Placement, frames: Sequence[Frame],
               originals: Sequence[Size], stats: BatchStats) -> list[Result]:
        """After an out-of-memory error: the chunk as two halves, or 507 when that cannot help."""
        if self._device.type == "cuda":
            torch.cuda.empty_cache()
        if len(chunk.items) == 1:
            return [DeviceOutOfMemory("the device ran out of memory on this frame alone")]
        if not self._layout.split_helps(chunk.slot, len(chunk.items)):
            # A fixed-batch engine allocates static_batch rows of the same slot whatever the
            # frame count: a smaller chunk needs the same memory, so retrying cannot help.
            return [DeviceOutOfMemory(
                f"the device ran out of memory on a chunk of static_batch = {placement.rows} "
                f"rows of {placement.slot[1]}x{placement.slot[0]}; fewer frames allocate the same")
            ] * len(chunk.items)
        half = len(chunk.items) // 2
        self._planner.learn(chunk.slot, half)
        stats.oom_splits += 1
        return (self.run(Chunk(chunk.slot, chunk.items[:half]), frames, originals, stats)
                + self.run(Chunk(chunk.slot, chunk.items[half:]), frames, originals, stats))

    def _forward(self, frames: list[Frame], placement: Placement) -> list[Result]:
        # Large chunks are copied (and converted to float on CPU) by the decode threads in parallel.
        parallel = self._parallel if placement.tensor_pixels >= _PARALLEL_COLLATE_PIXELS else map
        out = self._staging.take((placement.rows, *placement.slot, 3))
        batch = collate(frames, placement, out, parallel)
        with torch.inference_mode():
            outputs = self._on_device(batch).to_host()
        results = per_frame(outputs, placement, self._layout, self._config.dense_outputs)
        return [batch.failed.get(i, result) for i, result in enumerate(results)]

    def _on_device(self, batch: PaddedBatch) -> Gathered:
        """Upload, normalise, forward, and gather the outputs' real rows: no host sync in here."""
        placement = batch.placement
        x = self._normalizer(self._staging.upload(batch.tensor))
        args: tuple[torch.Tensor, ...] = (x,)
        if self._config.pass_sizes:
            padded = [placement.slot] * (placement.rows - len(batch))
            sizes = torch.tensor(list(placement.sizes) + padded, dtype=torch.int64)
            args = (x, self._staging.upload_small(sizes))
        return gather(self._model(*args), self._config.output_names, placement, len(batch))
