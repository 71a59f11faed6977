"""`python -m bench`: our handler vs a stock-style, a decode-only and a no-op handler, in one run.

In-process (each handler's `handle` on a real ts Context): 32-frame batches of 720p JPEG, 720p
.npy and mixed resolutions, frames/s and a per-stage breakdown. End to end (bench.e2e): all
handlers in one TorchServe with the shipped batching, frame_quality and a trivial model behind
our handler, interleaved closed-loop rounds of 720p JPEG and .npy. The machine may be shared:
compare rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from bench import e2e, inprocess


def targets(in_process: list[inprocess.Result], end_to_end: list[e2e.Result]) -> list[tuple[str, float | None, float, bool | None]]:
    """(target, measured ratio, required ratio, met) for the issues' targets (ratios of one run)."""
    fps = {(r.handler, r.kind): r.frames_per_s for r in in_process}
    served = {(r.handler, r.fmt): r.requests_per_s for r in end_to_end}

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    def e2e_ratio(a: str, b: str, fmt: str) -> float | None:
        return ratio(served.get((a, fmt)), served.get((b, fmt)))

    rows = [("in-process 720p npy: ours / stock", ratio(fps.get(("ours", "npy")), fps.get(("stock", "npy"))), 2.0),
            ("in-process mixed / own 720p npy (ours)", ratio(fps.get(("ours", "mixed")), fps.get(("ours", "npy"))), 0.8),
            ("e2e 720p jpeg: ours / no-op", e2e_ratio("ours", "no-op", "jpeg"), 0.8),
            ("e2e 720p jpeg: ours / stock", e2e_ratio("ours", "stock", "jpeg"), 8.0),
            ("e2e 720p jpeg: trivial / decode-only", e2e_ratio("trivial", "decode-only", "jpeg"), 0.9),
            ("e2e 720p npy: trivial / decode-only", e2e_ratio("trivial", "decode-only", "npy"), 0.9),
            ("e2e 720p jpeg: trivial / no-op", e2e_ratio("trivial", "no-op", "jpeg"), 0.65),
            ("(e2e 720p jpeg: trivial / Pillow decode-only)", e2e_ratio("trivial", "pil-decode", "jpeg"), 0.9),
            ("(e2e 720p npy: trivial / Pillow decode-only)", e2e_ratio("trivial", "pil-decode", "npy"), 0.9),
            ("(in-process 720p jpeg: ours / stock)", ratio(fps.get(("ours", "jpeg")), fps.get(("stock", "jpeg"))), 8.0),
            ("(in-process 720p jpeg: trivial / decode-only)",
             ratio(fps.get(("trivial", "jpeg")), fps.get(("decode", "jpeg"))), 0.9),
            ("(in-process 720p npy: trivial / decode-only)",
             ratio(fps.get(("trivial", "npy")), fps.get(("decode", "npy"))), 0.9)]
    return [(name, value, need, None if value is None else value >= need) for name, value, need in rows]


def target_table(rows) -> str:
    lines = [f"{'target':<46} {'measured':>9} {'need':>6}  verdict"]
    for name, value, need, met in rows:
        shown = "n/a" if value is None else f"{value:.2f}x"
        verdict = "not measured" if met is None else ("MET" if met else "MISSED")
        lines.append(f"{name:<46} {shown:>9} {need:>5.2f}x  {verdict}")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="device for the in-process part: cpu or cuda")
    p.add_argument("--frames", type=int, default=32, help="requests (one frame each) per batch")
    p.add_argument("--iterations", type=int, default=3, help="timed batches per handler and workload")
    p.add_argument("--resolution", default="1280x720", help="the 'uniform' size (WxH); tiny for smoke tests")
    p.add_argument("--no-e2e", action="store_true", help="skip the TorchServe part (no Java needed)")
    p.add_argument("--e2e-rounds", type=int, default=3, help="interleaved rounds over every handler and format")
    p.add_argument("--e2e-seconds", "--e2e-duration", type=float, default=8.0, help="seconds per handler, format and round")
    p.add_argument("--e2e-clients", type=int, default=16, help="closed-loop client threads")
    p.add_argument("--port-offset", type=int, help="move TorchServe's ports (default $VIDEO_TS_PORT_OFFSET)")
    p.add_argument("--json", type=Path, help="write all results here")
    return p


def main(argv: list[str] | None = None) -> int:
    from handler.models.build import build_all
    from loadgen.schedule import Resolution

    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    hd = Resolution.parse(args.resolution)
    scale = (hd.width / 1280, hd.height / 720)
    mixed = tuple(Resolution(max(8, round(r.width * scale[0])), max(8, round(r.height * scale[1])))
                  for r in inprocess.MIXED)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        work = Path(tmp)
        build_all(work / "models")
        print(f"in process on {args.device}: batches of {args.frames} requests x 1 frame, "
              f"{args.iterations} timed batches each; mixed = {', '.join(map(str, mixed))}", flush=True)
        loads = inprocess.workloads(args.frames, hd, mixed)
        local = inprocess.bench(work / "models", args.device, args.frames, args.iterations, loads)
        print(inprocess.table(local), flush=True)
        served: list[e2e.Result] = []
        if not args.no_e2e:
            print(f"\nend to end, one TorchServe, shipped batching: {hd} JPEG and npy, {args.e2e_clients} "
                  f"closed-loop clients, {args.e2e_rounds} interleaved rounds of {args.e2e_seconds:g} s",
                  flush=True)
            served = e2e.bench(work, work / "models", args.e2e_rounds, args.e2e_seconds, args.e2e_clients,
                               hd, port_offset=args.port_offset,
                               progress=lambda line: print("  " + line, flush=True))
            print(e2e.table(served), flush=True)
    rows = targets(local, served)
    print("\n" + target_table(rows))
    print(f"\n({time.time() - started:.0f} s; a shared 2-core machine is noisy: compare rows of one run)")
    if args.json:
        args.json.write_text(json.dumps({
            "argv": sys.argv, "in_process": [asdict(r) for r in local],
            "end_to_end": [{"handler": r.handler, "format": r.fmt, "requests_per_s": r.requests_per_s,
                            "rounds": r.rounds, "p50_ms": r.p50_ms, "answers": dict(r.answers)}
                           for r in served],
            "targets": [{"target": n, "measured": v, "need": need, "met": met} for n, v, need, met in rows],
        }, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
