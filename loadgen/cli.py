"""`video-loadgen`: simulated cameras posting frames to TorchServe, open loop, with an SLA verdict.

Exit status: 0 when every request got 200 and p99 latency met --sla-ms, 1 otherwise, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loadgen import report
from loadgen.frames import IMAGES, Format, FrameSource
from loadgen.metrics import Metrics, calculate_metrics
from loadgen.runner import Target, run
from loadgen.schedule import Plan, Resolution, StreamRate, Switch
from loadgen.transport import Door
from tskeys.keyfile import Key, KeyFileError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="video-loadgen", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8080", help="inference address (default %(default)s)")
    p.add_argument("--model", default="frame_quality", help="model name (default %(default)s)")
    p.add_argument("--realtime-model", help="low-latency lane's model, e.g. frame_quality_realtime")
    p.add_argument("--realtime-streams", type=int, default=0,
                   help="the first N cameras send to --realtime-model (default %(default)s)")
    p.add_argument("--streams", type=int, default=4, help="cameras (default %(default)s)")
    p.add_argument("--fps", type=float, default=30.0, help="frames/s per camera (default %(default)s)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of sending (default %(default)s)")
    p.add_argument("--burst-fps", type=float, help="frames/s per camera during the burst (default: no burst)")
    p.add_argument("--burst-start", type=float, default=0.0, help="burst start, seconds (default %(default)s)")
    p.add_argument("--burst-duration", type=float, default=5.0, help="burst length, seconds (default %(default)s)")
    p.add_argument("--resolution", action="append", type=Resolution.parse, metavar="WxH",
                   help="frame size; repeat to mix (camera i gets the i-th, cycling; default 1280x720)")
    p.add_argument("--switch", action="append", type=Switch.parse, default=[], metavar="SECONDS:WxH",
                   help="from SECONDS on, every camera sends WxH (repeatable)")
    p.add_argument("--stream-fps", action="append", type=StreamRate.parse, default=[], metavar="STREAM:FPS",
                   help="camera STREAM sends FPS frames/s for the whole run, e.g. 0:300 (repeatable)")
    p.add_argument("--protocol", type=Door, default=Door.HTTP, metavar="{http,grpc,oip,grpc-stream}",
                   help="HTTP /predictions, gRPC Predictions, the Open Inference Protocol, or gRPC "
                        "StreamPredictions2 with one persistent stream per camera (default http)")
    p.add_argument("--grpc-address", default="127.0.0.1:7070",
                   help="gRPC inference address, host:port (default %(default)s)")
    p.add_argument("--format", type=Format, default=Format.JPEG, metavar="{jpeg,png,npy,raw,h264,mp4}",
                   help="wire format; h264/mp4 send H.264 segments (default jpeg)")
    p.add_argument("--clip", type=int, default=1, help="frames per request; >1 needs npy or raw (default 1)")
    p.add_argument("--segment-frames", type=int, default=30,
                   help="frames per H.264 segment with --format h264|mp4 (default %(default)s)")
    token = p.add_mutually_exclusive_group()
    token.add_argument("--token", help="inference key")
    token.add_argument("--token-file", type=Path,
                       help="TorchServe's key_file.json (inference key; re-read when refused, then one retry)")
    p.add_argument("--sla-ms", type=float, default=200.0, help="p99 latency budget, ms (default %(default)s)")
    p.add_argument("--report", type=Path, help="write the JSON report here")
    p.add_argument("--plot", type=Path, help="write the latency-over-time PNG here")
    p.add_argument("--concurrency", type=int, default=128, help="most requests in flight (default %(default)s)")
    p.add_argument("--max-lag-ms", type=float,
                   help="drop (do not send) a frame that cannot leave within this of its time (default: send all)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default %(default)s)")
    p.add_argument("--distinct", type=int, default=8,
                   help="distinct frames per camera and size before they repeat (default %(default)s)")
    p.add_argument("--images", type=Path, default=IMAGES, help="photographs frames are made from")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def plan_from(args: argparse.Namespace) -> Plan:
    return Plan(streams=args.streams, fps=args.fps, duration_s=args.duration,
                resolutions=tuple(args.resolution or [Resolution(1280, 720)]),
                burst_fps=args.burst_fps, burst_start_s=args.burst_start,
                burst_duration_s=args.burst_duration, switches=tuple(args.switch),
                clip=args.segment_frames if args.format.is_video else args.clip,
                stream_rates=tuple(args.stream_fps))


def execute(args: argparse.Namespace, progress: bool = True) -> tuple[Metrics, dict]:
    """Runs the load described by parsed arguments; writes the report and plot when asked."""
    plan = plan_from(args)
    if args.realtime_streams and not args.realtime_model:
        raise ValueError("--realtime-streams needs --realtime-model")
    if args.realtime_streams > plan.streams:
        raise ValueError(f"--realtime-streams {args.realtime_streams} exceeds --streams {plan.streams}")
    try:
        key = Key(args.token_file) if args.token_file else Key(token=args.token)
    except KeyFileError as exc:
        raise ValueError(str(exc)) from None
    target = Target(args.url, args.model, args.token, args.timeout, args.realtime_model, args.realtime_streams,
                    args.protocol, args.grpc_address, key)
    source = FrameSource(args.format, plan.clip, args.distinct, args.images)
    bar = None
    if progress:
        from tqdm import tqdm

        from loadgen.schedule import arrivals
        bar = tqdm(total=len(arrivals(plan)), unit="req", desc="answers", file=sys.stderr,
                   dynamic_ncols=True)
    max_lag = None if args.max_lag_ms is None else args.max_lag_ms / 1000.0
    result = run(plan, target, source, args.concurrency,
                 on_record=(lambda r: bar.update(1)) if bar is not None else None, max_lag_s=max_lag)
    if bar is not None:
        bar.close()
    records = result.records
    metrics = calculate_metrics(records, plan.duration_s, args.sla_ms, len(result.schedule) * plan.clip,
                                frames_dropped=len(result.dropped) * plan.clip)
    config = {"url": args.url, "model": args.model, "realtime_model": args.realtime_model,
              "realtime_streams": args.realtime_streams, "streams": plan.streams, "fps": plan.fps,
              "duration_s": plan.duration_s, "burst_fps": plan.burst_fps,
              "burst_start_s": plan.burst_start_s, "burst_duration_s": plan.burst_duration_s,
              "resolutions": [str(r) for r in plan.resolutions],
              "switches": [f"{s.at_s:g}:{s.resolution}" for s in plan.switches],
              "stream_fps": [f"{r.stream}:{r.fps:g}" for r in plan.stream_rates],
              "protocol": args.protocol.value, "format": args.format.value, "clip": plan.clip, "concurrency": args.concurrency,
              "max_lag_ms": args.max_lag_ms}
    data = report.to_json(metrics, records, config, plan.burst_window)
    lanes = lane_metrics(records, result.schedule, result.dropped, target, plan, args.sla_ms)
    if len(lanes) > 1:
        data["lanes"] = {name: report.to_json(m, [], {}, None) | {"records": None}
                         for name, m in lanes.items()}
    if args.report:
        report.write_json(args.report, data)
    if args.plot:
        report.plot(args.plot, records, metrics, plan.burst_window)
    return metrics, data


def lane_metrics(records, schedule, dropped, target: Target, plan: Plan, sla_ms: float) -> dict[str, Metrics]:
    """Metrics per model (lane): the batched lane and, when used, the low-latency lane."""
    lanes: dict[str, Metrics] = {}
    for model in dict.fromkeys(target.model_for(s) for s in range(plan.streams)):
        mine = [r for r in records if target.model_for(r.stream) == model]
        offered = sum(1 for a in schedule if target.model_for(a.stream) == model) * plan.clip
        lost = sum(1 for a in dropped if target.model_for(a.stream) == model) * plan.clip
        lanes[model] = calculate_metrics(mine, plan.duration_s, sla_ms, offered, frames_dropped=lost)
    return lanes


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        metrics, data = execute(args, progress=not args.no_progress)
    except ValueError as exc:
        p.error(str(exc))
    print(report.table(metrics))
    for name, lane in data.get("lanes", {}).items():
        print(f"\nlane {name}: {lane['requests_sent']} requests, responses {lane['responses']}, "
              f"p50 {lane['latency_ms']['p50']:.1f} ms, p99 {lane['latency_ms']['p99']:.1f} ms, "
              f"achieved {lane['achieved_fps']:.1f} fps")
    return 0 if metrics.sla_met else 1


if __name__ == "__main__":
    sys.exit(main())
