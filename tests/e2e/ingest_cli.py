"""`video-ingest` as a user runs it, for the end-to-end tests: the real CLI in a subprocess, its
results file and metrics port read while it runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.server import TorchServe
from tests.rtsp_server import free_port
from tests.support import ROOT
from tsutil import prom


class Ingest:
    """`video-ingest` as a user runs it, its results file and metrics port read while it runs."""

    def __init__(self, work: Path, server: TorchServe, args: list[str], env: dict[str, str] | None = None,
                 model: str = "frame_quality") -> None:
        self.results = work / "results.jsonl"
        self.stderr_path = work / "ingest.log"
        self.metrics_port = free_port()
        command = [sys.executable, "-m", "ingest.cli", "--url", server.inference_url, "--model", model,
                   "--token-file", str(server.workdir / "key_file.json"), "--results", str(self.results),
                   "--metrics-port", str(self.metrics_port), *args]
        self._stderr = self.stderr_path.open("w")
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self._stderr,
                                        env={**os.environ, **(env or {})})

    def lines(self) -> list[dict[str, Any]]:
        text = self.results.read_text() if self.results.exists() else ""
        return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]

    def answers(self, camera: str, since: int = 0) -> list[dict[str, Any]]:
        """Result lines (not events) of `camera`, from line `since` of the file on."""
        return [x for x in self.lines()[since:] if x["camera"] == camera and "event" not in x]

    def events(self, camera: str | None, event: str, since: int = 0) -> list[dict[str, Any]]:
        return [x for x in self.lines()[since:] if x["camera"] == camera and x.get("event") == event]

    def wait(self, what: str, condition: Callable[[], Any], timeout: float = 40.0) -> Any:
        """Polls until `condition()` is truthy; fails naming `what` and the log's tail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = condition()
            if found:
                return found
            assert self.process.poll() is None, f"video-ingest exited {self.process.returncode}: {self.log()[-2000:]}"
            time.sleep(0.2)
        pytest.fail(f"timed out waiting for {what}; last lines: {self.lines()[-5:]}; log: {self.log()[-1500:]}")

    def metrics(self) -> str:
        return requests.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text

    def metric(self, name: str, **labels: str) -> float:
        return prom.total(self.metrics(), name, **labels)

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self, timeout: float = 15.0) -> tuple[int, float]:
        """SIGTERM; returns the exit status and the seconds it took."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=timeout)
        self._stderr.close()
        return code, time.monotonic() - started

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self._stderr.close()
