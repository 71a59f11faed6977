"""video-loadgen against a real TorchServe: its counts agree with TorchServe's own counters."""

import json
import time

import numpy as np

from loadgen import cli
from tsutil import prom

MODEL = "frame_quality"


def _counters(server) -> tuple[float, float]:
    text = server.metrics()
    return prom.total(text, "ts_inference_requests_total", MODEL), prom.total(text, "video_frames_total", MODEL)


def _run(server, tmp_path, name, *flags):
    before = _counters(server)
    report_path = tmp_path / f"{name}.json"
    status = cli.main(["--url", server.inference_url, "--model", MODEL,
                       "--token-file", str(server.workdir / "key_file.json"), "--sla-ms", "60000",
                       "--no-progress", "--report", str(report_path), "--plot", str(tmp_path / f"{name}.png"),
                       *flags])
    report = json.loads(report_path.read_text())
    deadline = time.monotonic() + 10  # handler metrics reach the frontend through the worker log
    while True:
        after = _counters(server)
        delta = (after[0] - before[0], after[1] - before[1])
        if delta == (report["requests_sent"], report["frames_sent"]) or time.monotonic() > deadline:
            return status, report, delta
        time.sleep(0.25)


def test_a_burst_with_mixed_and_switching_resolutions(server, tmp_path):
    status, report, (requests, frames) = _run(
        server, tmp_path, "jpeg", "--streams", "3", "--fps", "8", "--duration", "3", "--burst-fps", "16",
        "--burst-start", "1", "--burst-duration", "1", "--resolution", "320x180", "--resolution", "256x144",
        "--switch", "2.2:240x136", "--format", "jpeg")
    assert report["frames_sent"] == 3 * (8 * 2 + 16 * 1)
    assert (requests, frames) == (report["requests_sent"], report["frames_sent"])
    assert report["responses"] == {"200": report["requests_sent"]}
    assert status == 0 and report["sla_met"]
    latencies = [r["latency_ms"] for r in report["records"]]
    assert report["latency_ms"]["p99"] == np.percentile(latencies, 99)
    assert {r["resolution"] for r in report["records"]} == {"320x180", "256x144", "240x136"}
    assert (tmp_path / "jpeg.png").stat().st_size > 1000


def test_npy_clips_count_frames_apart_from_requests(server, tmp_path):
    status, report, (requests, frames) = _run(
        server, tmp_path, "npy", "--streams", "2", "--fps", "12", "--duration", "2",
        "--resolution", "160x96", "--format", "npy", "--clip", "3")
    assert (report["requests_sent"], report["frames_sent"]) == (16, 48)
    assert (requests, frames) == (16, 48)
    assert report["responses"] == {"200": 16} and status == 0


def test_a_tight_sla_or_a_bad_token_fails_the_exit_status(server, tmp_path):
    assert cli.main(["--url", server.inference_url, "--model", MODEL, "--token", "wrong", "--no-progress",
                     "--streams", "1", "--fps", "4", "--duration", "0.5", "--resolution", "64x48"]) == 1
    assert cli.main(["--url", server.inference_url, "--model", MODEL, "--no-progress", "--sla-ms", "0",
                     "--token-file", str(server.workdir / "key_file.json"),
                     "--streams", "1", "--fps", "4", "--duration", "0.5", "--resolution", "64x48"]) == 1


def test_both_lanes_at_once_are_reported_separately(server, tmp_path):
    report_path = tmp_path / "lanes.json"
    status = cli.main(["--url", server.inference_url, "--model", MODEL,
                       "--realtime-model", "frame_quality_realtime", "--realtime-streams", "1",
                       "--token-file", str(server.workdir / "key_file.json"), "--sla-ms", "60000",
                       "--no-progress", "--report", str(report_path), "--streams", "3", "--fps", "6",
                       "--duration", "2", "--resolution", "320x180"])
    report = json.loads(report_path.read_text())
    lanes = report["lanes"]
    assert set(lanes) == {MODEL, "frame_quality_realtime"}
    assert lanes["frame_quality_realtime"]["requests_sent"] == 12
    assert lanes[MODEL]["requests_sent"] == 24
    assert lanes["frame_quality_realtime"]["responses"] == {"200": 12}
    assert status == 0
    assert set(server.batch_requests("frame_quality_realtime")) == {1}
