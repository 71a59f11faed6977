"""Web view bench: what watching costs video-ingest, one run (about 4 minutes on 2 cores).

    python -m bench.web
    python -m bench.web --cameras 8 --viewers 8 --rounds 3

The real CLI with `--web`: `--cameras` cameras, each the 1080p30 H.264 file of bench.ingest
(looping, segments mode, tracked with a zone and a line), sending to a sink that answers each
segment at once with its 30 frames of 10 moving detections (bench.ingest.DetectionSink), so that
only the bridge's work is measured. In each round one bridge process is measured over three
windows in turn: no viewer, one viewer of every camera, `--viewers` viewers of every camera, and
no viewer again once the previews stopped (the baseline: the mean of the two without). A viewer fetches what the page fetches: every camera's
pictures (one long poll, every fragment read to the end), `/api/cameras` every second and the
large camera's events every 2 s; viewers are threads of this process, and only the bridge's
process is measured: its CPU (user + system, all threads, psutil) over the window, per camera,
in % of one core. `kept up`: segments answered over segments due. The rounds run `--rounds`
times (this machine's speed drifts by 2x from minute to minute), and the table gives each row's
median; the verdict uses the median of each round's own difference.

Verdicts: one viewer adds under 0.5% of a core per 1080p30 camera; `--viewers` viewers leave every
camera's `kept up` as it is without a viewer (within 0.02).
"""

from __future__ import annotations

import argparse
import json
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

import psutil
import requests

from bench.ingest import (
    FIRST_ANSWER_S,
    ROOT,
    DetectionSink,
    _cpu,
    _first_answer,
    _segments,
    _size,
    camera_list,
    make_video,
)
from ingest.web.view import WATCH_S
from tests.rtsp_server import free_port

TARGET_PER_CAMERA = 0.5  # % of a core one viewer may add per 1080p30 camera
KEPT_UP_SLACK = 0.02
WARMUP_S = 4.0
WINDOW_S = 10.0
TOKEN = "bench-token-0123456789"


@dataclass(frozen=True, slots=True)
class Row:
    viewers: int
    cpu_per_camera_pct: float
    kept_up: float
    fragments_per_s: float  # fragments each viewer got a second, per camera


class Viewer:
    """What one open page fetches, in threads: every camera's pictures, the cameras, the events."""

    def __init__(self, base: str, token: str, cameras: list[str]) -> None:
        self.base, self.cameras = base, cameras
        self.headers = {"Authorization": f"Bearer {token}"}
        self.stop = threading.Event()
        self.fragments = 0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._pictures, daemon=True),
                         threading.Thread(target=self._page, daemon=True)]
        for thread in self._threads:
            thread.start()

    def _pictures(self) -> None:
        """The page's one long poll for every camera's next picture, each read to its end."""
        seqs = dict.fromkeys(self.cameras, -1)
        with requests.Session() as session:
            while not self.stop.is_set():
                query = f"cameras={','.join(seqs)}&after={','.join(map(str, seqs.values()))}"
                try:
                    response = session.get(f"{self.base}/api/live?{query}", headers=self.headers, timeout=30)
                except requests.RequestException:
                    time.sleep(0.5)
                    continue
                data, at = response.content, 0
                while at + 8 <= len(data):
                    head_length, payload_length = int.from_bytes(data[at:at + 4], "big"), int.from_bytes(data[at + 4:at + 8], "big")
                    head = json.loads(data[at + 8:at + 8 + head_length])
                    seqs[head["camera"]] = head["seq"]
                    at += 8 + head_length + payload_length
                    with self._lock:
                        self.fragments += 1

    def _page(self) -> None:
        with requests.Session() as session:
            for second in range(10**9):
                if self.stop.wait(1.0):
                    return
                try:
                    session.get(f"{self.base}/api/cameras", headers=self.headers, timeout=30)
                    if second % 2 == 0:
                        session.get(f"{self.base}/api/cameras/{self.cameras[0]}/events", headers=self.headers, timeout=30)
                except requests.RequestException:
                    pass

    def close(self) -> None:
        self.stop.set()


def _window(process: psutil.Process, results: Path, watching: list[Viewer], viewers: int, cameras: int) -> Row:
    """One `WINDOW_S` window of the running bridge: its CPU, the segments answered, the fragments got."""
    got0 = sum(v.fragments for v in watching)
    cpu0, t0, size0 = _cpu([process]), time.monotonic(), _size(results)
    time.sleep(WINDOW_S)
    cpu1, t1, size1 = _cpu([process]), time.monotonic(), _size(results)
    got1 = sum(v.fragments for v in watching)
    data = results.read_bytes()[:size1]
    answered = len(_segments(data) - _segments(data[:size0]))
    seconds = t1 - t0
    return Row(viewers, round(100 * (cpu1 - cpu0) / seconds / cameras, 2), round(answered / (cameras * seconds), 2),
               round((got1 - got0) / seconds / max(1, viewers * cameras), 2))


def measure(folder: Path, sink: DetectionSink, video: Path, cameras: int, viewers: int) -> list[Row]:
    """One round: the CLI with `cameras` cameras and `--web`, one window with no viewer, then one
    with a viewer, then one with `viewers` viewers, then (once nobody watches) one with no viewer
    again: the baseline is the mean of the first and the last (the same process: drift cancels)."""
    work = Path(tempfile.mkdtemp(dir=folder))
    names = [f"cam-{i}" for i in range(cameras)]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    watching: list[Viewer] = []
    rows = []
    try:
        (work / "cameras.yaml").write_text(camera_list(video, cameras, "track + zone + line"))
        (work / "web.json").write_text(json.dumps({"web": {"key": TOKEN}}))
        results = work / "results.jsonl"
        process = subprocess.Popen([sys.executable, "-m", "ingest.cli", "--config", str(work / "cameras.yaml"),
                                    "--url", sink.url, "--token-file", str(work / "none.json"), "--results",
                                    str(results), "--log-level", "WARNING", "--web", f"127.0.0.1:{port}",
                                    "--web-token-file", str(work / "web.json")],
                                   cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _first_answer(results, FIRST_ANSWER_S)
            time.sleep(WARMUP_S)
            bridge = psutil.Process(process.pid)
            rows.append(_window(bridge, results, watching, 0, cameras))
            for count in (1, viewers):
                watching += [Viewer(base, TOKEN, names) for _ in range(count - len(watching))]
                time.sleep(WARMUP_S)  # the previews start at each camera's next segment
                rows.append(_window(bridge, results, watching, count, cameras))
            for viewer in watching:
                viewer.close()
            time.sleep(WATCH_S + WARMUP_S)  # no longer watched: the previews stop
            again = _window(bridge, results, [], 0, cameras)
            rows[0] = Row(0, round((rows[0].cpu_per_camera_pct + again.cpu_per_camera_pct) / 2, 2),
                          min(rows[0].kept_up, again.kept_up), 0.0)
        finally:
            for viewer in watching:
                viewer.close()
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def table(rows: list[Row], cameras: int) -> str:
    lines = [f"| viewers of each of {cameras} cameras | CPU per camera (% of a core) | kept up | "
             "fragments a second per viewer and camera |", "| --- | --- | --- | --- |"]
    lines += [f"| {r.viewers} | {r.cpu_per_camera_pct:g} | {r.kept_up:g} | {r.fragments_per_s:g} |" for r in rows]
    return "\n".join(lines)


def verdicts(rows: list[Row], measured: dict[int, list[Row]], viewers: int) -> list[str]:
    base, many = (next(r for r in rows if r.viewers == n) for n in (0, viewers))
    added = round(statistics.median(o.cpu_per_camera_pct - b.cpu_per_camera_pct
                                    for b, o in zip(measured[0], measured[1])), 2)
    more = round(statistics.median((m.cpu_per_camera_pct - o.cpu_per_camera_pct) / max(1, viewers - 1)
                                   for o, m in zip(measured[1], measured[viewers])), 3)
    cost = "PASS" if added < TARGET_PER_CAMERA else "FAIL"
    kept = "PASS" if abs(many.kept_up - base.kept_up) <= KEPT_UP_SLACK else "FAIL"
    return [f"One viewer adds {added}% of a core per 1080p30 camera (target < {TARGET_PER_CAMERA}%): {cost}; "
            f"each further viewer {more}%.",
            f"{viewers} viewers of every camera: kept up {many.kept_up:g}, without a viewer {base.kept_up:g} "
            f"(target: unchanged, within {KEPT_UP_SLACK}): {kept}."]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.web", description=__doc__.split("\n\n")[0])
    p.add_argument("--cameras", type=int, default=8)
    p.add_argument("--viewers", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="bench-web-"))
    sink = DetectionSink(10, 30)
    try:
        video = make_video(folder, "1080p30")
        measured: dict[int, list[Row]] = {0: [], 1: [], args.viewers: []}
        for round_ in range(args.rounds):
            for r in measure(folder, sink, video, args.cameras, args.viewers):
                measured[r.viewers].append(r)
                print(f"round {round_ + 1}: {r.viewers} viewer(s): {r.cpu_per_camera_pct:g}% a camera, kept up "
                      f"{r.kept_up:g}, {r.fragments_per_s:g} fragments/s", file=sys.stderr, flush=True)
    finally:
        sink.close()
        shutil.rmtree(folder, ignore_errors=True)
    rows = [Row(n, round(statistics.median(r.cpu_per_camera_pct for r in runs), 2),
                round(statistics.median(r.kept_up for r in runs), 2),
                round(statistics.median(r.fragments_per_s for r in runs), 2)) for n, runs in measured.items()]
    print(f"Medians of {args.rounds} rounds, {WINDOW_S:g} s windows:\n")
    print(table(rows, args.cameras))
    print()
    for line in verdicts(rows, measured, args.viewers):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
