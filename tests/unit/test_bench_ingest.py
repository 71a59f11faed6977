"""The pure parts of the tracking rows of bench/ingest.py: the moving detections, the sink's
answer, the camera list, the tables and the verdict (no processes, no tracker)."""

import json
import urllib.request

import pytest

from bench import ingest
from ingest import config


def test_moving_detections_are_deterministic_in_the_frame_and_sized():
    for n in (1, 10, 100):
        for frame in (0, 1, 29, 30, 1000, 12345):
            boxes = ingest.moving_detections(n, frame)
            assert boxes == ingest.moving_detections(n, frame)
            assert len(boxes) == n
            for d in boxes:
                x1, y1, x2, y2 = d["box"]
                assert 0 <= x1 < x2 <= 1920 and 0 <= y1 < y2 <= 1080
                assert 39.9 <= x2 - x1 <= 120.1 and 39.9 <= y2 - y1 <= 120.1
                assert 0.3 <= d["score"] <= 0.95
                assert d["label"] == "person" and d["class_id"] == 0
    scores = [d["score"] for d in ingest.moving_detections(100, 7)]
    assert any(s < 0.6 for s in scores) and any(s >= 0.7 for s in scores)  # both ByteTrack passes


def test_moving_detections_move_smoothly_and_wrap():
    a, b = ingest.moving_detections(100, 500), ingest.moving_detections(100, 501)
    steps = [abs(p["box"][0] - q["box"][0]) for p, q in zip(a, b)]
    assert all(s > 0 for s in steps)  # every object moves
    assert sum(s <= 8.1 for s in steps) >= 95  # by at most 8 px a frame, but where it wraps around
    assert {p["box"][0] < q["box"][0] for p, q in zip(a, b) if abs(p["box"][0] - q["box"][0]) <= 8.1} == {True, False}
    xs = [ingest.moving_detections(1, f)[0]["box"][0] for f in range(2000)]
    assert min(xs) < 100 and max(xs) > 1700  # it goes across the frame (and the line at the middle)


def test_segment_answer_has_fps_frames_a_frame_apart_each_with_n_detections():
    answer = ingest.segment_answer(seq=4, fps=30, detections=10)
    frames = answer["frames"]
    assert len(frames) == 30
    assert [f["pts"] for f in frames] == pytest.approx([k / 30 for k in range(30)])
    for k, frame in enumerate(frames):
        assert (frame["width"], frame["height"]) == (1920, 1080)
        assert frame["detections"] == ingest.moving_detections(10, 4 * 30 + k)
    # the next segment goes on where this one ended
    assert ingest.segment_answer(5, 30, 10)["frames"][0]["detections"] == ingest.moving_detections(10, 150)


def test_detection_sink_answers_by_frame_id():
    sink = ingest.DetectionSink(detections=3, fps=15)
    try:
        request = urllib.request.Request(sink.url + "/predictions/m", data=b"ts", method="POST",
                                         headers={"Content-Type": "video/mp2t", "X-Frame-Id": "2"})
        with urllib.request.urlopen(request, timeout=5) as response:
            body = json.loads(response.read())
    finally:
        sink.close()
    assert body == json.loads(json.dumps(ingest.segment_answer(2, 15, 3)))


def test_camera_list_reads_as_the_scenes_it_names(tmp_path):
    video = tmp_path / "v.ts"
    video.write_bytes(b"")
    for scene, want in (("track: false", (False, 0, 0)), ("track", (True, 0, 0)),
                        ("track + zone + line", (True, 1, 1))):
        path = tmp_path / "cameras.yaml"
        path.write_text(ingest.camera_list(video, 3, scene))
        cameras = config.load(path)
        assert [c.name for c in cameras] == ["cam-0", "cam-1", "cam-2"]
        assert all(c.loop for c in cameras)
        assert {(c.scene.track, len(c.scene.zones), len(c.scene.lines)) for c in cameras} == {want}


def _rows(off, track, zoned, kept=1.0, detections=10, cameras=1):
    return [ingest.TrackRow("p", "1080p30", cameras, detections, scene, cpu, kept, 1.0)
            for scene, cpu in zip(ingest.SCENES, (off, track, zoned))]


def test_tracking_table_and_verdict():
    rows = _rows(3.0, 3.5, 3.9) + _rows(2.0, 6.0, 7.0, kept=0.6, cameras=32)
    micros = [ingest.MicroRow(ingest.BASELINE, 10, 1000, 900.0, 950.0, 2.7),
              ingest.MicroRow(ingest.CAMERA_FRAME, 10, 1000, 120.0, 130.0, 0.36),
              ingest.MicroRow(ingest.BASELINE, 100, 1000, 8000.0, 8100.0, 24.0),
              ingest.MicroRow(ingest.CAMERA_FRAME, 100, 1000, 1600.0, 1700.0, 4.8)]
    text = ingest.tracking_table(rows)
    assert "| 1080p30 | 10 | 1 | 3 | 3.5 | 3.9 | +0.50 | +0.90 | 1 / 1 / 1 | 1 |" in text
    assert "0.6 / 0.6 / 0.6 SATURATED (track: false: 64%, track: 192%, track + zone + line: 224% of a core" in text
    assert ingest.verdict(rows, micros).splitlines() == [
        "a camera-frame at 10 detections with a zone and a line: 120 µs (target <= 150; trackers 2.6's tracker "
        "alone 900 µs, 7.5 times ours in all): PASS",
        "a camera-frame at 100 detections with a zone and a line: 1600 µs (target <= 1500; trackers 2.6's tracker "
        "alone 8000 µs, 5.0 times ours in all): FAIL",
        "32 cameras at 10 detections, tracked with a zone and a line, in one process: kept up 0.6 (target >= 0.8): FAIL",
        "tracking adds 0.50% of a core per 1080p30 camera at 10 detections (target < 1%): PASS"]
    assert ingest.verdict(_rows(3.0, 4.2, 5.0), []).endswith(": FAIL")
    assert ingest.verdict([], []) is None


def test_caps_table_and_rows():
    rows = [ingest.CapRow("Tracks.update, uncapped (before)", "2000 detections", 20, 501000.0),
            ingest.CapRow("ingest Region (ours)", "64 frame-wide zones, 1920x1080, 100 boxes", 300, 820.5, 95.1, 0.27, 3.0)]
    assert ingest.caps_table(rows).splitlines()[2:] == [
        "| Tracks.update, uncapped (before) | 2000 detections | 20 | 501000 |  |  |  |",
        "| ingest Region (ours) | 64 frame-wide zones, 1920x1080, 100 boxes | 300 | 820.5 | 95.1 | 0.27 | 3 |"]
    tracker = ingest.tracker_caps(detections=400, frames=2, warmup=1)
    assert [(r.part, r.case, r.frames) for r in tracker] == [
        ("Tracks.update, uncapped (before)", "400 detections", 2),
        ("Tracks.update, at most 300 (after)", "400 detections", 2)]
    zones = ingest.zone_costs(zones=2, detections=5, frames=2)
    assert [r.part for r in zones] == ["supervision PolygonZone (baseline)", "ingest Region (ours)"]
    baseline, ours = zones
    assert baseline.kept_mb >= 2 * 1920 * 1080 / 2**20 > 100 * ours.kept_mb  # a frame-sized mask each, against runs
    assert ingest.frame_zones(1920, 1080, 5) == [
        [(0, 0), (1919, 0), (1919, 1079), (0, 1079)], [(0, 0), (1919, 1079), (0, 1079)],
        [(1919, 0), (1919, 1079), (0, 539)], [(1919, 0), (1919, 1079), (0, 1079)],
        [(0, 0), (1919, 0), (1919, 1079), (0, 1079)]]
