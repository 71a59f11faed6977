"""`video-autotune sweep`: measure a grid of batch settings with video-loadgen, fit the batch
latency model, recommend the setting with most headroom."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.fit import LatencyFit, fit_batch_latency
from autotune.management import Management
from autotune.prom import batch_samples, traffic
from autotune.recommend import Cell, Scored, recommend, score
from autotune.scrape import Poller
from autotune.switch import Setting, apply, setting_of
from loadgen.frames import IMAGES, Format, FrameSource
from loadgen.metrics import calculate_metrics
from loadgen.runner import Target, run
from loadgen.schedule import Plan, Resolution
from tskeys import Key, is_invalid_key

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Deployment:
    """Where TorchServe is and what the tuner may touch."""

    inference_url: str
    management_url: str
    metrics_url: str
    key_file: Path | None
    model_store: Path
    model: str = "frame_quality"
    workers: int = 1


@dataclass(frozen=True, slots=True)
class Load:
    """The traffic each grid point is measured with (video-loadgen's plan, at a total rate)."""

    fps: float
    streams: int = 4
    duration_s: float = 10.0
    warmup_s: float = 2.0
    resolutions: tuple[Resolution, ...] = (Resolution(1280, 720),)
    format: Format = Format.JPEG
    concurrency: int = 128
    timeout_s: float = 30.0

    def plan(self, duration_s: float) -> Plan:
        return Plan(streams=self.streams, fps=self.fps / self.streams, duration_s=duration_s,
                    resolutions=self.resolutions)


@dataclass(frozen=True, slots=True)
class SweepResult:
    cells: list[Cell]
    samples: list[tuple[float, float]]
    fit: LatencyFit | None
    scored: list[Scored]
    best: Scored | None
    fps: float
    sla_ms: float
    restored: Setting | None


def measure(deployment: Deployment, load: Load, sla_ms: float, setting: Setting,
            scrape_interval_s: float = 0.05) -> tuple[Cell, list[tuple[float, float]]]:
    """Runs the load against the current default and returns the cell and its single-batch samples."""
    target = Target(deployment.inference_url, deployment.model, None, load.timeout_s, key=Key(deployment.key_file))
    source = FrameSource(load.format, 1, 8, IMAGES)
    if load.warmup_s > 0:  # a fresh worker's first batches (TorchScript profiling) are slow
        run(load.plan(load.warmup_s), target, source, load.concurrency)
    plan = load.plan(load.duration_s)
    poller = Poller(deployment.metrics_url, deployment.model, scrape_interval_s).start()
    try:
        result = run(plan, target, source, load.concurrency)
    finally:
        snapshots = poller.stop()
    metrics = calculate_metrics(result.records, plan.duration_s, sla_ms, len(result.schedule) * plan.clip,
                                frames_dropped=len(result.dropped) * plan.clip)
    seen = traffic(snapshots[0], snapshots[-1]) if len(snapshots) >= 2 else None
    batches = int(snapshots[-1].batches_total - snapshots[0].batches_total) if len(snapshots) >= 2 else 0
    cell = Cell(setting.batch_size, setting.max_batch_delay_ms, metrics.offered_fps, metrics.achieved_fps,
                metrics.latency_ms.p50, metrics.latency_ms.p99, metrics.all_ok,
                seen.mean_batch if seen else 0.0, batches)
    return cell, batch_samples(snapshots)


def probe(deployment: Deployment, load: Load, sizes: Sequence[int], repeats: int = 3,
          pause_s: float = 0.3) -> list[tuple[float, float]]:
    """Single-batch samples of known sizes: `n` requests released together, for each n of `sizes`.

    Steady traffic below capacity mostly makes batches of one frame, which leaves the slope of
    `a * frames + b` unmeasured; these bursts fill batches of each size under the current setting
    (batchSize >= max(sizes), maxBatchDelay long enough to gather them).
    """
    from concurrent.futures import ThreadPoolExecutor

    import requests

    key = Key(deployment.key_file)
    source = FrameSource(load.format, 1, 8, IMAGES)
    resolution = load.resolutions[0]
    source.prepare(0, resolution)
    url = f"{deployment.inference_url.rstrip('/')}/predictions/{deployment.model}"
    poller = Poller(deployment.metrics_url, deployment.model, 0.02).start()
    try:
        with ThreadPoolExecutor(max(sizes)) as pool:
            for _ in range(repeats):
                for n in sizes:
                    barrier = threading.Barrier(n)

                    def send(i: int, barrier: threading.Barrier = barrier) -> int:
                        payload = source.payload(0, i, resolution)
                        headers = {"Content-Type": payload.content_type, **payload.headers}
                        barrier.wait(timeout=30)
                        return key.call(
                            lambda value: requests.post(url, data=payload.body, timeout=load.timeout_s,
                                                        headers={**headers, **key.headers(value)}),
                            lambda a: is_invalid_key(a.status_code, a.content)).status_code

                    list(pool.map(send, range(n)))
                    time.sleep(pause_s)  # let the scrape see this batch alone
    finally:
        snapshots = poller.stop()
    return batch_samples(snapshots)


def sweep(deployment: Deployment, load: Load, sla_ms: float, batch_sizes: Sequence[int],
          delays_ms: Sequence[int], on_cell: Callable[[Cell], None] | None = None,
          restore: bool = True, probe_repeats: int = 3) -> SweepResult:
    """Measures every (batch size, delay), fits `latency = a * frames + b`, recommends.

    Each setting is applied the way `watch` applies one (a new version, made default, the old one
    drained and unregistered); with `restore` the setting found at the start is put back. The fit
    takes the single batches seen under load and, under the largest batch size and delay, bursts
    of 1 .. that size (`probe`), `probe_repeats` times each (0: no bursts).
    """
    management = Management(deployment.management_url, deployment.key_file)
    original = setting_of(management.default(deployment.model))
    cells: list[Cell] = []
    samples: list[tuple[float, float]] = []
    grid = list(itertools.product(batch_sizes, delays_ms))
    grid.sort(key=lambda bd: bd == (max(batch_sizes), max(delays_ms)))  # the probe's setting last
    try:
        for b, d in grid:
            setting = Setting(b, d)
            apply(management, deployment.inference_url, deployment.model, deployment.model_store, setting,
                  workers=deployment.workers)
            cell, got = measure(deployment, load, sla_ms, setting)
            logger.info("%s: %s", setting, cell)
            cells.append(cell)
            samples.extend(got)
            if on_cell is not None:
                on_cell(cell)
        if probe_repeats > 0 and max(batch_sizes) > 1:
            sizes = sorted({1, 2, *(n for n in (4, 8, 16, 32, 64) if n < max(batch_sizes)), max(batch_sizes)})
            samples.extend(probe(deployment, load, sizes, probe_repeats))
    finally:
        if restore:
            apply(management, deployment.inference_url, deployment.model, deployment.model_store, original,
                  workers=deployment.workers)
    try:
        fit = fit_batch_latency([f for f, _ in samples], [ms for _, ms in samples])
    except ValueError as exc:
        logger.warning("no latency fit: %s", exc)
        fit = None
    usable = fit if fit is not None and fit.reliable else None
    scored = [score(c, load.fps, sla_ms, usable) for c in cells]
    return SweepResult(cells, samples, fit, scored, recommend(cells, load.fps, sla_ms, usable), load.fps, sla_ms,
                       original if restore else None)


def table(result: SweepResult) -> str:
    """The grid for people, best row marked, then the fit and the verdict."""
    lines = [f"{'batch':>5} {'delay':>5}  {'offered':>7} {'achieved':>8}  {'p50 ms':>8} {'p99 ms':>8}  "
             f"{'mean batch':>10}  {'all 200':>7}  {'headroom':>8}"]
    for s in result.scored:
        c = s.cell
        mark = " <- recommended" if result.best is not None and s.cell == result.best.cell else ""
        lines.append(f"{c.batch_size:>5} {c.max_batch_delay_ms:>5}  {c.offered_fps:>7.1f} {c.achieved_fps:>8.1f}  "
                     f"{c.p50_ms:>8.1f} {c.p99_ms:>8.1f}  {c.mean_batch:>10.2f}  {'yes' if c.all_ok else 'no':>7}  "
                     f"{s.headroom:>8.2f}{mark}")
    if result.fit is not None:
        f = result.fit
        lines.append(f"batch latency fit: {f.a_ms:.2f} ms/frame * frames + {f.b_ms:.2f} ms "
                     f"(R^2 {f.r2:.2f}, {f.batches} batches)"
                     + ("" if f.reliable else "; too noisy to score capacity with, latency headroom only"))
    if result.best is None:
        lines.append(f"NO SETTING met {result.fps:g} fps within p99 {result.sla_ms:g} ms")
    else:
        c = result.best.cell
        lines.append(f"RECOMMENDED: batchSize {c.batch_size}, maxBatchDelay {c.max_batch_delay_ms} ms "
                     f"(p99 {c.p99_ms:.1f} ms of {result.sla_ms:g} ms at {result.fps:g} fps)")
    return "\n".join(lines)


def config_lines(result: SweepResult, model: str, mar: str, version: str = "1.0") -> str:
    """What to paste: the model-config YAML keys (these win when present in the archive) and the
    config.properties `models=` entry."""
    if result.best is None:
        return ""
    c = result.best.cell
    return (f"# model-config YAML packaged in {mar} (archive.sh NAME MODEL CONFIG): these win\n"
            f"batchSize: {c.batch_size}\nmaxBatchDelay: {c.max_batch_delay_ms}\n\n"
            f"# config.properties\n"
            f'models={{"{model}": {{"{version}": {{"defaultVersion": true, "marName": "{mar}", '
            f'"minWorkers": 1, "maxWorkers": 1, "batchSize": {c.batch_size}, '
            f'"maxBatchDelay": {c.max_batch_delay_ms}, "responseTimeout": 120}}}}}}\n')


def to_json(result: SweepResult, load: Load, deployment: Deployment) -> dict[str, Any]:
    best = result.best
    return {
        "fps": result.fps, "sla_ms": result.sla_ms,
        "load": {"streams": load.streams, "duration_s": load.duration_s, "warmup_s": load.warmup_s,
                 "resolutions": [str(r) for r in load.resolutions], "format": load.format.value},
        "model": deployment.model,
        "cells": [{**dataclasses.asdict(s.cell), "meets": s.meets, "latency_headroom": s.latency_headroom,
                   "capacity_headroom": s.capacity_headroom, "headroom": s.headroom} for s in result.scored],
        "fit": dataclasses.asdict(result.fit) if result.fit else None,
        "batch_samples": [list(s) for s in result.samples],
        "recommended": None if best is None else {"batchSize": best.cell.batch_size,
                                                  "maxBatchDelay": best.cell.max_batch_delay_ms,
                                                  "p99_ms": best.cell.p99_ms, "headroom": best.headroom},
        "restored": None if result.restored is None else dataclasses.asdict(result.restored),
    }


def plot(path: Path, result: SweepResult) -> None:
    """Left: measured batches and the fitted line. Right: p99 per setting against the SLA."""
    import matplotlib  # heavy and optional until a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    if result.samples:
        left.scatter([f for f, _ in result.samples], [ms for _, ms in result.samples], s=8, alpha=0.5,
                     label="batches")
    if result.fit is not None:
        top = max([f for f, _ in result.samples] + [1])
        f = result.fit
        left.plot([0, top], [f.b_ms, f.batch_ms(top)], color="tab:red",
                  label=f"{f.a_ms:.2f} ms x frames + {f.b_ms:.1f} ms")
    left.set_xlabel("frames in batch")
    left.set_ylabel("batch time (ms, PredictionTime)")
    left.legend(fontsize=8)
    names = [f"{s.cell.batch_size}/{s.cell.max_batch_delay_ms}" for s in result.scored]
    colors = ["tab:green" if s.meets else "tab:red" for s in result.scored]
    right.bar(range(len(names)), [s.cell.p99_ms for s in result.scored], color=colors)
    right.axhline(result.sla_ms, color="black", linestyle="--", linewidth=1, label=f"SLA {result.sla_ms:g} ms")
    right.set_xticks(range(len(names)), names, rotation=45, fontsize=8)
    right.set_xlabel("batchSize / maxBatchDelay ms")
    right.set_ylabel(f"p99 latency (ms) at {result.fps:g} fps")
    right.set_yscale("log")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
