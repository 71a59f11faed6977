"""The README's ONNX model in three lines, as written: its three lines in a copy of what they need (archive.sh,
handler/, config.properties with this run's ports, the shared .venv), with an Ultralytics-style
graph as `model.onnx` and docs/models.md's `my_detector.yaml`; the detector answers, and
`torchserve --stop` from that directory stops it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import requests

from tests import planted, support
from tests.integration.test_onnx import SCENES, ULTRALYTICS
from tests.onnx_export import export
from tsutil import properties
from tsutil.server import env_port_offset, read_key, wait_until


def test_the_readmes_three_lines_serve_an_onnx_detector(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(support.ROOT / "archive.sh", repo)
    shutil.copytree(support.ROOT / "handler", repo / "handler", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    (repo / "config.properties").write_text(properties.overlay(properties.SHIPPED.read_text(),
                                                               properties.port_overrides(env_port_offset())))
    export(planted.Yolo(), repo / "model.onnx", 1, (640, 640), metadata=ULTRALYTICS)
    (repo / "my_detector.yaml").write_text(support.fenced_block(support.ROOT / "docs" / "models.md", "`my_detector.yaml`", "yaml"))
    lines = support.fenced_block(support.ROOT / "README.md", "An ONNX graph's batch", "bash")
    assert len(lines.strip().splitlines()) == 3
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # torchserve's pid file, apart from other servers'
    inference = properties.parse((repo / "config.properties").read_text())["inference_address"]
    try:
        with open(tmp_path / "readme.log", "w") as log:  # a file, not a pipe: TorchServe's Java keeps it open
            ran = subprocess.run(["bash", "-ec", lines], cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 timeout=600)
        assert ran.returncode == 0, (tmp_path / "readme.log").read_text()[-3000:]
        frame, expected = SCENES[2]  # 1280x720 into the graph's 640x640: scale 1/2

        def answer() -> requests.Response | None:
            try:
                return requests.post(f"{inference}/predictions/my_detector", data=support.png(frame), timeout=60,
                                     headers={"Authorization": f"Bearer {read_key(repo / 'key_file.json', 'inference')}"})
            except (requests.ConnectionError, OSError, KeyError, ValueError):
                return None

        assert wait_until(lambda: (r := answer()) is not None and r.status_code == 200, 180), \
            (repo / "logs" / "model_log.log").read_text(errors="replace")[-3000:]
        got = answer()
        assert got is not None
        detections = got.json()["frames"][0]["detections"]
        assert [(d["label"], d["box"], d["score"]) for d in detections] == expected
    finally:
        subprocess.run([str(repo / ".venv" / "bin" / "torchserve"), "--stop"], cwd=repo, env=env,
                       capture_output=True, timeout=120)
