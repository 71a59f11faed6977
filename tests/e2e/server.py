"""A real TorchServe for end-to-end tests: `tsutil.server.TorchServe` plus what tests send and read.

It starts from a temporary directory with the shipped config.properties (plus any overlays), so
the worker cannot import the repo's `handler/`; `VIDEO_TS_PORT_OFFSET` moves its ports.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from tests.support import ROOT
from tsutil import server


def build_archives(store: Path, *extra: str) -> None:
    """Runs the shipped archive.sh into `store` (the demo archives, or one model with args)."""
    env = {**os.environ, "MODEL_STORE": str(store)}
    subprocess.run(["bash", str(ROOT / "archive.sh"), *extra], check=True, env=env,
                   stdout=subprocess.DEVNULL)


class TorchServe(server.TorchServe):
    """Starts `torchserve` in `workdir` with the archives of `store` (see `tsutil.server`)."""

    def get(self, path: str, **kwargs) -> requests.Response:
        return requests.get(self.inference_url + path, headers=self.auth(), timeout=30, **kwargs)

    def worker_rss_mb(self, model: str) -> float:
        """Resident memory of the model's (one) worker process, in MiB."""
        import psutil  # a TorchServe dependency

        [pid] = self.worker_pids(model)
        return psutil.Process(pid).memory_info().rss / 2**20

    def predict(self, model: str, body: bytes, content_type: str, headers: dict | None = None,
                session: requests.Session | None = None, timeout: float = 120) -> requests.Response:
        return (session or requests).post(
            f"{self.inference_url}/predictions/{model}", data=body, timeout=timeout,
            headers={**self.auth(), "Content-Type": content_type, **(headers or {})})

    def burst(self, model: str, payloads: list[tuple[bytes, str, dict]]) -> list[requests.Response]:
        """Sends all payloads at once (one connection each, released together by a barrier)."""
        barrier = threading.Barrier(len(payloads))
        auth = self.auth()

        def send(payload: tuple[bytes, str, dict]) -> requests.Response:
            body, content_type, headers = payload
            with requests.Session() as session:
                session.get(self.inference_url + "/ping", headers=auth, timeout=30)
                barrier.wait(timeout=60)
                return self.predict(model, body, content_type, headers, session)

        with ThreadPoolExecutor(len(payloads)) as pool:
            return list(pool.map(send, payloads))

    def model_log(self) -> str:
        return (self.workdir / "logs" / "model_log.log").read_text(errors="replace")

    def batch_frames(self, model: str = "frame_quality") -> list[int]:
        """Frames per batch of `model`, from the handler's per-batch log line."""
        pattern = rf"W-\d+-{re.escape(model)}_[\d.]+-stdout MODEL_LOG - batch: \d+ requests, (\d+) frames"
        return [int(n) for n in re.findall(pattern, self.model_log())]

    def batch_requests(self, model: str) -> list[int]:
        """Requests per batch of `model`, from the handler's per-batch log line."""
        pattern = rf"W-\d+-{re.escape(model)}_[\d.]+-stdout MODEL_LOG - batch: (\d+) requests"
        return [int(n) for n in re.findall(pattern, self.model_log())]
