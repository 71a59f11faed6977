"""`python -m bench.gpu_probe`: the argparse shell around `bench.gpu_probe.probe` (see the package's docstring)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

#: Seconds of the whole run by default: the probe must end under five minutes on the GPU host,
#: the wheels' install and the interpreter's start included.
DEFAULT_SECONDS = 270.0
DRY_RUN_SECONDS = 5.0
#: Past its budget a run is stopped, what it has is written, and the exit status is 1; a dry run
#: (whose sections do fixed tiny work) gets more room so a slow CI machine does not trip it.
GRACE_SECONDS = 10.0
DRY_RUN_GRACE_SECONDS = 180.0


def _sections():
    from bench.gpu_probe import core, decode, tasks

    return [*core.SECTIONS, *decode.SECTIONS, *tasks.SECTIONS]


def parse(argv: list[str] | None, names: list[str]) -> argparse.Namespace:
    import bench.gpu_probe

    p = argparse.ArgumentParser(prog="python -m bench.gpu_probe", description=bench.gpu_probe.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true",
                   help="tiny sizes, CPU allowed: every section runs its code path; nothing is compared")
    p.add_argument("--out", type=Path, help="the JSON report (default: $OUT/gpu_probe.json when $OUT is set)")
    p.add_argument("--only", action="append", choices=names, metavar="NAME",
                   help=f"run this section (repeatable); sections: {', '.join(names)}")
    p.add_argument("--seconds", type=float,
                   help=f"time budget of the whole run, shared by the sections (default {DEFAULT_SECONDS:.0f}, "
                        f"{DRY_RUN_SECONDS:.0f} with --dry-run)")
    p.add_argument("--device", default="cuda", help="the CUDA device to probe (default: cuda, the current one)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()  # before torch is imported: the budget counts the whole process
    sections = _sections()
    args = parse(argv, [s.name for s in sections])
    import torch

    from bench.gpu_probe import probe

    if torch.cuda.is_available():
        device = torch.device(args.device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif args.dry_run:
        device = torch.device("cpu")
    else:
        print("no CUDA device: run with --dry-run to check the probe on a CPU", file=sys.stderr)
        return 2
    if device.type == "cuda":
        torch.cuda.set_device(device)
    seconds = args.seconds if args.seconds is not None else DRY_RUN_SECONDS if args.dry_run else DEFAULT_SECONDS
    out = args.out or (Path(os.environ["OUT"]) / "gpu_probe.json" if os.environ.get("OUT") else None)
    chosen = [s for s in sections if not args.only or s.name in args.only]

    report = probe.Report(probe.environment(device), str(device), args.dry_run, seconds)
    finished = threading.Lock()

    def finish(final: bool) -> int | None:
        """Prints the table and writes the JSON, once: by the main thread or by the watchdog
        (None for the one that came second)."""
        if not finished.acquire(blocking=False):
            return None
        if not final:
            running = report.running or "between sections"
            done = {s.name for s in report.sections}
            left = [s.name for s in chosen if s.name not in done and s.name != report.running]
            report.sections.append(probe.SectionResult(running, 0.0, [probe.Row(
                f"{running}: ends within the budget", "stopped by the watchdog", None, "", f"≤ {seconds:.0f} s",
                False, f"not run: {', '.join(left) or 'none'}")]))
        print(probe.table(report), flush=True)
        probe.write_json(report, out)
        return probe.exit_status(report)

    def watchdog() -> None:
        print(f"[gpu_probe] past the budget of {seconds:.0f} s: stopping", file=sys.stderr, flush=True)
        status = finish(final=False)
        if status is not None:  # else the main thread is already printing the report
            os._exit(1)

    grace = DRY_RUN_GRACE_SECONDS if args.dry_run else GRACE_SECONDS
    timer = threading.Timer(max(0.0, started + seconds + grace - time.monotonic()), watchdog)
    timer.daemon = True
    timer.start()
    probe.run_sections(chosen, device, args.dry_run, seconds, report, started,
                       after_each=lambda r: probe.write_json(r, out))
    timer.cancel()
    status = finish(final=True)
    return 1 if status is None else status


if __name__ == "__main__":
    sys.exit(main())
