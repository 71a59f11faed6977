"""End-to-end bench: each handler packaged and served by a real TorchServe, loaded by video-loadgen
at a rate above what the machine can serve, so each one's ceiling and latency show."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.torchserve import ROOT, Server, archive
from loadgen.frames import Format, FrameSource
from loadgen.metrics import Metrics, calculate_metrics
from loadgen.runner import Target, run
from loadgen.schedule import Plan, Resolution

HANDLERS = ("ours", "stock", "no-op")


@dataclass(frozen=True, slots=True)
class Result:
    """One handler's run."""

    handler: str
    metrics: Metrics | None
    error: str | None = None


def build_archives(store: Path, model_dir: Path) -> dict[str, Path]:
    """frame_quality packaged three ways: ours (archive.sh), stock-style and no-op handlers."""
    subprocess.run(["bash", str(ROOT / "archive.sh")], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "MODEL_STORE": str(store / "ours")})
    config = ROOT / "handler" / "models" / "frame_quality.yaml"
    stage = Path(tempfile.mkdtemp(prefix="bench-stage-"))
    try:
        (stage / "bench").mkdir()
        for name in ("__init__.py", "stock.py"):
            shutil.copy(ROOT / "bench" / name, stage / "bench" / name)
        for name, handler in (("stock", "stock_handler.py"), ("no-op", "noop_handler.py")):
            (store / name).mkdir(parents=True, exist_ok=True)
            archive(store / name, "frame_quality", ROOT / "bench" / handler, model_dir / "frame_quality.pt",
                    config, extra=stage)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {name: store / name / "frame_quality.mar" for name in HANDLERS}


def bench(workdir: Path, model_dir: Path, fps: float = 240.0, duration_s: float = 6.0, streams: int = 8,
          resolution: Resolution = Resolution(1280, 720), sla_ms: float = 200.0,
          handlers: tuple[str, ...] = HANDLERS, port_offset: int | None = None) -> list[Result]:
    """Serves each handler in turn and loads it with `streams` cameras at `fps` frames/s in all.

    Frames more than 2 s behind their schedule are dropped unsent, so a run ends soon after
    `duration_s` however far above capacity it is.
    """
    mars = build_archives(workdir / "store", model_dir)
    plan = Plan(streams=streams, fps=fps / streams, duration_s=duration_s, resolutions=(resolution,))
    source = FrameSource(Format.JPEG, distinct=8)
    results = []
    for name in handlers:
        server = Server(workdir / f"ts-{name.replace('-', '')}", mars[name], port_offset=port_offset)
        try:
            server.start()
            # one request first: the worker's first batch pays one-off costs
            run(Plan(streams=1, fps=2, duration_s=1, resolutions=(resolution,)),
                Target(server.inference_url, "frame_quality", server.key()), source)
            result = run(plan, Target(server.inference_url, "frame_quality", server.key(), timeout_s=60),
                         source, concurrency=64, max_lag_s=2.0)
            metrics = calculate_metrics(result.records, duration_s, sla_ms, len(result.schedule),
                                        frames_dropped=len(result.dropped))
            results.append(Result(name, metrics))
        except Exception as exc:
            results.append(Result(name, None, f"{type(exc).__name__}: {exc}"[:120]))
        finally:
            server.stop()
    return results


def table(results: list[Result]) -> str:
    lines = [f"{'handler':<7} {'offered':>8} {'achieved':>9} {'p50 ms':>8} {'p99 ms':>8} {'dropped':>8}  answers"]
    for r in results:
        if r.metrics is None:
            lines.append(f"{r.handler:<7} FAILED  {r.error}")
            continue
        m = r.metrics
        answers = " ".join(f"{k}:{v}" for k, v in m.responses.items())
        lines.append(f"{r.handler:<7} {m.offered_fps:>8.1f} {m.achieved_fps:>9.1f} {m.latency_ms.p50:>8.0f} "
                     f"{m.latency_ms.p99:>8.0f} {m.frames_dropped:>8}  {answers}")
    return "\n".join(lines)
