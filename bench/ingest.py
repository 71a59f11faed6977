"""video-ingest bench: CPU per camera and end-to-end lag, against ffmpeg image2pipe + curl, one run.

    python -m bench.ingest                 # the table (about 4 minutes on 2 cores)
    python -m bench.ingest --full          # also 32 cameras in the decoding rows (saturates 2 cores)
    python -m bench.ingest --json out.json

1. CPU: one `video-ingest` process (the real CLI) with 1, 8 and 32 cameras, each a looping
   H.264 MPEG-TS file paced at its own rate (720p15 and 1080p30, a key frame a second, made by
   the ffmpeg CLI), sending to a sink HTTP server in this process that answers at once, so only
   the bridge's work is measured: its process CPU (all threads, user + system, psutil) over a
   window, per camera, in % of one core. `segments` remuxes only; `frames` decodes every frame
   and sends 5 JPEG frames a second. The baseline is what a user would write instead: per camera
   `ffmpeg -re -stream_loop -1 -i FILE -vf fps=5 -f image2pipe -c:v mjpeg -` with each JPEG
   posted by its own `curl` (one at a time per camera); CPU of ffmpeg and the curls. `kept up`:
   requests answered in the window over the requests the cameras' rate calls for.
2. Lag: two live cameras (gst-rtsp-server, 720p15) through video-ingest into a real TorchServe
   (the shipped frame_quality archive, far below capacity): p50/p99 of `latency_ms`, capture of
   each frame to its answer, in both modes. A segment's first frame waits for the segment to be
   cut (about 1 s) before it is sent: that is the price of not decoding.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
WARMUP_S = 3.0
WINDOW_S = 8.0
FRAMES_FPS = 5.0
RESOLUTIONS = {"720p15": (1280, 720, 15), "1080p30": (1920, 1080, 30)}


@dataclass(frozen=True, slots=True)
class Row:
    """One measured configuration."""

    producer: str
    video: str
    cameras: int
    cpu_per_camera_pct: float | None
    kept_up: float | None
    lag_p50_ms: float | None = None
    lag_p99_ms: float | None = None


class Sink:
    """An HTTP server that answers every POST at once with one frame of outputs (no model)."""

    def __init__(self) -> None:
        answer = json.dumps({"frames": [{"width": 0, "height": 0, "outputs": {}}]}).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()


def make_video(folder: Path, name: str, seconds: int = 10) -> Path:
    """A test pattern in H.264 MPEG-TS at `RESOLUTIONS[name]`, a key frame every second."""
    width, height, fps = RESOLUTIONS[name]
    out = folder / f"{name}.ts"
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=size={width}x{height}:rate={fps}",
                    "-t", str(seconds), "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
                    "-g", str(fps), "-bf", "0", "-f", "mpegts", str(out)], check=True)
    return out


def _cpu(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def _count_answers(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if '"status": 200' in line)


def bridge_cpu(folder: Path, sink: Sink, mode: str, video: Path, name: str, cameras: int) -> Row:
    """The CLI with `cameras` looping file cameras in `mode`, sending to the sink."""
    work = Path(tempfile.mkdtemp(dir=folder))
    extra = f"    mode: frames\n    sample_fps: {FRAMES_FPS:g}\n" if mode == "frames" else ""
    (work / "cameras.yaml").write_text("cameras:\n" + "".join(
        f"  - name: cam-{i}\n    url: {video}\n    loop: true\n{extra}" for i in range(cameras)))
    results = work / "results.jsonl"
    process = subprocess.Popen([sys.executable, "-m", "ingest.cli", "--config", str(work / "cameras.yaml"),
                                "--url", sink.url, "--token-file", str(work / "none.json"), "--results", str(results),
                                "--log-level", "WARNING"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(WARMUP_S)
        proc = [psutil.Process(process.pid)]
        cpu0, answered0, t0 = _cpu(proc), _count_answers(results), time.monotonic()
        time.sleep(WINDOW_S)
        cpu1, answered1, t1 = _cpu(proc), _count_answers(results), time.monotonic()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    per_second = FRAMES_FPS if mode == "frames" else 1.0  # a segment a second (a key frame a second)
    expected = cameras * per_second * (t1 - t0)
    return Row(f"video-ingest {mode}", name, cameras, round(100 * (cpu1 - cpu0) / (t1 - t0) / cameras, 2),
               round((answered1 - answered0) / expected, 2))


class _FfmpegCurl:
    """One camera of the baseline: ffmpeg writing JPEGs to a pipe, each posted by curl."""

    def __init__(self, source: list[str], url: str, key: str | None = None) -> None:
        self.process = subprocess.Popen(
            ["ffmpeg", "-v", "error", *source, "-vf", f"fps={FRAMES_FPS:g}",
             "-f", "image2pipe", "-c:v", "mjpeg", "-q:v", "5", "-"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.url = url
        self.auth = ["-H", f"Authorization: Bearer {key}"] if key else []
        self.posted = 0
        self.lags: list[float] = []
        self.curl_cpu = 0.0
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        while True:
            chunk = self.process.stdout.read1(1 << 16)
            if not chunk:
                return
            buffer += chunk
            while (end := buffer.find(b"\xff\xd9")) >= 0:
                jpeg, buffer = buffer[: end + 2], buffer[end + 2:]
                self._post(jpeg)

    def _post(self, jpeg: bytes) -> None:
        started = time.monotonic()
        curl = psutil.Popen(["curl", "-s", "-o", "/dev/null", "-H", "Content-Type: image/jpeg", *self.auth,
                             "--data-binary", "@-", f"{self.url}/predictions/frame_quality"],
                            stdin=subprocess.PIPE)
        curl.communicate(jpeg)
        self.lags.append((time.monotonic() - started) * 1000)
        self.posted += 1


def baseline_cpu(video: Path, name: str, sink: Sink, cameras: int) -> Row:
    """`cameras` ffmpeg + curl pipelines; CPU of ffmpeg (psutil) and of the curls (rusage)."""
    source = ["-re", "-stream_loop", "-1", "-i", str(video)]
    pipelines = [_FfmpegCurl(source, sink.url) for _ in range(cameras)]
    try:
        time.sleep(WARMUP_S)
        procs = [psutil.Process(p.process.pid) for p in pipelines]
        children0 = os.times()
        cpu0, posted0, t0 = _cpu(procs), sum(p.posted for p in pipelines), time.monotonic()
        time.sleep(WINDOW_S)
        cpu1, posted1, t1 = _cpu(procs), sum(p.posted for p in pipelines), time.monotonic()
        children1 = os.times()
    finally:
        for pipeline in pipelines:
            pipeline.process.kill()
            pipeline.process.wait(timeout=30)
    curls = (children1.children_user + children1.children_system) - (children0.children_user + children0.children_system)
    cpu = (cpu1 - cpu0) + curls
    return Row("ffmpeg image2pipe + curl", name, cameras, round(100 * cpu / (t1 - t0) / cameras, 2),
               round((posted1 - posted0) / (cameras * FRAMES_FPS * (t1 - t0)), 2))


def lag(folder: Path, port_offset: int | None) -> list[Row]:
    """Two live RTSP cameras at 720p15 into a real TorchServe, in both modes."""
    from bench.torchserve import Server
    from tests.rtsp_server import RtspServer

    store = folder / "store"
    subprocess.run(["bash", str(ROOT / "archive.sh")], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "MODEL_STORE": str(store)})
    rows = []
    with Server(folder / "ts", store / "frame_quality.mar", port_offset=port_offset) as server, \
            RtspServer({"a": (1280, 720, 15), "b": (1280, 720, 15)}) as cameras:
        for mode in ("segments", "frames"):
            results = folder / f"lag-{mode}.jsonl"
            args = [a for name in ("a", "b") for a in ("--camera", f"{name}={cameras.url(name)}")]
            process = subprocess.Popen([sys.executable, "-m", "ingest.cli", *args, "--mode", mode,
                                        "--url", server.inference_url, "--token-file",
                                        str(server.workdir / "key_file.json"), "--results", str(results),
                                        "--duration", str(WARMUP_S + 2 * WINDOW_S), "--log-level", "WARNING"],
                                       cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            process.wait(timeout=120)
            lines = [json.loads(line) for line in results.read_text().splitlines()]
            start = min(x["capture_time"] for x in lines if x.get("status") == 200) + WARMUP_S
            lags = [x["latency_ms"] for x in lines if x.get("status") == 200 and x["capture_time"] >= start]
            rows.append(Row(f"video-ingest {mode} (TorchServe, RTSP)", "720p15", 2, None, None,
                            *_percentiles(lags)))
        pipelines = [_FfmpegCurl(["-rtsp_transport", "tcp", "-i", cameras.url(n)], server.inference_url,
                                 server.key()) for n in ("a", "b")]
        time.sleep(WARMUP_S + 2 * WINDOW_S)
        for pipeline in pipelines:
            pipeline.process.kill()
        lags = sorted(x for p in pipelines for x in p.lags[int(WARMUP_S * FRAMES_FPS):])
        rows.append(Row("ffmpeg image2pipe + curl (TorchServe, RTSP; from ffmpeg's output)", "720p15", 2,
                        None, None, *_percentiles(lags)))
    return rows


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return round(statistics.median(ordered), 1), round(ordered[int(0.99 * (len(ordered) - 1))], 1)


def table(rows: list[Row]) -> str:
    head = ["producer", "video", "cameras", "CPU/camera (% core)", "kept up", "lag p50 ms", "lag p99 ms"]
    cells = [[r.producer, r.video, str(r.cameras), _fmt(r.cpu_per_camera_pct), _fmt(r.kept_up),
              _fmt(r.lag_p50_ms), _fmt(r.lag_p99_ms)] for r in rows]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(c) + " |" for c in cells])


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="32 cameras in the decoding rows too")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    parser.add_argument("--no-lag", action="store_true", help="skip the TorchServe lag rows")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sink = Sink()
        videos = {name: make_video(folder, name) for name in RESOLUTIONS}
        for name, video in videos.items():
            for cameras in (1, 8, 32):
                rows.append(bridge_cpu(folder, sink, "segments", video, name, cameras))
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
            for cameras in (1, 8, 32) if args.full else (1, 8):
                rows.append(bridge_cpu(folder, sink, "frames", video, name, cameras))
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
                rows.append(baseline_cpu(video, name, sink, cameras))
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
        sink.close()
        if not args.no_lag:
            rows += lag(folder, None)
    print(table(rows))
    model = re.sub(r"\s+", " ", _cpu_model())
    print(f"\n{psutil.cpu_count()} cores ({model}); CPU over {WINDOW_S:g} s after {WARMUP_S:g} s of warm-up")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0


def _cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1] for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")).strip()
    except (OSError, StopIteration):
        return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
