"""video-autotune against a real TorchServe with the model API on (the autotune/config.properties
overlay): a short sweep, and the watcher switching batch sizes under video-loadgen with no failed
request."""

import json
import threading
import time

import pytest

from autotune import cli, engines
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
from tsutil import properties

MODEL = "frame_quality"
PHASE_S = 300.0  # how long one traffic phase may wait for its switch (worker starts are slow here)
CHUNK_S = 4.0  # load is sent in back-to-back video-loadgen runs of this length


@pytest.fixture(scope="module")
def tuned(archives, tmp_path_factory):
    ts = TorchServe(tmp_path_factory.mktemp("autotune"), archives,
                    overlays=[ROOT / "autotune" / "config.properties", properties.only(MODEL)])
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
    status = cli.main(["sweep", *_flags(tuned), "--fps", "8", "--streams", "2", "--sla-ms", "3000",
                       "--batch-sizes", "1,8", "--delays", "20", "--duration", "3", "--warmup", "1",
                       "--probe-repeats", "2", "--resolution", "160x120",
                       "--report", str(tmp_path / "sweep.json"), "--plot", str(tmp_path / "sweep.png"),
                       "--config-out", str(tmp_path / "lines.txt")])
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
    # The policy is given a latency model (2 ms/frame + 140 ms: batch 1 serves 7 fps, batch 4 27 fps)
    # and no queue-wait rule, so its choices depend on the rate alone: 2 fps -> batch 1, 8 fps ->
    # batch 4 (ladder 1, 4, 16, 30 % margin). The rates are low enough that the real handler keeps
    # up at batch 1 while a new worker starts. Each traffic phase lasts until the watcher has made
    # its switch, not for a set time.
    policy = Policy(interval_s=1.0, hold_s=2.0, cooldown_s=2.0, margin=0.3, ladder=(1, 4, 16),
                    fit=LatencyFit(2.0, 140.0, 1.0, 0), queue_high_ms=float("inf"), drain_s=0.5)
    stop = threading.Event()
    applied, switches, runs, chunks = [], [], [], []
    watcher = threading.Thread(target=lambda: applied.extend(watch(
        engines.TorchServe(_deployment(tuned)), policy, stop, lambda old, new: switches.append(new.batch_size))))
    target = Target(tuned.inference_url, MODEL, tuned.key("inference"))

    def send(fps: float) -> None:
        plan = Plan(streams=2, fps=fps / 2, duration_s=CHUNK_S, resolutions=(Resolution(160, 120),))
        runs.append(run(plan, target, FrameSource(Format.JPEG, 1, 4, IMAGES), concurrency=64))

    def load_until_switch(number: int, fps: float) -> None:
        deadline = time.monotonic() + PHASE_S
        while len(switches) < number:
            assert time.monotonic() < deadline, f"no switch {number} in {PHASE_S} s at {fps} fps: {switches}"
            chunk = threading.Thread(target=send, args=(fps,))
            chunk.start()
            chunks.append(chunk)
            time.sleep(CHUNK_S)  # the next run starts as this one's schedule ends: no gap in the load

    watcher.start()
    try:
        for number, fps in enumerate((2.0, 8.0, 2.0), start=1):
            load_until_switch(number, fps)
    finally:
        stop.set()
        for chunk in chunks:
            chunk.join(timeout=300)
        watcher.join(timeout=300)
    assert switches[:3] == [1, 4, 1], switches
    assert [s.batch_size for s in applied] == switches
    records = [r for result in runs for r in result.records]
    metrics = calculate_metrics(records, CHUNK_S * len(runs), 60_000.0)
    assert metrics.responses == {"200": len(records)}, metrics.responses
    assert len(records) == sum(len(result.schedule) for result in runs) and not any(r.dropped for r in runs)
    versions = Management(tuned.management_url, tuned.workdir / "key_file.json").versions(MODEL)
    assert len(versions) == 1 and versions[0].batch_size == applied[-1].batch_size
