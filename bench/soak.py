"""A long soak with key rotation (not CI): frames answered / sent, worker restarts, RSS floor growth.

    python -m bench.soak                       # 4 cameras x 15 fps, 720p JPEG, 30 min, 1-minute keys

TorchServe starts with the shipped config.properties plus `token_expiration_min=1` and `video-keys`
beside it, as `./serve.sh` runs them; `video-loadgen` (HTTP, `--token-file`, so it re-reads the
key when refused) drives the batched lane. Every `--sample-s` seconds the worker's pid and
resident memory are read. Printed: frames answered 200 / sent (and what the others got), worker
restarts (pid changes), key renewals (from video-keys' log), and the RSS floor (the minimum over
each window of `--floor-window-s`) in the first and the last window, whose difference is the
growth a leak would show.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from loadgen import cli


def soak(workdir: Path, streams: int = 4, fps: float = 15.0, duration_s: float = 1800.0,
         resolution: str = "1280x720", model: str = "frame_quality", sample_s: float = 10.0,
         floor_window_s: float = 300.0, expiration_min: float = 1.0) -> dict:
    from tests.e2e.server import TorchServe, build_archives
    from tests.support import ROOT

    store = workdir / "store"
    build_archives(store)
    server = TorchServe(workdir / "ts", store, overlays=[f"token_expiration_min={expiration_min:g}\n"]
                        ).start(timeout_s=300)
    keys_log = (workdir / "keys.log").open("w")
    keys = subprocess.Popen([sys.executable, "-m", "tskeys.rotate", "--config", str(server.workdir / "config.properties"),
                             "--key-file", str(server.workdir / "key_file.json")],
                            stdout=keys_log, stderr=subprocess.STDOUT, cwd=ROOT)
    samples: list[tuple[float, int, float]] = []  # (t, pid, rss MiB)
    stop = threading.Event()
    start = time.monotonic()

    def sample() -> None:
        while not stop.is_set():
            try:
                [pid] = server.worker_pids(model)
                samples.append((time.monotonic() - start, pid, server.worker_rss_mb(model)))
            except Exception:  # a worker restarting has no pid for a moment
                pass
            stop.wait(sample_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    report_path = workdir / "soak.json"
    try:
        status = cli.main(["--url", server.inference_url, "--model", model, "--token-file",
                           str(server.workdir / "key_file.json"), "--streams", str(streams), "--fps", str(fps),
                           "--duration", str(duration_s), "--resolution", resolution, "--sla-ms", "1000",
                           "--max-lag-ms", "5000", "--no-progress", "--report", str(report_path)])
    finally:
        stop.set()
        sampler.join(30)
        keys.terminate()
        keys.wait(60)
        keys_log.close()
        server.stop()
    report = json.loads(report_path.read_text())
    pids = [pid for _, pid, _ in samples]
    restarts = sum(1 for a, b in zip(pids, pids[1:]) if a != b)
    first = [rss for t, _, rss in samples if t <= floor_window_s]
    last = [rss for t, _, rss in samples if t >= samples[-1][0] - floor_window_s] if samples else []
    renewals = len(re.findall(r"renewed the inference key", (workdir / "keys.log").read_text()))
    return {"streams": streams, "fps": fps, "duration_s": duration_s, "resolution": resolution, "model": model,
            "frames_sent": report["frames_sent"], "frames_dropped": report.get("frames_dropped", 0),
            "responses": report["responses"], "latency_ms": report["latency_ms"], "exit_status": status,
            "worker_restarts": restarts, "inference_key_renewals": renewals,
            "rss_floor_first_mb": min(first) if first else None, "rss_floor_last_mb": min(last) if last else None,
            "rss_samples": len(samples)}


def table(result: dict) -> str:
    ok = result["responses"].get("200", 0)
    sent = result["frames_sent"] + result["frames_dropped"]
    growth = (result["rss_floor_last_mb"] - result["rss_floor_first_mb"]
              if result["rss_floor_first_mb"] is not None else float("nan"))
    return "\n".join([
        f"soak: {result['streams']} cameras x {result['fps']:g} fps, {result['resolution']} JPEG, "
        f"{result['duration_s']:g} s, model {result['model']}, keys renewed {result['inference_key_renewals']} times",
        f"frames answered 200 / sent: {ok} / {sent} ({ok / sent:.2%}); other answers: "
        f"{ {k: v for k, v in result['responses'].items() if k != '200'} }, dropped unsent: {result['frames_dropped']}",
        f"latency p50 {result['latency_ms']['p50']:.0f} ms, p99 {result['latency_ms']['p99']:.0f} ms",
        f"worker restarts: {result['worker_restarts']}",
        f"worker RSS floor: first window {result['rss_floor_first_mb']:.0f} MiB, last window "
        f"{result['rss_floor_last_mb']:.0f} MiB, growth {growth:+.0f} MiB ({result['rss_samples']} samples)"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--fps", type=float, default=15.0)
    p.add_argument("--duration", type=float, default=1800.0, help="seconds (default 1800)")
    p.add_argument("--resolution", default="1280x720")
    p.add_argument("--model", default="frame_quality")
    p.add_argument("--expiration-min", type=float, default=1.0, help="token_expiration_min (default 1)")
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args(argv)

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt  # `kill` stops TorchServe and video-keys too (the finally blocks)

    signal.signal(signal.SIGTERM, interrupted)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        result = soak(Path(tmp), args.streams, args.fps, args.duration, args.resolution, args.model,
                      expiration_min=args.expiration_min)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
