"""`python -m bench.protocols`: the same 720p JPEG load through each door of one TorchServe, side by side.

HTTP `/predictions`, gRPC `Predictions` (unary) and the Open Inference Protocol (one binary BYTES
tensor, as `tritonclient.http` frames it) carry the same JPEG bodies at the same offered load each,
at the same time, into the same server (shipped config.properties, frame_quality archive from
archive.sh): their requests share batches, so each door sees the same server and the same noisy
neighbours, and a door's extra cost shows as its own latency. `--sequential` runs them one after
the other instead. The machine is shared: compare the rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.torchserve import ROOT, Server
from loadgen.frames import Format, FrameSource
from loadgen.metrics import Metrics, calculate_metrics
from loadgen.runner import Target, run
from loadgen.schedule import Plan, Resolution
from loadgen.transport import Door
from tskeys.keyfile import Key

HD = Resolution(1280, 720)


@dataclass(frozen=True, slots=True)
class Row:
    """One protocol's run."""

    protocol: str
    metrics: Metrics


def bench(workdir: Path, fps: float = 6.0, duration_s: float = 20.0, streams: int = 2,
          resolution: Resolution = HD, sla_ms: float = 200.0,
          protocols: tuple[Door, ...] = tuple(Door), sequential: bool = False) -> list[Row]:
    """Loads one TorchServe with `fps` frames/s through each protocol (`streams` cameras each)."""
    store = workdir / "store"
    subprocess.run(["bash", str(ROOT / "archive.sh")], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "MODEL_STORE": str(store)})
    offset = int(os.environ.get("VIDEO_TS_PORT_OFFSET", "0"))
    server = Server(workdir / "ts", store / "frame_quality.mar")
    source = FrameSource(Format.JPEG, distinct=8)
    plan = Plan(streams=streams, fps=fps / streams, duration_s=duration_s, resolutions=(resolution,))
    with server:
        key = Key(server.workdir / "key_file.json")
        targets = {protocol: Target(server.inference_url, "frame_quality", timeout_s=60, protocol=protocol,
                                    grpc_address=f"127.0.0.1:{7070 + offset}", key=key)
                   for protocol in protocols}
        for target in targets.values():  # warm-up: connections, stubs, the worker's first batches
            run(Plan(streams=2, fps=2, duration_s=1, resolutions=(resolution,)), target, source)

        def measure(protocol: Door) -> Row:
            result = run(plan, targets[protocol], source, concurrency=64, max_lag_s=2.0)
            return Row(protocol.value, calculate_metrics(
                result.records, duration_s, sla_ms, len(result.schedule), frames_dropped=len(result.dropped)))

        if sequential:
            return [measure(protocol) for protocol in protocols]
        with ThreadPoolExecutor(len(protocols)) as pool:
            return list(pool.map(measure, protocols))


def table(rows: list[Row]) -> str:
    lines = [f"{'protocol':<8} {'offered':>8} {'achieved':>9} {'p50 ms':>8} {'p99 ms':>8} {'dropped':>8}  answers"]
    for row in rows:
        m = row.metrics
        answers = " ".join(f"{k}:{v}" for k, v in m.responses.items())
        lines.append(f"{row.protocol:<8} {m.offered_fps:>8.1f} {m.achieved_fps:>9.1f} {m.latency_ms.p50:>8.0f} "
                     f"{m.latency_ms.p99:>8.0f} {m.frames_dropped:>8}  {answers}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.protocols", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fps", type=float, default=6.0, help="frames/s offered to each protocol (default %(default)s)")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of load (default %(default)s)")
    p.add_argument("--streams", type=int, default=2, help="cameras per protocol (default %(default)s)")
    p.add_argument("--sequential", action="store_true", help="one protocol after the other, not together")
    p.add_argument("--resolution", type=Resolution.parse, default=HD, metavar="WxH")
    p.add_argument("--json", type=Path, help="also write the metrics here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-protocols-") as tmp:
        rows = bench(Path(tmp), args.fps, args.duration, args.streams, args.resolution,
                     sequential=args.sequential)
    how = "one after the other" if args.sequential else "all at once"
    print(f"{args.resolution} JPEG through each door of one TorchServe, {args.fps:g} frames/s offered to "
          f"each, {args.duration:g} s, {how}\n" + table(rows))
    if args.json:
        args.json.write_text(json.dumps([{"protocol": r.protocol, **asdict(r.metrics)} for r in rows],
                                        indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
