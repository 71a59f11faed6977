"""Web view bench for a fleet: what the page's grid costs the bridge at 64 cameras, against an older tree.

    python -m bench.web_fleet                           # this tree against BASELINE, 60 s windows
    python -m bench.web_fleet --cameras 64 --seconds 60 --baseline 4af3e47

The real CLI (`python -m ingest.cli --config ... --web`) of each tree: this checkout, and
`--baseline REV` checked out with `git worktree add` in a temporary folder and run the same way.
`--cameras` cameras, each tracked with two zones and a line, at a loopback port where nothing
listens: each only reconnects now and then (capped backoff), so the bridge's own work is small and
steady and the page's cost stands out. No model server is needed.

One client fetches what the page fetches on its grid (ingest/web/static/view.js `start`): every
second `GET /api/cameras` (every camera's state and counts), and every 5th second each tile's
`GET /api/cameras/NAME/scene`, one after the other, on one kept-alive connection; the page waits a
second after each round's requests. The bridge's CPU (user + system, all its threads, from
/proc/PID/stat) is measured over a window without the client and then over a window with it; the
page's cost is the difference, in % of one core. The target: under 1% of a core in all at 64
cameras.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.rtsp_server import free_port

ROOT = Path(__file__).resolve().parents[1]
#: The tree before the scene was served from what the bridge holds (issue 38).
BASELINE = "4af3e47"
TARGET_PCT = 1.0
WARMUP_S = 5.0
TOKEN = "bench-fleet-token-0123456789"


@dataclass(frozen=True, slots=True)
class Row:
    """One tree measured: the bridge's CPU without and with the page, and the page's requests."""

    tree: str
    cameras: int
    idle_pct: float
    page_pct: float
    scenes_per_s: float  # scene requests answered a second with the page
    scene_ms: float  # the median time a scene request took, seen by the client

    @property
    def cost_pct(self) -> float:
        return round(self.page_pct - self.idle_pct, 2)


def camera_list(cameras: int, port: int) -> str:
    """`cameras` tracked cameras at a dead loopback port, each with two zones and a line."""
    shapes = ("    zones:\n      - name: door\n        polygon: [[0.1, 0.1], [0.4, 0.1], [0.4, 0.9]]\n"
              "      - name: yard\n        polygon: [[0.5, 0.1], [0.9, 0.1], [0.9, 0.9]]\n"
              "    lines: [{name: gate, from: [0.5, 0], to: [0.5, 1]}]\n")
    return "defaults:\n  track: true\ncameras:\n" + "".join(
        f"  - name: cam-{i}\n    url: rtsp://127.0.0.1:{port}/cam-{i}\n{shapes}" for i in range(cameras))


def cpu_seconds(stat: str, ticks: int) -> float:
    """User + system seconds of a process from its /proc/PID/stat text (fields 14 and 15)."""
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / ticks


def _cpu(pid: int) -> float:
    return cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))


class Page:
    """What the page's grid fetches, in a thread, until `close()`: the scene times it saw."""

    def __init__(self, base: str, names: list[str]) -> None:
        self.base, self.names = base, names
        self.stop = threading.Event()
        self.scene_s: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with requests.Session() as session:
            for second in range(10**9):
                session.get(f"{self.base}/api/cameras", headers=headers, timeout=60).raise_for_status()
                if second % 5 == 4:
                    for name in self.names:
                        started = time.perf_counter()
                        session.get(f"{self.base}/api/cameras/{name}/scene", headers=headers,
                                    timeout=60).raise_for_status()
                        if self.stop.is_set():
                            return
                        self.scene_s.append(time.perf_counter() - started)
                if self.stop.wait(1.0):
                    return

    def close(self) -> None:
        self.stop.set()
        self._thread.join(timeout=120)


def measure(tree: Path, label: str, cameras: int, seconds: float, work: Path) -> Row:
    """One tree's CLI with `cameras` cameras and `--web`: a window without the page, one with it."""
    (work / "cameras.yaml").write_text(camera_list(cameras, free_port()))
    (work / "web.json").write_text(json.dumps({"web": {"key": TOKEN}}))
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "ingest.cli", "--config", str(work / "cameras.yaml"), "--url",
         f"http://127.0.0.1:{free_port()}", "--results", str(work / "results.jsonl"), "--log-level", "WARNING",
         "--web", f"127.0.0.1:{port}", "--web-token-file", str(work / "web.json")],
        cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_web(f"http://127.0.0.1:{port}", process)
        time.sleep(WARMUP_S)
        idle = _window(process.pid, seconds)
        page = Page(f"http://127.0.0.1:{port}", [f"cam-{i}" for i in range(cameras)])
        time.sleep(WARMUP_S)
        seen = len(page.scene_s)
        busy = _window(process.pid, seconds)
        answered = len(page.scene_s) - seen
        page.close()
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    median_ms = 1000 * statistics.median(page.scene_s) if page.scene_s else float("nan")
    return Row(label, cameras, round(idle, 2), round(busy, 2), round(answered / seconds, 2), round(median_ms, 2))


def _wait_for_web(base: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"video-ingest exited {process.returncode} before its web view answered")
        try:
            requests.get(f"{base}/api/cameras", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
            return
        except requests.RequestException:
            time.sleep(0.2)
    raise RuntimeError("the web view did not answer within 60 s")


def _window(pid: int, seconds: float) -> float:
    """The process's CPU over `seconds`, in % of one core."""
    cpu0, t0 = _cpu(pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (_cpu(pid) - cpu0) / (time.monotonic() - t0)


def table(rows: list[Row]) -> str:
    lines = ["| tree | cameras | bridge CPU without the page (% of a core) | with the page | the page's cost | "
             "scene requests a second | a scene request (median ms) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r.tree} | {r.cameras} | {r.idle_pct:g} | {r.page_pct:g} | {r.cost_pct:g} | {r.scenes_per_s:g} | "
              f"{r.scene_ms:g} |" for r in rows]
    return "\n".join(lines)


def verdict(row: Row) -> str:
    passed = "PASS" if row.cost_pct < TARGET_PCT else "FAIL"
    return (f"The page's scene and state requests cost {row.cost_pct:g}% of a core at {row.cameras} cameras "
            f"(target < {TARGET_PCT:g}%): {passed}.")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.web_fleet", description=__doc__.split("\n\n")[0])
    p.add_argument("--cameras", type=int, default=64)
    p.add_argument("--seconds", type=float, default=60.0, help="each window (one without the page, one with it)")
    p.add_argument("--baseline", default=BASELINE, help="a git revision to measure the same way ('' for none)")
    args = p.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="bench-web-fleet-"))
    rows = []
    try:
        trees = [(ROOT, "this tree")]
        if args.baseline:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(folder / "baseline"),
                            args.baseline], check=True)
            trees.append((folder / "baseline", f"baseline {args.baseline}"))
        for tree, label in trees:
            work = folder / f"run-{len(rows)}"
            work.mkdir()
            rows.append(measure(tree, label, args.cameras, args.seconds, work))
            print(f"{label}: {rows[-1]}", file=sys.stderr, flush=True)
    finally:
        if args.baseline:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder / "baseline")],
                           check=False, capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{args.seconds:g} s windows, {os.cpu_count()} cores:\n")
    print(table(rows))
    print()
    print(verdict(rows[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
