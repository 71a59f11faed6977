"""Running chunks: collate into staging, upload, normalise, forward, copy the outputs back; up
to the staging's depth in flight, so chunk k+1 is collated while chunk k runs. On device out of
memory, halve the chunk (when that allocates less), remember the limit, and retry."""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from handler.clip import Frame, FrameResult, Size
from handler.collate import Normalizer, PaddedBatch, collate
from handler.config import HandlerConfig
from handler.device import OomCount, oom_count
from handler.errors import DeviceOutOfMemory, FrameError, InternalError
from handler.fills import DeviceFill, device_jpeg
from handler.layout import Layout, Placement
from handler.memory import Chunk, ChunkPlanner, Staging
from handler.metrics import BatchStats
from handler.outputs import Gathered, HostOutputs, non_finite
from handler.tasks.head import Head
from handler.tasks.raw import RawHead

logger = logging.getLogger(__name__)

# Below this many input pixels a chunk is copied on the calling thread: handing rows to the
# pool costs more than it saves.
_PARALLEL_COLLATE_PIXELS = 1 << 20
Result = FrameResult | FrameError
ParallelMap = Callable[[Callable[[int], None], range], Iterable[None]]


@dataclass(slots=True)
class _Launched:
    """A chunk whose forward was started: its outputs on their way back, or its results already."""

    chunk: Chunk
    placement: Placement
    outputs: HostOutputs | None = None
    failed: dict[int, FrameError] = field(default_factory=dict)
    results: list[Result] | None = None


class ChunkRunner:
    """Runs chunks of one model on one device."""

    def __init__(self, model: Callable[..., Any], config: HandlerConfig, device: torch.device,
                 layout: Layout, planner: ChunkPlanner, parallel: ParallelMap,
                 ooms: OomCount | None = None, staging: Staging | None = None,
                 fill: DeviceFill | None = None, head: Head | None = None) -> None:
        """A runner for `model` on `device`.

        Args:
            model: the loaded model.
            config: the handler's settings.
            device: where the model runs.
            layout: where each frame goes in a chunk, and how outputs map back.
            planner: chunk sizes; told of out-of-memory errors and of successes.
            parallel: a `map` for per-row copies (the decode threads').
            ooms: the allocator's out-of-memory count (default: `handler.device.oom_count`).
            staging: the host buffers (default: two pinned at the planner's capacity on CUDA).
            fill: what goes to the device directly (default: per `jpeg_decoder`).
            head: the task's calling of the model and reading of its outputs (default: `raw`).
        """
        self._model = model
        self._config = config
        self._device = device
        self._layout = layout
        self._planner = planner
        self._parallel = parallel
        self._ooms = ooms or oom_count(device)
        self._staging = staging or Staging(device, planner.capacity() if device.type == "cuda" else None)
        self._fill = fill or DeviceFill(device_jpeg(config, device))
        self._normalizer = Normalizer(config.normalize, device)
        self._head = head or RawHead(config.output_names, config.dense_outputs)
        # A model that takes contiguous [N, 3, H, W] on the CPU (an ONNX graph) gets the chunk
        # collated channel-first: its buffer as is, no transposing copy before the forward.
        self._planar = device.type == "cpu" and bool(getattr(model, "planar", False))
        # The chunks' own stream, non-blocking: FFmpeg copies NVDEC's pictures on the legacy
        # default stream, and a decode thread waiting for its frame must not wait for forwards.
        self._stream: torch.cuda.Stream | None = None  # made at the first chunk
        self._before_model: int | None = None  # the allocator's count just before the forward

    def run_all(self, chunks: Iterable[Chunk], frames: Sequence[Frame], originals: Sequence[Size],
                stats: BatchStats) -> Iterator[tuple[Chunk, list[Result]]]:
        """Each chunk with its frames' results, in order (`chunk.items` index `frames`).

        Chunk k+1 is collated and started before chunk k's outputs are waited for (as many in
        flight as staging has buffers), so the device is not idle while the host collates.
        """
        in_flight: deque[_Launched] = deque()
        for chunk in self._fitting(chunks):
            in_flight.append(self._launch(chunk, frames, originals, stats))
            if len(in_flight) >= self._staging.depth:
                yield self._finish(in_flight.popleft(), frames, originals, stats)
        while in_flight:
            yield self._finish(in_flight.popleft(), frames, originals, stats)

    def run(self, chunk: Chunk, frames: Sequence[Frame], originals: Sequence[Size],
            stats: BatchStats) -> list[Result]:
        """One chunk's results, waited for. Statistics are counted once the chunk succeeded; a
        model error fails this chunk alone."""
        return self._finish(self._launch(chunk, frames, originals, stats), frames, originals, stats)[1]

    def _launch(self, chunk: Chunk, frames: Sequence[Frame], originals: Sequence[Size],
                stats: BatchStats) -> _Launched:
        placement = self._layout.place(chunk.slot, [originals[i] for i in chunk.items])
        self._before_model = None
        try:
            outputs, failed = self._start([frames[i] for i in chunk.items], placement)
        except Exception as err:
            oom = self._is_oom(err)
            _log_failure(err, oom, chunk)
        else:
            return _Launched(chunk, placement, outputs, failed)
        # Outside the except block, so the failed attempt's tensors are already released.
        return _Launched(chunk, placement, results=self._after_failure(oom, chunk, placement, frames,
                                                                        originals, stats))

    def _finish(self, launched: _Launched, frames: Sequence[Frame], originals: Sequence[Size],
                stats: BatchStats) -> tuple[Chunk, list[Result]]:
        chunk, placement = launched.chunk, launched.placement
        if launched.outputs is None:
            return chunk, launched.results or []
        try:
            outputs = launched.outputs.wait()
            results: list[Result] = list(self._head.per_frame(outputs, placement, self._layout))
        except Exception as err:  # an asynchronous device error surfaces here: never an allocation
            oom = isinstance(err, torch.cuda.OutOfMemoryError)
            _log_failure(err, oom, chunk)
        else:
            stats.chunks += 1
            stats.non_finite += non_finite(outputs)
            stats.tensor_pixels += placement.tensor_pixels
            stats.padded_pixels += placement.padded_pixels
            self._planner.succeeded(chunk.slot, len(chunk.items))
            return chunk, [launched.failed.get(i, result) for i, result in enumerate(results)]
        return chunk, self._after_failure(oom, chunk, placement, frames, originals, stats)

    def _is_oom(self, err: Exception) -> bool:
        """Out of memory whatever was raised: the error says so itself, or the allocator counted
        one since the forward started (TorchScript re-raises it as a plain RuntimeError)."""
        if isinstance(err, torch.cuda.OutOfMemoryError):
            return True
        return self._before_model is not None and self._ooms() > self._before_model

    def _after_failure(self, oom: bool, chunk: Chunk, placement: Placement, frames: Sequence[Frame],
                       originals: Sequence[Size], stats: BatchStats) -> list[Result]:
        if not oom:
            return [InternalError("the model failed on this frame's chunk; see the worker log")
                    ] * len(chunk.items)
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
        halves = (Chunk(chunk.slot, chunk.items[:half]), Chunk(chunk.slot, chunk.items[half:]))
        return [result for piece in self._fitting(halves) for result in self.run(piece, frames, originals, stats)]

    def _fitting(self, chunks: Iterable[Chunk]) -> Iterator[Chunk]:
        """The chunks, each cut to its slot's limit as it is when the chunk's turn comes: after an
        out-of-memory split, the wave's later chunks of that slot start at the learned size."""
        for chunk in chunks:
            limit = self._planner.limit(chunk.slot)
            for start in range(0, len(chunk.items), limit):
                yield Chunk(chunk.slot, chunk.items[start:start + limit])

    def _start(self, frames: list[Frame], placement: Placement) -> tuple[HostOutputs, dict[int, FrameError]]:
        """Collates, uploads and starts the forward and the outputs' copy back; waits for none."""
        # Large chunks are copied (and converted to float on CPU) by the decode threads in parallel.
        parallel = self._parallel if placement.tensor_pixels >= _PARALLEL_COLLATE_PIXELS else map
        later = self._fill.rows(frames)
        rows, (h, w) = placement.rows, placement.slot
        out = self._staging.take((rows, 3, h, w) if self._planar else (rows, h, w, 3))
        batch = collate(frames, placement, out, parallel, later, self._config.pad_value, self._planar)
        if self._stream is None and self._device.type == "cuda":
            self._stream = torch.cuda.Stream(self._device)  # type: ignore[no-untyped-call]
        with torch.inference_mode(), _on(self._stream):
            pixels = self._staging.upload(batch.tensor)
            failed = {**batch.failed, **self._fill.fill(pixels, frames, later, placement.offsets)}
            return self._on_device(pixels, batch).copy_to_host(), failed

    def _on_device(self, pixels: torch.Tensor, batch: PaddedBatch, settle: bool = False) -> Gathered:
        """Normalise, forward, and gather what the task needs of the outputs: no per-frame host
        sync in here (`settle`: the dummy chunk at `initialize`, which fixes `format: auto`)."""
        placement = batch.placement
        x = self._normalizer(pixels, batch.planar)
        sizes = None
        if self._config.pass_sizes:
            padded = [placement.slot] * (placement.rows - len(batch))
            sizes = self._staging.upload_small(torch.tensor(list(placement.sizes) + padded, dtype=torch.int64))
        self._before_model = self._ooms()
        call = getattr(self._head, "settle", None) if settle else None
        raw = (call or self._head.call)(self._model, x, placement, sizes)
        return self._head.gather(raw, placement, len(batch), self._staging.upload_small)

    def probe(self, size: Size, frames: int = 1) -> list[FrameResult]:
        """Runs dummy frames of `size` (pad value) through the model and the task, as at
        `initialize`: a task or format that does not fit the model's outputs fails here.

        Raises:
            ConfigError: the outputs do not fit the task or format (naming both).
        """
        placement = self._layout.place(self._layout.slot(*size), [size] * frames)
        frame = np.full((*self._layout.fitted(*size), 3), self._config.pad_value, dtype=np.uint8)
        batch = collate([frame] * frames, placement, pad_value=self._config.pad_value)
        with torch.inference_mode():
            pixels = batch.tensor.to(self._device)
            outputs = self._on_device(pixels, batch, settle=True).copy_to_host().wait()
        return self._head.per_frame(outputs, placement, self._layout)


def _on(stream: torch.cuda.Stream | None) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext() if stream is None else torch.cuda.stream(stream)


def _log_failure(err: Exception, oom: bool, chunk: Chunk) -> None:
    if oom:
        logger.warning("device out of memory on %d frames in %s (%s)", len(chunk.items), chunk.slot,
                       type(err).__name__)
    else:
        logger.error("the model failed on a chunk of %d frames", len(chunk.items), exc_info=err)
