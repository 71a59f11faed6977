"""video-autotune against a real TorchServe with the model API on (autotune/config.properties):
a short sweep, and the watcher switching batch sizes under video-loadgen with no failed request."""

import json
import threading
import time

import pytest

from autotune import cli
from autotune.fit import LatencyFit
from autotune.management import Management
from autotune.sweep import Deployment
from autotune.watch import Policy, watch
from loadgen.frames import IMAGES, Format, FrameSource
from loadgen.metrics import calculate_metrics
from loadgen.runner import Target, run
from loadgen.schedule import Plan, Resolution
from tests.e2e.server import TorchServe
from tests.support import ROOT

MODEL = "frame_quality"


@pytest.fixture(scope="module")
def tuned(archives, tmp_path_factory):
    ts = TorchServe(tmp_path_factory.mktemp("autotune"), archives, config=ROOT / "autotune" / "config.properties")
    ts.start()
    yield ts
    ts.stop()


def _deployment(ts) -> Deployment:
    return Deployment(ts.inference_url, ts.management_url, ts.metrics_url, ts.workdir / "key_file.json",
                      ts.workdir / "model_store", MODEL)


def _flags(ts) -> list[str]:
    return ["--url", ts.inference_url, "--management-url", ts.management_url, "--metrics-url", ts.metrics_url,
            "--key-file", str(ts.workdir / "key_file.json"), "--model-store", str(ts.workdir / "model_store"),
            "--model", MODEL]


def test_a_short_sweep_fits_recommends_and_restores(tuned, tmp_path):
    started = time.monotonic()
    status = cli.main(["sweep", *_flags(tuned), "--fps", "8", "--streams", "2", "--sla-ms", "3000",
                       "--batch-sizes", "1,8", "--delays", "20", "--duration", "3", "--warmup", "1",
                       "--probe-repeats", "2", "--resolution", "160x120",
                       "--report", str(tmp_path / "sweep.json"), "--plot", str(tmp_path / "sweep.png"),
                       "--config-out", str(tmp_path / "lines.txt")])
    assert time.monotonic() - started < 60
    report = json.loads((tmp_path / "sweep.json").read_text())
    assert status == 0 and report["recommended"]["batchSize"] in (1, 8)
    assert [(c["batch_size"], c["max_batch_delay_ms"]) for c in report["cells"]] == [(1, 20), (8, 20)]
    assert all(c["all_ok"] for c in report["cells"])
    assert report["fit"]["a_ms"] > 0 and len(report["batch_samples"]) >= 10
    assert {f for f, _ in report["batch_samples"]} >= {1.0, 8.0}
    assert (tmp_path / "sweep.png").stat().st_size > 1000
    assert "maxBatchDelay: 20" in (tmp_path / "lines.txt").read_text()
    [version] = Management(tuned.management_url, tuned.workdir / "key_file.json").versions(MODEL)
    assert (version.batch_size, version.max_batch_delay_ms) == (32, 50)  # put back as found


def test_watch_switches_batch_size_under_load_without_a_failed_request(tuned):
    # The policy is given a latency model (2 ms/frame + 40 ms) so its choices depend on the rate
    # alone: 8 fps -> batch 1, 40 fps -> batch 4 (ladder 1, 4, 16, 30 % margin).
    policy = Policy(interval_s=1.0, hold_s=2.0, cooldown_s=2.0, margin=0.3, ladder=(1, 4, 16),
                    fit=LatencyFit(2.0, 40.0, 1.0, 0), drain_s=0.5)
    stop = threading.Event()
    applied = []
    switched_at = []
    watcher = threading.Thread(target=lambda: applied.extend(watch(_deployment(tuned), policy, stop,
                                                                   lambda old, new: switched_at.append(time.monotonic()))))
    plan = Plan(streams=2, fps=4.0, duration_s=45.0, resolutions=(Resolution(160, 120),), burst_fps=20.0,
                burst_start_s=14.0, burst_duration_s=16.0)
    target = Target(tuned.inference_url, MODEL, tuned.key("inference"))
    source = FrameSource(Format.JPEG, 1, 4, IMAGES)
    watcher.start()
    started = time.monotonic()
    try:
        result = run(plan, target, source, concurrency=64)
    finally:
        stop.set()
        watcher.join(timeout=120)
    metrics = calculate_metrics(result.records, plan.duration_s, 60_000.0)
    during = [t - started for t in switched_at if t - started < plan.duration_s]
    assert [s.batch_size for s in applied][:3] == [1, 4, 1][:len(applied)]
    assert len(during) >= 2, f"switches at {during} s into the load; applied {applied}"
    assert metrics.responses == {"200": metrics.requests_sent}, metrics.responses
    assert metrics.requests_sent == len(result.schedule) and not result.dropped
    versions = Management(tuned.management_url, tuned.workdir / "key_file.json").versions(MODEL)
    assert len(versions) == 1 and versions[0].batch_size == applied[-1].batch_size
