"""`python -m bench`: our handler against a stock-style, a decode-only and a no-op handler, in one run.

In process (bench.inprocess: each handler's `handle` on a real ts Context): 32-frame batches of 720p
JPEG, 720p .npy and mixed resolutions, frames/s and a per-stage breakdown. End to end: six models in
ONE TorchServe with the shipped batching (`batchSize` 32, `maxBatchDelay` 50 ms, one worker each):
ours with frame_quality (`archive.sh`) and with a trivial model (`archive.sh trivial MODEL
bench/trivial.yaml`, as docs/models.md says), a decode-only handler (our decode step, nothing
after it), one in the stock style (Pillow / `np.load`), the stock-style handler and a no-op one.
Each round drives every (format, handler) pair in turn with the same closed loop for `seconds`,
in an order that rotates every round, so load from other processes hits all alike; a figure is
the median of its rounds. The machine may be shared: compare rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench import harness, inprocess
from bench.harness import ROOT
from loadgen.frames import Format, encode, frame
from loadgen.schedule import Resolution

#: bench name -> (TorchServe model, its handler file under bench/; None: ours through archive.sh)
HANDLERS = {"ours": ("frame_quality", None), "trivial": ("trivial", None),
            "decode-only": ("decode_only", "decode_handler.py"), "pil-decode": ("pillow_decode", "pillow_decode_handler.py"),
            "stock": ("stock", "stock_handler.py"), "no-op": ("noop", "noop_handler.py")}
FORMATS = ("jpeg", "npy")


@dataclass(slots=True)
class Served:
    """One handler on one format over all rounds."""

    handler: str
    format: str
    rounds: list[float] = field(default_factory=list)  # 200 answers a second, one per round
    answers: Counter[str] = field(default_factory=Counter)  # status -> count, all rounds
    latency_ms: list[float] = field(default_factory=list)

    @property
    def requests_per_s(self) -> float | None:
        return statistics.median(self.rounds) if self.rounds else None


def archives(store: Path, models: Path) -> dict[str, Path]:
    """The six archives: ours and trivial through `archive.sh`, the baselines through the archiver."""
    from bench.trivial_model import build

    trivial = build(models / "trivial.pt")
    out = {"ours": harness.shipped(store), "trivial": harness.shipped(store, "trivial", trivial, ROOT / "bench" / "trivial.yaml")}
    for name, (model, handler) in HANDLERS.items():
        if handler is not None:
            out[name] = harness.archive(store, model, ROOT / "bench" / handler, models / "frame_quality.pt",
                                        ROOT / "handler" / "models" / "frame_quality.yaml", with_handler=True)
    return out


def end_to_end(work: Path, models: Path, rounds: int, seconds: float, clients: int, resolution: Resolution,
               port_offset: int | None, progress: Callable[[str], None]) -> list[Served]:
    """Every handler and format, `rounds` interleaved rounds of `seconds` each, in one TorchServe."""
    server = harness.serve(work / "ts", archives(work / "store", models), port_offset=port_offset)
    bodies = {f: [(p.body, p.content_type) for p in (encode([frame(i % 4, i, resolution)], Format(f)) for i in range(8))]
              for f in FORMATS}
    results = {(h, f): Served(h, f) for f in FORMATS for h in HANDLERS}
    names = list(HANDLERS)
    try:
        token = server.key()
        url = {h: f"{server.inference_url}/predictions/{model}" for h, (model, _) in HANDLERS.items()}
        for f in FORMATS:  # warm-up: first batches pay one-off costs
            for h in names:
                harness.closed_loop(url[h], token, bodies[f], clients, 1.0)
        for r in range(rounds):
            for f in FORMATS:
                for h in names[r % len(names):] + names[:r % len(names)]:
                    answers, latencies = harness.closed_loop(url[h], token, bodies[f], clients, seconds)
                    served = results[(h, f)]
                    served.rounds.append(answers[200] / seconds)
                    served.answers.update({str(k): v for k, v in answers.items()})
                    served.latency_ms.extend(latencies)
                    progress(f"round {r + 1}/{rounds} {f:<4} {h:<11} {answers[200] / seconds:7.1f} req/s")
    finally:
        server.stop()
    return list(results.values())


def e2e_table(results: list[Served]) -> str:
    lines = [f"{'format':<6} {'handler':<11} {'req/s':>8} {'rounds (req/s)':<26} {'p50 ms':>7}  answers"]
    for r in results:
        rate = "FAILED" if r.requests_per_s is None else f"{r.requests_per_s:8.1f}"
        p50 = harness.percentile(r.latency_ms, 0.5)
        lines.append(f"{r.format:<6} {r.handler:<11} {rate:>8} {' '.join(f'{v:.1f}' for v in r.rounds):<26} "
                     f"{'-' if p50 is None else f'{p50:.0f}':>7}  {' '.join(f'{k}:{v}' for k, v in sorted(r.answers.items()))}")
    return "\n".join(lines)


def targets(local: list[inprocess.Result], served: list[Served]) -> list[tuple[str, float | None, float, bool | None]]:
    """(target, measured ratio, required ratio, met) for the issues' targets (ratios of one run)."""
    fps = {(r.handler, r.kind): r.frames_per_s for r in local}
    rate = {(r.handler, r.format): r.requests_per_s for r in served}
    rows = [("in-process 720p npy: ours / stock", fps, ("ours", "npy"), ("stock", "npy"), 2.0),
            ("in-process mixed / own 720p npy (ours)", fps, ("ours", "mixed"), ("ours", "npy"), 0.8),
            ("e2e 720p jpeg: ours / no-op", rate, ("ours", "jpeg"), ("no-op", "jpeg"), 0.8),
            ("e2e 720p jpeg: ours / stock", rate, ("ours", "jpeg"), ("stock", "jpeg"), 8.0),
            ("e2e 720p jpeg: trivial / decode-only", rate, ("trivial", "jpeg"), ("decode-only", "jpeg"), 0.9),
            ("e2e 720p npy: trivial / decode-only", rate, ("trivial", "npy"), ("decode-only", "npy"), 0.9),
            ("e2e 720p jpeg: trivial / no-op", rate, ("trivial", "jpeg"), ("no-op", "jpeg"), 0.65),
            ("(e2e 720p jpeg: trivial / Pillow decode-only)", rate, ("trivial", "jpeg"), ("pil-decode", "jpeg"), 0.9),
            ("(e2e 720p npy: trivial / Pillow decode-only)", rate, ("trivial", "npy"), ("pil-decode", "npy"), 0.9),
            ("(in-process 720p jpeg: ours / stock)", fps, ("ours", "jpeg"), ("stock", "jpeg"), 8.0),
            ("(in-process 720p jpeg: trivial / decode-only)", fps, ("trivial", "jpeg"), ("decode", "jpeg"), 0.9),
            ("(in-process 720p npy: trivial / decode-only)", fps, ("trivial", "npy"), ("decode", "npy"), 0.9)]
    out = []
    for name, figures, a, b, need in rows:
        value = figures[a] / figures[b] if figures.get(a) and figures.get(b) else None
        out.append((name, value, need, None if value is None else value >= need))
    return out


def target_table(rows: list[tuple[str, float | None, float, bool | None]]) -> str:
    lines = [f"{'target':<46} {'measured':>9} {'need':>6}  verdict"]
    for name, value, need, met in rows:
        verdict = "not measured" if met is None else ("MET" if met else "MISSED")
        lines.append(f"{name:<46} {'n/a' if value is None else f'{value:.2f}x':>9} {need:>5.2f}x  {verdict}")
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
    args = parser().parse_args(argv)
    return harness.main(lambda progress: run(args, progress, sys.argv[1:] if argv is None else argv))


def run(args: argparse.Namespace, progress: Callable[[str], None], argv: list[str]) -> int:
    from handler.models.build import build_all

    logging.basicConfig(level=logging.WARNING)
    hd = Resolution.parse(args.resolution)
    mixed = tuple(Resolution(max(8, round(r.width * hd.width / 1280)), max(8, round(r.height * hd.height / 720)))
                  for r in inprocess.MIXED)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        work = Path(tmp)
        build_all(work / "models")
        print(f"in process on {args.device}: batches of {args.frames} requests x 1 frame, "
              f"{args.iterations} timed batches each; mixed = {', '.join(map(str, mixed))}", flush=True)
        local = inprocess.bench(work / "models", args.device, args.iterations,
                                inprocess.workloads(args.frames, hd, mixed))
        print(inprocess.table(local), flush=True)
        served: list[Served] = []
        if not args.no_e2e:
            print(f"\nend to end, one TorchServe, shipped batching: {hd} JPEG and npy, {args.e2e_clients} "
                  f"closed-loop clients, {args.e2e_rounds} interleaved rounds of {args.e2e_seconds:g} s", flush=True)
            served = end_to_end(work, work / "models", args.e2e_rounds, args.e2e_seconds, args.e2e_clients, hd,
                                args.port_offset, progress)
            print(e2e_table(served), flush=True)
    rows = targets(local, served)
    print("\n" + target_table(rows))
    print(f"\n({time.time() - started:.0f} s; a shared 2-core machine is noisy: compare rows of one run)")
    harness.report(args.json, argv, in_process=[asdict(r) for r in local],
                   end_to_end=[{"handler": r.handler, "format": r.format, "requests_per_s": r.requests_per_s,
                                "rounds": r.rounds, "p50_ms": harness.percentile(r.latency_ms, 0.5),
                                "answers": dict(r.answers)} for r in served],
                   targets=[{"target": n, "measured": v, "need": need, "met": met} for n, v, need, met in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
