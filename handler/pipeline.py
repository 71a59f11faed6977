"""The core: requests -> decode -> plan -> collate -> infer -> unpad -> encode. Imports nothing from `ts`."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from handler import encode
from handler.collate import bucket, collate, letterbox, to_model_input, unpad
from handler.config import HandlerConfig, Resize
from handler.errors import BadHeader, DeviceOutOfMemory, FrameError, InternalError, StaleFrame
from handler.frames import Clip
from handler.memory import Chunk, ChunkPlanner, Staging, peak_memory, reset_peak_memory
from handler.requests import Request

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
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
        self._planner = ChunkPlanner(config)
        self._staging = Staging(device)
        # Pillow and NumPy release the GIL while decoding and copying: decode a batch in parallel.
        self._decoders = ThreadPoolExecutor(config.decode_threads, thread_name_prefix="decode")

    def run(self, requests: Sequence[Request]) -> tuple[list[encode.Response], BatchStats]:
        """Answers every request, in order; a bad one never fails the others."""
        stats = BatchStats(requests=len(requests))
        reset_peak_memory(self._device)
        started = self._clock()
        results: list[list[FrameResult | None] | FrameError] = []
        frames: list[np.ndarray] = []
        owners: list[tuple[int, int]] = []
        clips = list(self._decoders.map(lambda request: self._decode(request, started), requests))
        for index, clip in enumerate(clips):
            if isinstance(clip, FrameError):
                results.append(clip)
                continue
            results.append([None] * len(clip.frames))
            frames.extend(clip.frames)
            owners.extend((index, n) for n in range(len(clip.frames)))
        # A request's frames: its clip length once decoded, 1 when it could not be decoded.
        frame_counts = [len(r) if isinstance(r, list) else 1 for r in results]
        stats.frames = sum(frame_counts)

        for chunk in self._planner.plan(self._group(frames)):
            for item, result in zip(chunk.items, self._infer(chunk, frames, stats)):
                index, n = owners[item]
                if isinstance(results[index], FrameError):
                    continue
                if isinstance(result, FrameError):
                    results[index] = result
                else:
                    pts = clips[index].pts
                    results[index][n] = result if pts is None else {**result, "pts": pts[n]}

        responses = []
        for request, result, count in zip(requests, results, frame_counts):
            if isinstance(result, FrameError):
                stats.rejected[result.reason] = stats.rejected.get(result.reason, 0) + count
                responses.append(encode.error(request, result))
            else:
                responses.append(encode.ok(request, result))
        if len(responses) != len(requests):
            raise RuntimeError(f"{len(requests)} requests in, {len(responses)} responses out")
        stats.peak_memory_bytes = peak_memory(self._device)
        return responses, stats

    def _decode(self, request: Request, started: float) -> Clip | FrameError:
        try:
            self._check_age(request.headers, started)
            return request.decode(self._config)
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
            age_ms = (started - float(captured)) * 1000.0
        except ValueError:
            raise BadHeader(
                f"X-Capture-Time {captured[:32]!r} is not a Unix time in seconds"
            ) from None
        if age_ms > limit:
            raise StaleFrame(f"frame was {age_ms:.0f} ms old at batch start (limit {limit:.0f} ms)")

    def _group(self, frames: list[np.ndarray]) -> dict[tuple[int, int], list[int]]:
        groups: dict[tuple[int, int], list[int]] = {}
        for i, frame in enumerate(frames):
            if self._config.resize is Resize.LETTERBOX:
                key = self._config.input_size
            else:
                key = bucket(*frame.shape[:2], self._config.size_divisor)
            groups.setdefault(key, []).append(i)
        return groups

    def _infer(self, chunk: Chunk, frames: list[np.ndarray], stats: BatchStats
               ) -> list[FrameResult | FrameError]:
        """Runs one chunk; on device OOM halves it, remembers the limit and retries."""
        try:
            return self._forward([frames[i] for i in chunk.items], stats)
        except torch.cuda.OutOfMemoryError:
            logger.warning("device out of memory on %d frames of %s", len(chunk.items), chunk.shape)
        except Exception:
            logger.exception("the model failed on a chunk of %d frames", len(chunk.items))
            return [InternalError("the model failed on this frame's chunk; see the worker log")
                    ] * len(chunk.items)
        # Outside the except block, so the failed attempt's tensors are already released.
        if self._device.type == "cuda":
            torch.cuda.empty_cache()
        if len(chunk.items) == 1:
            return [DeviceOutOfMemory("the device ran out of memory on this frame alone")]
        half = len(chunk.items) // 2
        self._planner.learn(chunk.shape, half)
        stats.oom_splits += 1
        return (self._infer(Chunk(chunk.shape, chunk.items[:half]), frames, stats)
                + self._infer(Chunk(chunk.shape, chunk.items[half:]), frames, stats))

    def _forward(self, frames: list[np.ndarray], stats: BatchStats) -> list[FrameResult]:
        config = self._config
        shape = tuple(max(dim) for dim in zip(*(
            bucket(*f.shape[:2], config.size_divisor) for f in frames)))
        rows = max(len(frames), config.static_batch or 0)
        batch = collate(frames, shape, rows, out=self._staging.take((rows, *shape, 3)))
        stats.chunks += 1
        with torch.inference_mode():
            x = to_model_input(self._staging.upload(batch.tensor), config.normalize)
            sizes, original, model_hw = batch.sizes, None, shape
            if config.resize is Resize.LETTERBOX:
                x, sizes = letterbox(x, batch.sizes, config.input_size)
                original, model_hw = batch.sizes, config.input_size
            valid = sum(h * w for h, w in sizes)
            stats.tensor_pixels += rows * model_hw[0] * model_hw[1]
            stats.padded_pixels += rows * model_hw[0] * model_hw[1] - valid
            args = (x,)
            if config.pass_sizes:
                padded_sizes = list(sizes) + [model_hw] * (rows - len(sizes))
                args = (x, torch.tensor(padded_sizes, dtype=torch.int64, device=x.device))
            outputs = _named(self._model(*args), config.output_names)
            per_frame: list[FrameResult] = [
                {"width": w, "height": h, "outputs": {}} for h, w in batch.sizes
            ]
            for name, tensor in outputs.items():
                if tensor.shape[0] != rows:
                    raise ValueError(f"model output {name!r} has {tensor.shape[0]} rows for {rows} inputs")
                values = unpad(tensor.detach().cpu(), model_hw, sizes, original)
                for result, value in zip(per_frame, values):
                    result["outputs"][name] = value
        return per_frame


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
