"""What one camera's analytics may cost (issue 38): a zone costs its own outline, not a frame, and
answers exactly as supervision's `PolygonZone` does; a camera takes at most 64 zones and 64 lines
(refused at start, on a reload and in the editor); the tracker takes at most `MAX_DETECTIONS` a
frame, the highest-scoring, and the rest are counted."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
import supervision as sv
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from ingest import config
from ingest.analytics import scene
from ingest.analytics.analyse import Analytics
from ingest.analytics.counting import Counting, Tracked
from ingest.analytics.polygon import Region
from ingest.analytics.scene import Anchor, Shape, Zone
from ingest.analytics.tracking import MAX_DETECTIONS, Tracks
from ingest.cameras.units import Unit
from ingest.config import ConfigError
from ingest.sinks.metrics import Metrics
from ingest.web.editor import EditError, Editor
from tests.ingest_process import IngestProcess
from tests.rtsp_server import free_port
from tests.support import ROOT
from tsutil import prom

# --- a zone's inside test: supervision's answers, at the cost of the zone's own outline


def polygon_zone(points: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """supervision's own answer: a zero-size box at each point, its centre the point."""
    zone = sv.PolygonZone(points, triggering_anchors=[sv.Position.CENTER])
    return zone.trigger(sv.Detections(xyxy=np.concatenate([xy, xy], axis=1).astype(np.float64)))


SHAPES = {
    "square": [[10, 10], [20, 10], [20, 20], [10, 20]],
    "triangle": [[3, 40], [57, 2], [61, 33]],
    "concave": [[0, 0], [40, 0], [40, 40], [20, 12], [0, 40]],
    "bowtie": [[5, 5], [45, 35], [45, 5], [5, 35]],  # self-intersecting
    "sliver": [[0, 0], [63, 1], [0, 2]],
    "flat": [[4, 9], [30, 9], [50, 9]],  # no area: a line of pixels
}


@pytest.mark.parametrize("name", SHAPES)
def test_a_region_answers_as_polygon_zone_on_every_pixel_and_half_pixel_around_its_edges(name):
    points = np.array(SHAPES[name])
    (x0, y0), (x1, y1) = points.min(axis=0), points.max(axis=0)
    xs, ys = np.meshgrid(np.arange(x0 - 3, x1 + 3.5, 0.5), np.arange(y0 - 3, y1 + 3.5, 0.5))
    xy = np.stack([xs.ravel(), ys.ravel()], axis=1)
    assert Region(points).inside(xy).tolist() == polygon_zone(points, xy).tolist()


def test_a_square_holds_its_edges_and_a_half_pixel_rounds_to_even():
    region = Region(np.array(SHAPES["square"]))
    xs = np.arange(8.0, 23.0, 0.5)
    inside = region.inside(np.stack([xs, np.full_like(xs, 10.0)], axis=1))
    # np.rint: 9.5 -> 10 (in), 20.5 -> 20 (in), 21.5 -> 22 (out), 8.5 -> 8 (out)
    assert xs[inside].tolist() == [9.5, *np.arange(10.0, 21.0, 0.5).tolist()]
    assert int(region.inside(np.stack(np.meshgrid(np.arange(0.0, 40), np.arange(0.0, 40)), -1).reshape(-1, 2)).sum()) \
        == 121
    off = np.array([[np.nan, 15.0], [np.inf, 15.0], [-np.inf, 15.0], [15.0, 1e300], [-1e300, 15.0]])
    assert region.inside(off).tolist() == [False] * 5
    assert region.nbytes == 4 * 2 * 11  # a start and an end in each of its 11 rows (int32)
    assert Region(np.array(SHAPES["triangle"])).nbytes == 4 * 2 * 39  # a start and an end in each of its 39 rows


_coordinate = st.integers(0, 300)
_point = st.one_of(st.integers(-10, 620).map(lambda v: v / 2), st.floats(-20.0, 320.0))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_coordinate, _coordinate), min_size=3, max_size=8),
       st.lists(st.tuples(_point, _point), min_size=1, max_size=200))
def test_any_polygon_answers_as_polygon_zone_at_any_point(vertices, points):
    polygon, xy = np.array(vertices), np.array(points, dtype=np.float64)
    assert Region(polygon).inside(xy).tolist() == polygon_zone(polygon, xy).tolist()


_box = st.tuples(st.floats(-50, 700), st.floats(-50, 500), st.floats(1, 200), st.floats(1, 200))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_coordinate, _coordinate), min_size=3, max_size=7),
       st.lists(st.sampled_from(list(Anchor)), min_size=1, max_size=3, unique=True),
       st.lists(_box, min_size=1, max_size=40))
def test_a_zone_enters_exactly_the_tracks_polygon_zone_triggers_on_every_anchor(vertices, anchors, boxes):
    xyxy = np.array([(x, y, x + w, y + h) for x, y, w, h in boxes])
    zone = Zone("z", Shape(tuple((float(x), float(y)) for x, y in vertices), fractions=False), anchors=tuple(anchors))
    tracked = [Tracked(i + 1, tuple(b), "person") for i, b in enumerate(xyxy.tolist())]
    events = Counting([zone], []).frame(tracked, (640, 480), 1.0)
    want = sv.PolygonZone(np.array(vertices), triggering_anchors=[sv.Position[a.name] for a in anchors])
    assert [e["track_id"] for e in events] == (np.flatnonzero(want.trigger(sv.Detections(xyxy=xyxy))) + 1).tolist()


def full_frame_zones(width: int, height: int) -> list[Zone]:
    """64 zones that each span the frame: a rectangle and three triangles, 16 times."""
    w, h = width - 1, height - 1
    shapes = [[(0, 0), (w, 0), (w, h), (0, h)], [(0, 0), (w, h), (0, h)], [(w, 0), (w, h), (0, h / 2)],
              [(w, 0), (w, h), (0, h)]]
    return [Zone(f"z{i}", Shape(tuple((float(x), float(y)) for x, y in shapes[i % 4]), fractions=False))
            for i in range(64)]


def test_64_zones_over_a_4k_frame_keep_under_2_mb_and_peak_under_16_mb():
    """Before: each kept a mask the size of the frame (8 MB at 4K), and more while making it:
    64 of them over 500 MB on their first frame."""
    counting = Counting(full_frame_zones(3840, 2160), [])
    # track i's feet at (30 i + 30, 10 i + 80): the triangles hold i <= 9, i >= 54 and i >= 77
    # (each at least 4 px inside), the rectangle all of them
    tracked = [Tracked(i + 1, (30.0 * i, 10.0 * i, 30.0 * i + 60, 10.0 * i + 80), "person") for i in range(100)]
    tracemalloc.start()
    try:
        events = counting.frame(tracked, (3840, 2160), 1.0)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    entered = {f"z{i}": [] for i in range(64)}
    for event in events:
        entered[event["zone"]].append(event["track_id"])
    want = [list(range(1, 101)), list(range(1, 11)), list(range(55, 101)), list(range(78, 101))]
    assert entered == {f"z{i}": want[i % 4] for i in range(64)}
    assert kept < 2 * 2**20, f"{kept / 2**20:.1f} MB kept"
    assert peak < 16 * 2**20, f"{peak / 2**20:.1f} MB at the peak"


# --- at most 64 zones and 64 lines a camera


def shapes(key: str, count: int) -> list[dict]:
    if key == "zones":
        return [{"name": f"z{i}", "polygon": [[0, 0], [0.5, 0], [0.5, 0.5]]} for i in range(count)]
    return [{"name": f"l{i}", "from": [0.5, 0], "to": [0.5, 1]} for i in range(count)]


ZONES_MESSAGE = ("zones: 65 given, a camera takes at most 64 (each is judged on every frame): remove the zones not "
                 "needed, or join neighbouring zones that count the same classes into one polygon")
LINES_MESSAGE = "lines: 65 given, a camera takes at most 64 (each is judged on every frame): remove the lines not needed"


@pytest.mark.parametrize(("key", "message"), [("zones", ZONES_MESSAGE), ("lines", LINES_MESSAGE)])
def test_64_shapes_are_taken_and_65_refused_naming_the_camera_the_count_and_the_fix(key, message):
    assert scene.MAX_SHAPES == 64
    assert len(getattr(scene.parse({"track": True, key: shapes(key, 64)}), key)) == 64
    with pytest.raises(ConfigError) as caught:
        config.parse({"cameras": [{"name": "dock", "url": "rtsp://h/s", "track": True, key: shapes(key, 65)}]})
    assert str(caught.value) == f"camera 'dock': {message}"


def write_list(path, **dock) -> None:
    path.write_text(yaml.safe_dump({"cameras": [{"name": "dock", "url": f"rtsp://127.0.0.1:{free_port()}/s",
                                                 "track": True, **dock}]}))


def test_the_cli_exits_2_at_start_with_65_zones(tmp_path):
    write_list(tmp_path / "cameras.yaml", zones=shapes("zones", 65))
    done = subprocess.run([sys.executable, "-m", "ingest.cli", "--config", str(tmp_path / "cameras.yaml"),
                           "--url", f"http://127.0.0.1:{free_port()}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"video-ingest: camera 'dock': {ZONES_MESSAGE}"


def test_a_reload_to_65_lines_is_refused_and_the_camera_goes_on(tmp_path):
    path = tmp_path / "cameras.yaml"
    write_list(path, lines=shapes("lines", 64))
    with IngestProcess(path, tmp_path / "results.jsonl") as cli:
        cli.wait(lambda: cli.events("started"))
        write_list(path, lines=shapes("lines", 65))
        cli.reload()
        cli.wait(lambda: cli.events("config_error"))
        assert [e["message"] for e in cli.events("config_error")] == [f"camera 'dock': {LINES_MESSAGE}"]
        assert not cli.events("stopped") and not cli.events("reloaded")
        assert cli.stop() == 0


def test_the_editor_refuses_a_65th_zone_and_leaves_the_file(tmp_path):
    path = tmp_path / "cameras.yaml"
    write_list(path, zones=shapes("zones", 64))
    before = path.read_text()
    with pytest.raises(EditError) as caught:
        Editor(path, {}).save("dock", shapes("zones", 65), [])
    assert (caught.value.status, str(caught.value)) == (400, f"camera 'dock': {ZONES_MESSAGE}")
    assert path.read_text() == before


# --- at most MAX_DETECTIONS a frame into the tracker


def crowd(n: int, seed: int = 7) -> list[dict]:
    """`n` boxes apart from each other (a 50-wide grid of 20 px squares 40 px apart), scores all
    different and all at least 0.5 (each starts a track), in a shuffled order."""
    scores = 0.5 + 0.49 * np.random.default_rng(seed).permutation(n) / n
    return [{"box": [40.0 * (i % 50), 40.0 * (i // 50), 40.0 * (i % 50) + 20, 40.0 * (i // 50) + 20],
             "score": float(scores[i]), "label": "person", "class_id": 0} for i in range(n)]


def test_the_tracker_takes_the_highest_scoring_max_detections_of_a_frame():
    assert MAX_DETECTIONS == 300
    frame = crowd(2000)
    best = sorted(np.argsort([-d["score"] for d in frame])[:MAX_DETECTIONS].tolist())
    tracks = Tracks()
    assert tracks.update(frame, 0.0) == [None] * 2000 and tracks.dropped == 1700
    ids = tracks.update(frame, 1 / 30)
    assert tracks.dropped == 1700
    assert [i for i, t in enumerate(ids) if t is not None] == best
    assert [ids[i] for i in best] == list(range(1, 301))  # in the frame's order, as ever
    assert len(tracks._rows) == 300
    tracks.update(frame[:300], 2 / 30)
    assert tracks.dropped == 0


def test_equal_scores_past_the_cap_keep_the_earlier_and_a_score_that_is_no_number_goes_last():
    tracks = Tracks(max_detections=3)
    frame = [{"box": [40.0 * i, 0.0, 40.0 * i + 20, 20.0], "score": s}
             for i, s in enumerate([0.6, float("nan"), 0.9, 0.6, 0.6, 0.9])]
    tracks.update(frame, 0.0)
    assert [i is not None for i in tracks.update(frame, 1 / 30)] == [True, False, True, False, False, True]
    assert tracks.dropped == 3
    with pytest.raises(ValueError, match="max_detections = 0: use 1 or more"):
        Tracks(max_detections=0)


def test_a_camera_writes_the_capped_boxes_and_counts_the_rest_in_its_metric():
    metrics = Metrics()
    [cam] = config.parse({"cameras": [{"name": "dock", "url": "rtsp://h/s", "track": True}]})
    analytics = Analytics("dock", cam.scene, metrics)
    unit = Unit(0, b"", "video/mp2t", 1000.0, 0.0, 1, session=1)
    frame = crowd(2000)
    best = sorted(np.argsort([-d["score"] for d in frame])[:MAX_DETECTIONS].tolist())
    out = [analytics.release(unit, [{"camera": "dock", "segment": n, "pts": n / 30, "capture_time": 1000 + n / 30,
                                     "status": 200, "width": 1920, "height": 1080,
                                     "detections": [dict(d) for d in frame]}], 1.0)[0] for n in range(3)]
    assert [len(line["detections"]) for line in out] == [0, 300, 300]
    assert [d["box"] for d in out[2]["detections"]] == [frame[i]["box"] for i in best]
    exposition = generate_latest(metrics.registry).decode()
    assert prom.total(exposition, "video_ingest_detections_dropped_total", camera="dock") == 3 * 1700
    assert prom.total(exposition, "video_ingest_tracks_active", camera="dock") == 300
