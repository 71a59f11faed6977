"""The pure parts of bench/cameras.py and its scenes (bench/camera_scenes.py): what each scene
shows where, the window's counts, the search for cameras carried, the table and the targets, and
the camera list the bridge is given (no processes)."""

import numpy as np
import pytest

from bench import camera_scenes as cs
from bench import cameras
from ingest import config


def _inside(mask: list[list[float]], ys: np.ndarray, xs: np.ndarray, width: int, height: int) -> np.ndarray:
    (x1, y1), (x2, y2) = mask[0], mask[2]
    return (xs >= x1 * width) & (xs < x2 * width) & (ys >= y1 * height) & (ys < y2 * height)


@pytest.mark.parametrize("seconds", [10, 20, 30])
def test_movers_are_in_view_a_tenth_half_and_all_of_the_time(seconds):
    frames = seconds * cs.FPS
    assert cs.presence("quiet", frames) == pytest.approx(0.1, abs=1 / frames)
    assert cs.presence("busy", frames) == pytest.approx(0.5, abs=2 / frames)
    assert cs.presence("crowd", frames) == 1.0


@pytest.mark.parametrize("resolution", ["720p", "1080p"])
def test_without_movers_only_the_masked_clock_and_tree_change(resolution):
    width, height = cs.RESOLUTIONS[resolution]
    frames = 20 * cs.FPS  # quiet: the car is in view from 45% to 55%, the light is down from 33% to 73%
    for a, b in [(0, 20), (20, 70), (120, 200), (15 * 16, 15 * 19)]:
        changed = np.any(cs.render("quiet", width, height, a, frames, None) !=
                         cs.render("quiet", width, height, b, frames, None), axis=2)
        ys, xs = np.nonzero(changed)
        assert len(ys) > 0  # the tree sways, the clock ticks
        masked = _inside(cs.CLOCK, ys, xs, width, height) | _inside(cs.BRANCH, ys, xs, width, height)
        assert masked.all(), (a, b, list(zip(xs[~masked][:5], ys[~masked][:5])))


def test_the_clock_ticks_inside_its_mask_and_movers_stay_out_of_both_masks():
    width, height = cs.RESOLUTIONS["1080p"]
    one, two = (cs.render("busy", width, height, n, 300, None) for n in (15 * 7, 15 * 8))  # no mover
    ys, xs = np.nonzero(np.any(one != two, axis=2) & (np.arange(width)[None, :] < 0.7 * width))
    assert len(ys) > 0 and _inside(cs.CLOCK, ys, xs, width, height).all()
    for scene, movers in cs.SCENES.items():
        for n in range(0, 300, 5):
            for mover in movers:
                box = mover.box(n / 300, width, height)
                assert box is None or box[1] > max(cs.CLOCK[2][1], cs.BRANCH[2][1]) * height, (scene, n)


def test_the_lighting_step_changes_most_of_the_frame_and_the_clip_loops():
    width, height = cs.RESOLUTIONS["720p"]
    bright, dark = (cs.render("quiet", width, height, n, 300, None).astype(float) for n in (60, 100))
    assert np.mean(np.abs(bright - dark).max(axis=2) > 20) > 0.8  # over Frigate's lightning_threshold
    assert dark.mean() / bright.mean() == pytest.approx(0.6, abs=0.03)
    for scene in cs.SCENES:  # the end meets the start but for the clock (masked)
        first, past_end = (cs.render(scene, width, height, n, 300, None) for n in (0, 300))
        ys, xs = np.nonzero(np.any(first != past_end, axis=2))
        assert _inside(cs.CLOCK, ys, xs, width, height).all()


def test_noise_is_temporal_and_small():
    width, height = cs.RESOLUTIONS["720p"]
    clean = cs.render("quiet", width, height, 3, 300, None).astype(float)
    noisy = cs.render("quiet", width, height, 3, 300, np.random.default_rng(0)).astype(float)
    assert np.std(noisy - clean) == pytest.approx(cs.NOISE_SIGMA, rel=0.15)


def test_text_bitmap_scales_the_font():
    glyphs = cs.text_bitmap("12:05", 3)
    assert glyphs.shape == (15, 4 * 5 * 3) and glyphs.dtype == bool and glyphs.any()


def _line(camera, t, **more):
    return {"camera": camera, "capture_time": t, "status": 200, "latency_ms": 1000.0, **more}


def test_summarise_counts_the_window_and_its_drops():
    lines = [_line("a", 9.9), _line("a", 10.0, looked=True, regions=[[0, 0, 640, 640]]), _line("a", 11.0, looked=False),
             _line("b", 12.0, latency_ms=3000.0), {"camera": "b", "capture_time": 13.0, "status": 503, "type": "x"},
             _line("a", 20.0), {"camera": "a", "event": "dropped", "reason": "behind", "time": 21.0},
             {"camera": "a", "event": "dropped", "reason": "shutdown", "time": 21.5},
             {"camera": "a", "event": "dropped", "reason": "behind", "time": 30.0}]
    trial = cameras.summarise(lines, ["a", "b", "c"], 10.0, 20.0, 5.0, 1.0)
    assert (trial.answered, trial.looked, trial.regions, trial.errors, trial.dropped, trial.silent) == (3, 2, 1, 1, 1, 1)
    assert (trial.lag_p50_ms, trial.lag_p99_ms) == (1000.0, 3000.0)
    assert trial.fraction == pytest.approx(3 / 30)
    assert trial.behind == "1 silent, 1 dropped, 1 errors, lag p99 3.0 s, answered 0.10"
    framed = cameras.summarise([_line("a", 10.0, looked=False, latency_ms=1.0), _line("a", 11.0, looked=True)],
                               ["a"], 10.0, 12.0, 0.0, 1.0, frames_mode=True)
    assert framed.lag_p99_ms == 1000.0 and framed.behind is None and framed.model_frames == 0.5


def _trial(cameras_, capacity):
    """A machine that answers `capacity` cameras' frames in full (15 fps, 10 s windows)."""
    share = min(1.0, capacity / cameras_)
    return cameras.Trial(cameras_, 10.0, 15.0, answered=round(share * cameras_ * 150), looked=round(share * cameras_ * 150),
                         lag_p50_ms=1000.0, lag_p99_ms=1500.0 if share == 1 else 9000.0,
                         cpu_s={"bridge": 1.0, "torchserve": 9.0})


@pytest.mark.parametrize("capacity, most", [(0.4, 32), (1, 32), (5, 32), (13, 32), (32, 32), (40, 32), (3, 3), (7, 1)])
def test_search_finds_the_cameras_carried_in_few_trials(capacity, most):
    asked = []

    def measure(n):
        asked.append(n)
        return _trial(n, capacity)

    carried, trial, behind, trials = cameras.search(measure, most)
    expect = round(capacity, 2) if capacity < 1 else float(min(int(capacity), most))
    assert carried == expect and trial.cameras == max(1, int(min(capacity, most)))
    assert behind is None if capacity >= most else behind.startswith(f"N={max(1, int(capacity) + 1)}: ")
    assert len(asked) == len(set(asked)) <= 2 * most.bit_length() and [t.cameras for t in trials] == sorted(asked)


def test_the_table_and_the_targets():
    def row(scene, setting, capacity):
        carried, trial, behind, trials = cameras.search(lambda n: _trial(n, capacity), 16)
        return cameras.Row(scene, "720p", "segments", setting, carried, trial, behind, trials)

    rows = [row("quiet", "decode", 10), row("quiet", "off", 0.5), row("quiet", "on", 8), row("crowd", "off", 0.5),
            row("crowd", "on", 0.4)]
    lines = cameras.table(rows).splitlines()
    assert lines[0] == "| " + " | ".join(cameras.HEAD) + " |" and len(lines) == 2 + len(rows)
    assert all(line.count("|") == len(cameras.HEAD) + 1 for line in lines)
    assert lines[2].split(" | ")[4:7] == ["10", "10.0", "(15.00 decoded)"]
    assert lines[3].split(" | ")[4:7] == ["0.50 of 1", "100.0", "7.50"]
    assert lines[3].endswith(" | N=1: lag p99 9.0 s, answered 0.50 |")
    assert cameras.targets(rows) == [
        "quiet 720p segments: motion on / off = 8 / 0.5 = 16.00 (target >= 8): MET",
        "quiet 720p segments: motion on / decode only = 8 / 10 = 0.80 (target >= 0.7): MET",
        "crowd 720p segments: motion on / off = 0.4 / 0.5 = 0.80 (target >= 1): MISSED"]


def test_the_camera_list_says_motion_off_or_on_with_the_masks():
    off = cameras.camera_entry("a", "rtsp://127.0.0.1:1/p0", "segments", "off")
    on = cameras.camera_entry("b", "rtsp://127.0.0.1:1/p1", "frames", "on")
    assert off["motion"] is False and on["motion"] == {"mask": cs.MASK} and on["sample_fps"] == 5.0
    parsed = {c.name: c for c in config.parse({"cameras": [off, on]})}
    assert parsed["a"].effective_motion is None
    assert [[list(p) for p in polygon] for polygon in parsed["b"].effective_motion.mask] == cs.MASK


def test_the_short_plan_and_the_options():
    args = cameras.parser().parse_args(["--short", "--scenes", "quiet,crowd", "--max-cameras", "4"])
    assert (args.scenes, args.max_cameras, args.modes) == (("quiet", "crowd"), 4, None)
    short = cameras.SHORT
    assert short.max_cameras == 1 and short.settings == ("off", "on") and short.clip % 5 == 0
    with pytest.raises(SystemExit):  # before anything starts
        cameras.main(["--scenes", "quiet,rush"])
