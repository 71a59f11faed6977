"""Video bench: JPEG per frame against H.264 segments, same 720p content at 30 fps, one run.

    python -m bench.video                      # both tables (about 2 minutes on 2 cores)
    python -m bench.video --decode-only        # the decoder table only (no TorchServe)
    python -m bench.video --json out.json      # also the figures as JSON
    python -m bench.video --gpu                # on a CUDA machine: NVDEC decode against the CPU's
    python -m bench.video --libraries          # PyAV and torchcodec (if installed) side by side

1. Decoder: frames/s of `handler.video.decode_segment` (PyAV, to rgb24, threads as shipped) on
   30-frame H.264 segments at 720p and 1080p, against Pillow decoding the same frames as JPEGs.
2. End to end: the shipped archive in a real TorchServe (bench.torchserve: shipped
   config.properties, ports moved by $VIDEO_TS_PORT_OFFSET), driven closed loop with about 60
   frames in flight, once with one JPEG per request and once with 30-frame H.264 segments
   (Annex-B and MP4) of the same camera (video-loadgen's frames, 720p at 30 fps): bytes on the
   wire per frame and frames/s answered 200.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import requests
from PIL import Image

from bench.torchserve import ROOT, Server
from handler.config import HandlerConfig
from handler.formats import Format as VideoFormat
from loadgen.frames import Format, FrameSource, encode
from loadgen.schedule import Resolution

HD = Resolution(1280, 720)
FULL_HD = Resolution(1920, 1080)
SEGMENT = 30


@dataclass(frozen=True, slots=True)
class DecodeRow:
    """Decoder speed on one resolution."""

    resolution: str
    h264_fps: float
    jpeg_fps: float


@dataclass(frozen=True, slots=True)
class WireRow:
    """One wire format end to end."""

    format: str
    frames_per_request: int
    clients: int
    bytes_per_frame: float
    achieved_fps: float
    p50_ms: float
    p99_ms: float
    answers: dict[str, int]


def _best_fps(fn, frames: int, repeats: int = 7) -> float:
    fn()  # warm-up: imports, codec tables
    best = min(_timed(fn) for _ in range(repeats))
    return frames / best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _decode_jpegs(bodies: list[bytes]) -> None:
    for body in bodies:
        np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))


def decode_table(resolutions=(HD, FULL_HD)) -> list[DecodeRow]:
    """frames/s decoding a 30-frame segment in-process, against the same frames as JPEGs."""
    from handler.video import decode_segment

    config = HandlerConfig()
    rows = []
    for size in resolutions:
        source = FrameSource(Format.H264, SEGMENT, distinct=1)
        segment = source.payload(0, 0, size).body
        frames = decode_segment(segment, VideoFormat.H264, None, config).frames
        jpegs = [encode([f], Format.JPEG).body for f in frames]

        rows.append(DecodeRow(
            str(size),
            _best_fps(functools.partial(decode_segment, segment, VideoFormat.H264, None, config), SEGMENT),
            _best_fps(functools.partial(_decode_jpegs, jpegs), SEGMENT),
        ))
    return rows


def _closed_loop(url: str, headers: dict[str, str], bodies: list[bytes], content_type: str,
                 frames_per_body: int, clients: int, duration_s: float) -> tuple[float, list[float], Counter]:
    """`clients` threads each sending the next body as soon as the last is answered.

    Returns:
        frames answered 200 per second, latencies (ms) and answers by status.
    """
    latencies: list[float] = []
    answers: Counter[str] = Counter()
    lock = threading.Lock()
    start = time.perf_counter()
    deadline = start + duration_s

    def client(index: int) -> None:
        with requests.Session() as session:
            n = index
            while time.perf_counter() < deadline:
                sent = time.perf_counter()
                try:
                    status = str(session.post(url, data=bodies[n % len(bodies)], timeout=120,
                                              headers={**headers, "Content-Type": content_type}).status_code)
                except requests.RequestException:
                    status = "error"
                with lock:
                    latencies.append((time.perf_counter() - sent) * 1000)
                    answers[status] += 1
                n += clients

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    return answers["200"] * frames_per_body / elapsed, latencies, answers


def wire_table(workdir: Path, duration_s: float = 15.0, frames_in_flight: int = 60,
               port_offset: int | None = None) -> list[WireRow]:
    """JPEG per frame vs H.264 segments through one TorchServe, same camera images.

    Closed loop: enough clients that about `frames_in_flight` frames are in flight (60: two
    batches of JPEGs, or two 30-frame segments, decoded in parallel by `decode_threads`).
    """
    store = workdir / "store"
    subprocess.run(["bash", str(ROOT / "archive.sh")], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "MODEL_STORE": str(store)})
    server = Server(workdir / "ts", store / "frame_quality.mar", port_offset=port_offset)
    rows = []
    try:
        server.start()
        url = f"{server.inference_url}/predictions/frame_quality"
        auth = {"Authorization": f"Bearer {server.key()}"}
        for fmt, clip in ((Format.JPEG, 1), (Format.H264, SEGMENT), (Format.MP4, SEGMENT)):
            source = FrameSource(fmt, clip, distinct=max(1, 60 // clip))
            bodies = [source.payload(0, f * clip, HD).body for f in range(source.distinct)]
            # one request first: the worker's first batch of a kind pays one-off costs (imports)
            requests.post(url, data=bodies[0], headers={**auth, "Content-Type": fmt.content_type},
                          timeout=120)
            clients = max(1, math.ceil(frames_in_flight / clip))
            fps, latencies, answers = _closed_loop(url, auth, bodies, fmt.content_type, clip,
                                                   clients, duration_s)
            rows.append(WireRow(fmt.value, clip, clients, sum(map(len, bodies)) / (len(bodies) * clip),
                                fps, float(np.percentile(latencies, 50)),
                                float(np.percentile(latencies, 99)), dict(answers)))
    finally:
        server.stop()
    return rows


def _pyav_decode(segment: bytes, threads: int) -> int:
    import av

    with av.open(io.BytesIO(segment), "r", format="h264") as container:
        stream = container.streams.video[0]
        stream.codec_context.thread_type = "AUTO"
        stream.codec_context.thread_count = threads
        return sum(1 for frame in container.decode(stream) if frame.to_ndarray(format="rgb24").size)


def _torchcodec_decode(segment: bytes, threads: int) -> int:
    from torchcodec.decoders import VideoDecoder  # needs FFmpeg's shared libraries

    decoder = VideoDecoder(segment, num_ffmpeg_threads=threads, dimension_order="NHWC")
    return sum(1 for i in range(len(decoder)) if decoder[i].numel())


def library_table(frames: int = 90, resolutions=(HD, FULL_HD), repeats: int = 7) -> list[dict]:
    """Each candidate library: does it import here, and decode + rgb24 frames/s, 1 and 2 threads."""
    import importlib.metadata

    rows = []
    segments = {size: FrameSource(Format.H264, frames, distinct=1).payload(0, 0, size).body
                for size in resolutions}
    for name, package, decode in (("PyAV", "av", _pyav_decode),
                                  ("torchcodec", "torchcodec", _torchcodec_decode)):
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            rows.append({"library": name, "version": None, "error": "not installed"})
            continue
        row: dict = {"library": name, "version": version, "error": None}
        try:
            start = time.perf_counter()
            decode(segments[resolutions[0]], 1)
            row["first_call_s"] = time.perf_counter() - start
            for size, segment in segments.items():
                for threads in (1, 2):
                    row[f"{size} x{threads}"] = _best_fps(
                        functools.partial(decode, segment, threads), frames, repeats)
        except (ImportError, OSError, RuntimeError) as err:
            root: BaseException = err
            while root.__cause__ is not None or root.__context__ is not None:
                root = root.__cause__ or root.__context__  # type: ignore[assignment]
            row["error"] = f"import fails: {type(root).__name__}: {str(root).splitlines()[0][:100]}"
        rows.append(row)
    return rows


def render_libraries(rows: list[dict]) -> str:
    lines = ["libraries (H.264 decode + rgb24, frames/s, best of 7; x1 / x2 = FFmpeg threads)"]
    for row in rows:
        if row.get("error"):
            lines.append(f"{row['library']:<11} {row['version'] or '-':<8} {row['error']}")
            continue
        speeds = "  ".join(f"{k} {v:.0f}" for k, v in row.items() if " x" in k)
        lines.append(f"{row['library']:<11} {row['version']:<8} {speeds}")
    return "\n".join(lines)


def render(decode_rows: list[DecodeRow], wire_rows: list[WireRow]) -> str:
    lines = ["decoder (in-process, one 30-frame segment, best of 7)",
             f"{'size':<10} {'H.264 fps':>10} {'JPEG fps':>9}"]
    lines += [f"{r.resolution:<10} {r.h264_fps:>10.0f} {r.jpeg_fps:>9.0f}" for r in decode_rows]
    if wire_rows:
        header = (f"{'format':<6} {'frames/req':>10} {'clients':>7} {'bytes/frame':>11} "
                  f"{'frames/s':>9} {'p50 ms':>7} {'p99 ms':>7}  answers")
        lines += ["", "end to end, 720p, closed loop (TorchServe, frame_quality)", header]
        for r in wire_rows:
            answers = " ".join(f"{k}:{v}" for k, v in r.answers.items())
            lines.append(f"{r.format:<6} {r.frames_per_request:>10} {r.clients:>7} "
                         f"{r.bytes_per_frame:>11.0f} {r.achieved_fps:>9.1f} {r.p50_ms:>7.0f} "
                         f"{r.p99_ms:>7.0f}  {answers}")
        jpeg = next(r for r in wire_rows if r.format == "jpeg")
        for r in wire_rows:
            if r is not jpeg and r.bytes_per_frame:
                lines.append(f"{r.format}: {jpeg.bytes_per_frame / r.bytes_per_frame:.1f}x fewer bytes "
                             f"per frame, {r.achieved_fps / max(jpeg.achieved_fps, 1e-9):.2f}x the frames/s of jpeg")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.video", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--decode-only", action="store_true", help="only the in-process decoder table")
    p.add_argument("--duration", type=float, default=15.0, help="seconds per format (default %(default)s)")
    p.add_argument("--in-flight", type=int, default=60,
                   help="frames in flight: clients = this / frames per request (default %(default)s)")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--libraries", action="store_true", help="only the decoding-library comparison")
    args = p.parse_args(argv)
    if args.libraries:
        print(render_libraries(library_table()))
        return 0
    decode_rows = decode_table()
    wire_rows: list[WireRow] = []
    if not args.decode_only:
        with tempfile.TemporaryDirectory(prefix="bench-video-") as tmp:
            wire_rows = wire_table(Path(tmp), args.duration, args.in_flight)
    print(render(decode_rows, wire_rows))
    if args.json:
        args.json.write_text(json.dumps({"decode": [asdict(r) for r in decode_rows],
                                         "wire": [asdict(r) for r in wire_rows]}, indent=2))
    ok = all(set(r.answers) == {"200"} for r in wire_rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
