"""What every bench repeats, once: a bench is a scenario over these.

- `archive` and `serve`: models packed by torch-model-archiver, one TorchServe serving them with
  the shipped config.properties, the batching given and its ports moved (`tsutil.server`);
- `closed_loop`: client threads sending frames for a window, each its next when the last is answered;
- `Window`: the CPU each group of processes spent over a window, and the rest of the machine's, from /proc;
- `markdown`, `report`: a table for people, and JSON for machines with the command, commit and machine;
- `main`: the shell every bench's `main` runs in (progress on stderr, SIGTERM stops servers cleanly).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


# --- the machine and the tree -----------------------------------------------------------------


def commit() -> str:
    """HEAD's hash, and whether the tree has uncommitted changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "HEAD") + (" (with uncommitted changes)" if git("status", "--porcelain", "-uno") else "")


def machine() -> str:
    """`N cores (CPU model)`."""
    try:
        model = next(line.split(":", 1)[1] for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")).strip()
    except (OSError, StopIteration):
        model = "unknown CPU"
    return f"{os.cpu_count()} cores ({model})"


# --- /proc --------------------------------------------------------------------------------------


def cpu_seconds(pid: int | str) -> float:
    """User + system seconds of process `pid` or thread `PID/task/TID` (/proc/PID/stat's 14 and 15; 0 once gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine_seconds() -> float:
    """Busy core-seconds of the whole machine since boot (/proc/stat: all but idle and iowait)."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / TICKS


def children(pid: int, word: str = "") -> list[int]:
    """The processes whose parent is `pid` (and whose command line holds `word`)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rpartition(")")[2].split()[1]) == pid \
                    and word in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def memory(pid: int) -> tuple[float, int, int]:
    """(resident MiB, threads, open fds) of process `pid`, from /proc."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"]), len(os.listdir(f"/proc/{pid}/fd"))


class Window:
    """CPU seconds of each group of processes between `start` and `stop`, and `others`: what the rest
    of the machine spent meanwhile (the machine may be shared)."""

    def __init__(self, groups: Mapping[str, Sequence[int | str]]) -> None:
        self.groups = groups
        self.t0 = self.t1 = 0.0
        self.cpu_s: dict[str, float] = {}
        self._before: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        return {g: sum(map(cpu_seconds, pids)) for g, pids in self.groups.items()} | {"machine": machine_seconds()}

    def start(self) -> Window:
        self._before, self.t0 = self._read(), time.time()
        return self

    def stop(self) -> dict[str, float]:
        after, self.t1 = self._read(), time.time()
        spent = {k: after[k] - self._before[k] for k in after}
        spent["others"] = spent.pop("machine") - sum(spent.values())
        self.cpu_s = {k: round(v, 2) for k, v in spent.items()}
        return self.cpu_s

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0


# --- TorchServe ---------------------------------------------------------------------------------


def archive(store: Path, name: str, handler: Path, model: Path, config: Path, with_handler: bool = False) -> Path:
    """Packs `model` with `handler` into `store/name.mar`; `with_handler`: the `handler` package (as
    archive.sh ships it, without its demo models) and `bench/stock.py` beside it."""
    store.mkdir(parents=True, exist_ok=True)
    command = ["torch-model-archiver", "--model-name", name, "--version", "1.0", "--serialized-file", str(model),
               "--handler", str(handler), "--config-file", str(config), "--export-path", str(store), "--force"]
    stage = store / f".{name}-stage"
    if with_handler:
        skip = shutil.ignore_patterns("models", "__pycache__")
        shutil.copytree(ROOT / "handler", stage / "handler", ignore=skip, dirs_exist_ok=True)
        (stage / "bench").mkdir(exist_ok=True)
        for part in ("__init__.py", "stock.py"):
            shutil.copy(ROOT / "bench" / part, stage / "bench" / part)
        command += ["--extra-files", str(stage)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(stage, ignore_errors=True)
    return store / f"{name}.mar"


def shipped(store: Path, name: str = "", model: Path | None = None, config: Path | None = None) -> Path:
    """An archive made by `archive.sh` (the shipped frame_quality, or `name` from `model` and `config`)."""
    args = [name, str(model), str(config)] if name else []
    subprocess.run(["bash", str(ROOT / "archive.sh"), *args], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "MODEL_STORE": str(store), "PYTHON": sys.executable})
    return store / f"{name or 'frame_quality'}.mar"


BATCHING = {"minWorkers": 1, "maxWorkers": 1, "batchSize": 32, "maxBatchDelay": 50, "responseTimeout": 120}


def serve(workdir: Path, mars: Mapping[str, Path], batching: Mapping[str, int] = BATCHING,
          port_offset: int | None = None, extra: str = "", server: Any = None) -> Any:
    """One TorchServe (shipped config.properties, ports moved) serving every archive of `mars` with
    `batching`, started; `extra`: more properties; `server`: the class (default `tsutil.server.TorchServe`)."""
    from tsutil.server import TorchServe

    models = {m.stem: {"1.0": {"defaultVersion": True, "marName": m.name, **batching}} for m in mars.values()}
    overlay = f"load_models={','.join(m.name for m in mars.values())}\nmodels={json.dumps(models)}\n{extra}"
    return (server or TorchServe)(workdir, {m.stem: m for m in mars.values()}, overlays=[overlay],
                                  port_offset=port_offset).start(timeout_s=300)


# --- clients --------------------------------------------------------------------------------------


def closed_loop(url: str, token: str, bodies: Sequence[tuple[bytes, str]], clients: int, seconds: float
                ) -> tuple[Counter[Any], list[float]]:
    """`clients` threads, each sending its next frame when the last is answered, for `seconds`.

    Returns:
        every status answered within the window (an exception's name for a failed request), and
        the 200s' latencies (ms).
    """
    import requests

    stop_at = time.monotonic() + seconds
    answers: Counter[Any] = Counter()
    latencies: list[float] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        with requests.Session() as session:
            for i in range(k, 1 << 62, clients):
                body, content_type = bodies[i % len(bodies)]
                sent = time.monotonic()
                if sent >= stop_at:
                    return
                try:
                    status: Any = session.post(url, data=body, timeout=120, headers={
                        "Authorization": f"Bearer {token}", "Content-Type": content_type}).status_code
                except requests.RequestException as exc:
                    status = type(exc).__name__
                done = time.monotonic()
                with lock:
                    if done <= stop_at:
                        answers[status] += 1
                        if status == 200:
                            latencies.append((done - sent) * 1000)

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers, latencies


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q` quantile (nearest rank) of `values`, one decimal; None for none."""
    ordered = sorted(values)
    return round(ordered[round(q * (len(ordered) - 1))], 1) if ordered else None


# --- results --------------------------------------------------------------------------------------


def markdown(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def report(path: Path | None, argv: Sequence[str], **result: Any) -> None:
    """Writes `result` to `path` as JSON, with the command, the commit and the machine."""
    if path is not None:
        path.write_text(json.dumps({"command": " ".join(argv), "commit": commit(), "machine": machine(), **result},
                                   indent=1, default=str))


def main(run: Callable[[Callable[[str], None]], int]) -> int:
    """Runs `run(progress)`: `progress` prints a line on stderr with the seconds since the start; a
    SIGTERM unwinds like Ctrl-C, so the bench's `finally` blocks stop what it started; this
    interpreter's scripts (torchserve, the archiver) come first on PATH."""
    started = time.time()

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        return run(lambda line: print(f"  [{time.time() - started:4.0f} s] {line}", file=sys.stderr, flush=True))
    finally:
        signal.signal(signal.SIGTERM, previous)
