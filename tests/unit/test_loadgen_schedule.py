"""The open-loop schedule and the frames: counts, burst, switches, video-like content, encodings."""

import io
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from loadgen import cli
from loadgen.frames import Format, FrameSource, encode, frame
from loadgen.schedule import Plan, Resolution, Switch, arrivals
from tskeys import read_key

HD = Resolution(1280, 720)


def test_a_steady_run_sends_fps_times_duration_per_stream_evenly_spaced():
    plan = Plan(streams=3, fps=30, duration_s=2)
    schedule = arrivals(plan)
    assert len(schedule) == 3 * 30 * 2
    for stream in range(3):
        times = [a.t for a in schedule if a.stream == stream]
        assert np.allclose(np.diff(times), 1 / 30)
        assert [a.frame_id for a in schedule if a.stream == stream] == list(range(60))
    assert [a.t for a in schedule] == sorted(a.t for a in schedule)
    assert all(0 <= a.t < 2 for a in schedule)
    # cameras are phase-shifted, not simultaneous
    assert len({round(a.t, 9) for a in schedule}) == len(schedule)


def test_the_burst_window_sends_at_the_burst_rate():
    # the seed's verification: 40 fps for 5 s inside a 30 fps run
    plan = Plan(streams=2, fps=30, duration_s=10, burst_fps=40, burst_start_s=2, burst_duration_s=5)
    schedule = arrivals(plan)
    assert len(schedule) == 2 * (30 * 5 + 40 * 5)
    assert sum(1 for a in schedule if 2 <= a.t < 7) == 2 * 40 * 5
    assert plan.burst_window == (2, 7)


def test_a_clip_divides_the_request_rate_not_the_frame_rate():
    plan = Plan(streams=1, fps=32, duration_s=2, clip=4)
    schedule = arrivals(plan)
    assert len(schedule) * 4 == 64
    assert [a.frame_id for a in schedule][:3] == [0, 4, 8]


def test_streams_mix_resolutions_and_switch_mid_run():
    plan = Plan(streams=3, fps=10, duration_s=2, resolutions=(HD, Resolution(640, 480)),
                switches=(Switch.parse("1:320x240"),))
    schedule = arrivals(plan)
    early = {(a.stream, str(a.resolution)) for a in schedule if a.t < 1}
    assert early == {(0, "1280x720"), (1, "640x480"), (2, "1280x720")}
    assert {str(a.resolution) for a in schedule if a.t >= 1} == {"320x240"}


@settings(max_examples=100, deadline=None)
@given(streams=st.integers(1, 6), fps=st.integers(1, 60), duration=st.integers(1, 5),
       burst=st.integers(1, 80), start=st.integers(0, 5), length=st.integers(0, 5))
def test_counts_follow_the_rates(streams, fps, duration, burst, start, length):
    plan = Plan(streams, fps, duration, burst_fps=burst, burst_start_s=start, burst_duration_s=length)
    in_burst = max(0, min(duration, start + length) - min(start, duration))
    assert len(arrivals(plan)) == streams * (fps * (duration - in_burst) + burst * in_burst)


@pytest.mark.parametrize("bad, message", [
    (dict(streams=0), "streams = 0"), (dict(fps=0), "fps = 0"), (dict(duration_s=-1), "duration = -1"),
    (dict(clip=0), "clip = 0"), (dict(burst_fps=-5), "burst_fps = -5")])
def test_a_bad_plan_names_the_setting(bad, message):
    with pytest.raises(ValueError, match=message):
        Plan(**{"streams": 1, "fps": 1, "duration_s": 1, **bad})


@pytest.mark.parametrize("text", ["720p", "1280x", "0x720", "axb"])
def test_bad_resolutions_say_the_form(text):
    with pytest.raises(ValueError, match="WIDTHxHEIGHT|positive"):
        Resolution.parse(text)


def test_frames_look_like_video_from_the_photographs():
    a, b, c = (frame(0, i, HD) for i in (0, 1, 2))
    assert a.shape == (720, 1280, 3) and a.dtype == np.uint8
    assert a.std() > 20  # a photograph, not a flat colour
    assert not np.array_equal(a, b)
    # a pan: consecutive frames are close, a shifted copy of each other
    assert np.array_equal(a[2:, 4:], b[:-2, :-4])  # 4 px right, 2 px down per frame
    other = frame(1, 0, HD)
    assert np.abs(a.astype(int) - other.astype(int)).mean() > 10  # cameras film different scenes
    assert frame(2, 5, Resolution(33, 17)).shape == (17, 33, 3)


@pytest.mark.parametrize("fmt", [f for f in Format if not f.is_video])  # video: tests/unit/test_video.py
def test_each_format_round_trips(fmt):
    pixels = frame(0, 3, Resolution(64, 48))
    payload = encode([pixels], fmt)
    if fmt is Format.JPEG:
        decoded = np.asarray(Image.open(io.BytesIO(payload.body)))
        assert decoded.shape == pixels.shape and np.abs(decoded.astype(int) - pixels).mean() < 8
    elif fmt is Format.PNG:
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(payload.body))), pixels)
    elif fmt is Format.NPY:
        assert np.array_equal(np.load(io.BytesIO(payload.body)), pixels)
    else:
        assert payload.headers["X-Frame-Width"] == "64" and payload.headers["X-Frame-Height"] == "48"
        assert payload.body == pixels.tobytes()
    assert payload.content_type == fmt.content_type


def test_clips_need_a_multi_frame_format():
    with pytest.raises(ValueError, match="npy or raw"):
        FrameSource(Format.JPEG, clip=4)
    source = FrameSource(Format.NPY, clip=4, distinct=2)
    payload = source.payload(0, 8, Resolution(32, 24))
    assert np.load(io.BytesIO(payload.body)).shape == (4, 24, 32, 3) and payload.frames == 4
    assert source.payload(0, 0, Resolution(32, 24)).body == payload.body  # a cycle of 2 requests


def test_a_720p_jpeg_is_a_realistic_size():
    body = FrameSource(Format.JPEG, distinct=1).payload(0, 0, HD).body
    assert 50_000 < len(body) < 400_000


def test_the_cli_parses_every_flag_into_a_plan(tmp_path):
    keys = tmp_path / "key_file.json"
    keys.write_text(json.dumps({"inference": {"key": "abc"}}))
    args = cli.parser().parse_args([
        "--streams", "2", "--fps", "30", "--duration", "3", "--burst-fps", "40", "--burst-start", "1",
        "--burst-duration", "1", "--resolution", "1280x720", "--resolution", "640x480",
        "--switch", "2:1920x1080", "--format", "npy", "--clip", "2", "--token-file", str(keys)])
    plan = cli.plan_from(args)
    assert plan.resolutions == (HD, Resolution(640, 480)) and plan.clip == 2
    assert plan.switches == (Switch(2.0, Resolution(1920, 1080)),)
    assert args.format is Format.NPY and read_key(args.token_file) == "abc"
    assert len(arrivals(plan)) == 2 * (30 * 2 + 40 * 1) // 2
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["--resolution", "big"])
    with pytest.raises(ValueError, match="missing.json"):
        read_key(tmp_path / "missing.json", settle_s=0)
    assert math.isclose(cli.parser().parse_args([]).sla_ms, 200.0)


def test_realtime_streams_go_to_the_low_latency_lane():
    from loadgen.runner import Target

    target = Target("http://127.0.0.1:8080/", "frame_quality", None, 5.0, "frame_quality_realtime", 2)
    assert [target.model_for(s) for s in range(4)] == [
        "frame_quality_realtime", "frame_quality_realtime", "frame_quality", "frame_quality"]
    assert target.endpoint(3) == "http://127.0.0.1:8080/predictions/frame_quality"
