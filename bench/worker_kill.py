"""`python -m bench.worker_kill`: what clients get when the worker is SIGKILLed under a trickle of frames.

A few closed-loop clients send small JPEG frames with short gaps, so TorchServe's batch aggregator
is often still gathering a batch (`maxBatchDelay`) when the worker dies. The worker is killed
`--kills` times, each after it is READY again. Prints every answer's count: the batch being run
gets 5xx (507 after SIGKILL, which TorchServe reads as the OOM killer's exit code); requests the
aggregator was gathering are dropped unanswered by TorchServe 0.12 and show as client timeouts.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import requests

from bench.torchserve import ROOT, Server
from loadgen.frames import Format, FrameSource
from loadgen.schedule import Resolution
from tsutil.server import wait_until


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=8)
    p.add_argument("--clients", type=int, default=6)
    p.add_argument("--timeout", type=float, default=15.0, help="client timeout, s (default %(default)s)")
    args = p.parse_args(argv)
    frame = FrameSource(Format.JPEG, distinct=1).payload(0, 0, Resolution(320, 240)).body
    answers: Counter[str] = Counter()
    lock, stop = threading.Lock(), threading.Event()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        subprocess.run(["bash", str(ROOT / "archive.sh")], check=True, stdout=subprocess.DEVNULL,
                       env={**os.environ, "MODEL_STORE": str(store)})
        with Server(Path(tmp) / "ts", store / "frame_quality.mar") as server:
            def client(gap_s: float) -> None:
                with requests.Session() as session:
                    while not stop.is_set():
                        try:
                            answer = str(session.post(
                                f"{server.inference_url}/predictions/frame_quality", data=frame,
                                timeout=args.timeout,
                                headers={**server.auth(), "Content-Type": "image/jpeg"}).status_code)
                        except requests.Timeout:
                            answer = "no answer (timeout)"
                        except requests.RequestException as error:
                            answer = type(error).__name__
                        with lock:
                            answers[answer] += 1
                        time.sleep(gap_s)

            threads = [threading.Thread(target=client, args=(random.uniform(0.01, 0.05),), daemon=True)
                       for _ in range(args.clients)]
            for thread in threads:
                thread.start()
            for kill in range(args.kills):
                time.sleep(random.uniform(2, 4))
                [pid] = server.worker_pids("frame_quality")
                os.kill(pid, signal.SIGKILL)
                wait_until(lambda old=pid: server.worker_status("frame_quality") == ["READY"]
                           and server.worker_pids("frame_quality") != [old], 60)
                print(f"kill {kill + 1}/{args.kills}: worker {pid} replaced", file=sys.stderr, flush=True)
            time.sleep(3)
            stop.set()
            for thread in threads:
                thread.join(args.timeout + 10)
    print(f"{'answer':<22} {'requests':>8}")
    for answer, count in sorted(answers.items()):
        print(f"{answer:<22} {count:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
