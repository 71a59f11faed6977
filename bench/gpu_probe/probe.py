"""The probe's framework: rows, sections, time budgets, the runner, the table and the JSON.

A section is `Section(name, run, share)`: `run(probe) -> list[Row]`. The runner gives each section
a share of the time left (`share` / the shares of the sections still to run), so one that ends
early leaves its time to the next. A section that raises becomes one failed row and the probe
goes on. The process's exit status is 0 iff no row failed (`ok is False`).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

#: The packages whose versions the environment header names (distribution names).
PACKAGES = ("torch", "torchvision", "av", "simplejpeg", "numpy", "pillow", "pyyaml")


@dataclass(frozen=True, slots=True)
class Row:
    """One measured claim.

    Attributes:
        check: what is claimed, in words ("nvJPEG 720p decode + collate + upload").
        measured: the figure as people read it ("5,210 frames/s"), or what happened.
        value: the figure as a number (None when there is none).
        unit: the value's unit ("frames/s", "MiB", "").
        target: the claim's bar ("≥ 5,000 frames/s"); empty for a figure reported as is.
        ok: True met, False missed (or broken), None not applicable here (no CUDA, dry run) or
            nothing to compare with.
        note: how it was measured, or why it is not applicable.
        cuda_only: the claim is about the GPU; on a CPU its `ok` is always None.
    """

    check: str
    measured: str
    value: float | None = None
    unit: str = ""
    target: str = ""
    ok: bool | None = None
    note: str = ""
    cuda_only: bool = False

    @property
    def verdict(self) -> str:
        if self.ok is None:  # a figure with no bar to meet is information; anything else does not apply here
            return "info" if self.value is not None and not self.target else "n/a"
        return "PASS" if self.ok else "FAIL"


class Deadline:
    """A point in time (`time.monotonic`) that work checks against."""

    def __init__(self, at: float) -> None:
        self.at = at

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + max(0.0, seconds))

    def left(self) -> float:
        """Seconds until the deadline (0 once passed)."""
        return max(0.0, self.at - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.at


@dataclass(frozen=True, slots=True)
class Probe:
    """What a section is given: the device, the mode and its time.

    Attributes:
        device: `cuda:N` on a GPU host; `cpu` in a dry run without CUDA.
        dry_run: tiny sizes: every code path runs, nothing is compared with a target.
        end: when this section's share of the time budget is spent.
    """

    device: torch.device
    dry_run: bool
    end: Deadline

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def index(self) -> int:
        """The CUDA device index (0 on the CPU)."""
        return self.device.index or 0

    def deadline(self, fraction: float = 1.0) -> Deadline:
        """A deadline `fraction` of this section's time left from now (never past its end):
        with k measurements to go, `deadline(1 / k)` gives the next its even share."""
        return Deadline(min(self.end.at, time.monotonic() + fraction * self.end.left()))

    def sync(self) -> None:
        """Waits for the device's queued work (nothing on the CPU)."""
        if self.cuda:
            torch.cuda.synchronize(self.device)


@dataclass(frozen=True, slots=True)
class Section:
    """A named group of checks; `run(probe)` returns its rows."""

    name: str
    run: Callable[[Probe], list[Row]]
    share: float = 1.0


@dataclass(frozen=True, slots=True)
class Rate:
    """Units of work done in a timed loop."""

    units: int
    seconds: float
    runs: int

    @property
    def per_second(self) -> float:
        return self.units / self.seconds if self.seconds > 0 else 0.0


def throughput(step: Callable[[], int], until: Deadline, sync: Callable[[], None] = lambda: None,
               warmup: int = 1) -> Rate:
    """Runs `step` (which returns the units it did) `warmup` times untimed, then again and again
    until `until` (at least once); the device's work is waited for before each clock read.

    Fixed durations, not fixed counts: the probe's time is bounded whatever the speed.
    """
    for _ in range(warmup):
        step()
    sync()
    units = runs = 0
    start = time.perf_counter()
    while True:
        units += step()
        runs += 1
        if until.passed():
            break
    sync()
    return Rate(units, time.perf_counter() - start, runs)


def attempt(check: str, measure: Callable[[], list[Row]], cuda_only: bool = False) -> list[Row]:
    """`measure()`'s rows, or one failed row naming `check` and the exception: one broken
    measurement does not take its section's other rows with it."""
    try:
        return measure()
    except Exception as exc:  # the probe reports every failure as a row and goes on
        traceback.print_exc(file=sys.stderr)
        return [failed(check, exc, cuda_only)]


def failed(check: str, exc: BaseException, cuda_only: bool = False) -> Row:
    """The row for a measurement or a section that raised."""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return Row(check, f"raised {type(exc).__name__}", None, "", "runs", False, first, cuda_only)


def fmt(value: float, unit: str) -> str:
    """`5210.4, "frames/s"` -> `"5,210 frames/s"` (one decimal below 100)."""
    return f"{value:,.1f} {unit}" if abs(value) < 100 else f"{value:,.0f} {unit}"


@dataclass(slots=True)
class SectionResult:
    name: str
    seconds: float
    rows: list[Row]


@dataclass(slots=True)
class Report:
    """The whole run, filled in as sections finish (so a timed-out run can still be written)."""

    environment: dict[str, object]
    device: str
    dry_run: bool
    seconds: float
    sections: list[SectionResult] = field(default_factory=list)
    running: str | None = None
    complete: bool = False

    @property
    def rows(self) -> list[Row]:
        return [row for section in self.sections for row in section.rows]

    @property
    def ok(self) -> bool:
        """No row failed (rows that do not apply do not count against it)."""
        return all(row.ok is not False for row in self.rows)

    def to_json(self) -> dict[str, object]:
        return {"environment": self.environment, "device": self.device, "dry_run": self.dry_run,
                "seconds_budget": self.seconds, "complete": self.complete, "ok": self.ok,
                "sections": [{"name": s.name, "seconds": round(s.seconds, 2),
                              "rows": [{**asdict(r), "verdict": r.verdict} for r in s.rows]}
                             for s in self.sections]}


def run_sections(sections: Sequence[Section], device: torch.device, dry_run: bool, seconds: float,
                 report: Report | None = None, started: float | None = None,
                 after_each: Callable[[Report], None] = lambda report: None) -> Report:
    """Runs `sections` in order within `seconds` (counted from `started`, default now).

    Args:
        report: the report to fill (the caller's, so a watchdog can write what is done).
        after_each: called with the report after every section (the JSON written as it goes).
    """
    started = time.monotonic() if started is None else started
    report = report or Report({}, str(device), dry_run, seconds)
    total_end = started + seconds
    for index, section in enumerate(sections):
        shares = sum(s.share for s in sections[index:])
        budget = max(0.0, total_end - time.monotonic()) * section.share / shares
        probe = Probe(device, dry_run, Deadline.after(budget))
        report.running = section.name
        print(f"[gpu_probe] {section.name}: {budget:.0f} s", file=sys.stderr, flush=True)
        begun = time.monotonic()
        try:
            rows = list(section.run(probe))
        except Exception as exc:  # a broken section is a failed row; the others still run
            traceback.print_exc(file=sys.stderr)
            rows = [failed(f"{section.name}: section runs", exc)]
        for row in rows:
            print(f"[gpu_probe]   {row.verdict:<4} {row.check}: {row.measured}", file=sys.stderr, flush=True)
        report.sections.append(SectionResult(section.name, time.monotonic() - begun, rows))
        report.running = None
        after_each(report)
    report.complete = True
    return report


def exit_status(report: Report) -> int:
    """0 iff no row failed."""
    return 0 if report.ok else 1


def table(report: Report) -> str:
    """The environment header, the markdown table (check | measured | target | verdict) and the
    notes of the rows that have one."""
    env = report.environment
    lines = [f"# gpu_probe{' (dry run)' if report.dry_run else ''}: {report.device}", ""]
    lines += [f"- {key}: {value}" for key, value in env.items()]
    lines += ["", "| check | measured | target | verdict |", "| --- | --- | --- | --- |"]
    lines += [f"| {r.check} | {r.measured} | {r.target or '-'} | {r.verdict} |" for r in report.rows]
    notes = [f"- {r.check}: {r.note}" for r in report.rows if r.note]
    if notes:
        lines += ["", "Notes:", *notes]
    failures = sum(r.ok is False for r in report.rows)
    lines += ["", f"{len(report.rows)} rows, {failures} failed"
              + ("" if report.complete else " (INCOMPLETE: the run stopped early)")]
    return "\n".join(lines)


def write_json(report: Report, path: Path | None) -> None:
    """Writes the report to `path` (via a temporary file, so a reader never sees half of it)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(report.to_json(), indent=1, default=str))
    partial.replace(path)


def environment(device: torch.device) -> dict[str, object]:
    """What ran the probe: GPU, driver and CUDA, package versions, CPUs."""
    env: dict[str, object] = {"python": platform.python_version(), "platform": platform.platform(),
                              "cpus": f"{len(os.sched_getaffinity(0))} usable of {os.cpu_count()}"}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["gpu"] = (f"{props.name}, {props.total_memory / 2**30:.0f} GiB, "
                      f"{props.multi_processor_count} SMs; {torch.cuda.device_count()} visible")
    else:
        env["gpu"] = "none (no CUDA)"
    env["driver"] = _driver_version() or "unknown"
    env["cuda (torch built with)"] = torch.version.cuda or "none"
    for package in PACKAGES:
        try:
            env[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            env[package] = "missing"
    try:
        import av
        from av.codec.hwaccel import hwdevices_available

        env["ffmpeg (PyAV's)"] = f"{av.ffmpeg_version_info}; hw devices: {', '.join(hwdevices_available()) or 'none'}"
    except Exception as exc:  # the header must not fail the run
        env["ffmpeg (PyAV's)"] = f"unavailable ({type(exc).__name__})"
    return env


def _driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py, on the GPU host

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no NVML or no driver: ask nvidia-smi
        pass
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
