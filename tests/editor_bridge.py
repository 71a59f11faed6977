"""`video-ingest --config CONFIG --web` as the editor's tests run it: the real CLI in a subprocess,
its cameras at a port where nothing listens (no camera server or TorchServe needed), its log at
DEBUG (the editor logs each parse of the camera list), its web API over real HTTP."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from tests.rtsp_server import free_port
from tests.support import ROOT

TOKEN = "editor-test-token-0123456789"
PARSED = "editor: parsing the camera list"
DOOR = {"name": "door", "polygon": [[0.1, 0.1], [0.4, 0.1], [0.4, 0.9]]}


def camera_list(names: list[str], port: int, zones: bool = True) -> str:
    """`names` at a dead port, tracked, each with two zones and a line (`zones`)."""
    text = "# cameras of the test: keep this comment\ndefaults:\n  track: true\ncameras:\n"
    for name in names:
        text += f"  - name: {name}\n    url: rtsp://127.0.0.1:{port}/{name}\n"
        if zones:
            text += ("    zones:\n      - name: door\n        polygon: [[0.1, 0.1], [0.4, 0.1], [0.4, 0.9]]\n"
                     "      - name: yard\n        polygon: [[0.5, 0.1], [0.9, 0.1], [0.9, 0.9]]\n"
                     "    lines: [{name: gate, from: [0.5, 0], to: [0.5, 1]}]\n")
    return text


def version_of(text: str) -> str:
    """A camera list's version, as docs/ingest.md gives it: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Bridge:
    """`video-ingest --config CONFIG --web` at DEBUG (the editor logs each parse of the list)."""

    def __init__(self, work: Path, config: Path, *extra: str) -> None:
        self.port = free_port()
        (work / "web.json").write_text(json.dumps({"web": {"key": TOKEN}}))
        self.log_path = work / "ingest.log"
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ingest.cli", "--config", str(config), "--url", f"http://127.0.0.1:{free_port()}",
             "--results", str(work / "results.jsonl"), "--web", f"127.0.0.1:{self.port}", "--web-token-file",
             str(work / "web.json"), "--log-level", "DEBUG", *extra],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self._log)
        self.wait("the web view", lambda: "the web view is on" in self.log())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def parses(self) -> int:
        return self.log().count(PARSED)

    def wait(self, what: str, condition: Callable[[], Any], timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while not (found := condition()):
            assert self.process.poll() is None, f"video-ingest exited: {self.log()[-2000:]}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.log()[-2000:]}"
            time.sleep(0.1)
        return found

    def scene(self, camera: str) -> dict[str, Any]:
        response = requests.get(f"http://127.0.0.1:{self.port}/api/cameras/{camera}/scene",
                                headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert response.status_code == 200, response.text
        return response.json()

    def put(self, camera: str, body: dict[str, Any]) -> requests.Response:
        return requests.put(f"http://127.0.0.1:{self.port}/api/cameras/{camera}/scene", json=body,
                            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)

    def close(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            assert self.process.wait(timeout=20) == 0, self.log()[-2000:]
        finally:
            self.process.kill()
            self._log.close()


