"""The small parts of video-ingest: redaction, shards, backoff, capture clock, queue, sequencer,
result lines."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.cameras.backoff import Backoff
from ingest.cameras.client import Answer
from ingest.cameras.clock import CaptureClock
from ingest.cameras.queue import Closed, SendQueue, Sequencer
from ingest.cameras.units import Unit
from ingest.config import Policy
from ingest.shard import Shard
from ingest.sinks.redact import Redactor, url_secrets
from ingest.sinks.results import result_lines


def unit(seq: int, capture: float = 100.0, pts: float = 3.0) -> Unit:
    return Unit(seq, b"body", "video/mp2t", capture, pts, 15, None)


def test_redactor_masks_userinfo_and_registered_secrets():
    redact = Redactor(url_secrets("rtsp://viewer:p%40ss@cam/1") + ["envvalue"])
    text = "rtsp://viewer:p%40ss@cam/1 failed; p@ss, envvalue and rtsp://other:x@h/ too"
    assert redact(text) == "rtsp://***@cam/1 failed; ***, *** and rtsp://***@h/ too"
    assert Redactor(["ab"])("ab stays: too short to mask outside URLs") == "ab stays: too short to mask outside URLs"


def test_shards_split_every_camera_exactly_once_and_stably():
    names = [f"cam-{i}" for i in range(200)]
    shards = [Shard(k, 4) for k in range(4)]
    owners = [[s.index for s in shards if s.includes(n)] for n in names]
    assert all(len(o) == 1 for o in owners)
    sizes = [sum(o == [k] for o in owners) for k in range(4)]
    assert min(sizes) >= 30, sizes
    moved = sum(Shard(0, 4).owner(n) != Shard(0, 5).owner(n) for n in names)
    assert moved < 80  # about 1/5 of them move to the new shard, not all
    assert Shard.parse("2/4") == Shard(2, 4)
    for bad in ("4/4", "x", "1/0", "-1/2"):
        with pytest.raises(ValueError, match="use K/N with 0 <= K < N"):
            Shard.parse(bad)


def test_backoff_grows_caps_and_resets_after_a_healthy_minute():
    backoff = Backoff()
    delays = [backoff.next_delay(0.1) for _ in range(12)]
    assert all(0.5 <= d <= 30.0 for d in delays)
    assert delays[0] <= 0.75 and delays[-1] >= 15.0
    assert backoff.next_delay(61.0) <= 0.75 and backoff.attempts == 1


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 0.5)), min_size=1, max_size=50),
       st.sets(st.integers(0, 49)))
def test_capture_times_only_increase_whatever_the_pts_and_reconnects(steps, reconnects):
    now = [1000.0]
    clock = CaptureClock(lambda: now[0])
    last = float("-inf")
    for i, (pts, advance) in enumerate(steps):
        if i in reconnects:
            clock.reconnected()
        now[0] += advance
        stamp = clock.stamp(pts)
        assert stamp > last and stamp <= now[0] + 1e-3 * (i + 1)
        last = stamp


def test_capture_time_follows_the_pts_from_the_packet_that_came_soonest():
    now = [1000.0]
    clock = CaptureClock(lambda: now[0])
    assert clock.stamp(5.0) == 1000.0
    now[0] = 1000.9  # arrived late by 0.4 s: the stream's own time counts
    assert clock.stamp(5.5) == pytest.approx(1000.5)
    burst = CaptureClock(lambda: now[0])  # a burst after probing: all came at 1000.9
    arrivals = [burst.observe(pts) for pts in (5.0, 5.5, 6.0)]
    # The last of the burst was the live one; none is stamped after its arrival.
    assert [burst.capture(p, a) for p, a in zip((5.0, 5.5, 6.0), arrivals)] == pytest.approx([999.9, 1000.4, 1000.9])
    now[0] = 1010.0  # stream time fell 3.6 s behind (a slow camera clock): re-anchored on arrival
    assert burst.stamp(6.5) == pytest.approx(1010.0)


def test_a_frame_is_never_stamped_after_it_arrived_even_when_the_offset_shrinks():
    now = [1000.0]
    clock = CaptureClock(lambda: now[0])
    first = [(p, clock.observe(p)) for p in (1.0, 1.5)]  # a burst: both at 1000.0
    stamped = [clock.capture(p, a) for p, a in first]
    now[0] = 1000.1
    later = [(p, clock.observe(p)) for p in (2.0, 2.5)]  # live now: the offset shrinks by 0.9 s
    stamped += [clock.capture(p, a) for p, a in later]
    assert stamped == sorted(stamped) and all(s <= a for s, (_, a) in zip(stamped, first + later))


def test_latest_drops_the_oldest_unsent_and_every_waits():
    dropped: list[int] = []
    latest = SendQueue(2, Policy.LATEST, lambda u: dropped.append(u.seq))
    stop = threading.Event()
    for seq in range(5):
        assert latest.put(unit(seq), stop)
    assert dropped == [0, 1, 2] and [latest.get().seq, latest.get().seq] == [3, 4]
    every = SendQueue(1, Policy.EVERY, lambda u: dropped.append(u.seq))
    every.put(unit(0), stop)
    threading.Timer(0.3, stop.set).start()
    assert every.put(unit(1), stop) is False  # waited for room until stopped, nothing dropped
    assert dropped == [0, 1, 2]
    every.finish()
    assert every.get().seq == 0
    with pytest.raises(Closed):
        every.get()


def test_sequencer_writes_in_sequence_order():
    written: list[int] = []
    seq = Sequencer(lambda lines: written.extend(line["n"] for line in lines))
    numbers = [seq.issue() for _ in range(4)]
    assert numbers == [0, 1, 2, 3]
    seq.done(2, [{"n": 2}])
    seq.done(1, [])
    assert written == []
    seq.done(0, [{"n": 0}])
    seq.done(3, [{"n": 3}])
    assert written == [0, 2, 3]


def test_result_lines_one_per_frame_with_pts_and_capture_time_from_the_segment():
    body = {"stream_id": "a", "frame_id": "7", "frames": [
        {"width": 320, "height": 240, "outputs": {"brightness": 1.0}, "pts": 1.4},
        {"width": 320, "height": 240, "outputs": {"brightness": 2.0}, "pts": 1.5}]}
    segment = Unit(7, b"", "video/mp2t", 100.0, 3.0, 2, None, ((3.0, 100.0), (3.1, 100.1)))
    lines = result_lines("a", segment, Answer(200, body), now=100.6)
    assert [(r["segment"], r["pts"], r["capture_time"], r["latency_ms"]) for r in lines] == [
        (7, 3.0, 100.0, 600.0), (7, 3.1, 100.1, 500.0)]
    assert lines[1]["outputs"] == {"brightness": 2.0} and lines[0]["status"] == 200
    detections = [{"box": [1.0, 2.0, 30.0, 40.0], "score": 0.9, "class_id": 0, "label": "person"}]
    body = {"frames": [{"width": 320, "height": 240, "detections": detections, "pts": 1.4}]}
    [line] = result_lines("a", segment, Answer(200, body), now=100.6)
    assert line["detections"] == detections and "outputs" not in line
    [error] = result_lines("a", unit(8), Answer(400, {"code": 400, "type": "CorruptFrame", "message": "bad"}), 100.5)
    assert (error["status"], error["type"], error["message"], error["segment"]) == (400, "CorruptFrame", "bad", 8)
    [lost] = result_lines("a", unit(9), Answer(None, None, "ConnectionError: no"), 100.5)
    assert (lost["status"], lost["type"]) == (None, "Unavailable")


def test_keys_from_key_file_json_a_plain_token_file_or_none(tmp_path):
    from ingest.cameras.client import Keys

    key_file = tmp_path / "key_file.json"
    key_file.write_text('{"inference": {"key": "k1", "expiration time": "2030-01-01T00:00:00Z"}, '
                        '"management": {"key": "m1"}, "API": {"key": "a1"}}')
    keys = Keys(key_file)
    assert keys.current() == "k1"
    key_file.write_text(key_file.read_text().replace("k1", "k2"))
    assert keys.current() == "k1"  # kept until refused
    assert keys.refreshed("k1") == "k2"
    token = tmp_path / "token"
    token.write_text("s3cr3t-token\n")
    plain = Keys(token)
    assert plain.current() == "s3cr3t-token"
    token.write_text("rotated")
    assert plain.refreshed("s3cr3t-token") == "rotated"
    assert Keys(tmp_path / "absent.json").current() is None
