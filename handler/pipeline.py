"""The core: requests -> decode (waves) -> plan -> chunks -> per-request outcomes.

Imports nothing from `ts` and knows no wire format: a door builds the `Request`s and encodes
the outcomes.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from handler import looks
from handler.chunks import ChunkRunner, Result
from handler.clip import Clip, Frame, FrameResult, Look, Outcome, Request, Size
from handler.config import HandlerConfig
from handler.device import OomCount, bind
from handler.errors import ConfigError, FrameError
from handler.layout import layout_for
from handler.looks import region_side
from handler.memory import ChunkPlanner, peak_memory, reset_peak_memory
from handler.metrics import BatchStats
from handler.tasks.heads import head_for
from handler.tasks.labels import Labels
from handler.waves import Decoded, Waves

logger = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclass(slots=True)
class Job:
    """One request in flight: its clip while its wave is served, its frames' results, or its error.

    Attributes:
        frames: frames it was decoded to (1 when it could not be decoded), for the metrics.
        looks: with motion, what the model looks at in each frame (`results` are then its
            regions', in order: `handler.looks`).
    """

    clip: Clip | None
    error: FrameError | None = None
    results: list[FrameResult | None] = field(default_factory=list)
    frames: int = 1
    looks: list[Look] | None = None
    pts: list[float] | None = None
    where: list[tuple[int, int]] = field(default_factory=list)  # with looks: (frame, region) of each result

    @classmethod
    def of(cls, decoded: Decoded) -> Job:
        if isinstance(decoded, FrameError):
            return cls(None, decoded)
        if decoded.looks is None:
            return cls(decoded, results=[None] * len(decoded.frames), frames=len(decoded.frames), pts=decoded.pts)
        where = [(i, j) for i, look in enumerate(decoded.looks) for j in range(len(look.regions))]
        return cls(decoded, results=[None] * len(where), frames=len(decoded.looks), looks=list(decoded.looks),
                   pts=decoded.pts, where=where)

    def answer(self, index: int, result: Result) -> None:
        """Frame `index`'s result; one failed frame fails the request, with its error."""
        if self.error is not None:
            return
        if isinstance(result, FrameError):
            self.error = result
            return
        if self.looks is None:
            result.pts = None if self.pts is None else self.pts[index]
        self.results[index] = result

    def outcome(self, most: int) -> Outcome:
        """Its frames' results (with motion, each put together from its regions' with at most
        `most` detections), or its error."""
        if self.error is not None:
            return self.error
        results = [result for result in self.results if result is not None]
        if len(results) != len(self.results):
            raise RuntimeError("a frame of a served request has no result")
        if self.looks is None:
            return results
        parts = self._parts(results)
        return [looks.answered(look, parts[i], None if self.pts is None else self.pts[i], most)
                for i, look in enumerate(self.looks)]

    def _parts(self, results: Sequence[FrameResult | None]) -> list[list[FrameResult]]:
        """Each frame's regions' results, in its look's order."""
        parts: list[list[tuple[int, FrameResult]]] = [[] for _ in self.looks or ()]
        for (i, j), result in zip(self.where, results):
            if result is not None:
                parts[i].append((j, result))
        return [[result for _, result in sorted(p, key=lambda jr: jr[0])] for p in parts]

    def regrown(self, side: int, fit: Callable[[list[Frame], list[Size]], list[Frame]]) -> list[FrameRef]:
        """A region around each moving box a region cut (`looks.regrown`), fitted, to run next."""
        if self.looks is None or self.clip is None or self.error is not None:
            return []
        parts, again, original = self._parts(self.results), [], -1
        for i, look in enumerate(self.looks):
            if not look.regions:
                continue
            original += 1
            self.looks[i] = looks.regrown(look, parts[i], side)
            for j in range(len(look.regions), len(self.looks[i].regions)):
                x1, y1, x2, y2 = self.looks[i].regions[j]
                crop = self.clip.originals[original][y1:y2, x1:x2]  # type: ignore[index]
                self.where.append((i, j))
                self.results.append(None)
                again.append(FrameRef(self, len(self.results) - 1, fit([crop], [(y2 - y1, x2 - x1)])[0],
                                      (y2 - y1, x2 - x1)))
        return again


@dataclass(frozen=True, slots=True)
class FrameRef:
    """One frame of a wave: whose it is and where (the planner chunks these)."""

    job: Job
    index: int
    frame: Frame
    size: Size


class Pipeline:
    """Serves batches of requests with one model on one device."""

    def __init__(self, model: Callable[..., Any], config: HandlerConfig,
                 device: torch.device = torch.device("cpu"), clock: Clock = time.time,
                 ooms: OomCount | None = None, labels: Labels | None = None,
                 metadata: Mapping[str, Any] | None = None) -> None:
        """A pipeline for `model`, its decode threads started.

        Args:
            model: the loaded model, on `device`.
            config: the handler's settings.
            device: the worker's device (TorchServe's `gpu_id`).
            clock: Unix seconds, for stale frames.
            ooms: the allocator's out-of-memory count (default: `handler.device.oom_count`).
            labels: class names for the task's answers (`handler.tasks.labels`).
            metadata: what the model file says of itself (`handler.loading.Loaded`).
        """
        self._clock = clock
        self._device = device
        self._config_task = config.task.value
        self._max_chunk, self._static_batch = config.max_chunk, config.static_batch
        bind(device)
        config = config.resolved(cuda=device.type == "cuda")
        layout = layout_for(config)
        self._planner = ChunkPlanner(config, layout)
        pool = decode_pool(config, device)
        self._waves = Waves(config, layout, pool)
        self._head = head_for(config, layout, labels or Labels(), metadata)
        self._chunks = ChunkRunner(model, config, device, layout, self._planner, pool.map, ooms, head=self._head)
        self._probe_size = _probe_size(config)
        self._side, self._most = region_side(config), config.max_detections
        _limit_intra_op_threads(config.threads)

    def check(self) -> str:
        """Runs a dummy frame through the model and the task (at `initialize`), then two (unless
        one is all a forward may take), so that a task or format that does not fit the model, or
        a model traced at a batch of one, fails at load rather than on the first requests.

        Returns:
            What was found, for the log: the task, and the detector format where `auto` chose it.

        Raises:
            ConfigError: the model's outputs do not fit the task or format, naming both; or the
                model answers one frame and fails on two, saying what to set.
        """
        self._chunks.probe(self._probe_size)
        if self._max_chunk > 1 and self._static_batch is None:
            try:
                self._chunks.probe(self._probe_size, frames=2)
            except Exception as err:
                reason = str(err).strip().splitlines()[-1][:200] if str(err).strip() else type(err).__name__
                raise ConfigError(
                    f"the model answers one frame but fails on a chunk of two ({reason}): it was traced or "
                    "exported with a fixed batch of 1 (an Ultralytics export is, unless exported with batch=N); "
                    "set handler.model_max_batch: 1, or static_batch: N for an engine of exactly N frames") from err
        found = getattr(self._head, "format", None)
        return self._config_task + (f" (format {found.value})" if found is not None else "")

    def run(self, requests: Sequence[Request]) -> tuple[list[Outcome], BatchStats]:
        """Every request's outcome, in order; a bad one never fails the others."""
        stats = BatchStats(requests=len(requests))
        reset_peak_memory(self._device)
        jobs: list[Job] = []
        for wave in self._waves.decode(requests, self._clock()):
            stats.count_segments(wave)
            served = [Job.of(decoded) for decoded in wave]
            self._serve(served, stats)
            wave.clear()  # its frames are released before the next wave is decoded
            for job in served:
                job.clip = None
            jobs.extend(served)
        outcomes = [job.outcome(self._most) for job in jobs]
        if len(outcomes) != len(requests):
            raise RuntimeError(f"{len(requests)} requests in, {len(outcomes)} outcomes out")
        stats.frames = sum(job.frames for job in jobs)
        for job, outcome in zip(jobs, outcomes):
            if isinstance(outcome, FrameError):
                stats.reject(outcome.reason, job.frames)
        stats.peak_memory_bytes = peak_memory(self._device)
        return outcomes, stats

    def _serve(self, wave: list[Job], stats: BatchStats) -> None:
        """Plans and runs one wave's frames (regions, with motion, and again those grown around
        a box they cut); every result goes to its job."""
        self._run([FrameRef(job, n, frame, size) for job in wave if job.clip is not None
                   for n, (frame, size) in enumerate(zip(job.clip.frames, job.clip.own_sizes))], stats)
        if self._side is not None:
            self._run([ref for job in wave for ref in job.regrown(self._side, self._waves.fit)], stats)

    def _run(self, refs: list[FrameRef], stats: BatchStats) -> None:
        if not refs:
            return
        frames = [ref.frame for ref in refs]
        sizes = [ref.size for ref in refs]
        for chunk, results in self._chunks.run_all(self._planner.plan(sizes), frames, sizes, stats):
            for item, result in zip(chunk.items, results):
                refs[item].job.answer(refs[item].index, result)


def _probe_size(config: HandlerConfig) -> Size:
    """The dummy frame's size: a letterbox engine's input, else a small frame within the limits."""
    if config.input_size is not None:
        return config.input_size
    return min(config.max_height, 256), min(config.max_width, 256)


def decode_pool(config: HandlerConfig, device: torch.device) -> ThreadPoolExecutor:
    """The worker's decode threads, each bound to the worker's device before its first task.

    Pillow, libjpeg-turbo, NumPy and FFmpeg release the GIL: a batch is decoded in parallel.
    NVDEC and any CUDA work in these threads then use the worker's GPU, not GPU 0.
    """
    return ThreadPoolExecutor(config.threads, thread_name_prefix="decode",
                              initializer=bind, initargs=(device,))


def _limit_intra_op_threads(decode_threads: int) -> None:
    """Caps torch's intra-op threads at the CPUs per decode thread, unless OMP_NUM_THREADS is set.

    The host work (decoding, converting; on the CPU the forward too) is spread over frames by
    the decode threads, on CUDA hosts as well; an intra-op team waits at a barrier after every
    operator, so when the worker shares its
    CPUs (TorchServe's frontend, other workers, clients) a preempted team member stalls each
    operator for a scheduler time slice: frame_quality on a 16-frame 720p chunk took 1.2-1.6 s
    (median) with 2 threads on 2 loaded cores, 0.13-0.16 s with 1 (docs/performance.md).
    """
    if "OMP_NUM_THREADS" in os.environ:
        return
    cap = intra_op_threads(decode_threads)
    if torch.get_num_threads() > cap:
        logger.info("torch intra-op threads: %d -> %d (%d decode threads)", torch.get_num_threads(), cap,
                    decode_threads)
        torch.set_num_threads(cap)


def intra_op_threads(decode_threads: int) -> int:
    """A forward's threads: the CPUs per decode thread (`OMP_NUM_THREADS` where set), for torch and
    for an ONNX Runtime session alike."""
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    return max(1, len(os.sched_getaffinity(0)) // max(1, decode_threads))
