"""In process: each handler's `handle` on a real `ts.context.Context`, no server.

Same frames, same batches for our handler (frame_quality, and the trivial model of
`bench.trivial_model`), the decode-only handler, the stock-style handler (frame_quality) and a no-op one;
frames/s from timed runs, then one instrumented run for the per-stage breakdown.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from bench.harness import ROOT
from loadgen.frames import Format, encode, frame
from loadgen.schedule import Resolution

STAGES = ("decode", "collate", "transfer", "model", "encode")
HD = Resolution(1280, 720)
# averages 936,000 pixels a frame, within 2% of 720p's 921,600: frames/s compare directly
MIXED = (Resolution(1920, 1080), Resolution(1280, 720), Resolution(960, 540), Resolution(640, 360))


@dataclass(frozen=True, slots=True)
class Workload:
    """One batch of requests, one frame each: (body, content type) and its pixel count."""

    name: str
    kind: str  # "jpeg", "npy" (uniform size) or "mixed"
    requests: tuple[tuple[bytes, str], ...]
    pixels: int


def workloads(frames: int = 32, hd: Resolution = HD, mixed: tuple[Resolution, ...] = MIXED) -> list[Workload]:
    """720p JPEG, 720p .npy and mixed-resolution .npy batches of `frames` camera frames."""
    out = []
    for kind, fmt, sizes in (("jpeg", Format.JPEG, (hd,)), ("npy", Format.NPY, (hd,)),
                             ("mixed", Format.NPY, mixed)):
        reqs, pixels = [], 0
        for i in range(frames):
            size = sizes[i % len(sizes)]
            payload = encode([frame(i % 4, i, size)], fmt)
            reqs.append((payload.body, payload.content_type))
            pixels += size.width * size.height
        name = "mixed npy" if kind == "mixed" else f"{hd.height}p {kind}"
        out.append(Workload(name, kind, tuple(reqs), pixels))
    return out


def context(model_dir: Path, serialized: str, device: str, batch_size: int = 32,
            config: Path = ROOT / "handler" / "models" / "frame_quality.yaml", name: str = "frame_quality"):
    """A real `ts.context.Context` for a model (frame_quality by default), as TorchServe's worker builds it."""
    from ts.context import Context
    from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl

    raw = yaml.safe_load(config.read_text())
    metrics = MetricsCacheYamlImpl(str(ROOT / "handler" / "metrics.yaml"))
    metrics.initialize_cache()
    manifest = {"model": {"modelName": name, "serializedFile": serialized, "handler": "service.py"}}
    gpu = 0 if device.startswith("cuda") else None
    return Context(name, str(model_dir), manifest, batch_size, gpu, "0.12.0",
                   metrics=metrics, model_yaml_config=raw)


def _feed(ctx, workload: Workload) -> list[dict]:
    """Sets the per-request headers on the context; returns the `data` list `handle` takes."""
    from ts.context import RequestProcessor

    ctx.request_processor = [RequestProcessor({"body": {"content-type": ct}, "Content-Type": ct})
                             for _, ct in workload.requests]
    ctx.request_ids = {i: f"req-{i}" for i in range(len(workload.requests))}
    ctx.metrics.set_request_ids(ctx.request_ids)
    return [{"body": bytearray(body)} for body, _ in workload.requests]


class StageClock:
    """Totals seconds per stage; `sync` makes device work land in the stage that queued it."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self.sync = sync
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, stage: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.sync()
                self.seconds[stage] += time.perf_counter() - start
        return timed


@contextmanager
def _patched(targets: list[tuple[object, str, str]], clock: StageClock) -> Iterator[None]:
    """Replaces `obj.name` by a timed wrapper for `stage` while inside."""
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in targets]
    try:
        for obj, name, stage in targets:
            setattr(obj, name, clock.wrap(stage, getattr(obj, name)))
        yield
    finally:
        for obj, name, original in saved:
            setattr(obj, name, original)


def _ours_stages(handler) -> list[tuple[object, str, str]]:
    import handler.chunks as chunks_module
    import handler.doors.native as native_module

    waves, chunks = handler.pipeline._waves, handler.pipeline._chunks
    # decode (with the letterbox fit) runs in the decode threads: its time is summed over them.
    # On the CPU a JPEG is only parsed there; its pixels are decoded while collating.
    return [(waves, "_fit", "decode"), (native_module, "decode", "decode"),
            (chunks_module, "collate", "collate"),
            (chunks._staging, "upload", "transfer"), (chunks, "_normalizer", "transfer"),
            (chunks, "_model", "model"), (chunks._layout, "unpad", "encode"),
            (native_module, "answer", "encode")]


def _stock_stages(_handler) -> list[tuple[object, str, str]]:
    from bench import stock

    return [(stock, "decode_frame", "decode"), (stock, "transfer", "transfer"), (stock, "collate", "collate"),
            (stock, "infer", "model"), (stock, "encode", "encode")]


@dataclass(slots=True)
class Result:
    """One handler on one workload."""

    handler: str
    workload: str
    kind: str
    frames_per_s: float | None = None
    mpixels_per_s: float | None = None
    ms_per_batch: float | None = None
    stages_ms: dict[str, float] = field(default_factory=dict)
    statuses: dict[int, int] = field(default_factory=dict)
    error: str | None = None


def _decode_stages(handler) -> list[tuple[object, str, str]]:
    return [(handler, "_one", "decode")]  # decode and answer one request, in the decode threads


def _handlers(model_dir: Path, device: str) -> dict[str, tuple[object, object, Callable]]:
    from bench.decode_handler import DecodeOnlyHandler
    from bench.noop_handler import NoopHandler
    from bench.stock_handler import StockVisionHandler
    from bench.trivial_model import build as build_trivial
    from handler.service import VideoFrameHandler

    build_trivial(model_dir / "trivial.pt")
    trivial = ("trivial.pt", ROOT / "bench" / "trivial.yaml", "trivial")
    default = ("frame_quality.pt", ROOT / "handler" / "models" / "frame_quality.yaml", "frame_quality")
    out = {}
    for name, cls, stages, (serialized, config, model) in (
            ("ours", VideoFrameHandler, _ours_stages, default),
            ("trivial", VideoFrameHandler, _ours_stages, trivial),
            ("decode", DecodeOnlyHandler, _decode_stages, trivial),
            ("stock", StockVisionHandler, _stock_stages, default),
            ("no-op", NoopHandler, lambda h: [], default)):
        ctx = context(model_dir, serialized, device, config=config, name=model)
        handler = cls()
        handler.initialize(ctx)
        out[name] = (handler, ctx, stages)
    return out


def bench(model_dir: Path, device: str, iterations: int, loads: list[Workload]) -> list[Result]:
    """Every handler on every workload: warm-up, `iterations` timed batches, one staged batch.

    Args:
        model_dir: holds `frame_quality.pt` (`handler.models.build.build_all`).
        device: `cpu` or `cuda`.
    """
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    results = []
    for name, (handler, ctx, stages) in _handlers(model_dir, device).items():
        for load in loads:
            result = Result(name, load.name, load.kind)
            try:
                handler.handle(_feed(ctx, load), ctx)  # warm-up (and the failure, if it fails)
                sync()
                elapsed = 0.0
                for _ in range(iterations):
                    data = _feed(ctx, load)
                    start = time.perf_counter()
                    handler.handle(data, ctx)
                    sync()
                    elapsed += time.perf_counter() - start
                clock = StageClock(sync)
                with _patched(stages(handler), clock):
                    handler.handle(_feed(ctx, load), ctx)
            except Exception as exc:  # the stock style on mixed sizes: the table says so
                result.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:70]}"
                results.append(result)
                continue
            n = len(load.requests)
            result.frames_per_s = n * iterations / elapsed
            result.mpixels_per_s = load.pixels * iterations / elapsed / 1e6
            result.ms_per_batch = elapsed / iterations * 1000
            result.stages_ms = {s: clock.seconds[s] * 1000 for s in STAGES if s in clock.seconds}
            codes = ([ctx.get_response_status(i)[0] for i in range(n)] if name in ("ours", "trivial", "decode")
                     else [200] * n)
            result.statuses = {c: codes.count(c) for c in sorted(set(codes))}
            results.append(result)
    return results


def table(results: list[Result]) -> str:
    lines = [f"{'handler':<7} {'workload':<10} {'frames/s':>9} {'Mpx/s':>7} {'ms/batch':>9}  "
             + " ".join(f"{s:>8}" for s in STAGES) + "   (stage ms in one batch)"]
    for r in results:
        if r.error:
            lines.append(f"{r.handler:<7} {r.workload:<10} {'FAILS':>9}  {r.error}")
            continue
        stages = " ".join(f"{r.stages_ms[s]:>8.1f}" if s in r.stages_ms else f"{'-':>8}" for s in STAGES)
        lines.append(f"{r.handler:<7} {r.workload:<10} {r.frames_per_s:>9.1f} {r.mpixels_per_s:>7.1f} "
                     f"{r.ms_per_batch:>9.1f}  {stages}")
    return "\n".join(lines)
