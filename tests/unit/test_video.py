"""Video segments -> frames (handler.video), against frames the `ffmpeg` CLI decodes on its own."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from handler import video
from handler.clip import Meta
from handler.config import HandlerConfig
from handler.errors import (
    BadHeader,
    ClipTooLarge,
    ConfigError,
    CorruptFrame,
    EmptyFrame,
    FrameTooLarge,
    UnsupportedCodec,
)
from handler.formats import Format, sniff
from handler.frames import decode
from tests import support, videos

CONFIG = HandlerConfig()
FORMATS = {"mp4": Format.MP4, "fmp4": Format.MP4, "mpegts": Format.MPEGTS, "h264": Format.H264,
           "hevc": Format.H265}


def _codec(container: str) -> str:
    return "libx265" if container == "hevc" else "libx264"


def _decode(body: bytes, container: str, headers: dict | None = None,
            config: HandlerConfig = CONFIG):
    return decode(body, videos.CONTENT_TYPES[container], Meta.parse(headers or {}), config)


@pytest.mark.parametrize("container", sorted(FORMATS))
def test_every_frame_in_order_equals_the_ffmpeg_cli_decode(container):
    body = videos.segment(container, codec=_codec(container), frames=12)
    reference = videos.reference_frames(body, container)
    clip = _decode(body, container)
    assert len(clip.frames) == len(reference) == 12
    for got, want in zip(clip.frames, reference):
        assert got.shape == want.shape == (96, 160, 3)
        # Same FFmpeg decoder and conversion: the RGB frames agree within rounding.
        assert abs(got.astype(int) - want.astype(int)).max() <= 2
        support.assert_quality(support.quality(got), want, rel=0.02)
    assert all(b > a for a, b in itertools.pairwise(clip.pts))


@pytest.mark.parametrize(("container", "codec"), [("hevc", "libx265-main10"), ("mp4", "libx264-444")])
def test_ten_bit_and_444_streams_come_out_as_8_bit_rgb(container, codec):
    body = videos.segment(container, codec=codec, frames=4)
    reference = videos.reference_frames(body, container)
    clip = _decode(body, container)
    assert len(clip.frames) == len(reference) == 4
    for got, want in zip(clip.frames, reference):
        assert got.shape == want.shape == (96, 160, 3)
        # 10 -> 8 bits: FFmpeg's conversions may dither differently; the statistics agree.
        support.assert_quality(support.quality(got), want, rel=0.02)


@pytest.mark.parametrize("container", ["h264", "hevc"])
def test_elementary_streams_are_timed_at_thirty_per_second(container):
    clip = _decode(videos.segment(container, codec=_codec(container), frames=6), container)
    assert clip.pts == [i / 30 for i in range(6)]


@pytest.mark.parametrize("container", ["mp4", "mpegts"])
def test_container_pts_are_the_containers(container):
    clip = _decode(videos.segment(container, frames=6, fps=25), container)
    start = clip.pts[0]
    assert [round(p - start, 6) for p in clip.pts] == [round(i / 25, 6) for i in range(6)]


def test_the_format_is_found_from_the_bytes_without_a_content_type():
    for container, fmt in FORMATS.items():
        body = videos.segment(container, codec=_codec(container), frames=3)
        assert sniff(body) is fmt
        assert len(decode(body, None, Meta(), CONFIG).frames) == 3


def _kept(count: int, source_fps: float, fps: float) -> list[int]:
    """Independent rule: frame i is kept when it is the first at or after k / fps, k = 0, 1, ..."""
    kept, k = [], 0
    for i in range(count):
        if i / source_fps >= k / fps - 1e-9:
            kept.append(i)
            while k / fps <= i / source_fps + 1e-9:
                k += 1
    return kept


@pytest.mark.parametrize(("container", "fps"), [("mp4", 10), ("mpegts", 7), ("h264", 12.5),
                                                ("mp4", 30), ("mp4", 60)])
def test_sample_fps_keeps_the_first_frame_of_each_interval(container, fps):
    body = videos.segment(container, frames=15)
    reference = videos.reference_frames(body, container)
    clip = _decode(body, container, {"x-sample-fps": str(fps)})
    kept = _kept(15, 30, fps)
    assert len(clip.frames) == len(kept)
    for got, index in zip(clip.frames, kept):
        assert abs(got.astype(int) - reference[index].astype(int)).max() <= 2
    all_pts = _decode(body, container).pts
    assert clip.pts == [all_pts[i] for i in kept]


@given(st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=60).map(sorted),
       st.floats(0.5, 120))
def test_sampler_never_keeps_two_frames_in_one_interval(times, fps):
    sampler = video.PtsSampler(fps)
    kept = [t for t in times if sampler.keep(t)]
    assert kept[0] == times[0]
    slots = [math.floor((t - times[0]) * fps + 1e-6) for t in kept]
    assert slots == sorted(set(slots))
    # every interval that holds a frame keeps one
    assert set(slots) == {math.floor((t - times[0]) * fps + 1e-6) for t in times}


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "ten", "1e999"])
def test_a_bad_sample_fps_is_a_bad_header(value):
    with pytest.raises(BadHeader, match="X-Sample-Fps"):
        _decode(videos.segment("mp4", frames=3), "mp4", {"x-sample-fps": value})


# --- limits ---------------------------------------------------------------------------------

def test_a_frame_wider_than_the_maximum_is_refused_from_the_header():
    body = videos.segment("mp4", width=3856, height=16, frames=2)
    with pytest.raises(FrameTooLarge, match="declares frames of 3856x16"):
        _decode(body, "mp4")


def test_a_stream_whose_sps_declares_a_huge_picture_is_refused_from_its_header():
    body = videos.segment("h264", width=64, height=48, frames=4)
    assert len(_decode(videos.with_sps_size(body, 64, 48), "h264").frames) == 4  # the rewrite is sound
    with pytest.raises(FrameTooLarge, match="declares frames of 8192x8192"):
        _decode(videos.with_sps_size(body, 8192, 8192), "h264")


@pytest.mark.parametrize("container", ["mpegts", "h264", "mp4"])
def test_more_frames_than_max_video_frames_is_clip_too_large(container):
    config = dataclasses.replace(CONFIG, max_video_frames=8)
    body = videos.segment(container, frames=9)
    with pytest.raises(ClipTooLarge, match="9 frames to keep, above max_video_frames = 8"):
        _decode(body, container, config=config)
    assert len(_decode(body, container, {"x-sample-fps": "15"}, config).frames) == 5


def test_max_clip_pixels_counts_the_kept_frames():
    config = dataclasses.replace(CONFIG, max_width=160, max_height=96, max_clip_pixels=5 * 160 * 96)
    body = videos.segment("mpegts", frames=6)
    with pytest.raises(ClipTooLarge, match="max_clip_pixels"):
        _decode(body, "mpegts", config=config)
    assert len(_decode(body, "mpegts", {"x-sample-fps": "15"}, config).frames) == 3


def test_an_mp4_is_refused_from_its_sample_table_before_decoding():
    config = dataclasses.replace(CONFIG, max_video_frames=8)
    with pytest.raises(ClipTooLarge, match="declares 9 frames"):
        _decode(videos.segment("mp4", frames=9), "mp4", config=config)


@pytest.mark.parametrize(("limits", "kept"), [({"max_video_frames": 4}, 4),
                                              ({"max_clip_pixels": 3 * 640 * 360 + 5}, 3)])
def test_no_frame_over_a_limit_is_ever_converted(monkeypatch, limits, kept):
    """A 30-frame 640x360 TS (it declares no frame count): decoding stops at the first frame over
    the limit, which is never converted to RGB, so a request never holds more than the limit."""
    config = dataclasses.replace(CONFIG, max_width=640, max_height=360, **limits)
    converted = []
    rgb = video._rgb
    monkeypatch.setattr(video, "_rgb", lambda frame, on_device: converted.append(1) or rgb(frame, on_device))
    with pytest.raises(ClipTooLarge):
        _decode(videos.segment("mpegts", width=640, height=360, frames=30), "mpegts", config=config)
    assert len(converted) == kept


def test_thousands_of_tiny_frames_stop_at_the_limit():
    body = videos.segment("h264", width=16, height=16, frames=2000, gop=250)
    with pytest.raises(ClipTooLarge, match="holds at least 121 frames to keep"):
        _decode(body, "h264")
    # sampled down to 1 fps they would fit, but decoding stops at the work budget
    with pytest.raises(ClipTooLarge, match="more than 960 frames before sampling"):
        _decode(body, "h264", {"x-sample-fps": "1"})


def test_codecs_outside_the_allow_list_are_refused_before_decoding():
    for codec, name in (("libvpx-vp9", "vp9"), ("mpeg4", "mpeg4")):
        with pytest.raises(UnsupportedCodec, match=f"codec is {name}"):
            _decode(videos.segment("mp4", codec=codec, frames=3), "mp4")
    only_h264 = dataclasses.replace(CONFIG, video_codecs=("h264",))
    with pytest.raises(UnsupportedCodec, match="codec is hevc"):
        _decode(videos.segment("hevc", codec="libx265", frames=3), "hevc", config=only_h264)
    mjpeg = videos.segment("mp4", codec="mjpeg", frames=3)
    assert len(_decode(mjpeg, "mp4").frames) == 3


# --- broken segments ------------------------------------------------------------------------

@pytest.mark.parametrize("container", ["mp4", "mpegts", "h264", "hevc"])
def test_a_segment_cut_inside_a_frame_is_corrupt(container):
    body = videos.segment(container, codec=_codec(container), frames=12)
    with pytest.raises(CorruptFrame):
        _decode(videos.cut_inside_last_key_frame(body, container), container)


@pytest.mark.parametrize("frames_left", [4, 7])
def test_an_mp4_cut_between_frames_is_corrupt_because_its_header_counts_them(frames_left):
    body = videos.segment("mp4", frames=12)
    pos, size, _ = videos.packets(body, "mp4")[frames_left - 1]
    with pytest.raises(CorruptFrame, match=f"declares 12 frames and holds {frames_left}"):
        _decode(body[: pos + size], "mp4")


@pytest.mark.parametrize("container", ["mp4", "mpegts", "h264"])
def test_damaged_slices_are_corrupt_not_concealed(container):
    body = videos.segment(container, frames=12)
    with pytest.raises(CorruptFrame):
        _decode(videos.damage_slices(body, container), container)


def test_a_frame_the_decoder_had_to_conceal_is_corrupt():
    """Random bytes inside one P slice: FFmpeg conceals some of these even with err_detect (the
    frame comes out marked corrupt); each must be refused, never answered with made-up pixels."""
    body = videos.segment("h264", width=320, height=192, frames=12, gop=12, bframes=0)
    concealed = 0
    for pos, size, _ in videos.packets(body, "h264")[1:6]:
        for seed in range(6):
            damaged, rng = bytearray(body), random.Random(seed)
            start = pos + size // 3
            for at in range(start, min(start + 24, pos + size)):
                damaged[at] = rng.randrange(256)
            try:
                _decode(bytes(damaged), "h264")
            except CorruptFrame as err:
                concealed += "had to conceal" in str(err)
    assert concealed >= 3, f"only {concealed} of 30 damaged segments were caught by concealment"


def test_a_segment_that_starts_without_a_key_frame_is_corrupt():
    body = videos.without_first_key_frame(videos.segment("h264", frames=12))
    with pytest.raises(CorruptFrame, match="does not start with a key frame"):
        _decode(body, "h264")


@pytest.mark.parametrize(("body", "content_type"), [
    (lambda: videos.segment("h264", frames=3), "video/h265"),
    (lambda: videos.segment("hevc", codec="libx265", frames=3), "video/h264"),
    (lambda: videos.segment("mp4", frames=3).replace(b"avc1", b"hev1"), "video/mp4"),
    (lambda: videos.segment("mpegts", frames=3), "video/mp4"),
    (lambda: videos.segment("mp4", frames=3), "video/mp2t"),
    (lambda: support.jpeg(support.frame(64, 64)), "video/mp4"),
    (lambda: support.jpeg(support.frame(64, 64)), "video/h264"),
    (lambda: support.jpeg(support.frame(64, 64)), "video/mp2t"),
])
def test_a_body_that_is_not_what_its_type_claims_is_corrupt(body, content_type):
    with pytest.raises(CorruptFrame):
        decode(body(), content_type, Meta(), CONFIG)


@pytest.mark.parametrize(("body", "content_type"), [
    (lambda: videos.init_segment_only(videos.segment("fmp4", frames=3)), "video/mp4"),
    (lambda: videos.tables_only(videos.segment("mpegts", frames=3)), "video/mp2t"),
    (lambda: b"", "video/h264"),
])
def test_a_zero_length_stream_is_empty(body, content_type):
    with pytest.raises(EmptyFrame):
        decode(body(), content_type, Meta(), CONFIG)


# --- configuration --------------------------------------------------------------------------

def test_video_settings_parse_and_check():
    config = HandlerConfig.from_mapping(
        {"max_video_frames": 30, "video_codecs": ["h264"], "video_hw_decode": False})
    assert (config.max_video_frames, config.video_codecs, config.video_hw_decode) == (30, ("h264",), False)
    assert (CONFIG.max_video_frames, CONFIG.video_codecs) == (120, ("h264", "hevc", "mjpeg"))
    with pytest.raises(ConfigError, match="h265 -> hevc"):
        HandlerConfig.from_mapping({"video_codecs": ["h264", "h265"]})
    with pytest.raises(ConfigError, match="video_codecs"):
        HandlerConfig.from_mapping({"video_codecs": "h264"})
    with pytest.raises(ConfigError, match="max_video_frames"):
        HandlerConfig.from_mapping({"max_video_frames": 0})
    with pytest.raises(ConfigError, match="video_hw_decode"):
        HandlerConfig.from_mapping({"video_hw_decode": "yes"})


def test_default_limits_serve_one_second_of_1080p30_and_refuse_the_next_frame():
    """max_clip_pixels (32 frames of 1080p) bounds one request's decoded RGB: a real 1 s 1080p30
    segment decodes whole under the defaults; 33 frames are one frame over."""
    one_second = _decode(videos.segment("mp4", width=1920, height=1080, frames=30), "mp4")
    assert len(one_second.frames) == 30
    assert {f.shape for f in one_second.frames} == {(1080, 1920, 3)}
    with pytest.raises(ClipTooLarge, match="max_clip_pixels"):
        _decode(videos.segment("mp4", width=1920, height=1080, frames=33), "mp4")


# --- the producer side (video-loadgen --format h264|mp4) ------------------------------------

@pytest.mark.parametrize(("fmt", "container"), [("h264", "h264"), ("mp4", "mp4")])
def test_loadgen_segments_are_a_moving_camera_the_ffmpeg_cli_decodes(fmt, container):
    from loadgen.cli import parser, plan_from
    from loadgen.frames import Format as WireFormat
    from loadgen.frames import FrameSource
    from loadgen.schedule import Resolution

    args = parser().parse_args(["--format", fmt, "--segment-frames", "6", "--resolution", "320x180"])
    plan = plan_from(args)
    assert plan.clip == 6
    source = FrameSource(WireFormat(fmt), plan.clip, distinct=2)
    payload = source.payload(1, 0, Resolution(320, 180))
    assert (payload.content_type, payload.frames) == (videos.CONTENT_TYPES[container], 6)
    reference = videos.reference_frames(payload.body, container)
    assert reference.shape == (6, 180, 320, 3)
    assert all((a != b).any() for a, b in itertools.pairwise(reference))  # the camera pans
    assert [p[2] for p in videos.packets(payload.body, container)] == [True] + [False] * 5
    clip = decode(payload.body, payload.content_type, Meta(), CONFIG)
    assert clip.pts == pytest.approx([i / 30 for i in range(6)])
    for got, want in zip(clip.frames, reference):
        assert abs(got.astype(int) - want.astype(int)).max() <= 2


@pytest.mark.parametrize(("cpus", "decode_threads", "threads"), [(2, 2, 1), (1, 2, 1), (8, 2, 4),
                                                                  (16, 2, 4), (6, 3, 2)])
def test_decoder_threads_split_the_cpus_between_parallel_requests(monkeypatch, cpus, decode_threads,
                                                                 threads):
    monkeypatch.setattr(video.os, "sched_getaffinity", lambda pid: set(range(cpus)))
    assert video._codec_threads(dataclasses.replace(CONFIG, decode_threads=decode_threads)) == threads
