"""Tracks, zones and lines on scripted boxes: the scene settings and their errors, crossings and
their direction and hysteresis, zone dwell, ids that never repeat, time gaps, resets, reloads."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
from PIL import Image
from prometheus_client import generate_latest

from ingest import config
from ingest.analytics.analyse import Analytics
from ingest.analytics.counting import Counting, Tracked
from ingest.analytics.scene import Anchor, Line, Shape, Zone
from ingest.analytics.snapshot import ZONE_COLOUR
from ingest.analytics.tracking import Tracks
from ingest.cameras.units import Unit
from ingest.config import ConfigError
from ingest.fleet import Fleet
from ingest.sinks.metrics import Metrics
from tsutil import prom

DOOR = [[0.0, 0.0], [0.3, 0.0], [0.3, 1.0], [0.0, 1.0]]
GATE = {"name": "gate", "from": [0.5, 0], "to": [0.5, 1]}


def camera(**scene):
    [cam] = config.parse({"cameras": [{"name": "c", "url": "rtsp://h/x", **scene}]})
    return cam


def test_shapes_in_fractions_follow_the_frame_and_pixels_stay():
    cam = camera(track=True, zones=[{"name": "door", "polygon": DOOR, "classes": ["person", 2]}],
                 lines=[{**GATE, "min_frames": 3}, {"name": "px", "from": [100, 0], "to": [100, 50]}])
    [door] = cam.scene.zones
    assert door.polygon.pixels(200, 100) == ((0, 0), (60, 0), (60, 100), (0, 100))
    assert door.classes == {"person", "2"}
    gate, px = cam.scene.lines
    assert (gate.segment.fractions, gate.min_frames, px.segment.fractions) == (True, 3, False)
    assert px.segment.pixels(1920, 1080) == ((100, 0), (100, 50))


@pytest.mark.parametrize(("scene", "message"), [
    ({"zones": [{"name": "door", "polygon": DOOR}]}, "camera 'c': zones and lines follow tracks: add `track: true`"),
    ({"track": True, "zones": [{"name": "door", "polygon": DOOR[:2]}]},
     "camera 'c': zone 'door': polygon: give at least 3 points"),
    ({"track": True, "zones": [{"name": "d", "polygon": DOOR}, {"name": "d", "polygon": DOOR}]},
     "camera 'c': zones[1]: name 'd' is used twice"),
    ({"track": True, "lines": [{"name": "g", "from": [0.5, 0]}]}, "camera 'c': line 'g': give `from: [x, y]` and `to"),
    ({"track": True, "lines": [{**GATE, "to": [0.5, 0]}]}, "camera 'c': line 'gate': `from` and `to` are the same"),
    ({"track": True, "lines": [{**GATE, "anchors": ["middle"]}]}, "camera 'c': line 'gate': anchors = ['middle']: use"),
    ({"track": True, "lines": [{**GATE, "colour": "red"}]}, "camera 'c': line 'gate': unknown key(s) colour: use name"),
    ({"track": True, "zones": [{"name": "d", "polygon": [[0, 0], [1, -1], [1, 1]]}]},
     "camera 'c': zone 'd': polygon: [1, -1] is off any frame: write coordinates from 0 to 1"),
    ({"track": True, "zones": [{"name": "d", "polygon": [[0, 0], [float("nan"), 0.5], [1, 1]]}]},
     "camera 'c': zone 'd': polygon: [nan, 0.5] is off any frame"),
    ({"track": True, "lines": [{**GATE, "to": [float("inf"), 1]}]}, "camera 'c': line 'gate': from/to: [inf, 1] is off"),
    ({"track": True, "lines": [{**GATE, "to": [16385, 1]}]},
     "camera 'c': line 'gate': from/to: [16385, 1] is off any frame: write coordinates from 0 to 1 (fractions of "
     "the frame) or from 0 to 16384 (pixels)"),
    ({"track": True, "zones": [{"name": "d", "polygon": [[0.1, 0.1], [640, 0], [640, 480]]}]},
     "camera 'c': zone 'd': polygon: 0.1 is a fraction of the frame but 640 is pixels: write every point of the "
     "shape in fractions (0 to 1) or every one in pixels"),
    ({"track": True, "zones": [{"name": "d", "polygon": [[0, 0], [0.5, 0.5], [1, 1]]}]},
     "camera 'c': zone 'd': polygon [[0.0, 0.0], [0.5, 0.5], [1.0, 1.0]] has no area (its points are on one line)"),
    ({"track": True, "zones": [{"name": "d", "polygon": [[10, 10], [10, 10], [10, 10], [10, 10]]}]},
     "camera 'c': zone 'd': polygon [[10.0, 10.0], [10.0, 10.0], [10.0, 10.0], [10.0, 10.0]] has no area"),
    ({"track": True, "lines": [{"name": "g", "from": [200, 100], "to": [200, 100]}]},
     "camera 'c': line 'g': `from` and `to` are the same point: a line of zero length counts nothing"),
    ({"track": True, "lines": [{**GATE, "anchors": []}]}, "camera 'c': line 'gate': anchors = []: name at least one of"),
    ({"track": True, "zones": [{"name": "d", "polygon": DOOR, "anchor": []}]},
     "camera 'c': zone 'd': anchor = []: name at least one of center, bottom_center"),
    ({"track": True, "zones": [{"name": "d", "polygon": DOOR, "anchor": "feet"}]},
     "camera 'c': zone 'd': anchor = 'feet': use center, bottom_center, top_center"),
    ({"track": "yes"}, "camera 'c': track = 'yes': use true or false"),
    ({"track": True, "display_threshold": 1.5}, "camera 'c': display_threshold = 1.5: use a number from 0 to 1"),
    ({"track": True, "lost_track_seconds": 0}, "camera 'c': lost_track_seconds = 0: use a number above 0"),
])
def test_a_bad_scene_names_the_camera_the_field_and_the_fix(scene, message):
    with pytest.raises(ConfigError) as caught:
        camera(**scene)
    assert str(caught.value).startswith(message), str(caught.value)


def test_the_scene_is_not_the_cameras_identity_and_track_comes_from_the_command_line():
    assert camera(track=True, lines=[GATE]) == camera()
    assert config.from_argument("c=rtsp://h/x", track=True).scene.track


def box(x: float, y: float = 40.0, size: float = 20.0) -> tuple[float, float, float, float]:
    return (x, y, x + size, y + size)


def test_a_line_counts_each_whole_crossing_once_left_to_right_in():
    """Vertical line at x = 100, drawn top to bottom: left to right is `in`; a box on the line is
    on neither side; only the line's classes count."""
    crossings = []
    counting = Counting([], [Line("gate", Shape(((100, 0), (100, 200)), False), frozenset({"person"}))],
                        line_counter=lambda *a: crossings.append(a))
    events = []
    path = [40, 60, 85, 95, 105, 130, 150, 130, 95, 85, 60]
    for n, x in enumerate(path):
        events += counting.frame([Tracked(7, box(x), "person"), Tracked(8, box(x, 120), "car")], (200, 200), n)
    assert [(e["event"], e["track_id"], e["direction"], e["capture_time"]) for e in events] == [
        ("crossed", 7, "in", 4), ("crossed", 7, "out", 10)]
    assert crossings == [("gate", "in", "person"), ("gate", "out", "person")]


def test_min_frames_ignores_a_short_excursion_and_counts_a_stay():
    counting = Counting([], [Line("gate", Shape(((100, 0), (100, 200)), False), min_frames=3)])
    sides = [40, 130, 130, 40, 40, 40, 130, 130, 130, 130]  # 2 frames across: noise; then 3 and more: in
    events = [e for n, x in enumerate(sides) for e in counting.frame([Tracked(1, box(x), "p")], (200, 200), n)]
    assert [(e["direction"], e["capture_time"]) for e in events] == [("in", 8)]


def test_a_zone_reports_entries_dwell_and_a_track_that_ends_inside():
    gauge = {}
    zone = Zone("door", Shape(((0, 0), (60, 0), (60, 100), (0, 100)), False))
    counting = Counting([zone], [], zone_gauge=lambda z, label, n: gauge.update({label: n}))
    events = []
    for t, x in enumerate([10, 20, 30, 80, 90, 20]):  # anchor: the bottom centre (x + 10)
        events += counting.frame([Tracked(1, box(x, 10), "person")], (200, 100), float(t))
    assert gauge == {"person": 1}
    events += counting.frame([], (200, 100), 5.5)  # unseen: still inside, for as long as its track lives
    events += counting.frame([], (200, 100), 60.0)
    assert gauge == {"person": 1}
    events += counting.end_tracks([1])  # the tracker ended it: it leaves at its last sighting
    assert [(e["event"], e["capture_time"], e.get("dwell_s")) for e in events] == [
        ("entered", 0.0, None), ("left", 3.0, 3.0), ("entered", 5.0, None), ("left", 5.0, 0.0)]
    assert gauge == {"person": 0}


def test_a_reload_keeps_the_members_of_a_zone_that_did_not_change():
    door = Zone("door", Shape(tuple(map(tuple, DOOR)), True))
    counting = Counting([door], [])
    assert [e["event"] for e in counting.frame([Tracked(1, box(10), "p")], (200, 100), 0.0)] == ["entered"]
    gone = counting.reconfigure([door, Zone("yard", Shape(((0.5, 0), (1, 0), (1, 1)), True))], [])
    assert gone == []
    assert counting.frame([Tracked(1, box(12), "p")], (200, 100), 0.1) == []  # not entered again
    # The door moved right: its member is judged where it is next seen (outside now: it left).
    moved = Zone("door", Shape(((0.5, 0), (1, 0), (1, 1), (0.5, 1)), True))
    assert counting.reconfigure([moved], []) == ["yard"]
    assert [e["event"] for e in counting.frame([Tracked(1, box(12), "p")], (200, 100), 0.2)] == ["left"]
    assert counting.reconfigure([], []) == ["door"]
    assert [e["event"] for e in counting.end()] == []


def moving(n: int, x0: float = 100.0, speed: float = 8.0) -> list[dict]:
    return [{"box": [x0 + speed * n, 100.0, x0 + speed * n + 50, 150.0], "score": 0.9},
            {"box": [600.0, 300.0 + speed * n, 660.0, 360.0 + speed * n], "score": 0.8}]


def test_ids_start_at_one_survive_a_gap_in_time_and_never_repeat_after_a_reset():
    tracks = Tracks(lost_track_seconds=1.0)
    seen = [tracks.update(moving(n), n / 30) for n in range(30)]
    assert seen[0] == [None, None] and all(ids == [1, 2] for ids in seen[1:])  # confirmed on the next frame
    after_gap = [tracks.update(moving(n), n / 30) for n in range(45, 60)]  # half a second dropped
    assert all(ids == [1, 2] for ids in after_gap) and tracks.ended == []
    assert tracks.update(moving(60), 59 / 30) == [1, 2]  # the same time again: a frame at no distance
    assert tracks.update(moving(1), 1 / 30) == [None, None]  # stream time went back: every track ended
    assert tracks.ended == [1, 2]
    again = [tracks.update(moving(n), n / 30) for n in range(2, 7)]
    assert again[-1] == [3, 4] and tracks.issued == 4 and tracks.reset() == [3, 4]


def answer(n: int, width: int = 640, height: int = 480, pts: float | None = None, detections=None) -> dict:
    return {"camera": "c", "segment": n, "pts": n / 15 if pts is None else pts, "capture_time": 1000 + n / 15,
            "status": 200, "width": width, "height": height,
            "detections": [{**d, "class_id": 0, "label": "person"} for d in (detections or moving(n))]}


def test_analytics_writes_tracked_boxes_over_the_display_threshold_and_counts_all_tracked(tmp_path):
    cam = camera(track=True, display_threshold=0.85, zones=[{"name": "door", "polygon": DOOR}])
    metrics = Metrics()
    analytics = Analytics("c", cam.scene, metrics)
    unit = Unit(0, b"", "video/mp2t", 1000.0, 0.0, 1, session=1)
    out = [line for n in range(5) for line in analytics.release(unit, [answer(n)], 1.0)]
    frames = [line for line in out if "event" not in line]
    assert [[d["track_id"] for d in f["detections"]] for f in frames] == [[], [1], [1], [1], [1]]  # 0.8 not written
    entered = [line for line in out if line.get("event") == "entered"]
    assert [(e["track_id"], e["zone"], e["camera"]) for e in entered] == [(1, "door", "c")]
    exposition = generate_latest(metrics.registry).decode()
    assert prom.total(exposition, "video_ingest_tracks_active", camera="c") == 2
    assert prom.total(exposition, "video_ingest_zone_objects", camera="c", zone="door", label="person") == 1


def test_a_reconnect_or_a_new_size_ends_the_tracks_and_fraction_zones_follow_the_size():
    cam = camera(track=True, zones=[{"name": "door", "polygon": DOOR}])
    analytics = Analytics("c", cam.scene, Metrics())
    one, two = (Unit(0, b"", "video/mp2t", 1000.0, 0.0, 1, session=s) for s in (1, 2))
    inside = [{"box": [20.0, 20.0, 60.0, 60.0], "score": 0.9}]  # in the door at 640 wide (x < 192)
    out = []
    for n in range(3):
        out += analytics.release(one, [answer(n, detections=inside)], 1.0)
    for n in range(3):  # a new connection: pts start again
        out += analytics.release(two, [answer(n, detections=inside)], 1.0)
    for n in range(3, 6):  # the same box at twice the size: still inside (x < 384)
        out += analytics.release(two, [answer(n, 1280, 960, detections=[{"box": [40.0, 40.0, 120.0, 120.0],
                                                                         "score": 0.9}])], 1.0)
    assert [(e["event"], e["track_id"]) for e in out if "event" in e] == [
        ("entered", 1), ("left", 1), ("entered", 2), ("left", 2), ("entered", 3)]


def test_a_snapshot_draws_the_zone_on_the_frame_that_was_sent(tmp_path):
    cam = camera(track=True, zones=[{"name": "door", "polygon": [[0.25, 0.25], [0.75, 0.25], [0.75, 0.75]]}])
    analytics = Analytics("c", cam.scene, Metrics(), snapshots=tmp_path)
    jpeg = io.BytesIO()
    Image.new("RGB", (640, 480), (40, 40, 40)).save(jpeg, "JPEG")
    analytics.release(Unit(0, jpeg.getvalue(), "image/jpeg", 1000.0, 0.0, 1, session=1), [answer(0)], 1.0)
    _wait((tmp_path / "c.jpg").exists)  # (made by the camera's snapshot thread)
    picture = np.asarray(Image.open(tmp_path / "c.jpg")).astype(int)
    assert picture.shape == (480, 640, 3)
    assert np.abs(picture[120, 320] - ZONE_COLOUR).sum() < 120  # the polygon's top edge, y = 0.25 * 480


def _wait(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class _Worker:
    def __init__(self, cam) -> None:
        self.camera, self.reconfigured, self.stopped = cam, [], False

    def reconfigure(self, cam) -> None:
        self.reconfigured.append(cam.scene)
        self.camera = cam

    def stop(self) -> None:
        self.stopped = True

    def drain(self, deadline: float) -> None:
        pass


def test_a_reload_that_changes_only_the_scene_reconfigures_the_running_camera():
    started = []
    fleet = Fleet(lambda cam: started.append(cam) or _Worker(cam))
    fleet.apply([camera(track=True, lines=[GATE])])
    moved = camera(track=True, lines=[{**GATE, "from": [0.7, 0], "to": [0.7, 1]}])
    fleet.apply([moved])
    [worker] = fleet.workers.values()
    assert len(started) == 1 and not worker.stopped and worker.reconfigured == [moved.scene]


def test_a_long_run_keeps_only_the_live_tracks():
    tracks = Tracks(lost_track_seconds=0.2)
    ended = []
    for n in range(2000):  # a new object every 10 frames, each seen for 5 frames
        tracks.update([{"box": [float(n // 10 % 50) * 30, 10.0, float(n // 10 % 50) * 30 + 20, 30.0], "score": 0.9}]
                      if n % 10 < 5 else [], n / 30)
        ended += tracks.ended
    assert tracks.issued == 200 and len(tracks._rows) <= 1 and ended == list(range(1, 200))


@pytest.mark.parametrize(("threshold", "tracked"), [(0.5, True), (0.7, False)])
def test_track_threshold_decides_which_boxes_start_tracks(threshold, tracked):
    tracks = Tracks(threshold=threshold)
    ids = [tracks.update([{**d, "score": 0.6} for d in moving(n)], n / 30) for n in range(5)]
    assert (ids[-1] == [1, 2]) is tracked and (ids[-1] == [None, None]) is not tracked


def test_dwell_follows_stream_time_not_a_capture_clock_that_re_anchors():
    zone = Zone("door", Shape(((0, 0), (60, 0), (60, 100), (0, 100)), False))
    counting = Counting([zone], [])
    here = [Tracked(1, box(10, 10), "person"), Tracked(2, box(20, 10), "person")]
    assert len(counting.frame(here, (200, 100), 1000.0, 0.0)) == 2  # both entered
    # The capture clock jumps 20 s ahead (re-anchored); stream time moves 0.1 s: track 2 is unseen.
    assert counting.frame(here[:1], (200, 100), 1020.0, 0.1) == []
    [left] = counting.frame([Tracked(1, box(100, 10), "person")], (200, 100), 1020.5, 0.6)
    assert (left["track_id"], left["capture_time"], left["dwell_s"]) == (1, 1020.5, 0.6)


def test_a_reload_that_changes_a_zones_anchors_judges_by_the_new_ones():
    """The zone is the top half: a box across its edge has its top centre in, its bottom centre out."""
    top = Shape(((0, 0), (200, 0), (200, 50), (0, 50)), False)
    counting = Counting([Zone("top", top)], [])  # default anchor: the bottom centre
    across = [Tracked(1, (90.0, 30.0, 110.0, 70.0), "p")]
    assert counting.frame(across, (200, 100), 0.0) == []
    counting.reconfigure([Zone("top", top, anchors=(Anchor.TOP_CENTER,))], [])
    assert [e["event"] for e in counting.frame(across, (200, 100), 0.1)] == ["entered"]
    counting.reconfigure([Zone("top", top, anchors=(Anchor.TOP_CENTER, Anchor.BOTTOM_LEFT))], [])
    assert [e["event"] for e in counting.frame(across, (200, 100), 0.2)] == ["left"]


def test_a_track_out_of_the_regions_is_frozen_and_one_missed_ages_by_stream_time():
    """Motion first (issue 48): a track out of view that was matched at its last look keeps its
    state bit for bit (no predict, no aging, no match) however long; one looked for and missed
    ages as ever, and ends `lost_track_seconds` after the miss even while nothing is in view."""
    tracks = Tracks(lost_track_seconds=0.45)
    for n in range(3):
        tracks.update(moving(n), n / 30)
    first, second = moving(3)
    around_first = [[first["box"][0] - 20, 80, first["box"][2] + 20, 170]]  # the second box is outside
    assert tracks.update([first], 3 / 30, around_first) == [1]
    assert tracks.frozen == 1
    held = tracks._rows[1].copy()
    for n in range(4, 124):  # 4 s with nothing in view: both frozen (both were matched at their last look)
        assert tracks.update([], n / 30, []) == [] and tracks.ended == []
    assert np.array_equal(tracks._rows[1], held) and tracks.frozen == 2
    assert tracks.update([second], 124 / 30) == [2]  # the next whole look: it is still there; the first is missed
    ended_at = next(n for n in range(125, 200) if tracks.update([], n / 30, []) == [] and tracks.ended)
    assert tracks.ended == [1] and ended_at == 124 + 13  # unseen 14 / 30 s > 0.45 s after the miss
    assert tracks.frozen == 1 and tracks.update([second], 200 / 30, around_first) == [None]  # out of view: not matched


def test_a_whole_frame_region_list_is_the_whole_frame_and_detections_match_only_tracks_in_view():
    tracks = Tracks()
    for n in range(3):
        tracks.update(moving(n), n / 30)
    assert tracks.update(moving(3), 3 / 30, [[0, 0, 2000, 2000]]) == [1, 2] and tracks.frozen == 0
    first, second = moving(4)
    # The region holds the second box, not the first's track: the first's box, seen there anyway, starts a track.
    assert tracks.update([first, second], 4 / 30, [[500, 200, 800, 500]]) == [None, 2]
    assert tracks.frozen == 1 and len(tracks._rows) == 3
