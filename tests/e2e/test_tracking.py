"""Tracks, zones and lines end to end: a scripted scene (tests/scenes.py) served by a real
gst-rtsp-server and read from a file, a real TorchServe serving the planted detector (built from
code, packed by archive.sh with its labels), and the real `video-ingest` with tracking, the zone
`door` and the line `gate`. Every count is the scripted paths' exact number.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from PIL import Image

from ingest.analytics.snapshot import LINE_COLOUR, ZONE_COLOUR
from tests import scenes
from tests.e2e.ingest_cli import Ingest
from tests.e2e.tracks import (
    LARGE,
    MODEL,
    SMALL,
    all_left,
    assert_steady_file_counted,
    camera,
    connections,
    first_ids,
    tally,
    track_ids,
    write,
)
from tests.rtsp_server import RtspServer


def test_counts_ids_snapshot_and_a_moved_line_on_live_cameras(detector, videos, tmp_path):
    """`live` plays the scene with a resolution change at frame 90 (a new tracker: red's and
    blue's tracks end, blue inside the door); `moved` plays it at one size, and its line moves
    from x = 0.5 to 0.7 after its first crossing. Then the RTSP server restarts."""
    rtsp = RtspServer({"resized": videos["resized"], "steady": videos["steady"]}, log=tmp_path / "gst.log").start()
    cameras = tmp_path / "cameras.yaml"
    write(cameras, camera("live", rtsp.url("resized")), camera("moved", rtsp.url("steady")))
    ingest = Ingest(tmp_path, detector, ["--config", str(cameras), "--snapshot", str(tmp_path / "snaps")],
                    model=MODEL)
    try:
        ingest.wait("a crossing on moved", lambda: ingest.events("moved", "crossed"))
        write(cameras, camera("live", rtsp.url("resized")), camera("moved", rtsp.url("steady"), gate_x=0.7))
        reloaded = ingest.wait("the reload", lambda: ingest.events(None, "reloaded"))[0]["time"]
        # The end of both plays: the connections end, and with them every track (members leave).
        ingest.wait("the end of both plays", lambda: ingest.events("live", "disconnected")
                    and ingest.events("moved", "disconnected") and all_left(ingest, "live")
                    and all_left(ingest, "moved"), timeout=60)
        live = connections(ingest.answers("live"))[0]
        assert {(a["width"], a["height"]) for a in live} == {SMALL, LARGE}
        assert ingest.events("live", "dropped") == []
        # Red: in the door at the start, out, across the gate, back (a new track at the new size),
        # in, out, across, back, in, and out when the play ends (the camera goes down). Blue
        # mirrors it; its track ends in the door at the new size.
        assert tally(ingest, "live", first_connection=True) == {
            ("entered", "door", "red", None): 3, ("left", "door", "red", None): 3,
            ("entered", "door", "blue", None): 3, ("left", "door", "blue", None): 3,
            ("crossed", "gate", "red", "in"): 2, ("crossed", "gate", "red", "out"): 2}
        first = first_ids(ingest, "live")
        [ended] = [e for e in ingest.events("live", "left") if e["label"] == "red" and e["track_id"] in first][-1:]
        assert ended["capture_time"] == max(a["capture_time"] for a in live)  # left at its last sighting
        red, blue = track_ids(live, "red"), track_ids(live, "blue")
        assert len(set(red)) == 2 and len(set(blue)) == 2 and not set(red) & set(blue)
        assert ingest.metric("video_ingest_line_crossings_total", camera="live", line="gate", direction="in",
                             label="red") == 2
        # One connection until the play ended: the new size needed no reconnect. (The gauges of a
        # camera that went down: the misses test, whose server stays down.)
        lines = ingest.lines()
        down = next(i for i, e in enumerate(lines) if e["camera"] == "live" and e.get("event") == "disconnected")
        assert [e.get("event") for e in lines[:down] if e["camera"] == "live"].count("connected") == 1
        # The line moved without a reconnect and without ending red's track.
        moved = connections(ingest.answers("moved"))[0]
        assert len(set(track_ids(moved, "red"))) == 1
        boxes = {a["capture_time"]: d["box"] for a in moved for d in a["detections"] if d["label"] == "red"}
        step = 0.7 / scenes.MOVE * SMALL[0]
        for crossing in ingest.events("moved", "crossed"):
            x = 0.7 if crossing["time"] > reloaded else 0.5
            x1, _, x2, _ = boxes[crossing["capture_time"]]
            edge = x1 if crossing["direction"] == "in" else x2  # the whole box just past the line
            assert abs(edge - x * SMALL[0]) <= step + 2, (crossing, edge)
        assert [e["time"] > reloaded for e in ingest.events("moved", "crossed")].count(True) >= 2
        # The snapshot: the last frame with the door and the gate drawn where they are.
        picture = np.asarray(Image.open(tmp_path / "snaps" / "live.jpg"))
        height, width = picture.shape[:2]
        assert (width, height) == LARGE
        # (JPEG blurs the colour of a thin line: nearer to its colour than to the grey background)
        for (x, y), colour in (((round(0.02 * width), height // 2), ZONE_COLOUR), ((width // 2, height // 2), LINE_COLOUR)):
            pixel = picture[y - 1:y + 2, x - 1:x + 2].reshape(-1, 3).astype(int)
            nearest = np.abs(pixel - colour).sum(axis=1).min()
            assert nearest < np.abs(np.array(colour) - scenes.BACKGROUND).sum() / 3, (pixel, colour)
        # The RTSP server restarts: the camera reconnects, and its tracks get new ids, none reused.
        played = len(connections(ingest.answers("live")))  # (the scene may be playing again already)
        rtsp.kill()
        rtsp.start()
        ingest.wait("tracked answers after the restart", lambda: len(runs := connections(ingest.answers("live")))
                    > played and track_ids(runs[-1], "red"), timeout=60)
        runs = connections(ingest.answers("live"))
        ids = [set(track_ids(run, "red") + track_ids(run, "blue")) for run in runs]
        assert all(min(later) > max(earlier) for earlier, later in zip(ids, ids[1:]) if later), ids
    finally:
        ingest.kill()
        rtsp.stop()


def test_ids_and_counts_survive_a_torchserve_restart(detector, videos, tmp_path):
    """A file camera (`every`: nothing is dropped, answers wait for the server): TorchServe is
    stopped after the first crossing and started again; every frame is answered in the end, each
    box keeps its one track id, and the counts are the scene's."""
    cameras = tmp_path / "cameras.yaml"
    write(cameras, camera("file", str(videos["steady"])))
    ingest = Ingest(tmp_path, detector, ["--config", str(cameras)], model=MODEL)
    try:
        ingest.wait("a crossing", lambda: ingest.events("file", "crossed"))
        detector.stop()
        time.sleep(2)
        detector.start()
        assert ingest.process.wait(timeout=120) == 0  # the file ended, every unit answered
    finally:
        ingest.kill()
    assert_steady_file_counted(ingest)
    [left] = [e for e in ingest.events("file", "left") if e["label"] == "red"][:1]
    assert left["dwell_s"] == pytest.approx((scenes.LEAD + 0.15 / 0.7 * scenes.MOVE) / scenes.FPS, abs=0.3)


def test_counts_hold_through_misses_a_class_flip_bad_reloads_and_a_camera_that_goes_down(detector, tmp_path):
    """The misses scene (tests/scenes.py) live over gst-rtsp-server: red, missed for 2, 5 and 10
    frames in a row while in the door and again while crossing the gate, makes one visit and one
    crossing each way a cycle, with one id throughout; blue turns green on the gate and crosses
    once, as green. Meanwhile every bad scene setting is written to the camera list in turn: each
    is refused (`config_error`) and the camera keeps counting with its scene. Then the RTSP
    server is killed while red stands in the door: red leaves it, and the gauges go to 0."""
    video = scenes.make(tmp_path / "misses.ts", [(*SMALL, scenes.M_FRAMES)], scenes.misses_frame)
    rtsp = RtspServer({"misses": video}, log=tmp_path / "gst.log").start()
    good = {"name": "dock", "url": rtsp.url("misses"), "track": True, "stall_seconds": 2, "motion": False,
            "zones": [{"name": "door", "polygon": scenes.DOOR}], "lines": [{"name": "gate", **scenes.GATE}]}
    cameras = tmp_path / "cameras.yaml"
    write(cameras, good)
    ingest = Ingest(tmp_path, detector, ["--config", str(cameras)], model=MODEL)
    try:
        ingest.wait("the first answers", lambda: ingest.answers("dock"))
        for n, (bad, message) in enumerate(scenes.BAD_SCENES, start=1):
            write(cameras, {**good, **bad})
            [*_, refused] = ingest.wait(f"bad setting {n} refused", lambda n=n: len(
                errors := ingest.events(None, "config_error")) == n and errors)
            assert refused["message"].startswith(f"camera 'dock': {message}"), refused
        write(cameras, good)
        ingest.wait("red in the door for the last time", lambda: len(ingest.events("dock", "entered")) == 4,
                    timeout=60)
        rtsp.kill()
        ingest.wait("red leaves the door as the camera goes down", lambda: len(ingest.events("dock", "left")) == 4)
        assert ingest.metric("video_ingest_zone_objects", camera="dock", zone="door", label="red") == 0
        assert ingest.metric("video_ingest_tracks_active", camera="dock") == 0
        assert ingest.metric("video_ingest_line_crossings_total", camera="dock", line="gate", label="red") == 6
    finally:
        ingest.kill()
        rtsp.stop()
    assert tally(ingest, "dock") == {
        ("entered", "door", "red", None): 4, ("left", "door", "red", None): 4,
        ("crossed", "gate", "red", "in"): 3, ("crossed", "gate", "red", "out"): 3,
        ("crossed", "gate", "green", "in"): 1}
    answers = ingest.answers("dock")
    assert len(set(track_ids(answers, "red"))) == 1
    assert len(set(track_ids(answers, "blue") + track_ids(answers, "green"))) == 1
    [down] = ingest.events("dock", "left")[-1:]
    [last_entry] = ingest.events("dock", "entered")[-1:]
    assert down["capture_time"] == max(a["capture_time"] for a in answers if track_ids([a], "red"))
    # (dwell runs on stream time; a live camera's capture times are its packets' arrival times)
    assert down["dwell_s"] == pytest.approx(down["capture_time"] - last_entry["capture_time"], abs=0.25)
    assert len(ingest.events("dock", "connected")) == 1 and ingest.events("dock", "dropped") == []
