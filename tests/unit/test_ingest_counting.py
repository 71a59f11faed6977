"""Counts that hold under a real detector: a box missed for frames while it crosses a line or
stays in a zone, a class that flips, a camera that goes down, a reload of the tracker's settings,
a zone that fails; the tracker against trackers 2.6 frame by frame and on clean scenes
(Hypothesis); the snapshot writer off the result path; the sequencer's order for a connection's end.
"""

from __future__ import annotations

import io
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from prometheus_client import generate_latest

from ingest import config
from ingest.analytics.analyse import Analytics
from ingest.analytics.scene import Shape, Zone
from ingest.analytics.snapshot import Snapshots
from ingest.analytics.tracking import Tracks
from ingest.cameras.queue import Sequencer
from ingest.cameras.units import Unit
from ingest.sinks.metrics import Metrics
from tsutil import prom

WIDTH, HEIGHT, FPS = 640, 480, 15
DOOR = [[0.0, 0.0], [0.3, 0.0], [0.3, 1.0], [0.0, 1.0]]  # x < 192
GATE = {"name": "gate", "from": [0.5, 0], "to": [0.5, 1]}  # x = 320, top to bottom: left to right is `in`
UNIT = Unit(0, b"", "video/mp2t", 1000.0, 0.0, 1, session=1)


def scene(**settings_):
    [cam] = config.parse({"cameras": [{"name": "c", "url": "rtsp://h/x", "track": True, **settings_}]})
    return cam.scene


def line(n: int, detections: list[dict]) -> dict:
    return {"camera": "c", "segment": n // FPS, "pts": n / FPS, "capture_time": 1000 + n / FPS, "status": 200,
            "width": WIDTH, "height": HEIGHT, "detections": detections}


def square(x: float, label: str = "red", y: float = 200.0, size: float = 40.0) -> dict:
    return {"box": [x, y, x + size, y + size], "score": 0.9, "class_id": 0, "label": label}


def run(analytics: Analytics, frames: list[list[dict]]) -> list[dict]:
    """Each frame's detections through `analytics`: the lines and events it writes."""
    return [out for n, detections in enumerate(frames) for out in analytics.release(UNIT, [line(n, detections)], 1.0)]


def events(out: list[dict], kind: str | None = None) -> list[dict]:
    return [o for o in out if "event" in o and (kind is None or o["event"] == kind)]


def ids(out: list[dict]) -> set[int]:
    return {d["track_id"] for o in out if "event" not in o for d in o["detections"]}


@pytest.mark.parametrize("missed", [2, 5, 10])
def test_a_square_missed_for_frames_while_it_crosses_is_counted_once_with_one_id(missed):
    """An 80 px square seen 5 frames left of the gate (x = 320), missed `missed` frames (it
    crosses unseen), then seen wholly right of it: one crossing, `in`, at the first frame it is
    seen on the other side."""
    speed = 100 / (missed + 1)  # from x = 230 (its right edge at 310) to 330 while unseen
    frames = [[square(230 + (n - 4) * speed, size=80)] if n < 5 or n >= 5 + missed else [] for n in range(10 + missed)]
    out = run(Analytics("c", scene(lines=[GATE]), Metrics()), frames)
    [crossed] = events(out, "crossed")
    assert (crossed["direction"], crossed["track_id"], crossed["capture_time"]) == ("in", 1, 1000 + (5 + missed) / FPS)
    assert ids(out) == {1}


@pytest.mark.parametrize("missed", [2, 5, 10])
def test_a_square_missed_for_frames_inside_a_zone_makes_one_visit(missed):
    """In the door (x < 192) for 5 frames, missed `missed` frames, seen inside 5 more, then it
    walks out: one entry, one exit, one id; its dwell runs from its first to its last sighting inside."""
    inside = 10 + missed
    frames = [[square(100)]] * 5 + [[]] * missed + [[square(100)]] * 5 + [[square(100 + 15 * k)] for k in range(1, 10)]
    out = run(Analytics("c", scene(zones=[{"name": "door", "polygon": DOOR}]), Metrics()), frames)
    assert [(e["event"], e["track_id"]) for e in events(out)] == [("entered", 1), ("left", 1)]
    left = events(out, "left")[0]
    # confirmed at frame 1; out at the frame its bottom centre passes x = 192 (100 + 15 k + 20 > 192: k = 5)
    assert left["dwell_s"] == pytest.approx((inside + 4 - 1) / FPS, abs=1e-6)
    assert ids(out) == {1}


def test_a_box_the_tracker_has_not_confirmed_never_counts():
    """A box seen once (no id yet) right of the gate, then never again: nothing; a confirmed
    track's first side seeds it (no crossing from nowhere)."""
    out = run(Analytics("c", scene(lines=[GATE], zones=[{"name": "door", "polygon": DOOR}]), Metrics()),
              [[square(100), square(500, "blue")], [square(100)], [square(100)]])
    assert [(e["event"], e["track_id"], e["label"]) for e in events(out)] == [("entered", 1, "red")]


def test_a_class_flip_mid_crossing_keeps_the_side_and_the_membership_and_counts_the_new_label():
    gauge = {}
    metrics = Metrics()
    analytics = Analytics("c", scene(lines=[{**GATE, "classes": ["car", "truck"]}],
                                     zones=[{"name": "lot", "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]]}]), metrics)
    path = [240 + 10 * n for n in range(12)]  # crosses x = 320 at frame 8
    frames = [[square(x, "car" if n < 6 else "truck")] for n, x in enumerate(path)]
    out = run(analytics, frames)
    assert [(e["event"], e.get("direction"), e["label"]) for e in events(out)] == [
        ("entered", None, "car"), ("crossed", "in", "truck")]
    exposition = generate_latest(metrics.registry).decode()
    gauge = {label: prom.total(exposition, "video_ingest_zone_objects", camera="c", zone="lot", label=label)
             for label in ("car", "truck")}
    assert gauge == {"car": 0, "truck": 1}  # the member counts under its label now
    # A track that flips out of the line's classes before it crosses is not counted.
    flipped = run(Analytics("c", scene(lines=[{**GATE, "classes": ["car"]}]), Metrics()),
                  [[square(x, "car" if n < 4 else "person")] for n, x in enumerate(path)])
    assert events(flipped) == []


def test_a_camera_that_goes_down_ends_its_tracks_members_leave_and_the_gauges_go_to_zero():
    metrics = Metrics()
    analytics = Analytics("c", scene(zones=[{"name": "door", "polygon": DOOR}]), metrics)
    out = run(analytics, [[square(100), square(140, "blue", y=300)]] * 4)
    assert len(events(out, "entered")) == 2
    before = generate_latest(metrics.registry).decode()
    assert prom.total(before, "video_ingest_tracks_active", camera="c") == 2
    left = analytics.end(2.0)
    assert [(e["event"], e["track_id"], e["dwell_s"], e["time"]) for e in left] == [
        ("left", 1, pytest.approx(2 / FPS, abs=1e-6), 2.0), ("left", 2, pytest.approx(2 / FPS, abs=1e-6), 2.0)]
    after = generate_latest(metrics.registry).decode()
    assert prom.total(after, "video_ingest_zone_objects", camera="c", zone="door") == 0
    assert prom.total(after, "video_ingest_tracks_active", camera="c") == 0
    assert analytics.end(3.0) == []  # nothing left to end
    # The next connection's tracks get new ids.
    again = [o for n in range(3) for o in analytics.release(Unit(0, b"", "video/mp2t", 1.0, 0.0, 1, session=2),
                                                             [line(n, [square(100)])], 4.0)]
    assert [(e["event"], e["track_id"]) for e in events(again)] == [("entered", 3)]


def test_a_reload_of_the_trackers_settings_applies_to_the_running_tracks_without_a_second_entry():
    """lost_track_seconds 0.5 -> 2 while a member is unseen for 1 s: it is kept (the tracker and
    the zone together), comes back with its id, and never enters twice."""
    analytics = Analytics("c", scene(lost_track_seconds=0.5, zones=[{"name": "door", "polygon": DOOR}]), Metrics())
    out = run(analytics, [[square(100)]] * 3)
    analytics.reconfigure(scene(lost_track_seconds=2, track_threshold=0.6,
                                zones=[{"name": "door", "polygon": DOOR}]), 1.0)
    for n in range(3, 3 + FPS):  # unseen for a second
        out += analytics.release(UNIT, [line(n, [])], 1.0)
    for n in range(3 + FPS, 6 + FPS):
        out += analytics.release(UNIT, [line(n, [square(100)])], 1.0)
    assert [(e["event"], e["track_id"]) for e in events(out)] == [("entered", 1)] and ids(out) == {1}
    # track_threshold 0.6 now: a new box at 0.55 starts no track.
    low = {**square(400, "blue"), "score": 0.55}
    out = [o for n in range(6 + FPS, 9 + FPS) for o in analytics.release(UNIT, [line(n, [square(100), low])], 1.0)]
    assert ids(out) == {1}


def test_equal_pts_never_reset_the_tracker_and_pts_going_back_does_once():
    analytics = Analytics("c", scene(zones=[{"name": "door", "polygon": DOOR}]), Metrics())
    out = run(analytics, [[square(100)]] * 3)
    out += analytics.release(UNIT, [line(2, [square(100)])], 1.0)  # the same pts again
    assert [e["event"] for e in events(out)] == ["entered"] and ids(out) == {1}
    out = analytics.release(UNIT, [line(0, [square(100)])], 1.0)  # back to the start: a new tracker
    assert [(e["event"], e["track_id"]) for e in events(out)] == [("left", 1)]


class _Broken(Shape):
    """A polygon whose geometry fails (a bug, as a test stands in for one)."""

    def pixels(self, width: int, height: int):
        raise RuntimeError("broken geometry")


def test_a_zone_that_fails_leaves_the_other_zones_and_lines_their_events_and_state(caplog):
    metrics = Metrics()
    good = scene(zones=[{"name": "door", "polygon": DOOR}], lines=[GATE])
    broken = Zone("bad", _Broken(((0, 0), (1, 0), (1, 1)), True))
    analytics = Analytics("c", good, metrics)
    analytics.reconfigure(type(good)(**{**{f: getattr(good, f) for f in good.__slots__}, "zones": (broken, *good.zones)}),
                          1.0)
    path = [100 + 12 * n for n in range(22)]  # out of the door at n = 7, wholly past the gate at n = 19
    out = run(analytics, [[square(x)] for x in path])
    assert [(e["event"], e.get("zone") or e.get("line")) for e in events(out)] == [
        ("entered", "door"), ("left", "door"), ("crossed", "gate")]
    exposition = generate_latest(metrics.registry).decode()
    assert prom.total(exposition, "video_ingest_analytics_errors_total", camera="c", stage="zone") == len(path) - 1
    assert "camera c: zone 'bad' failed on a frame (1 failures so far" in caplog.text


def bytetrack(lost_track_seconds: float = 1.0, threshold: float = 0.5):
    """Roboflow's `trackers` 2.6 `ByteTrackTracker`, built and read exactly as video-ingest used it
    before its own tracker: an `update(detections, seconds) -> ids` like `Tracks.update`, each
    detection's id (the camera's, from 1) or None."""
    import supervision as sv
    from trackers import ByteTrackTracker

    tracker = ByteTrackTracker(lost_track_buffer=max(1, round(lost_track_seconds * 30)), frame_rate=30.0,
                               track_activation_threshold=threshold, high_conf_det_threshold=threshold)
    camera_ids: dict[int, int] = {}

    def update(detections, seconds):
        n = len(detections)
        frame = sv.Detections(xyxy=np.array([d["box"] for d in detections], dtype=np.float64).reshape(n, 4),
                              confidence=np.array([float(d.get("score", 1.0)) for d in detections], dtype=np.float64),
                              data={"index": np.arange(n)})
        result = tracker.update(frame, timestamp=seconds)
        ids = [None] * n
        if result.tracker_id is None or len(result) == 0:  # (an empty answer carries no `index`)
            return ids
        for index, tracker_id in zip(result.data["index"], result.tracker_id):
            if tracker_id >= 0:
                ids[int(index)] = camera_ids.setdefault(int(tracker_id), len(camera_ids) + 1)
        return ids

    return update


def test_the_tracker_gives_the_ids_trackers_2_6_gives_frame_by_frame():
    """Crossing paths, missed boxes, low scores and a 0.5 s gap: the same ids as the library
    whose algorithm it runs (its arithmetic over all tracks at once)."""
    rng = np.random.default_rng(3)
    frames, times = [], []
    for f in range(300):
        if 100 <= f < 115:
            continue  # a gap in time
        detections = []
        for i in range(12):
            x = (50 + 37 * i + (3 + i % 5) * f * (1 if i % 2 else -1)) % 1800
            y = 80 * i % 1000
            if rng.random() < 0.1:
                continue  # missed
            detections.append({"box": [x, y, x + 60.0, y + 90.0], "score": float(rng.choice([0.3, 0.8, 0.9]))})
        frames.append(detections)
        times.append(f / 30)
    tracks, library = Tracks(), bytetrack()
    assert [tracks.update(d, t) for d, t in zip(frames, times)] == [library(d, t) for d, t in zip(frames, times)]


@st.composite
def clean_scenes(draw):
    """Up to 8 objects on straight paths in rows of their own (they never overlap), each seen in
    every frame and moving at most half its width a frame (a box overlaps its last one), at a
    frame rate from 5 to 30."""
    count = draw(st.integers(1, 8))
    objects = [(draw(st.floats(0, 1500)), draw(st.floats(-0.5, 0.5)), draw(st.floats(30, 120))) for _ in range(count)]
    return objects, draw(st.sampled_from([5, 10, 15, 30])), draw(st.integers(2, 60))


@settings(max_examples=60, deadline=None)
@given(clean_scenes())
def test_on_clean_scenes_every_object_keeps_one_id_for_its_whole_path(case):
    objects, fps, frames = case
    tracks = Tracks()
    seen: dict[int, set[int | None]] = {i: set() for i in range(len(objects))}
    for f in range(frames):
        detections = [{"box": [x + step * w * f, 130.0 * i, x + step * w * f + w, 130.0 * i + 100], "score": 0.9}
                      for i, (x, step, w) in enumerate(objects)]
        for i, track_id in enumerate(tracks.update(detections, f / fps)):
            if f > 0:  # (an id from the second frame on)
                seen[i].add(track_id)
    assert all(len(s) == 1 and None not in s for s in seen.values()), seen
    assert sorted(next(iter(s)) for s in seen.values()) == list(range(1, len(objects) + 1))


def test_a_snapshot_that_is_slow_to_write_never_holds_the_result_path(tmp_path, monkeypatch):
    """The picture is made on the snapshot thread: `offer` returns at once while a write is
    stuck, and a picture due meanwhile is skipped."""
    release = threading.Event()
    started = threading.Event()
    snapshots = Snapshots(tmp_path, "c", every_s=0.0)
    real = snapshots._write

    def slow(*args):
        started.set()
        release.wait(10)
        real(*args)

    monkeypatch.setattr(snapshots, "_write", slow)
    jpeg = io.BytesIO()
    Image.new("RGB", (64, 48), (40, 40, 40)).save(jpeg, "JPEG")
    unit = Unit(0, jpeg.getvalue(), "image/jpeg", 1.0, 0.0, 1)
    begun = time.monotonic()
    assert snapshots.offer(unit, line(0, []), scene())
    assert started.wait(10)
    assert [snapshots.offer(unit, line(1, []), scene()) for _ in range(3)] == [False] * 3
    assert time.monotonic() - begun < 5 and snapshots.skipped == 3
    release.set()
    deadline = time.monotonic() + 10
    while snapshots.written < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert (tmp_path / "c.jpg").exists()
    snapshots.close()


def test_the_end_of_a_connection_is_written_after_the_lines_of_its_units():
    written = []
    sequencer: Sequencer[str] = Sequencer(written.append)
    first, second = sequencer.issue(), sequencer.issue()
    sequencer.after_all("ended")
    third = sequencer.issue()
    sequencer.done(third, "c")
    sequencer.done(second, "b")
    assert written == []
    sequencer.done(first, "a")
    assert written == ["a", "b", "ended", "c"]
    sequencer.after_all("again")
    assert written[-1] == "again"
