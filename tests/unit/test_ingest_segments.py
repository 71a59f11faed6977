"""Segments and frames cut from real video files (made by the ffmpeg CLI), without a server:
segment boundaries at key frames, every frame in exactly one segment, each segment decodable on
its own, pts kept; frames mode sampled by pts; MJPEG passed through."""

from __future__ import annotations

import io
import threading

import av
import pytest
import simplejpeg

from ingest.cameras.clock import CaptureClock
from ingest.cameras.frames import FrameSender, Sampler
from ingest.cameras.segments import Segmenter
from tests.videos import segment


def _issue():
    counter = iter(range(10_000))
    return lambda: next(counter)


def _cut(body: bytes, fmt: str, make):
    container = av.open(io.BytesIO(body), format=fmt)
    stream = container.streams.video[0]
    cutter = make(stream)
    units = [u for packet in container.demux(stream) for u in cutter.push(packet)] + cutter.flush()
    container.close()
    return units


def _decode(ts: bytes) -> list[tuple[int, int, float]]:
    with av.open(io.BytesIO(ts), format="mpegts") as container:
        return [(f.width, f.height, float(f.time)) for f in container.decode(video=0)]


def test_segments_cut_at_key_frames_every_second_and_decode_alone():
    body = segment("mpegts", width=160, height=96, frames=45, fps=15, gop=15, bframes=0)
    now = [1000.0]
    units = _cut(body, "mpegts", lambda s: Segmenter(s, 1.0, CaptureClock(lambda: now[0]), _issue()))
    assert [u.seq for u in units] == [0, 1, 2]
    assert [u.frames for u in units] == [15, 15, 15]
    assert all(u.content_type == "video/mp2t" and u.sample_fps is None for u in units)
    decoded = [_decode(u.body) for u in units]
    assert [len(d) for d in decoded] == [15, 15, 15]
    assert {(w, h) for d in decoded for w, h, _ in d} == {(160, 96)}
    starts = [u.pts for u in units]
    assert [round(b - a, 3) for a, b in zip(starts, starts[1:])] == [1.0, 1.0]
    captures = [t for u in units for _, t in u.frame_times]
    assert [u.capture_time for u in units] == [u.frame_times[0][1] for u in units]
    # All arrived at once (1000.0): none is stamped later; earlier ones lie before it by their pts.
    assert captures == sorted(set(captures)) and max(captures) <= 1000.0
    assert captures[0] == pytest.approx(1000.0 - 15 / 15)


def test_segments_with_b_frames_and_a_longer_cut_keep_every_frame_once():
    body = segment("mp4", width=160, height=96, frames=60, fps=30, gop=10, bframes=2)
    units = _cut(body, "mp4", lambda s: Segmenter(s, 0.5, CaptureClock(lambda: 0.0), _issue(), sample_fps=10))
    assert [u.frames for u in units] == [20, 20, 20]  # cut at the first key frame 0.5 s on
    assert all(u.sample_fps == 10 for u in units)
    # The muxer may shift a segment's times (dts kept >= 0): results place frames by their
    # distance from the segment's first pts, as here.
    times = []
    for unit in units:
        decoded = [t for _, _, t in _decode(unit.body)]
        times += [round(unit.pts + t - min(decoded), 4) for t in decoded]
    assert times == [round(i / 30, 4) for i in range(60)]


def test_frames_mode_keeps_five_a_second_by_pts_as_jpeg():
    body = segment("mpegts", width=160, height=96, frames=45, fps=15, gop=15, bframes=0)
    units = _cut(body, "mpegts", lambda s: FrameSender(s, 5.0, CaptureClock(lambda: 0.0), _issue()))
    assert len(units) == 15
    assert [round(u.pts - units[0].pts, 3) for u in units[:3]] == [0.0, 0.2, 0.4]
    assert all(u.content_type == "image/jpeg" and u.frames == 1 for u in units)
    assert simplejpeg.decode_jpeg_header(units[0].body)[:2] == (96, 160)


def test_mjpeg_packets_are_sent_as_they_came():
    body = segment("mp4", width=160, height=96, frames=10, fps=10, codec="mjpeg")
    container = av.open(io.BytesIO(body), format="mp4")
    packets = [bytes(p) for p in container.demux(video=0) if p.size]
    container.close()
    units = _cut(body, "mp4", lambda s: FrameSender(s, 5.0, CaptureClock(lambda: 0.0), _issue()))
    assert [u.body for u in units] == packets[::2]


def test_sampler_restarts_when_pts_go_back():
    sampler = Sampler(2.0)
    kept = [t for t in (0.0, 0.25, 0.5, 0.75, 1.0, 0.1, 0.3, 0.6) if sampler.keep(t)]
    assert kept == [0.0, 0.5, 1.0, 0.1, 0.6]


def test_a_stop_event_is_what_pacing_waits_on():
    from ingest.cameras.source import Pacer

    stop = threading.Event()
    pacer = Pacer()
    pacer.wait(0.0, stop)
    stop.set()
    pacer.wait(100.0, stop)  # returns at once: stopping never waits out a file's pace


def test_packets_that_do_not_decode_are_counted_in_a_row_and_a_good_one_resets_the_count():
    from fractions import Fraction

    body = segment("mp4", width=160, height=96, frames=4, fps=10, codec="libx264", bframes=0)
    container = av.open(io.BytesIO(body), format="mp4")
    stream = container.streams.video[0]
    good = [p for p in container.demux(stream) if p.size]
    calls: list[int] = []
    sender = FrameSender(stream, 5.0, CaptureClock(lambda: 0.0), _issue(), corrupt=calls.append)
    assert len(sender.push(good[0])) == 1
    for i in range(3):
        garbage = av.Packet(b"\x00\x00\x01\x65" + bytes(range(256)) * 4)
        garbage.pts, garbage.time_base = 1000 + i, Fraction(1, 10)
        assert sender.push(garbage) == []
    container.close()
    assert calls[:1] == [1] and calls == list(range(1, len(calls) + 1))


def test_h265_is_remuxed_too():
    body = segment("mpegts", width=160, height=96, frames=30, fps=15, codec="libx265", gop=15, bframes=0)
    units = _cut(body, "mpegts", lambda s: Segmenter(s, 1.0, CaptureClock(lambda: 0.0), _issue()))
    assert [u.frames for u in units] == [15, 15]
    assert [len(_decode(u.body)) for u in units] == [15, 15]
