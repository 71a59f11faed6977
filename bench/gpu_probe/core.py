"""The core's checks on the device: out of memory inside a TorchScript model split and recovered,
a frame that never fits answered 507, no host sync in the forward for both demo models, pinned
staging whose copies overlap compute, device memory per chunk against the budget (and
`bytes_per_pixel` calibrated), and a worker on a non-zero GPU index touching no other GPU.

Everything drives `handler.pipeline.Pipeline` in this process, as a worker would (no TorchServe).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from bench.gpu_probe.probe import Probe, Row, Section

ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20


def _config(**overrides: Any) -> Any:
    from handler.config import HandlerConfig

    return HandlerConfig.from_mapping(overrides)


def _demo(name: str, device: torch.device) -> tuple[Any, Any]:
    """A demo model built from code (DESIGN section 5), loaded as the worker loads it, with its
    archive's handler settings."""
    from handler.config import HandlerConfig
    from handler.loading import load_model
    from handler.models.build import build

    with tempfile.TemporaryDirectory() as tmp:
        model = load_model(build(name, Path(tmp)), device).model
    raw = yaml.safe_load((ROOT / "handler" / "models" / f"{name}.yaml").read_text())["handler"]
    return model, HandlerConfig.from_mapping(raw)


def _requests(frames: Sequence[np.ndarray]) -> list[Any]:
    """Raw uint8 frames as native-door requests (`.npy` bodies: no decoding cost)."""
    import io

    from handler.clip import Request
    from handler.doors.native import Body

    bodies = []
    for frame in frames:
        out = io.BytesIO()
        np.save(out, frame, allow_pickle=False)
        bodies.append(Request(Body(out.getvalue(), "application/x-npy")))
    return bodies


def _frames(count: int, height: int, width: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(count)]


def _statuses(outcomes: Sequence[Any]) -> list[int]:
    return sorted({200 if isinstance(o, list) else o.status for o in outcomes})


class Hungry(torch.nn.Module):
    """Allocates `per_frame` float32 elements per frame inside the model: on CUDA, out of memory
    is raised by TorchScript's interpreter (as a plain error, not `torch.cuda.OutOfMemoryError`)."""

    def __init__(self, per_frame: int) -> None:
        super().__init__()
        self.per_frame = per_frame

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        work = torch.ones(x.shape[0], self.per_frame, device=x.device)
        return x.mean(dim=(1, 2, 3)) + work.sum(dim=1) * 0.0


def oom_section(probe: Probe) -> list[Row]:
    """A real out-of-memory error inside a scripted model: split, every frame 200, the limit
    learned and then recovered; a frame that never fits gets 507 alone."""
    from handler.memory import RECOVER_AFTER
    from handler.pipeline import Pipeline

    per_frame = (1 << 28) if probe.cuda else 1 << 10  # 1 GiB of float32 per frame on the GPU
    scripted = torch.jit.script(Hungry(per_frame)).to(probe.device)
    # On the CPU the same path runs with a stand-in for the allocator's count.
    model: Callable[..., Any] = scripted if probe.cuda else _CpuOom(scripted, 4)
    ooms = None if probe.cuda else model.count  # type: ignore[union-attr]
    config = _config(model_max_batch=16, output_names=["mean"])
    burst = _requests(_frames(16, 32, 32))
    with _memory_cap(probe, 6 * per_frame * 4):
        pipeline = Pipeline(model, config, probe.device, ooms=ooms)
        outcomes, stats = pipeline.run(burst)
        learned = pipeline._planner.limit((32, 32))
    rows = [Row("OOM inside a TorchScript model: chunk split, every frame answered",
                f"statuses {_statuses(outcomes)}, {stats.oom_splits} splits, limit learned {learned}",
                stats.oom_splits, "splits", "every frame 200, ≥ 1 split",
                _cuda(probe, _statuses(outcomes) == [200] and stats.oom_splits > 0),
                "16 frames of 1 GiB each inside the model, allocator capped at 6 GiB", cuda_only=True)]
    if isinstance(model, _CpuOom):
        model.limit = 16  # memory is back
    batches = 0
    while pipeline._planner.limit((32, 32)) < 16 and batches < 4 * RECOVER_AFTER and not probe.end.passed():
        pipeline.run(burst)
        batches += 1
    recovered = pipeline._planner.limit((32, 32))
    rows.append(Row("the learned limit recovers once memory is back", f"limit {learned} -> {recovered} after "
                    f"{batches} batches", recovered, "frames", "back to 16",
                    _cuda(probe, recovered == 16), f"RECOVER_AFTER = {RECOVER_AFTER} full chunks per doubling",
                    cuda_only=True))
    if isinstance(model, _CpuOom):
        model.limit = 0
    with _memory_cap(probe, per_frame * 2):
        outcomes, stats = Pipeline(model, config, probe.device, ooms=ooms).run(burst[:2])
    rows.append(Row("a frame that never fits gets 507 alone", f"statuses {_statuses(outcomes)}", None, "",
                    "507", _cuda(probe, _statuses(outcomes) == [507]), "allocator capped below one frame",
                    cuda_only=True))
    return rows


class _CpuOom:
    """The dry run's stand-in for the allocator: above `limit` frames its count rises and the
    call fails, as a scripted model's out-of-memory error does on CUDA."""

    def __init__(self, model: Callable[..., Any], limit: int) -> None:
        self.model, self.limit, self.ooms = model, limit, 0

    def count(self) -> int:
        return self.ooms

    def __call__(self, x: torch.Tensor) -> Any:
        if x.shape[0] > self.limit:
            self.ooms += 1
            raise RuntimeError("out of memory (dry run)")
        return self.model(x)


class _memory_cap:  # noqa: N801 - a context manager used like a function
    """Caps the caching allocator at what it holds now plus `extra` bytes (CUDA only)."""

    def __init__(self, probe: Probe, extra: int) -> None:
        self.probe, self.extra = probe, extra

    def __enter__(self) -> None:
        if self.probe.cuda:
            torch.cuda.synchronize(self.probe.device)
            torch.cuda.empty_cache()
            total = torch.cuda.get_device_properties(self.probe.device).total_memory
            cap = torch.cuda.memory_reserved(self.probe.device) + self.extra
            torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), self.probe.device)

    def __exit__(self, *exc: object) -> None:
        if self.probe.cuda:
            torch.cuda.set_per_process_memory_fraction(1.0, self.probe.device)
            torch.cuda.empty_cache()


def _cuda(probe: Probe, ok: bool) -> bool | None:
    return ok if probe.cuda and not probe.dry_run else None


def sync_section(probe: Probe) -> list[Row]:
    """Normalisation, the forward and gathering the outputs under `set_sync_debug_mode("error")`
    for both demo models (frame_quality: pad, sizes passed; fixed_batch_cnn: letterbox, static
    batch, normalisation): a host sync in there raises and is reported."""
    from handler.pipeline import Pipeline

    rows = []
    size = (72, 128) if probe.dry_run else (720, 1280)
    for name in ("frame_quality", "fixed_batch_cnn"):
        model, config = _demo(name, probe.device)
        pipeline = Pipeline(model, config, probe.device)
        errors = _guard(pipeline, probe)
        outcomes, _ = pipeline.run(_requests(_frames(24, *size)))
        rows.append(Row(f"no host sync between upload and output copy: {name}",
                        f"{len(errors)} syncs, statuses {_statuses(outcomes)}", len(errors), "syncs", "0",
                        _cuda(probe, not errors and _statuses(outcomes) == [200]),
                        errors[0] if errors else "set_sync_debug_mode('error') around ChunkRunner._on_device",
                        cuda_only=True))
    return rows


def _guard(pipeline: Any, probe: Probe) -> list[str]:
    """Wraps the pipeline's sync-free section in sync debug mode "error"; returns its errors."""
    chunks = pipeline._chunks
    original = chunks._on_device
    errors: list[str] = []

    def guarded(pixels: torch.Tensor, batch: Any) -> Any:
        if probe.cuda:
            torch.cuda.set_sync_debug_mode("error")
        try:
            return original(pixels, batch)
        except RuntimeError as exc:
            errors.append(str(exc).splitlines()[0][:200])
            raise
        finally:
            if probe.cuda:
                torch.cuda.set_sync_debug_mode("default")

    chunks._on_device = guarded
    return errors


class Heavy(torch.nn.Module):
    """A forward-bound model: `depth` 3x3 convolutions at the input's resolution."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(3, 3, 3, padding=1) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = conv(x)
        return x.mean(dim=(1, 2, 3))


def staging_section(probe: Probe) -> list[Row]:
    """Pinned staging, and how busy the GPU is with one staging buffer and with two on a
    forward-bound run (busy = the forward's own device time x chunks / the run's wall time)."""
    from handler.memory import Staging
    from handler.pipeline import Pipeline

    size, chunk, count = ((72, 128), 4, 16) if probe.dry_run else ((720, 1280), 16, 192)
    config = _config(model_max_batch=chunk, output_names=["mean"], max_width=size[1], max_height=size[0])
    requests = _requests(_frames(count, *size))
    model = Heavy(1).to(probe.device).eval()
    forward = _forward_seconds(model, probe, chunk, size)
    collate = _run_seconds(Pipeline(lambda x: x.mean(dim=(1, 2, 3)), config, probe.device), requests, probe) / (
        count // chunk)
    depth = max(1, round(1.5 * collate / max(forward, 1e-6)))  # the forward 1.5x the host's collate
    model = Heavy(depth).to(probe.device).eval()
    forward = _forward_seconds(model, probe, chunk, size)
    rows, busy = [], {}
    for buffers in (1, 2):
        pipeline = Pipeline(model, config, probe.device)
        pipeline._chunks._staging = Staging(probe.device, pipeline._planner.capacity(), depth=buffers)
        wall = _run_seconds(pipeline, requests, probe)
        busy[buffers] = min(1.0, forward * (count // chunk) / wall)
        pinned = all(b is None or b.is_pinned() for b in pipeline._chunks._staging._buffers)
    rows.append(Row("staging is pinned (CUDA) and allocated once", f"pinned {pinned}", None, "", "pinned",
                    _cuda(probe, pinned), "", cuda_only=True))
    for buffers in (1, 2):
        where = "" if probe.cuda else " (CPU: not a GPU figure)"
        rows.append(Row(f"GPU busy, forward-bound run, {buffers} staging buffer(s)", f"{busy[buffers]:.0%}{where}",
                        busy[buffers] if probe.cuda else None, "", "≥ 80%" if buffers == 2 else "",
                        _cuda(probe, busy[buffers] >= 0.8) if buffers == 2 else None,
                        f"{depth} convolutions at {size[1]}x{size[0]}, chunks of {chunk}; forward "
                        f"{forward * 1e3:.1f} ms, host collate {collate * 1e3:.1f} ms per chunk", cuda_only=True))
    return rows


def _forward_seconds(model: Callable[..., Any], probe: Probe, chunk: int, size: tuple[int, int]) -> float:
    # The layout the pipeline hands the model: `[N, H, W, 3]` permuted, channels-last in memory.
    x = torch.rand(chunk, *size, 3, device=probe.device).permute(0, 3, 1, 2)
    with torch.inference_mode():
        model(x)
        probe.sync()
        start = time.perf_counter()
        for _ in range(5):
            model(x)
        probe.sync()
    return (time.perf_counter() - start) / 5


def _run_seconds(pipeline: Any, requests: list[Any], probe: Probe) -> float:
    pipeline.run(requests)  # warm-up: kernels, pinned buffers
    probe.sync()
    start = time.perf_counter()
    pipeline.run(requests)
    probe.sync()
    return time.perf_counter() - start


def memory_section(probe: Probe) -> list[Row]:
    """Peak device memory per chunk of 1080p frames (frame_quality), fitted to bytes per input
    pixel, and a burst under a budget of four frames staying within it."""
    from handler.pipeline import Pipeline

    model, config = _demo("frame_quality", probe.device)
    h, w = (36, 64) if probe.dry_run else (1080, 1920)
    peaks = []
    for frames in (1, 2, 4, 8):
        pipeline = Pipeline(model, config, probe.device)
        _, stats = pipeline.run(_requests(_frames(frames, h, w)))
        peaks.append((frames, stats.peak_memory_bytes))
    slot_pixels = -(-h // 32) * 32 * (-(-w // 32) * 32)
    per_pixel = (peaks[-1][1] - peaks[0][1]) / ((peaks[-1][0] - peaks[0][0]) * slot_pixels)
    rows = [Row(f"bytes_per_pixel calibrated (frame_quality, {w}x{h})", f"{per_pixel:.1f} B/pixel "
                f"(configured {config.bytes_per_pixel})", per_pixel if probe.cuda else None, "B/pixel", "", None,
                "peaks " + ", ".join(f"{f}: {p / MiB:.0f} MiB" for f, p in peaks), cuda_only=True)]
    budget = 4 * slot_pixels * config.bytes_per_pixel
    budgeted = Pipeline(model, _with(config, memory_budget_bytes=budget), probe.device)
    outcomes, stats = budgeted.run(_requests(_frames(16, h, w)))
    rows.append(Row("a burst under a 4-frame budget stays within it", f"peak {stats.peak_memory_bytes / MiB:.0f} "
                    f"MiB of {budget / MiB:.0f} MiB, {stats.chunks} chunks, statuses {_statuses(outcomes)}",
                    stats.peak_memory_bytes / MiB, "MiB", "≤ budget, every frame 200",
                    _cuda(probe, stats.peak_memory_bytes <= budget and _statuses(outcomes) == [200]),
                    f"16 frames at {w}x{h}", cuda_only=True))
    return rows


def _with(config: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(config, **changes)


def pipeline_jpeg_section(probe: Probe) -> list[Row]:
    """720p JPEG requests through the whole pipeline (decode, collate, upload, a trivial forward,
    outputs back), with `jpeg_decoder: cpu` and `nvjpeg`: the handler's own frames/s."""
    from bench.gpu_probe.decode import jpeg_bodies
    from bench.gpu_probe.probe import fmt, throughput
    from handler.clip import Request
    from handler.doors.native import Body
    from handler.pipeline import Pipeline

    h, w = (72, 128) if probe.dry_run else (720, 1280)
    requests = [Request(Body(b, "image/jpeg")) for b in jpeg_bodies(64, h, w)]
    rows = []
    decoders = ("cpu", "nvjpeg") if probe.cuda else ("cpu",)
    for n, decoder in enumerate(decoders):
        config = _config(model_max_batch=16, output_names=["mean"], jpeg_decoder=decoder)
        pipeline = Pipeline(lambda x: x.mean(dim=(1, 2, 3)), config, probe.device)
        statuses: set[int] = set()

        def step(pipeline: Any = pipeline, statuses: set[int] = statuses) -> int:
            outcomes, _ = pipeline.run(requests)
            statuses.update(_statuses(outcomes))
            return len(requests)

        rate = throughput(step, probe.deadline(1 / (len(decoders) - n)), probe.sync)
        target = decoder == "nvjpeg"
        rows.append(Row(f"{w}x{h} JPEG through the pipeline, jpeg_decoder: {decoder}",
                        f"{fmt(rate.per_second, 'frames/s')}, statuses {sorted(statuses)}",
                        rate.per_second if probe.cuda else None, "frames/s", "≥ 5,000 frames/s" if target else "",
                        _cuda(probe, rate.per_second >= 5000 and statuses == {200}) if target else None,
                        f"{config.resolved(probe.cuda).threads} decode threads, chunks of 16, a trivial model",
                        cuda_only=True))
    return rows


def handler_video_section(probe: Probe) -> list[Row]:
    """The handler's own video path: `handler.video.probe` proves NVDEC on this GPU with its test
    segment; `decode_segment` then keeps 1080p frames on the device (NV12 -> RGB there,
    `handler.colour`), close to the CPU decoder's RGB, at what frames/s with 7 decode threads."""
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor

    from bench.gpu_probe.decode import SEGMENT_FPS, camera_frames, encode_segment
    from bench.gpu_probe.probe import fmt, throughput
    from handler import video
    from handler.device import bind
    from handler.formats import Format

    h, w = (96, 160) if probe.dry_run else (1080, 1920)
    segment, _ = encode_segment(camera_frames(SEGMENT_FPS, h, w, scene=1))
    config = _config(model_max_batch=16)
    if probe.cuda:
        found = video.probe(probe.index)
        proven = found.accel is not None
        said = "proven on the test segment" if proven else found.reason
    else:
        proven, said = False, video.describe_decoder(config, probe.device)
    rows = [Row("handler.video.probe proves NVDEC on this GPU", said[:120], None, "", "proven",
                _cuda(probe, proven), said, cuda_only=True)]
    gpu = video.decode_segment(segment, Format.MPEGTS, None, config)
    cpu = video.decode_segment(segment, Format.MPEGTS, None, dataclasses.replace(config, video_hw_decode=False))
    on_device = all(isinstance(f, torch.Tensor) and f.device == probe.device for f in gpu.frames)
    diff = [np.abs(np.asarray(g.cpu() if isinstance(g, torch.Tensor) else g, dtype=np.int16)
                   - np.asarray(c, dtype=np.int16)) for g, c in zip(gpu.frames, cpu.frames)]
    worst, mean = max(int(d.max()) for d in diff), float(np.mean([d.mean() for d in diff]))
    rows.append(Row("decode_segment keeps NVDEC frames on the GPU, RGB close to the CPU decoder's",
                    f"decoder {gpu.decoder}, on the device {on_device}, max {worst} / mean {mean:.2f} levels",
                    worst, "levels", "nvdec, on the device, max ≤ 2, mean < 1",
                    _cuda(probe, gpu.decoder == "nvdec" and on_device and worst <= 2 and mean < 1),
                    f"{len(gpu.frames)} frames of {w}x{h}", cuda_only=True))
    pool = ThreadPoolExecutor(7, initializer=bind, initargs=(probe.device,))

    def step() -> int:
        clips = list(pool.map(lambda _: video.decode_segment(segment, Format.MPEGTS, None, config), range(7)))
        return sum(len(c.frames) for c in clips)

    rate = throughput(step, probe.deadline(), probe.sync)
    pool.shutdown()
    rows.append(Row("decode_segment, 7 segments in flight (decode threads bound to the GPU)",
                    fmt(rate.per_second, "frames/s"), rate.per_second if probe.cuda else None, "frames/s",
                    "≥ 2,000 frames/s", _cuda(probe, rate.per_second >= 2000),
                    f"RGB on the device when NVDEC is proven; {rate.units} frames in {rate.seconds:.1f} s",
                    cuda_only=True))
    return rows


_INDEX_CHECK = """
import sys, torch
from bench.gpu_probe.core import _demo, _frames, _requests, _statuses
from handler.pipeline import Pipeline
device = torch.device("cuda", int(sys.argv[1]))
model, config = _demo("frame_quality", device)
outcomes, _ = Pipeline(model, config, device).run(_requests(_frames(8, 720, 1280)))
others = [i for i in range(torch.cuda.device_count()) if i != device.index and torch.cuda.memory_reserved(i)]
print(_statuses(outcomes), others)
"""


def index_section(probe: Probe) -> list[Row]:
    """A worker on the last GPU allocates nothing on any other (a fresh process, as a worker)."""
    count = torch.cuda.device_count() if probe.cuda else 0
    if count < 2:
        return [Row("a worker on a non-zero GPU index touches no other GPU", f"{count} GPU(s) here", None, "",
                    "nothing on other GPUs", None, "needs two GPUs; unit-tested on the CPU "
                    "(tests/unit/test_cuda_path.py)", cuda_only=True)]
    done = subprocess.run([sys.executable, "-c", _INDEX_CHECK, str(count - 1)], capture_output=True, text=True,
                          cwd=ROOT, timeout=max(10.0, probe.end.left()), check=False)
    last = (done.stdout.strip().splitlines() or [done.stderr.strip()[-200:]])[-1]
    return [Row("a worker on a non-zero GPU index touches no other GPU", f"GPU {count - 1}: {last}", None, "",
                "nothing on other GPUs", done.returncode == 0 and last.endswith("[]"), "", cuda_only=True)]


SECTIONS: list[Section] = [
    Section("oom", oom_section),
    Section("syncs", sync_section),
    Section("staging", staging_section, share=2.0),
    Section("memory", memory_section),
    Section("pipeline_jpeg", pipeline_jpeg_section),
    Section("handler_video", handler_video_section),
    Section("gpu_index", index_section, share=0.5),
]
