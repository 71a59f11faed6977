"""A TorchServe started from a temporary directory with the shipped config.properties, one model.

Ports move by `port_offset` (default: $VIDEO_TS_PORT_OFFSET) so the bench can share a machine.
"""

from __future__ import annotations

import json
from collections.abc import Callable
import os
import shutil
import subprocess
import time
from pathlib import Path

import requests

from tskeys import read_key

ROOT = Path(__file__).resolve().parents[1]


def archive(store: Path, name: str, handler: Path, model: Path, config: Path,
            extra: Path | None = None) -> Path:
    """Packages `model` with `handler` into `store/name.mar` (torch-model-archiver)."""
    command = ["torch-model-archiver", "--model-name", name, "--version", "1.0",
               "--serialized-file", str(model), "--handler", str(handler), "--config-file", str(config),
               "--export-path", str(store), "--force"]
    if extra is not None:
        command += ["--extra-files", str(extra)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return store / f"{name}.mar"


def port_overrides(offset: int) -> str:
    """config.properties lines that move every port by `offset` (later keys win)."""
    return f"""
inference_address=http://127.0.0.1:{8080 + offset}
management_address=http://127.0.0.1:{8081 + offset}
metrics_address=http://127.0.0.1:{8082 + offset}
grpc_inference_port={7070 + offset}
grpc_management_port={7071 + offset}
initial_worker_port={9000 + offset}
"""


def start(workdir: Path, env: dict[str, str], ready: Callable[[], bool], timeout_s: float) -> None:
    """`torchserve --start` in `workdir` (config.properties there), then waits for `ready()`.

    Raises:
        TimeoutError: not ready in time; the server is stopped again.
    """
    subprocess.run(["torchserve", "--start", "--ncs", "--ts-config", "config.properties"],
                   cwd=workdir, env=env, check=True, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    stop(workdir, env)
    raise TimeoutError(f"TorchServe not ready in {timeout_s} s; see {workdir / 'logs'}")


def stop(workdir: Path, env: dict[str, str]) -> None:
    """`torchserve --stop` for the server started in `workdir` (its TMPDIR holds the pid file)."""
    subprocess.run(["torchserve", "--stop"], cwd=workdir, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


class Server:
    """`torchserve --start` in `workdir` serving `mar` as model `name`; stop() stops it."""

    def __init__(self, workdir: Path, mar: Path, name: str = "frame_quality",
                 port_offset: int | None = None, batch_size: int = 32, max_batch_delay_ms: int = 50) -> None:
        offset = int(os.environ.get("VIDEO_TS_PORT_OFFSET", "0")) if port_offset is None else port_offset
        self.workdir, self.name = workdir, name
        (workdir / "tmp").mkdir(parents=True, exist_ok=True)
        (workdir / "handler").mkdir(exist_ok=True)
        (workdir / "model_store").mkdir(exist_ok=True)
        shutil.copy(mar, workdir / "model_store" / f"{name}.mar")
        shutil.copy(ROOT / "handler" / "metrics.yaml", workdir / "handler" / "metrics.yaml")
        models = {name: {"1.0": {"defaultVersion": True, "marName": f"{name}.mar", "minWorkers": 1,
                                 "maxWorkers": 1, "batchSize": batch_size,
                                 "maxBatchDelay": max_batch_delay_ms, "responseTimeout": 120}}}
        config = (ROOT / "config.properties").read_text() + f"""
# bench overrides: one model, ports moved by {offset}
load_models={name}.mar
models={json.dumps(models)}
""" + port_overrides(offset)
        (workdir / "config.properties").write_text(config)
        self.inference_url = f"http://127.0.0.1:{8080 + offset}"
        self.management_url = f"http://127.0.0.1:{8081 + offset}"
        self.metrics_url = f"http://127.0.0.1:{8082 + offset}"
        self.env = {**os.environ, "TMPDIR": str(workdir / "tmp")}

    def key(self, api: str = "inference") -> str:
        return read_key(self.workdir / "key_file.json", api)

    def start(self, timeout_s: float = 120.0) -> Server:
        start(self.workdir, self.env, self._ready, timeout_s)
        return self

    def _ready(self) -> bool:
        try:
            answer = requests.get(f"{self.management_url}/models/{self.name}", timeout=5,
                                  headers={"Authorization": f"Bearer {self.key('management')}"})
            return answer.ok and [w["status"] for w in answer.json()[0]["workers"]] == ["READY"]
        except (requests.RequestException, OSError, KeyError, IndexError, ValueError):
            return False

    def stop(self) -> None:
        stop(self.workdir, self.env)

    def metrics(self) -> str:
        return requests.get(self.metrics_url + "/metrics", timeout=10).text

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
