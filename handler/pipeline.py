"""The core: requests -> decode -> plan -> collate -> infer -> unpad -> encode. Imports nothing from `ts`."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from handler import encode
from handler.collate import Normalizer, PaddedBatch, collate
from handler.config import HandlerConfig
from handler.errors import (
    BadHeader,
    DeviceOutOfMemory,
    FrameError,
    InternalError,
    StaleFrame,
)
from handler.frames import Clip
from handler.layout import Deferred, Layout, Placement, layout_for
from handler.memory import Chunk, ChunkPlanner, Staging, peak_memory, reset_peak_memory
from handler.requests import Request

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
# Below this many input pixels a chunk is copied on the calling thread: handing rows to the
# pool costs more than it saves.
_PARALLEL_COLLATE_PIXELS = 1 << 20
FrameResult = dict[str, Any]


@dataclass(slots=True)
class BatchStats:
    """What one batch did, for the metrics (DESIGN section 7)."""

    requests: int = 0
    frames: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    chunks: int = 0
    oom_splits: int = 0
    padded_pixels: int = 0
    tensor_pixels: int = 0
    peak_memory_bytes: int = 0

    @property
    def padding_ratio(self) -> float:
        return self.padded_pixels / self.tensor_pixels if self.tensor_pixels else 0.0


class Pipeline:
    """Serves batches of requests with one model on one device."""

    def __init__(self, model: Callable[..., Any], config: HandlerConfig,
                 device: torch.device = torch.device("cpu"), clock: Clock = time.time) -> None:
        self._model = model
        self._config = config
        self._device = device
        self._clock = clock
        self._layout: Layout = layout_for(config)
        self._planner = ChunkPlanner(config, self._layout)
        self._staging = Staging(device)
        self._normalizer = Normalizer(config.normalize, device)
        # Pillow and NumPy release the GIL while decoding and copying: decode a batch in parallel.
        self._decoders = ThreadPoolExecutor(config.decode_threads, thread_name_prefix="decode")
        if device.type == "cpu":
            _limit_intra_op_threads(config.decode_threads)

    def run(self, requests: Sequence[Request]) -> tuple[list[encode.Response], BatchStats]:
        """Answers every request, in order; a bad one never fails the others."""
        stats = BatchStats(requests=len(requests))
        reset_peak_memory(self._device)
        started = self._clock()
        results: list[list[FrameResult | None] | FrameError] = []
        pts: list[list[float] | None] = []
        # A request's frames: its clip length once decoded, 1 when it could not be decoded.
        frame_counts: list[int] = []
        for wave in self._waves(requests, started):
            self._serve(wave, results, pts, frame_counts, stats)
            wave.clear()  # its frames are released before the next wave is decoded
        stats.frames = sum(frame_counts)

        responses = []
        for request, outcome, count in zip(requests, results, frame_counts):
            if not isinstance(outcome, FrameError):  # every slot is filled: its chunk answered it
                try:
                    responses.append(encode.ok(request, cast(list[FrameResult], outcome)))
                    continue
                except Exception:  # e.g. a model output JSON cannot hold: this request alone fails
                    logger.exception("encoding a request's answer failed")
                    outcome = InternalError("the handler could not encode this request's answer; "
                                            "see the worker log")
            stats.rejected[outcome.reason] = stats.rejected.get(outcome.reason, 0) + count
            responses.append(encode.error(request, outcome))
        if len(responses) != len(requests):
            raise RuntimeError(f"{len(requests)} requests in, {len(responses)} responses out")
        stats.peak_memory_bytes = peak_memory(self._device)
        return responses, stats

    def _serve(self, wave: list[Clip | FrameError], results: list[list[FrameResult | None] | FrameError],
               pts: list[list[float] | None], frame_counts: list[int], stats: BatchStats) -> None:
        """Plans and runs one wave's frames; appends each request's slots (filled), pts and count."""
        frames: list[np.ndarray | Deferred] = []
        originals: list[tuple[int, int]] = []
        owners: list[tuple[int, int]] = []
        for clip in wave:
            index = len(results)
            if isinstance(clip, FrameError):
                results.append(clip)
                pts.append(None)
                frame_counts.append(1)
                continue
            results.append([None] * len(clip.frames))
            pts.append(clip.pts)
            frame_counts.append(len(clip.frames))
            frames.extend(clip.frames)
            originals.extend(clip.own_sizes)
            owners.extend((index, n) for n in range(len(clip.frames)))
        for chunk in self._planner.plan(originals):
            for item, result in zip(chunk.items, self._infer(chunk, frames, originals, stats)):
                index, n = owners[item]
                slots, times = results[index], pts[index]
                if isinstance(slots, FrameError):
                    continue
                if isinstance(result, FrameError):
                    results[index] = result
                else:
                    slots[n] = result if times is None else {**result, "pts": times[n]}

    def _waves(self, requests: Sequence[Request], started: float) -> Iterator[list[Clip | FrameError]]:
        """The requests decoded in order, `decode_threads` at a time, cut into waves that each hold
        at most `max_batch_pixels` decoded pixels (a wave has at least one request): a batch of
        large clips is served wave by wave instead of all held decoded at once. Lazy JPEG frames
        hold none (they are decoded into the staging slot while collating)."""
        pending: deque[Future[Clip | FrameError]] = deque()
        queued = iter(requests)
        wave: list[Clip | FrameError] = []
        held = 0
        for request in itertools.islice(queued, self._config.decode_threads):
            pending.append(self._decoders.submit(self._decode, request, started))
        while pending:
            clip = pending.popleft().result()
            following = next(queued, None)
            if following is not None:
                pending.append(self._decoders.submit(self._decode, following, started))
            pixels = 0 if isinstance(clip, FrameError) else clip.decoded_pixels
            if wave and held + pixels > self._config.max_batch_pixels:
                yield wave
                wave, held = [], 0
            wave.append(clip)
            held += pixels
        if wave:
            yield wave

    def _decode(self, request: Request, started: float) -> Clip | FrameError:
        try:
            self._check_age(request.headers, started)
            # JPEG is decoded later, by the collating threads: straight into its uint8 staging slot
            # (CUDA), or converted into its float32 one right after decoding (CPU).
            clip = request.decode(self._config, lazy=True)
            return self._fit(clip)
        except FrameError as err:
            return err
        except Exception:  # a decoder bug must not sink the batch-mates
            logger.exception("decoding a request failed")
            return InternalError("the handler failed on this request; see the worker log")

    def _check_age(self, headers: Mapping[str, str], started: float) -> None:
        limit = self._config.max_frame_age_ms
        captured = headers.get("x-capture-time")
        if limit is None or captured is None:
            return
        try:
            seconds = float(captured)
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds):  # "nan" and "inf" parse, but say nothing about age
            raise BadHeader(f"X-Capture-Time {captured[:32]!r} is not a Unix time in seconds")
        age_ms = (started - seconds) * 1000.0
        if age_ms > limit:
            raise StaleFrame(f"frame was {age_ms:.0f} ms old at batch start (limit {limit:.0f} ms)")

    def _fit(self, clip: Clip) -> Clip:
        """The clip's frames as their slots take them (letterbox: resized, in uint8, here in the
        decode threads); `sizes` keeps each frame's own size."""
        original = clip.own_sizes
        fitted = [self._layout.fit(f, size) for f, size in zip(clip.frames, original)]
        return dataclasses.replace(clip, frames=fitted, sizes=original)

    def _infer(self, chunk: Chunk, frames: list[np.ndarray | Deferred], originals: list[tuple[int, int]],
               stats: BatchStats) -> list[FrameResult | FrameError]:
        """Runs one chunk; on device OOM halves it (when that allocates less), remembers the
        limit and retries. Statistics are counted once the chunk succeeded."""
        placement = self._layout.place(chunk.key, [originals[i] for i in chunk.items])
        try:
            results = self._forward([frames[i] for i in chunk.items], placement)
        except torch.cuda.OutOfMemoryError:
            logger.warning("device out of memory on %d frames in %s", len(chunk.items), chunk.key)
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
        if self._device.type == "cuda":
            torch.cuda.empty_cache()
        if len(chunk.items) == 1:
            return [DeviceOutOfMemory("the device ran out of memory on this frame alone")]
        if not self._layout.split_helps(chunk.key, len(chunk.items)):
            # A fixed-batch engine allocates static_batch rows of the same slot whatever the
            # frame count: a smaller chunk needs the same memory, so retrying cannot help.
            return [DeviceOutOfMemory(
                f"the device ran out of memory on a chunk of static_batch = {placement.rows} "
                f"rows of {placement.slot[1]}x{placement.slot[0]}; fewer frames allocate the same")
            ] * len(chunk.items)
        half = len(chunk.items) // 2
        self._planner.learn(chunk.key, half)
        stats.oom_splits += 1
        return (self._infer(Chunk(chunk.key, chunk.items[:half]), frames, originals, stats)
                + self._infer(Chunk(chunk.key, chunk.items[half:]), frames, originals, stats))

    def _forward(self, frames: list[np.ndarray | Deferred], placement: Placement) -> list[FrameResult | FrameError]:
        # Large chunks are copied (and converted to float on CPU) by the decode threads in parallel.
        parallel = self._decoders.map if placement.tensor_pixels >= _PARALLEL_COLLATE_PIXELS else map
        batch = collate(frames, placement, self._staging.take((placement.rows, *placement.slot, 3)), parallel)
        with torch.inference_mode():
            flat, specs = self._on_device(batch)
            host = [tensor.cpu() for tensor in flat]  # one transfer per output dtype (one, usually)
        per_frame: list[FrameResult] = [
            {"width": w, "height": h, "outputs": {}} for h, w in placement.original
        ]
        for name, tensor in _unflatten(host, specs):
            dense = None if self._config.dense_outputs is None else name in self._config.dense_outputs
            for result, value in zip(per_frame, self._layout.unpad(tensor, placement, dense)):
                result["outputs"][name] = value
        return [batch.failed.get(i, result) for i, result in enumerate(per_frame)]

    def _on_device(self, batch: PaddedBatch) -> tuple[list[torch.Tensor], list[_Spec]]:
        """Upload, normalise, forward, and gather the outputs' real rows: no host sync in here.

        Returns:
            One flat tensor per output dtype (still on the device) and where each output lies in it.
        """
        placement = batch.placement
        x = self._normalizer(self._staging.upload(batch.tensor))
        args: tuple[torch.Tensor, ...] = (x,)
        if self._config.pass_sizes:
            sizes = torch.tensor(list(placement.sizes) + [placement.slot] * (placement.rows - len(batch)),
                                 dtype=torch.int64)
            args = (x, self._staging.upload_small(sizes))
        outputs = _named(self._model(*args), self._config.output_names)
        n = len(batch)
        groups: dict[torch.dtype, list[torch.Tensor]] = {}
        specs: list[_Spec] = []
        for name, tensor in outputs.items():
            if tensor.dim() == 0 or tensor.shape[0] != placement.rows:
                rows = tensor.shape[0] if tensor.dim() else "no"
                raise ValueError(f"model output {name!r} has {rows} rows for {placement.rows} inputs")
            real = tensor.detach()[:n]
            group = groups.setdefault(real.dtype, [])
            offset = sum(t.numel() for t in group)
            specs.append(_Spec(name, list(groups).index(real.dtype), offset, tuple(real.shape)))
            group.append(real.reshape(-1))
        return [torch.cat(group) if len(group) > 1 else group[0] for group in groups.values()], specs


def _limit_intra_op_threads(decode_threads: int) -> None:
    """Caps torch's intra-op threads at the CPUs per decode thread, unless OMP_NUM_THREADS is set.

    On the CPU the host work (decoding, converting) is spread over frames by the decode threads;
    an intra-op team waits at a barrier after every operator, so when the worker shares its
    CPUs (TorchServe's frontend, other workers, clients) a preempted team member stalls each
    operator for a scheduler time slice: frame_quality on a 16-frame 720p chunk took 1.2-1.6 s
    (median) with 2 threads on 2 loaded cores, 0.13-0.16 s with 1 (README, Performance).
    """
    if "OMP_NUM_THREADS" in os.environ:
        return
    cap = max(1, len(os.sched_getaffinity(0)) // max(1, decode_threads))
    if torch.get_num_threads() > cap:
        logger.info("torch intra-op threads: %d -> %d (%d decode threads)", torch.get_num_threads(), cap,
                    decode_threads)
        torch.set_num_threads(cap)


@dataclass(frozen=True, slots=True)
class _Spec:
    """Where one named output lies in the gathered flat tensors: `flat[group][offset:...]`."""

    name: str
    group: int
    offset: int
    shape: tuple[int, ...]


def _unflatten(host: list[torch.Tensor], specs: list[_Spec]) -> list[tuple[str, torch.Tensor]]:
    """The named outputs back from the flat host tensors, in the model's order (views, no copy)."""
    return [(s.name, host[s.group][s.offset:s.offset + math.prod(s.shape)].view(s.shape))
            for s in specs]


def _named(raw: Any, names: tuple[str, ...] | None) -> dict[str, torch.Tensor]:
    """The model's outputs by name: a dict as is, a tensor as `output`, a tuple by `names`."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, torch.Tensor):
        return {names[0] if names else "output": raw}
    if isinstance(raw, (tuple, list)):
        if names is not None and len(names) != len(raw):
            raise ValueError(f"model returned {len(raw)} outputs but output_names has {len(names)}")
        return dict(zip(names or [f"output_{i}" for i in range(len(raw))], raw))
    raise TypeError(f"model returned {type(raw).__name__}; return a tensor, a tuple or a dict")
