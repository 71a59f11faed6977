"""The real `video-ingest` CLI as a process on a camera list, its model server a port where nothing
listens (no TorchServe needed): its result lines by event, waited on while it runs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.rtsp_server import free_port
from tests.support import ROOT


class IngestProcess:
    def __init__(self, config: Path, results: Path) -> None:
        self.results = results
        self.process = subprocess.Popen([sys.executable, "-m", "ingest.cli", "--config", str(config), "--results",
                                         str(results), "--url", f"http://127.0.0.1:{free_port()}"],
                                        cwd=ROOT, stderr=subprocess.DEVNULL)

    def __enter__(self) -> IngestProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.process.kill()
        self.process.wait()

    def events(self, kind: str) -> list[dict[str, Any]]:
        text = self.results.read_text() if self.results.exists() else ""
        return [x for x in map(json.loads, text.splitlines()) if x.get("event") == kind]

    def wait(self, condition: Callable[[], object], timeout: float = 30) -> None:
        """Until `condition()` holds; fails past `timeout` or if the process ends first."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline and self.process.poll() is None
            time.sleep(0.05)

    def reload(self) -> None:
        self.process.send_signal(signal.SIGHUP)

    def stop(self) -> int:
        """SIGTERM, as a service manager stops it: its exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=15)
