"""A real TorchServe, started from a temporary directory with the shipped config.properties."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from bench.torchserve import port_overrides, start, stop
from tskeys import KeyFileError, read_key
from tests.support import ROOT


def build_archives(store: Path, *extra: str) -> None:
    """Runs the shipped archive.sh into `store` (the demo archives, or one model with args)."""
    env = {**os.environ, "MODEL_STORE": str(store)}
    subprocess.run(["bash", str(ROOT / "archive.sh"), *extra], check=True, env=env,
                   stdout=subprocess.DEVNULL)


class TorchServe:
    """Starts `torchserve` in `workdir` with copies of config.properties, the metrics YAML and
    the archives of `store`; its own TMPDIR keeps its pid file apart from other instances."""

    def __init__(self, workdir: Path, store: Path, config: Path = ROOT / "config.properties") -> None:
        self.workdir = workdir
        self.env = {**os.environ, "TMPDIR": str(workdir / "tmp")}
        (workdir / "tmp").mkdir(parents=True, exist_ok=True)
        (workdir / "handler").mkdir(exist_ok=True)
        shutil.copy(config, workdir / "config.properties")
        offset = int(os.environ.get("VIDEO_TS_PORT_OFFSET", "0"))  # several runs on one machine
        if offset:
            with (workdir / "config.properties").open("a") as out:
                out.write(port_overrides(offset))
        shutil.copy(ROOT / "handler" / "metrics.yaml", workdir / "handler" / "metrics.yaml")
        shutil.copytree(store, workdir / "model_store", dirs_exist_ok=True)
        properties = self.properties()
        self.inference_url = properties["inference_address"]
        self.management_url = properties["management_address"]
        self.metrics_url = properties["metrics_address"]
        self.models = [m.removesuffix(".mar") for m in properties["load_models"].split(",")]

    def properties(self) -> dict[str, str]:
        text = (self.workdir / "config.properties").read_text().replace("\\\n", "")
        return dict(line.split("=", 1) for line in text.splitlines()
                    if "=" in line and not line.lstrip().startswith("#"))

    def start(self, timeout: float = 120.0) -> TorchServe:
        start(self.workdir, self.env, self._ready, timeout)
        return self

    def stop(self) -> None:
        stop(self.workdir, self.env)

    def _ready(self) -> bool:
        try:
            if self.get("/ping").status_code != 200:
                return False
            return all(self.worker_status(m) == ["READY"] for m in self.models)
        except (requests.ConnectionError, FileNotFoundError, KeyError, json.JSONDecodeError, KeyFileError):
            return False

    def key(self, api: str) -> str:
        return read_key(self.workdir / "key_file.json", api)

    def auth(self, api: str = "inference") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key(api)}"}

    def get(self, path: str, **kwargs) -> requests.Response:
        return requests.get(self.inference_url + path, headers=self.auth(), timeout=30, **kwargs)

    def worker_status(self, model: str) -> list[str]:
        answer = requests.get(f"{self.management_url}/models/{model}", headers=self.auth("management"),
                              timeout=10).json()
        return [w["status"] for w in answer[0]["workers"]]

    def worker_pids(self, model: str) -> list[int]:
        answer = requests.get(f"{self.management_url}/models/{model}", headers=self.auth("management"),
                              timeout=10).json()
        return [w["pid"] for w in answer[0]["workers"]]

    def worker_rss_mb(self, model: str) -> float:
        """Resident memory of the model's (one) worker process, in MiB."""
        import psutil  # a TorchServe dependency

        [pid] = self.worker_pids(model)
        return psutil.Process(pid).memory_info().rss / 2**20

    def predict(self, model: str, body: bytes, content_type: str, headers: dict | None = None,
                session: requests.Session | None = None) -> requests.Response:
        return (session or requests).post(
            f"{self.inference_url}/predictions/{model}", data=body, timeout=120,
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

    def metrics(self) -> str:
        return requests.get(self.metrics_url + "/metrics", timeout=10).text
