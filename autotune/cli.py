"""`video-autotune`: tune TorchServe's batchSize / maxBatchDelay for live video.

  sweep   measure a grid of settings with video-loadgen at a target rate, fit the batch latency
          model, recommend the setting that meets --fps within --sla-ms with the most headroom
  watch   the sidecar: follow the traffic on the metrics port and switch the batch size (a new
          model version, made default, the old one drained and unregistered; with --engine ray,
          the live replicas' batch settings, in place)

On TorchServe both need the model API on for that deployment (enable_model_api=true; see
docs/autotune.md) and write archives into its model store. `watch --engine ray` runs in the folder
`video-ray start` ran in (its video-ray.json). sweep exits 0 when a setting met the target, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from autotune import engines
from autotune import sweep as sweeping
from autotune.fit import LatencyFit
from autotune.management import ManagementError
from autotune.policy import LADDER
from autotune.watch import Policy, fit_from_report, watch
from loadgen.frames import Format
from loadgen.schedule import Resolution


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 1,4,16") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more integers of 0 or more")
    return values


def _deployment_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="http://127.0.0.1:8080", help="inference address (default %(default)s)")
    p.add_argument("--management-url", default="http://127.0.0.1:8081", help="(default %(default)s)")
    p.add_argument("--metrics-url", help="the metrics port (default http://127.0.0.1:8082; with --engine ray, "
                   "http://127.0.0.1:8092, comma-separated for a cluster's nodes)")
    p.add_argument("--key-file", type=Path, default=Path("key_file.json"),
                   help="TorchServe's key_file.json, re-read for every call (default %(default)s)")
    p.add_argument("--no-auth", action="store_true", help="token authorization is off")
    p.add_argument("--model-store", type=Path, default=Path("model_store"),
                   help="the deployment's model store; new archives are written there (default %(default)s)")
    p.add_argument("--model", default="frame_quality", help="model name (default %(default)s)")
    p.add_argument("--workers", type=int, default=1, help="workers per registered version (default %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true", help="log each step")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="video-autotune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("sweep", help="measure a grid, fit, recommend")
    _deployment_args(s)
    s.add_argument("--fps", type=float, required=True, help="target frames/s over all cameras")
    s.add_argument("--sla-ms", type=float, default=200.0, help="p99 latency budget (default %(default)s)")
    s.add_argument("--batch-sizes", type=_ints, default=[1, 4, 8, 16, 32], help="(default 1,4,8,16,32)")
    s.add_argument("--delays", type=_ints, default=[5, 20, 50], help="maxBatchDelay ms values (default 5,20,50)")
    s.add_argument("--streams", type=int, default=4, help="cameras sharing --fps (default %(default)s)")
    s.add_argument("--duration", type=float, default=10.0, help="measured seconds per setting (default %(default)s)")
    s.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds per setting (default %(default)s)")
    s.add_argument("--resolution", action="append", type=Resolution.parse, metavar="WxH",
                   help="frame size, repeat to mix (default 1280x720)")
    s.add_argument("--format", type=Format, choices=list(Format), default=Format.JPEG, help="(default jpeg)")
    s.add_argument("--concurrency", type=int, default=128, help="most requests in flight (default %(default)s)")
    s.add_argument("--report", type=Path, help="write the JSON report here")
    s.add_argument("--plot", type=Path, help="write the fit and p99-per-setting PNG here")
    s.add_argument("--config-out", type=Path, help="write the lines to paste here (also printed)")
    s.add_argument("--probe-repeats", type=int, default=3,
                   help="bursts of 1..max batch size for the fit, each size this often (default %(default)s)")
    s.add_argument("--no-restore", action="store_true", help="leave the last measured setting in place")

    w = sub.add_parser("watch", help="the sidecar: follow the traffic with the batch size")
    _deployment_args(w)
    w.add_argument("--engine", choices=("torchserve", "ray"), default="torchserve",
                   help="what serves the model (default %(default)s): ray = `video-ray start`'s application")
    w.add_argument("--ray-address", help="the Ray cluster (default: the one video-ray start deployed to, from "
                   "--ray-state; else 127.0.0.1:6390)")
    w.add_argument("--ray-state", type=Path, default=Path("video-ray.json"),
                   help="the args and tuning `video-ray start` left (default %(default)s)")
    w.add_argument("--interval", type=float, default=5.0, help="seconds between scrapes (default %(default)s)")
    w.add_argument("--hold", type=float, default=30.0,
                   help="seconds a new batch size must be wanted before it is applied (default %(default)s)")
    w.add_argument("--cooldown", type=float, default=60.0, help="least seconds between changes (default %(default)s)")
    w.add_argument("--margin", type=float, default=0.3, help="spare capacity to keep (default %(default)s)")
    w.add_argument("--ladder", type=_ints, default=list(LADDER), help="batch sizes to choose from (default 1,2,4,8,16,32)")
    w.add_argument("--delay", type=int, help="maxBatchDelay ms to register with (default: keep the current)")
    fit = w.add_mutually_exclusive_group()
    fit.add_argument("--fit-from", type=Path, help="a sweep --report JSON: use its latency fit")
    fit.add_argument("--fit", type=float, nargs=2, metavar=("A_MS", "B_MS"),
                     help="batch latency = A_MS * frames + B_MS")
    w.add_argument("--queue-high-ms", type=float, default=100.0,
                   help="mean queue wait that asks for a larger batch whatever the rate (default %(default)s)")
    w.add_argument("--drain", type=float, default=1.0,
                   help="seconds the old version's queue must stay empty before unregistering (default %(default)s)")
    w.add_argument("--duration", type=float, help="stop after this many seconds (default: until SIGTERM)")
    return p


def _deployment(args: argparse.Namespace) -> sweeping.Deployment:
    return sweeping.Deployment(args.url, args.management_url, args.metrics_url or "http://127.0.0.1:8082",
                               None if args.no_auth else args.key_file, args.model_store, args.model, args.workers)


def _engine(args: argparse.Namespace) -> engines.Engine:
    if args.engine == "torchserve":
        return engines.TorchServe(_deployment(args))
    from rayserve import deploy
    from rayserve.node import keep_loopback

    app_args, tuning = deploy.load(args.ray_state)
    keep_loopback()  # before Ray is imported
    from rayserve import cluster

    cluster.join(args.ray_address or deploy.deployed_to(args.ray_state) or "127.0.0.1:6390")
    urls = (args.metrics_url or "http://127.0.0.1:8092").split(",")
    return engines.RayServe(args.model, urls, app_args, tuning, state=args.ray_state)


def _sweep(args: argparse.Namespace) -> int:
    load = sweeping.Load(args.fps, args.streams, args.duration, args.warmup,
                         tuple(args.resolution or [Resolution(1280, 720)]), args.format, args.concurrency)
    deployment = _deployment(args)
    total = len(args.batch_sizes) * len(args.delays)
    done = [0]

    def progress(cell) -> None:
        done[0] += 1
        print(f"[{done[0]}/{total}] batchSize {cell.batch_size}, maxBatchDelay {cell.max_batch_delay_ms} ms: "
              f"p99 {cell.p99_ms:.1f} ms, {cell.achieved_fps:.1f}/{cell.offered_fps:.1f} fps, "
              f"{'all 200' if cell.all_ok else 'NOT all 200'}", file=sys.stderr, flush=True)

    result = sweeping.sweep(deployment, load, args.sla_ms, args.batch_sizes, args.delays, progress,
                            restore=not args.no_restore, probe_repeats=args.probe_repeats)
    print(sweeping.table(result))
    lines = sweeping.config_lines(result, args.model, f"{args.model}.mar")
    if lines:
        print("\n" + lines)
        if args.config_out:
            args.config_out.write_text(lines)
    if args.report:
        args.report.write_text(json.dumps(sweeping.to_json(result, load, deployment), indent=1) + "\n")
    if args.plot:
        sweeping.plot(args.plot, result)
    return 0 if result.best is not None else 1


def _watch(args: argparse.Namespace) -> int:
    fit = (fit_from_report(args.fit_from) if args.fit_from
           else LatencyFit(args.fit[0], args.fit[1], 1.0, 0) if args.fit else None)
    policy = Policy(args.interval, args.hold, args.cooldown, args.margin, tuple(args.ladder), args.delay, fit,
                    args.queue_high_ms, args.drain)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.duration:
        threading.Timer(args.duration, stop.set).start()
    applied = watch(_engine(args), policy, stop,
                    on_switch=lambda old, new: print(f"switched: {old} -> {new}", flush=True))
    print(f"{len(applied)} switch(es)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose or args.command == "watch" else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return _sweep(args) if args.command == "sweep" else _watch(args)
    except (ValueError, ManagementError, FileNotFoundError) as exc:
        p.error(str(exc))
    return 2


if __name__ == "__main__":
    sys.exit(main())
