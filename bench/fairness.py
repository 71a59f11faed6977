"""Fairness under a flooding camera, and what sequence batching does to throughput (not CI).

    python -m bench.fairness                     # both lanes: 1 camera at 10x + 7 at nominal rate
    python -m bench.fairness capacity            # stream lane vs batched lane, 1..N cameras flat out

`fairness`: camera 0 sends `--flood` times the nominal `--fps`, cameras 1..7 the nominal rate, for
`--duration` seconds, first over HTTP to each HTTP lane (`frame_quality`, `frame_quality_realtime`),
then on one gRPC stream per camera to the stream lane (`frame_quality_stream`), all in one
TorchServe started with the shipped config.properties and archives. Per camera: frames sent,
answered 200, rejected (any other answer or none), p50/p99 latency, and the share answered 200
within `--sla-ms`; then the well-behaved cameras' worst share per lane.

`capacity`: N cameras each sending as fast as the schedule allows (`--fps` each, far above what
the machine serves) to the batched HTTP lane and to the stream lane; frames answered 200 per
second and the mean batch (frames per batch, from the handler's log), for N in `--cameras`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from loadgen.frames import Format, FrameSource
from loadgen.metrics import OK, Record, calculate_metrics
from loadgen.runner import Run, Target, run
from loadgen.schedule import Plan, Resolution, StreamRate
from loadgen.transport import Door
from tskeys import Key

HTTP_LANES = ("frame_quality", "frame_quality_realtime")
STREAM_LANE = "frame_quality_stream"
SD = Resolution(640, 360)


@dataclass(frozen=True, slots=True)
class CameraRow:
    """One camera's outcome in one lane."""

    lane: str
    camera: int
    fps: float
    sent: int
    ok: int
    rejected: int
    p50_ms: float
    p99_ms: float
    ok_within_sla: float  # share of frames sent answered 200 within the SLA
    errors: dict[str, int]  # what the rejected frames got (error type, or the status)

    @classmethod
    def of(cls, lane: str, camera: int, fps: float, records: list[Record], sla_ms: float) -> CameraRow:
        ok = [r for r in records if r.status == OK]
        answered = [r.latency_ms for r in records if r.status is not None]
        p50, p99 = (float(v) for v in np.percentile(answered, (50, 99))) if answered else (0.0, 0.0)
        within = sum(1 for r in ok if r.latency_ms <= sla_ms)
        errors: dict[str, int] = {}
        for r in records:
            if r.status != OK:
                name = (r.error or str(r.status))[:40]
                errors[name] = errors.get(name, 0) + 1
        return cls(lane, camera, fps, len(records), len(ok), len(records) - len(ok), p50, p99,
                   within / len(records) if records else 0.0, errors)


def _server(workdir: Path):
    from tests.e2e.server import TorchServe, build_archives

    store = workdir / "store"
    build_archives(store)
    return TorchServe(workdir / "ts", store).start(timeout_s=300)


def _drive(server, lane: str, plan: Plan, source: FrameSource, timeout_s: float) -> Run:
    protocol = Door.GRPC_STREAM if lane == STREAM_LANE else Door.HTTP
    grpc_address = f"127.0.0.1:{server.properties.get('grpc_inference_port', '7070')}"
    target = Target(server.inference_url, lane, None, timeout_s, protocol=protocol, grpc_address=grpc_address,
                    key=Key(server.workdir / "key_file.json"))
    # Frames more than a timeout behind their schedule are dropped unsent (a camera's full uplink).
    return run(plan, target, source, concurrency=256, max_lag_s=timeout_s)


def fairness(workdir: Path, cameras: int = 8, fps: float = 10.0, flood: float = 10.0, duration_s: float = 30.0,
             resolution: Resolution = SD, sla_ms: float = 1000.0,
             lanes: tuple[str, ...] = (*HTTP_LANES, STREAM_LANE), warmup_s: float = 5.0) -> list[CameraRow]:
    """Every lane under one flooding camera; one row per camera and lane."""
    plan = Plan(streams=cameras, fps=fps, duration_s=duration_s, resolutions=(resolution,),
                stream_rates=(StreamRate(0, fps * flood),))
    source = FrameSource(Format.JPEG, distinct=8)
    server = _server(workdir)
    rows = []
    try:
        for lane in lanes:
            # A fresh worker's first batches are slow (TorchScript profiling): warm each lane up.
            warmup = Plan(streams=cameras, fps=fps, duration_s=warmup_s, resolutions=(resolution,))
            _drive(server, lane, warmup, source, timeout_s=30.0)
            result = _drive(server, lane, plan, source, timeout_s=max(30.0, 3 * sla_ms / 1000))
            dropped = {(a.stream, a.frame_id) for a in result.dropped}
            for camera in range(cameras):
                records = [r for r in result.records if r.stream == camera]
                # A frame dropped unsent counts as sent and not answered (no status).
                records += [Record(camera, f, 1, str(resolution), 0.0, 0.0, 0.0, None, "Dropped")
                            for s, f in dropped if s == camera]
                rows.append(CameraRow.of(lane, camera, fps * (flood if camera == 0 else 1), records, sla_ms))
    finally:
        server.stop()
    return rows


def fairness_table(rows: list[CameraRow], sla_ms: float) -> str:
    lines = [(f"{'lane':<24}{'camera':>7}{'fps':>7}{'sent':>7}{'200':>7}{'rejected':>9}{'p50 ms':>9}"
              f"{'p99 ms':>9}{f'200<={sla_ms:g}ms':>13}")]
    for r in rows:
        lines.append(f"{r.lane:<24}{r.camera:>7}{r.fps:>7g}{r.sent:>7}{r.ok:>7}{r.rejected:>9}{r.p50_ms:>9.0f}"
                     f"{r.p99_ms:>9.0f}{r.ok_within_sla:>12.1%}")
    lines.append("")
    for lane in dict.fromkeys(r.lane for r in rows):
        behaved = [r for r in rows if r.lane == lane and r.camera != 0]
        flooder = next(r for r in rows if r.lane == lane and r.camera == 0)
        worst = min(r.ok_within_sla for r in behaved)
        errors: dict[str, int] = {}
        for r in rows:
            if r.lane == lane:
                for name, n in r.errors.items():
                    errors[name] = errors.get(name, 0) + n
        lines.append(f"{lane}: well-behaved cameras' worst share answered 200 within the SLA {worst:.1%} "
                     f"({'meets' if worst >= 0.99 else 'misses'} 99%); the flooder got {flooder.ok} of {flooder.sent}; "
                     f"rejections: {errors or 'none'}")
    return "\n".join(lines)


def capacity(workdir: Path, cameras: tuple[int, ...] = (1, 2, 4, 8, 16), fps: float = 60.0,
             duration_s: float = 10.0, resolution: Resolution = SD) -> list[dict]:
    """Frames/s answered 200 and mean frames per batch, per lane, for each number of cameras."""
    server = _server(workdir)
    source = FrameSource(Format.JPEG, distinct=8)
    rows = []
    try:
        for lane in ("frame_quality", STREAM_LANE):
            _drive(server, lane, Plan(streams=2, fps=5, duration_s=5, resolutions=(resolution,)), source, 30.0)
            for n in cameras:
                before = _batches(server, lane)
                plan = Plan(streams=n, fps=fps, duration_s=duration_s, resolutions=(resolution,))
                result = _drive(server, lane, plan, source, timeout_s=30.0)
                metrics = calculate_metrics(result.records, duration_s, 1e9, len(result.schedule),
                                            frames_dropped=len(result.dropped))
                after = _batches(server, lane)
                batches = after[0] - before[0]
                rows.append({"lane": lane, "cameras": n, "offered_fps": metrics.offered_fps,
                             "ok_fps": metrics.achieved_fps, "p50_ms": metrics.latency_ms.p50,
                             "mean_batch": (after[1] - before[1]) / batches if batches else 0.0})
    finally:
        server.stop()
    return rows


def _batches(server, lane: str) -> tuple[int, int]:
    """(batches, frames) the lane's handler logged so far."""
    frames = server.batch_frames(lane)
    return len(frames), sum(frames)


def capacity_table(rows: list[dict]) -> str:
    lines = [f"{'lane':<24}{'cameras':>8}{'offered fps':>12}{'200/s':>9}{'p50 ms':>9}{'frames/batch':>13}"]
    lines += [f"{r['lane']:<24}{r['cameras']:>8}{r['offered_fps']:>12.0f}{r['ok_fps']:>9.1f}{r['p50_ms']:>9.0f}"
              f"{r['mean_batch']:>13.2f}" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", nargs="?", choices=("fairness", "capacity"), default="fairness")
    p.add_argument("--cameras", type=int, nargs="+", help="fairness: one number (default 8); capacity: a list")
    p.add_argument("--fps", type=float, help="per camera (fairness default 10, capacity default 60)")
    p.add_argument("--flood", type=float, default=10.0, help="camera 0 sends this times --fps (default 10)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds per lane (default 30)")
    p.add_argument("--resolution", type=Resolution.parse, default=Resolution(640, 360))
    p.add_argument("--sla-ms", type=float, default=1000.0, help="latency budget (default 1000)")
    p.add_argument("--lanes", nargs="+", default=[*HTTP_LANES, STREAM_LANE])
    p.add_argument("--json", type=Path, help="write the rows here")
    args = p.parse_args(argv)
    if "VIDEO_TS_PORT_OFFSET" not in os.environ:
        print("bench.fairness: ports 8080-8082/7070 (set VIDEO_TS_PORT_OFFSET to move them)", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as tmp:
        if args.mode == "fairness":
            rows = fairness(Path(tmp), (args.cameras or [8])[0], args.fps or 10.0, args.flood, args.duration,
                            args.resolution, args.sla_ms, tuple(args.lanes))
            print(fairness_table(rows, args.sla_ms))
            data = [asdict(r) for r in rows]
        else:
            rows = capacity(Path(tmp), tuple(args.cameras or (1, 2, 4, 8, 16)), args.fps or 60.0,
                            args.duration, args.resolution)
            print(capacity_table(rows))
            data = rows
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
