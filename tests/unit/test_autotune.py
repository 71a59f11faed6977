"""video-autotune's pure core: the batch latency fit, the recommendation, the watch policy,
Prometheus parsing and archive rewriting."""

import json
import zipfile

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune import cli
from autotune.archive import derive, read_manifest
from autotune.fit import LatencyFit, fit_batch_latency
from autotune.policy import LADDER, Hysteresis, batch_for
from autotune.prom import batch_samples, ray_snapshot, snapshot, traffic
from autotune.recommend import Cell, recommend, score
from autotune.sweep import SweepResult, config_lines, table
from autotune.switch import Setting, version_for

sizes = st.lists(st.integers(1, 64), min_size=2, max_size=60).filter(lambda xs: len(set(xs)) >= 2)
slopes = st.floats(0.01, 100.0)
intercepts = st.floats(0.0, 1000.0)


@given(sizes, slopes, intercepts)
def test_the_fit_recovers_a_and_b_from_exact_batches(frames, a, b):
    fit = fit_batch_latency(frames, [a * f + b for f in frames])
    assert fit.a_ms == pytest.approx(a, rel=1e-6, abs=1e-6)
    assert fit.b_ms == pytest.approx(b, rel=1e-6, abs=1e-5)
    assert fit.outliers == 0 and fit.batches == len(frames)


@settings(deadline=None)
@given(st.integers(0, 2**32 - 1), slopes, intercepts, st.floats(0.0, 0.3))
def test_batches_that_waited_for_the_cpu_do_not_tilt_the_fit(seed, a, b, share):
    rng = np.random.default_rng(seed)
    frames = rng.integers(1, 33, 300).astype(float)
    quiet = a * frames + b
    latency = quiet + rng.normal(0, 0.01 * (a + b), 300).clip(-0.02 * (a + b), None)
    slow = rng.random(300) < share
    latency[slow] += rng.uniform(5, 50, slow.sum()) * (a * 32 + b)  # waited far longer than a batch
    fit = fit_batch_latency(frames, latency)
    assert fit.a_ms == pytest.approx(a, rel=0.1, abs=0.05 * (a + b))
    assert fit.batch_ms(16) == pytest.approx(a * 16 + b, rel=0.1)


def test_plain_least_squares_without_trimming():
    fit = fit_batch_latency([1, 2, 3], [1.0, 2.0, 6.0], trim=False)
    assert (fit.a_ms, fit.b_ms) == (pytest.approx(2.5), pytest.approx(-2.0))


def test_the_fit_needs_two_batch_sizes_and_one_time_per_batch():
    with pytest.raises(ValueError, match="at least two"):
        fit_batch_latency([4, 4, 4], [10.0, 11.0, 12.0])
    with pytest.raises(ValueError, match="one per batch"):
        fit_batch_latency([1, 2], [1.0])


def test_capacity_and_reliability():
    fit = LatencyFit(2.0, 10.0, 0.99, 50)
    assert fit.capacity_fps(10) == pytest.approx(1000 * 10 / 30)
    assert fit.reliable
    assert not LatencyFit(-1.0, 10.0, 0.99, 50).reliable and not LatencyFit(2.0, 10.0, 0.1, 50).reliable


cells = st.builds(Cell, st.sampled_from(LADDER), st.sampled_from([0, 5, 20, 50]), st.just(30.0),
                  st.floats(0, 40), st.floats(1, 500), st.floats(1, 500), st.booleans())


@given(st.lists(cells, max_size=12), st.floats(50, 400))
def test_the_recommendation_meets_the_target_with_the_most_headroom(grid, sla):
    best = recommend(grid, 30.0, sla)
    meeting = [c for c in grid if c.all_ok and c.p99_ms <= sla]
    if not meeting:
        assert best is None
        return
    assert best.meets and best.cell in meeting
    assert best.cell.p99_ms == pytest.approx(min(c.p99_ms for c in meeting), rel=1e-12)  # ties to the last ulp: either


def test_capacity_headroom_counts_when_a_fit_is_given():
    fit = LatencyFit(10.0, 20.0, 1.0, 100)  # batch 1: 33 fps, batch 8: 80 fps
    small = Cell(1, 5, 30, 30, 20, 40, True)
    large = Cell(8, 5, 30, 30, 40, 60, True)
    assert recommend([small, large], 30.0, 200.0).cell == small  # latency only
    assert recommend([small, large], 30.0, 200.0, fit).cell == large  # batch 1 runs at 90 % of capacity
    assert score(small, 30.0, 200.0, fit).capacity_headroom == pytest.approx(0.1)


@given(st.floats(0, 500), st.floats(0, 500), st.sampled_from([None, LatencyFit(2.0, 15.0, 1.0, 10)]))
def test_more_traffic_never_asks_for_a_smaller_batch(r1, r2, fit):
    low, high = sorted((r1, r2))
    assert batch_for(low, fit, 50) <= batch_for(high, fit, 50)
    chosen = batch_for(high, fit, 50)
    if fit is not None and chosen < max(LADDER):
        assert fit.capacity_fps(chosen) >= high * 1.3


def test_batch_for_without_a_fit_counts_frames_per_delay():
    assert batch_for(10, None, 50, margin=0.0) == 1
    assert batch_for(100, None, 50, margin=0.0) == 8  # 5 frames per 50 ms, up the ladder
    assert batch_for(10_000, None, 50) == 32


def test_hysteresis_waits_for_a_lasting_change_and_a_cooldown():
    h = Hysteresis(hold_s=10, cooldown_s=30)
    assert h.update(0, 8, 32) is None
    assert h.update(5, 8, 32) is None
    assert h.update(6, 4, 32) is None  # changed its mind: the hold starts again
    assert h.update(15, 4, 32) is None
    assert h.update(16, 4, 32) == 4
    h.switched(16)
    assert h.update(17, 32, 4) is None
    assert h.update(30, 32, 4) is None  # held 13 s but within the cooldown
    assert h.update(46, 32, 4) == 32
    assert h.update(47, 4, 4) is None


METRICS = """# HELP video_frames_total frames
video_frames_total{ModelName="frame_quality",Level="Model",Hostname="vm",} 131.0
video_frames_total{ModelName="other",Level="Model",Hostname="vm",} 99.0
video_batches_total{ModelName="frame_quality",Level="Model",Hostname="vm",} 34.0
video_batch_size{ModelName="frame_quality",Level="Model",Hostname="vm",} 4.0
video_batch_fill_ratio{ModelName="frame_quality",Level="Model",Hostname="vm",} 0.25
PredictionTime{ModelName="frame_quality",Level="Model",Hostname="vm",} 176.69
ts_inference_requests_total{model_name="frame_quality",model_version="default",hostname="vm",} 480.0
ts_queue_latency_microseconds{model_name="frame_quality",model_version="default",hostname="vm",} 5.4E6
"""


def test_snapshot_reads_one_models_series():
    s = snapshot(METRICS, "frame_quality", 1.0)
    assert (s.frames_total, s.batches_total, s.batch_size, s.fill_ratio, s.prediction_ms) == (131, 34, 4, 0.25, 176.69)
    assert (s.requests_total, s.queue_latency_us) == (480, 5.4e6)
    empty = snapshot(METRICS, "absent", 1.0)
    assert empty.frames_total == 0 and empty.batch_size is None


#: Two Ray nodes' metrics ports, concatenated (`autotune.engines.RayServe.scrape`): the handler's
#: series of a replica on each worker, the router's (in the ingress) on the head.
RAY_METRICS = """\
# TYPE ray_video_frames_total counter
ray_video_frames_total{Component="core_worker",Level="Model",ModelName="m",NodeAddress="127.0.0.1",WorkerId="a"} 40.0
ray_video_batches_total{Component="core_worker",Level="Model",ModelName="m",NodeAddress="127.0.0.1",WorkerId="a"} 10.0
ray_video_batch_size{Component="core_worker",Level="Model",ModelName="m",NodeAddress="127.0.0.1",WorkerId="a"} 4.0
ray_video_frames_total{Component="core_worker",Level="Model",ModelName="other",NodeAddress="127.0.0.1",WorkerId="c"} 99.0

ray_video_frames_total{Component="core_worker",Level="Model",ModelName="m",NodeAddress="127.0.0.1",WorkerId="b"} 20.0
ray_video_batches_total{Component="core_worker",Level="Model",ModelName="m",NodeAddress="127.0.0.1",WorkerId="b"} 5.0
ray_video_batch_fill_ratio{Component="core_worker",Level="Model",ModelName="m",NodeAddress="127.0.0.1",WorkerId="b"} 0.5
ray_serve_num_router_requests_total{application="video",deployment="m",handle="doors",route="/"} 70.0
ray_serve_request_router_fulfillment_time_ms_sum{application="video",deployment="m",handle="doors"} 35.0
ray_serve_request_router_fulfillment_time_ms_count{application="video",deployment="m",handle="doors"} 70.0
ray_serve_num_router_requests_total{application="video",deployment="doors",route="/"} 500.0
"""


def test_ray_snapshot_sums_the_nodes_and_reads_the_routers():
    s = ray_snapshot(RAY_METRICS, "m", 2.0)
    assert (s.t, s.frames_total, s.batches_total, s.batch_size, s.fill_ratio, s.prediction_ms) == (2.0, 60, 15, 4, 0.5, None)
    assert (s.requests_total, s.queue_latency_us) == (70, 35_000)
    seen = traffic(ray_snapshot("", "m", 0.0), s)
    assert (seen.frame_rate, seen.request_rate, seen.mean_batch, seen.queue_ms) == (30, 35, 4, 0.5)


def test_single_batches_and_traffic_from_consecutive_scrapes():
    def at(t, frames, batches, size, ms, requests=0.0, queue=0.0):
        return snapshot(METRICS, "absent", t).__class__(t, frames, batches, size, 1.0, ms, requests, queue)

    scrapes = [at(0, 10, 5, 2, 7.0), at(1, 14, 6, 4, 13.0), at(2, 22, 7, 8, 13.0),  # PredictionTime not yet in
               at(3, 30, 8, 8, 25.0), at(4, 40, 10, 5, 16.0, 30, 3e6)]  # two batches: gauges hold the last only
    assert batch_samples(scrapes) == [(4, 13.0), (8, 25.0)]
    seen = traffic(scrapes[0], scrapes[-1])
    assert (seen.frame_rate, seen.request_rate, seen.mean_batch, seen.queue_ms) == (7.5, 7.5, 6.0, 100.0)
    assert seen.demand_fps == 7.5
    with pytest.raises(ValueError, match="later"):
        traffic(scrapes[1], scrapes[0])


def _mar(path, version="1.0"):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("MAR-INF/MANIFEST.json", json.dumps(
            {"model": {"modelName": "m", "modelVersion": version, "configFile": "m.yaml", "handler": "h.py"}}))
        zf.writestr("m.yaml", "batchSize: 32\nmaxBatchDelay: 50\nhandler:\n  model_max_batch: 16\n")
        zf.writestr("h.py", "print('hi')\n")
    return path


def test_derived_archive_has_the_new_version_and_batch_settings(tmp_path):
    out = derive(_mar(tmp_path / "m.mar"), tmp_path / "m-2.mar", "1.0-at4x10", 4, 10)
    assert read_manifest(out)["model"]["modelVersion"] == "1.0-at4x10"
    with zipfile.ZipFile(out) as zf:
        config = yaml.safe_load(zf.read("m.yaml"))
        assert zf.read("h.py") == b"print('hi')\n"
    assert config == {"batchSize": 4, "maxBatchDelay": 10, "handler": {"model_max_batch": 16}}
    with pytest.raises(ValueError, match="batch of 1"):
        derive(tmp_path / "m.mar", tmp_path / "x.mar", "v", 0, 10)


def test_version_names_replace_the_previous_tuning():
    assert version_for("1.0", Setting(4, 10)) == "1.0-at4x10"
    assert version_for("1.0-at4x10", Setting(16, 50)) == "1.0-at16x50"
    with pytest.raises(ValueError, match="batch of 1"):
        Setting(0, 5)


def test_table_and_config_lines():
    cell = Cell(8, 20, 30.0, 29.8, 40.0, 90.0, True, 2.5, 300)
    bad = Cell(1, 5, 30.0, 12.0, 900.0, 4000.0, False)
    fit = LatencyFit(3.0, 2.0, 0.97, 100)
    result = SweepResult([cell, bad], [], fit, [score(cell, 30, 200, fit), score(bad, 30, 200, fit)],
                         recommend([cell, bad], 30, 200, fit), 30.0, 200.0, None)
    text = table(result)
    assert "<- recommended" in text and "RECOMMENDED: batchSize 8, maxBatchDelay 20 ms" in text
    lines = config_lines(result, "frame_quality", "frame_quality.mar")
    assert "batchSize: 8\nmaxBatchDelay: 20" in lines and '"batchSize": 8, "maxBatchDelay": 20' in lines
    none = SweepResult([bad], [], None, [score(bad, 30, 200)], None, 30.0, 200.0, None)
    assert "NO SETTING" in table(none) and config_lines(none, "m", "m.mar") == ""


def test_cli_refuses_bad_lists():
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["sweep", "--fps", "30", "--batch-sizes", "4,x"])
    args = cli.parser().parse_args(["watch", "--fit", "2.5", "10", "--ladder", "1,4,16"])
    assert args.fit == [2.5, 10.0] and args.ladder == [1, 4, 16]


def test_watch_on_ray_outside_video_rays_folder_names_the_fix(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["watch", "--engine", "ray", "--ray-state", str(tmp_path / "video-ray.json")])
    assert exit_info.value.code == 2
    assert "video-ray.json not found: run `video-ray start` in this folder first" in capsys.readouterr().err
