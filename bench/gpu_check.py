"""The GPU check: one call on a machine with torch and CUDA (no TorchServe, no Java needed).

    python -m bench.gpu_check                # on the GPU machine; JSON to $OUT/gpu_check.json if set
    python -m bench.gpu_check --dry-run      # tiny, on CPU: proves the script runs

It drives the core (`handler.pipeline.Pipeline`, which imports nothing from `ts`) and the stock
style (`bench.stock`) on the same frames and model, and checks: outputs agree; frames/s of each on
32-frame batches of 720p JPEG, 720p .npy and mixed sizes (the stock style fails on mixed); peak
device memory per batch; a 1080p burst under a small memory budget answers every frame 200 and
stays near the budget; with the CUDA allocator capped, real out-of-memory errors split chunks
(every frame still 200) and a frame that never fits gets 507 alone; and everything between the
upload and the outputs' one transfer to the host (normalisation, the forward, gathering the
outputs: `ChunkRunner._on_device`) runs under `torch.cuda.set_sync_debug_mode("error")`, so a host
sync there (a per-frame `int(sizes[i, 0])`, `.item()`, `.cpu()`) fails the check and is reported.
On the CPU (`--dry-run`) that mode does not exist: the same code path runs and the report says
"not applicable". Exit status 0 when every check passes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from bench import inprocess, stock
from loadgen.schedule import Resolution


def _peak_reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device))


def _time(fn, device: torch.device, iterations: int) -> tuple[float, object]:
    out = fn()  # warm-up: kernels, caches, pinned staging
    elapsed = 0.0
    for _ in range(iterations):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed += time.perf_counter() - start
    return elapsed / iterations, out


def check(device: torch.device, frames: int, hd: Resolution, iterations: int) -> dict:
    """Runs every check; returns the results (with `ok` per check and overall)."""
    from handler.config import HandlerConfig
    from handler.loading import load_model
    from handler.models.build import build_all
    from handler.pipeline import Pipeline

    report: dict = {"torch": torch.__version__, "device": str(device),
                    "cuda": torch.version.cuda, "checks": {}, "rows": []}
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)
    with tempfile.TemporaryDirectory() as tmp:
        build_all(Path(tmp))
        model = load_model(Path(tmp) / "frame_quality.pt", device)
    raw = yaml.safe_load((inprocess.ROOT / "handler" / "models" / "frame_quality.yaml").read_text())["handler"]
    config = HandlerConfig.from_mapping(raw)
    pipeline = Pipeline(model, config, device)
    scale = (hd.width / 1280, hd.height / 720)
    mixed = tuple(Resolution(max(8, round(r.width * scale[0])), max(8, round(r.height * scale[1])))
                  for r in inprocess.MIXED)

    for load in inprocess.workloads(frames, hd, mixed):
        requests = _requests(load.requests)
        bodies = [body for body, _ in load.requests]
        types = [ct for _, ct in load.requests]
        row: dict = {"workload": load.name}
        _peak_reset(device)
        seconds, (outcomes, _) = _time(lambda: pipeline.run(requests), device, iterations)
        row["ours_fps"] = len(requests) / seconds
        row["ours_peak_mib"] = _peak(device) / 2**20
        row["ours_statuses"] = _statuses(outcomes)
        try:
            _peak_reset(device)
            seconds, stock_bodies = _time(lambda: stock.handle(bodies, types, model, device), device, iterations)
            row["stock_fps"] = len(requests) / seconds
            row["stock_peak_mib"] = _peak(device) / 2**20
            ours = [outcome[0].outputs for outcome in outcomes]
            theirs = [json.loads(b) for b in stock_bodies]
            worst = max(abs(o[k] - t[k]) / max(abs(t[k]), 1.0) for o, t in zip(ours, theirs) for k in t)
            row["max_rel_diff"] = worst
            report["checks"][f"{load.name}: outputs agree with the stock style"] = worst < 1e-3
        except RuntimeError as exc:
            row["stock_error"] = str(exc).splitlines()[0][:100]
            report["checks"]["stock style fails on mixed sizes"] = load.kind == "mixed"
        report["checks"][f"{load.name}: every frame 200"] = row["ours_statuses"] == [200]
        report["rows"].append(row)

    # A burst of 1080p-scaled frames with a memory budget of ~4 frames per forward.
    big = Resolution(max(8, round(1920 * scale[0])), max(8, round(1080 * scale[1])))
    budget = 4 * big.width * big.height * config.bytes_per_pixel
    budgeted = Pipeline(model, HandlerConfig.from_mapping({**raw, "memory_budget_bytes": budget}), device)
    burst = _requests(inprocess.workloads(frames, big, (big,))[1].requests)
    _peak_reset(device)
    outcomes, stats = budgeted.run(burst)
    peak = _peak(device)
    report["budget"] = {"budget_mib": budget / 2**20, "peak_mib": peak / 2**20, "chunks": stats.chunks,
                        "oom_splits": stats.oom_splits}
    report["checks"]["budgeted burst: every frame 200"] = _statuses(outcomes) == [200]
    report["checks"]["budgeted burst: chunks of at most 4 frames"] = stats.chunks >= -(-frames // 4)
    if device.type == "cuda":
        report["checks"]["budgeted burst: peak memory within 2x the budget"] = peak <= 2 * budget
    _sync_free(device, Pipeline(model, config, device), inprocess.workloads(frames, hd, mixed), report)
    if device.type == "cuda":
        _real_oom(device, model, config, burst, report)
        _nvdec(report)
    report["ok"] = all(report["checks"].values())
    return report


def _requests(bodies: list) -> list:
    """`(body, content_type)` pairs as the native door's requests."""
    from handler.clip import Request
    from handler.doors.native import Body

    return [Request(Body(body, ct)) for body, ct in bodies]


def _statuses(outcomes: list) -> list[int]:
    """The statuses a door would answer the outcomes with."""
    return sorted({200 if isinstance(outcome, list) else outcome.status for outcome in outcomes})


def _sync_free(device: torch.device, pipeline, loads: list, report: dict) -> None:
    """Runs each workload with `set_sync_debug_mode("error")` around `ChunkRunner._on_device`
    (upload, normalisation, the forward, gathering outputs): any host sync in there raises."""
    chunks = pipeline._chunks
    original = chunks._on_device
    errors: list[str] = []
    cuda = device.type == "cuda"

    def guarded(pixels, batch):
        if cuda:
            torch.cuda.set_sync_debug_mode("error")
        try:
            return original(pixels, batch)
        except RuntimeError as exc:
            errors.append(str(exc).splitlines()[0][:200])
            raise
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")

    chunks._on_device = guarded
    statuses: set[int] = set()
    for load in loads:
        outcomes, _ = pipeline.run(_requests(load.requests))
        statuses |= set(_statuses(outcomes))
    report["sync_debug"] = {"mode": "error" if cuda else "not applicable on cpu (no CUDA)",
                            "statuses": sorted(statuses), "errors": errors[:3]}
    name = "no host sync between upload and output transfer (sync debug mode error)"
    report["checks"][name if cuda else "sync-debug path runs (CPU: mode not applicable)"] = (
        statuses == {200} and not errors)


def _real_oom(device: torch.device, model, config, burst: list, report: dict) -> None:
    """Real `torch.cuda.OutOfMemoryError`s: the allocator is capped just above what a few frames
    need, so a full chunk fails, is halved and retried; then capped below one frame, so each frame
    gets 507 alone. The cap is lifted afterwards."""
    from handler.pipeline import Pipeline

    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(device).total_memory
    base = torch.cuda.memory_reserved(device)
    # A 1080p frame in a chunk: uint8 upload, float32 input, luma and temporaries, about 40 MB;
    # 100 MB is a safe over-estimate, so 3 of them fit in "split" and none in "alone".
    per_frame = 12 * 1088 * 1920 * 4
    results = {}
    try:
        for name, cap in (("split", base + 3 * per_frame), ("alone", base + per_frame // 8)):
            torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), device)
            outcomes, stats = Pipeline(model, config, device).run(burst)
            results[name] = {"cap_mib": cap / 2**20, "statuses": _statuses(outcomes),
                             "oom_splits": stats.oom_splits, "chunks": stats.chunks}
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        torch.cuda.empty_cache()
    report["real_oom"] = results
    report["checks"]["real OOM: chunks split and every frame 200"] = (
        results["split"]["statuses"] == [200] and results["split"]["oom_splits"] > 0)
    report["checks"]["real OOM: a frame that never fits gets 507 alone"] = results["alone"]["statuses"] == [507]


def _nvdec(report: dict) -> None:
    """H.264 segments on the GPU's decoder (NVDEC) against the CPU decoder (bench.video)."""
    try:
        from bench.video import gpu_decode_check

        report["video_nvdec"] = gpu_decode_check()
        report["checks"]["video: NVDEC decodes a segment to the CPU decoder's frames"] = report["video_nvdec"]["ok"]
    except Exception as exc:  # a missing NVDEC must not hide the other checks' results
        report["video_nvdec"] = {"error": repr(exc)[:300]}
        report["checks"]["video: NVDEC decodes a segment to the CPU decoder's frames"] = False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="tiny frames on the CPU: checks the script itself")
    p.add_argument("--frames", type=int, default=32)
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--json", type=Path, help="default: $OUT/gpu_check.json when $OUT is set")
    args = p.parse_args(argv)
    if args.dry_run:
        device, frames, hd, iterations = torch.device("cpu"), min(args.frames, 8), Resolution(64, 36), 1
    else:
        if not torch.cuda.is_available():
            print("no CUDA device: run with --dry-run to check the script on a CPU", file=sys.stderr)
            return 2
        device, frames, hd, iterations = torch.device("cuda"), args.frames, Resolution(1280, 720), args.iterations
    report = check(device, frames, hd, iterations)
    for row in report["rows"]:
        stock_part = (f"stock {row['stock_fps']:8.1f} fps {row['stock_peak_mib']:8.1f} MiB"
                      if "stock_fps" in row else f"stock FAILS ({row['stock_error'][:50]})")
        print(f"{row['workload']:<10} ours {row['ours_fps']:8.1f} fps {row['ours_peak_mib']:8.1f} MiB   {stock_part}")
    print(f"budgeted burst: {report['budget']}")
    print(f"sync debug around the forward: {report['sync_debug']}")
    if "video_nvdec" in report:
        print(f"video NVDEC: {report['video_nvdec']}")
    for name, ok in report["checks"].items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    out = args.json or (Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else None)
    if out is not None:
        out.write_text(json.dumps(report, indent=1, default=str))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
