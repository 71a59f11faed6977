"""The cameras bench (bench/cameras.py) in its short form: one 720p camera on the quiet street,
gst-rtsp-server, the real `video-ingest`, a real TorchServe with the ONNX detector, motion off and
on. The whole matrix is run by hand (docs/ingest.md); here the command runs end to end, prints its
table, and its numbers agree with each other: motion on sends the model fewer frames than motion
off, and carries at least as much of the camera."""

from __future__ import annotations

import json
import subprocess
import sys

from bench import cameras
from tests.support import ROOT
from tsutil.server import env_port_offset

#: The bench's own TorchServe sits this far above `$VIDEO_TS_PORT_OFFSET` (clear of the shared one at +100).
PORT_OFFSET = 300


def test_the_short_bench_prints_its_table_and_motion_on_sends_fewer_frames_to_the_model(tmp_path):
    report = tmp_path / "cameras.json"
    done = subprocess.run([sys.executable, "-m", "bench.cameras", "--short", "--port-offset",
                           str(env_port_offset() + PORT_OFFSET), "--cache", str(tmp_path / "clips"), "--json", str(report)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    table = [line for line in done.stdout.splitlines() if line.startswith("|")]
    assert table[0] == "| " + " | ".join(cameras.HEAD) + " |" and len(table) == 4, done.stdout
    cells = [line.split(" | ") for line in table[2:]]
    assert [c[:4] for c in cells] == [["| quiet", "720p", "segments", cameras.SETTINGS[s]] for s in ("off", "on")]
    assert "decode-only limit (cameras): not measured" in done.stdout and "machine: " in done.stdout
    result = json.loads(report.read_text())
    assert result["presence"] == {"quiet": 0.1} and result["plan"]["max_cameras"] == 1
    off, on = result["rows"]
    for row in (off, on):
        trial = row["trial"]
        assert [t["cameras"] for t in row["trials"]] == [1] and trial["cameras"] == 1 and trial["silent"] == 0
        assert 7 < trial["seconds"] < 10 and trial["errors"] == 0 and trial["answered"] > 0
        assert trial["lag_p50_ms"] <= trial["lag_p99_ms"] and row["cpu_per_camera_pct"] > 0
        assert row["model_frames_per_camera_s"] == trial["looked"] / trial["seconds"] <= 15 * 1.05
        assert row["carried"] == (1.0 if row["behind"] is None else round(min(1.0, trial["answered"] / trial["seconds"] / 15), 2))
    # Motion off: every frame answered went through the model, whole; motion on: few did, each in a region or more.
    assert off["trial"]["looked"] == off["trial"]["answered"] and off["trial"]["regions"] == 0
    assert 0 < on["trial"]["looked"] <= on["trial"]["regions"] and on["trial"]["looked"] < on["trial"]["answered"]
    assert on["model_frames_per_camera_s"] < off["model_frames_per_camera_s"] / 2
    assert on["carried"] >= off["carried"]
