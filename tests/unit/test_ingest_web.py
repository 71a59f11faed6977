"""The web view's parts without a browser or a camera: the editor's round trip of the camera list,
the token, the view's bounded buffers (a stalled viewer holds nothing, a viewer behind jumps to the
newest, a camera never waits), the MP4 preview of a segment, and the HTTP server's answers (401,
404, 403 for another host, a stalled socket dropped). The browser's side: tests/e2e/test_web.py."""

from __future__ import annotations

import io
import json
import socket
import stat
import threading
import time

import av
import pytest
import requests

from ingest import config
from ingest.cameras.clock import CaptureClock
from ingest.cameras.segments import Segmenter
from ingest.cameras.units import Unit
from ingest.config import ConfigError
from ingest.web import access, view
from ingest.web import server as web
from ingest.web.editor import EditError, Editor
from ingest.web.view import CameraView, View
from tests.videos import segment

LIST = """\
# The cameras of the loading dock.
defaults:
  track: true   # every camera is tracked

cameras:
  - name: dock
    url: 'rtsp://viewer:${DOCK_PASSWORD}@dock.example/stream1'   # the password is a secret
    zones:
      # the door, in pixels of the 1080p stream
      - name: door
        polygon: [[10, 20], [400, 20], [400, 900], [10, 900]]
    lines: [{name: gate, from: [0.5, 0], to: [0.5, 1]}]
  - name: lobby
    url: rtsp://lobby.example/h264
"""
ENV = {"DOCK_PASSWORD": "s3cret"}


@pytest.fixture
def camera_list(tmp_path):
    path = tmp_path / "cameras.yaml"
    path.write_text(LIST)
    path.chmod(0o640)
    return path


def test_a_save_keeps_comments_order_and_unchanged_shapes_and_checks_with_the_bridges_parser(camera_list):
    editor = Editor(camera_list, ENV)
    door = {"name": "door", "polygon": [[10, 20], [400, 20], [400, 900], [10, 900]], "anchor": ["bottom_center"]}
    gate2 = {"name": "gate2", "from": [0.7, 0.05], "to": [0.7, 0.95], "classes": ["person"]}
    editor.save("dock", [door], [{"name": "gate", "from": [0.5, 0], "to": [0.5, 1]}, gate2])
    text = camera_list.read_text()
    # One line changed: comments, quotes, indentation and the door's own text are as they were.
    lines = "    lines: [{name: gate, from: [0.5, 0], to: [0.5, 1]}]"
    assert text == LIST.replace(lines, lines[:-1] + ", {name: gate2, from: [0.7, 0.05], to: [0.7, 0.95], "
                                                   "classes: [person]}]")
    cameras = config.load(camera_list, ENV)
    assert [c.name for c in cameras] == ["dock", "lobby"]
    assert [line.name for line in cameras[0].scene.lines] == ["gate", "gate2"]
    assert cameras[0].scene.lines[1].segment.points == ((0.7, 0.05), (0.7, 0.95))
    assert stat.S_IMODE(camera_list.stat().st_mode) == 0o640


def test_a_new_shape_is_written_one_line_a_list_and_a_removed_one_goes(camera_list):
    Editor(camera_list, ENV).save("lobby", [], [{"name": "way", "from": [0.1, 0.5], "to": [0.9, 0.5]}])
    text = camera_list.read_text()
    assert text == LIST + "    lines:\n      - name: way\n        from: [0.1, 0.5]\n        to: [0.9, 0.5]\n"
    Editor(camera_list, ENV).save("dock", [], [])
    dock = config.load(camera_list, ENV)[0]
    assert dock.scene.zones == () and dock.scene.lines == ()


@pytest.mark.parametrize(("zones", "lines", "message"), [
    ([{"name": "flat", "polygon": [[0.2, 0.2], [0.6, 0.6]]}], [],
     "camera 'dock': zone 'flat': polygon: give at least 3 points [x, y], in pixels or fractions of the frame"),
    ([], [{"name": "dot", "from": [0.5, 0.2], "to": [0.5, 0.2]}],
     "camera 'dock': line 'dot': `from` and `to` are the same point"),
    ([{"name": "door", "polygon": [[0.5, 0], [100, 200], [150, 20]]}], [],
     "camera 'dock': zone 'door': polygon: 0.5 is a fraction of the frame but 200 is pixels"),
    ([{"name": "a b", "polygon": [[0, 0], [1, 0], [1, 1]]}], [], "camera 'dock': zones[0]: name = 'a b'"),
    ("door", [], "zones must be a list of mappings"),
])
def test_an_invalid_shape_answers_the_bridges_message_and_changes_nothing(camera_list, zones, lines, message):
    with pytest.raises(EditError) as raised:
        Editor(camera_list, ENV).save("dock", zones, lines)
    assert raised.value.status == 400 and message in str(raised.value)
    assert camera_list.read_text() == LIST
    assert [p.name for p in camera_list.parent.iterdir()] == ["cameras.yaml"]  # no temporary file left


MOTION_LIST = """\
defaults:
  motion: {threshold: 40, refresh_seconds: 5}
cameras:
  - name: dock
    url: rtsp://dock.example/s
    motion:
      threshold: 25   # the dock's light flickers
      frame_height: 180
  - name: lobby
    url: rtsp://lobby.example/s
  - name: yard
    url: rtsp://yard.example/s
    motion: off
  - name: gate
    url: rtsp://gate.example/s
    motion: {mask: [[[0, 0], [0.1, 0], [0.1, 0.1]]]}
"""
CLOCK = [[0.0, 0.0], [0.25, 0.0], [0.25, 0.1], [0.0, 0.1]]
TREES = [[0.6, 0.5], [1.0, 0.5], [1.0, 1.0]]


@pytest.fixture
def motion_list(tmp_path):
    path = tmp_path / "cameras.yaml"
    path.write_text(MOTION_LIST)
    return path


def _mask(path, name):
    motion = next(c for c in config.load(path, {}) if c.name == name).effective_motion
    return [[list(p) for p in polygon] for polygon in motion.mask], motion


def test_a_motion_mask_is_saved_into_the_cameras_motion_keeping_its_other_settings(motion_list):
    Editor(motion_list, {}).save("dock", [], [], mask=[CLOCK, TREES])
    text = motion_list.read_text()
    assert text == MOTION_LIST.replace("      frame_height: 180\n", "      frame_height: 180\n      mask:\n"
                                       "        - [[0.0, 0.0], [0.25, 0.0], [0.25, 0.1], [0.0, 0.1]]\n"
                                       "        - [[0.6, 0.5], [1.0, 0.5], [1.0, 1.0]]\n")
    mask, motion = _mask(motion_list, "dock")
    assert mask == [CLOCK, TREES] and motion.threshold == 25 and motion.frame_height == 180
    Editor(motion_list, {}).save("dock", [], [])  # no mask given: the masks stay
    assert motion_list.read_text() == text
    Editor(motion_list, {}).save("dock", [], [], mask=[TREES])
    assert _mask(motion_list, "dock")[0] == [TREES] and "# the dock's light flickers" in motion_list.read_text()


def test_a_mask_for_a_camera_with_the_defaults_motion_keeps_the_defaults_settings(motion_list):
    Editor(motion_list, {}).save("lobby", [], [], mask=[CLOCK])
    mask, motion = _mask(motion_list, "lobby")
    assert mask == [CLOCK] and motion.threshold == 40 and motion.refresh_seconds == 5
    Editor(motion_list, {}).save("lobby", [], [], mask=[])
    mask, motion = _mask(motion_list, "lobby")
    assert mask == [] and motion.threshold == 40 and "mask" not in motion_list.read_text().split("name: lobby")[1].split("name: yard")[0]
    Editor(motion_list, {}).save("gate", [], [], mask=[])
    assert motion_list.read_text().endswith("  - name: gate\n    url: rtsp://gate.example/s\n    motion: true\n")
    assert _mask(motion_list, "gate")[0] == []  # no mask left: on, with every default


def test_a_mask_for_a_camera_with_motion_off_is_refused_and_changes_nothing(motion_list):
    with pytest.raises(EditError) as raised:
        Editor(motion_list, {}).save("yard", [], [], mask=[CLOCK])
    assert raised.value.status == 400 and str(raised.value) == (
        f"camera 'yard': motion is off (`motion: off`, or a file's default): masks apply when motion is on: "
        f"set `motion: on` for it in {motion_list} first")
    Editor(motion_list, {}).save("yard", [], [], mask=[])  # none: nothing to refuse, nothing turned on
    assert motion_list.read_text() == MOTION_LIST
    with pytest.raises(EditError, match="motion_mask must be a list of polygons"):
        Editor(motion_list, {}).save("dock", [], [], mask="clock")


def test_cameras_without_a_list_entry_are_read_only_with_the_reason(camera_list):
    assert "start with --config" in Editor(None).read_only("gate-1")
    editor = Editor(camera_list, ENV)
    assert editor.read_only("dock") is None
    assert "camera 'gate-1' is not in" in editor.read_only("gate-1")
    with pytest.raises(EditError) as raised:
        editor.save("gate-1", [], [])
    assert raised.value.status == 409 and camera_list.read_text() == LIST


def test_the_token_is_read_made_and_written_once_or_refused_with_the_fix(tmp_path):
    made = access.load(None)
    assert made.made and len(made.value) >= 24 and made.matches(made.value) and not made.matches(made.value + "x")
    path = tmp_path / "web.json"
    written = access.load(path)
    assert written.made and stat.S_IMODE(path.stat().st_mode) == 0o600
    again = access.load(path)
    assert again.value == written.value and not again.made
    path.write_text('{"web": {"key": "short"}}')
    with pytest.raises(ConfigError, match="at least 16 characters"):
        access.load(path)
    path.write_text("not json")
    with pytest.raises(ConfigError, match="cannot read it"):
        access.load(path)


def _unit(seq: int, preview: bytes | None = b"mp4", session: int = 1) -> Unit:
    return Unit(seq, b"ts", "video/mp2t", float(seq), float(seq), 30, session=session, preview=preview)


def _frame_line(seq: int) -> dict:
    return {"camera": "dock", "segment": seq, "pts": float(seq), "capture_time": float(seq), "status": 200,
            "width": 1920, "height": 1080, "latency_ms": 800.0,
            "detections": [{"box": [1, 2, 3, 4], "label": "person", "track_id": 7, "score": 0.9, "keypoints": []}]}


def _watched(camera: CameraView) -> None:
    assert camera.next(-1, stills=False) is None  # a viewer asks: the camera is watched


def _wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_viewer_gets_each_fragment_in_turn_and_jumps_to_the_newest_when_behind():
    camera = CameraView("dock")
    camera.released(_unit(0), [_frame_line(0)])  # nobody watches yet: nothing is made
    _watched(camera)
    for seq in range(1, 6):
        camera.released(_unit(seq), [_frame_line(seq)])
        _wait_for(lambda seq=seq: camera.next(-1, False) and camera.next(-1, False).header["pts"] == seq)
    first = camera.next(-1, stills=False)
    assert first.header["pts"] == 5.0 and first.kind == "mp4"  # a new viewer starts at the newest
    assert camera.next(first.seq - 2, False).header["pts"] == 4.0  # one behind: the next
    assert camera.next(first.seq - 4, False).header["pts"] == 5.0  # further behind: the newest
    length, size = int.from_bytes(first.data[:4], "big"), int.from_bytes(first.data[4:8], "big")
    head = json.loads(first.data[8:8 + length])
    assert head["camera"] == "dock" and size == 3 and first.data[8 + length:] == b"mp4"
    assert head["frames"][0]["detections"] == [{"box": [1, 2, 3, 4], "label": "person", "track_id": 7, "score": 0.9}]
    assert camera.next(first.seq, stills=False) is None  # nothing newer
    camera.close()


def test_a_frames_motion_reaches_the_page_only_when_its_line_has_it_and_bounded():
    camera = CameraView("dock")
    _watched(camera)
    noisy = [[i, i, i + 2, i + 2] for i in range(view.MOTION_BOXES + 10)]
    lines = [{**_frame_line(0), "looked": True, "regions": [[0, 0, 960, 540]], "motion": noisy, "lighting": True},
             {**_frame_line(0), "pts": 0.5, "looked": False, "regions": [], "motion": []},
             {**_frame_line(0), "pts": 0.9}]  # motion off: the line as before
    del lines[1]["detections"]  # not looked at: no answer of the model (not a frame without objects)
    camera.released(_unit(0), lines)
    _wait_for(lambda: camera.next(-1, False) is not None)
    looked, skipped, plain = camera.next(-1, False).header["frames"]
    assert looked["looked"] is True and looked["lighting"] is True and looked["regions"] == [[0, 0, 960, 540]]
    assert looked["motion"] == noisy[:view.MOTION_BOXES]
    assert skipped == {"pts": 0.5, "width": 1920, "height": 1080, "detections": [], "looked": False,
                       "regions": [], "motion": []}
    assert set(plain) == {"pts", "width", "height", "detections"}
    camera.close()


def test_one_long_poll_for_many_cameras_returns_when_any_has_a_picture():
    views = View()
    dock, lobby = views._get("dock"), views._get("lobby")
    started = time.monotonic()
    assert views.live([(dock, -1, False), (lobby, -1, False)], timeout=0.3) == []  # nothing: waits, then none
    assert time.monotonic() - started >= 0.25
    threading.Timer(0.3, lambda: lobby.released(_unit(1), [_frame_line(1)])).start()
    found = views.live([(dock, -1, False), (lobby, -1, False)], timeout=5)
    assert [f.header["camera"] for f in found] == ["lobby"] and time.monotonic() - started < 3
    views.close()


def test_the_camera_never_waits_for_a_busy_view():
    camera = CameraView("dock")
    _watched(camera)
    gate = threading.Event()
    original = camera._make
    camera._make = lambda unit, lines: (gate.wait(), original(unit, lines))  # a view thread stuck on one unit
    started = time.monotonic()
    for seq in range(200):
        camera.released(_unit(seq, preview=bytes(100_000)), [_frame_line(seq)])
    assert time.monotonic() - started < 1.0
    assert camera.skipped >= 200 - view.WORK - 1 and len(camera._work) <= view.WORK  # bounded, the oldest skipped
    gate.set()
    camera.close()


def test_state_counts_and_events_never_show_a_url():
    views = View()
    lines = [{"camera": "dock", "event": "connected", "codec": "h264", "width": 1920, "height": 1080,
              "url": "rtsp://dock.example/stream1"},
             {"camera": "dock", "event": "disconnected", "reason": "HTTPError: 404 at rtsp://dock.example/stream1"},
             {"camera": "dock", "event": "reconnecting", "attempt": 1, "delay_s": 5},
             {"camera": "dock", "event": "dropped", "reason": "behind"},
             {"camera": "dock", "event": "crossed", "line": "gate", "track_id": 3, "label": "person",
              "direction": "in", "event_id": "r:dock:5", "capture_time": 1.0}]
    views.offer((line, "") for line in lines)
    views.crossed("dock", "gate", "in", "person")
    views.zone("dock", "door", "person", 2)
    camera = views._views["dock"]
    state = camera.state()
    assert state["up"] is False and state["dropped"] == 1 and 4 <= state["reconnect_in_s"] <= 5
    assert state["last_error"] == "HTTPError: 404 at (the camera's URL)"
    assert camera.counts() == {"zones": {"door": {"person": 2}}, "lines": {"gate": {"in": {"person": 1}, "out": {}}}}
    assert camera.events() == [{"event": "crossed", "event_id": "r:dock:5", "line": "gate", "track_id": 3,
                                "label": "person", "direction": "in"}]
    views.offer([({"camera": "dock", "event": "started"}, "")])  # a restarted camera's metrics start at 0
    assert camera.counts() == {"zones": {}, "lines": {}}


def test_a_segment_watched_gets_an_mp4_preview_with_every_frame():
    body = segment("mpegts", width=160, height=96, frames=30, fps=15, gop=15, bframes=0)
    watching = iter([False, True])
    with av.open(io.BytesIO(body), format="mpegts") as container:
        stream = container.streams.video[0]
        counter = iter(range(100))
        cutter = Segmenter(stream, 1.0, CaptureClock(time.monotonic), lambda: next(counter),
                           preview=lambda: next(watching))
        units = [u for packet in container.demux(stream) for u in cutter.push(packet)] + cutter.flush()
    assert [u.preview is not None for u in units] == [False, True]
    with av.open(io.BytesIO(units[1].preview), format="mp4") as mp4:
        frames = [(f.width, f.height) for f in mp4.decode(video=0)]
    assert frames == [(160, 96)] * 15
    assert view.mp4_codec(units[1].preview).startswith('video/mp4; codecs="avc1.')


@pytest.fixture
def server(camera_list):
    views = View()
    views.configure(config.load(camera_list, ENV))
    token = access.Token("t" * 24, made=True)
    served = web.WebServer(("127.0.0.1", 0), token, views, Editor(camera_list, ENV)).start()
    yield served
    served.close()


def test_the_api_answers_401_without_the_token_404_for_no_camera_and_403_for_another_host(server):
    base = f"http://127.0.0.1:{server.port}"
    auth = {"Authorization": "Bearer " + "t" * 24}
    assert requests.get(base + "/api/cameras", timeout=5).status_code == 401
    assert requests.get(base + "/static/view.js", timeout=5).status_code == 200  # the page's code: no data
    cameras = requests.get(base + "/api/cameras", headers=auth, timeout=5).json()["cameras"]
    assert [c["name"] for c in cameras] == ["dock", "lobby"]
    missing = requests.get(base + "/api/cameras/nope/state", headers=auth, timeout=5)
    assert missing.status_code == 404 and missing.json()["type"] == "NotFound"
    bad = requests.get(base + "/api/live?cameras=dock&after=x", headers=auth, timeout=5)
    assert bad.status_code == 400 and "whole numbers" in bad.json()["message"]
    unknown = requests.get(base + "/api/live?cameras=dock,nope", headers=auth, timeout=5)
    assert unknown.status_code == 404 and unknown.json()["message"] == "no such camera: nope"
    assert requests.get(base + "/api/cameras", headers={**auth, "Host": "evil.example"}, timeout=5).status_code == 403
    scene = requests.get(base + "/api/cameras/dock/scene", headers=auth, timeout=5).json()
    assert scene["editable"] and scene["zones"][0]["polygon"][0] == [10.0, 20.0]
    assert scene["motion"] == {"on": True, "mask": []}  # a live camera: motion on by default
    saved = requests.put(base + "/api/cameras/dock/scene", headers=auth, timeout=5,
                         json={"zones": [], "lines": [{"name": "g", "from": [0, 0], "to": [0, 0]}]})
    assert saved.status_code == 400 and saved.json()["type"] == "InvalidScene"


def test_a_stalled_viewer_is_dropped_and_holds_no_slot(server, monkeypatch):
    monkeypatch.setattr(web._Handler, "timeout", 0.5)
    stalled = socket.create_connection(("127.0.0.1", server.port))
    stalled.sendall(b"GET /api/cameras HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % server.port)  # never finished
    time.sleep(1.5)
    assert stalled.recv(100) == b""  # the server gave up on it
    stalled.close()
    _wait_for(lambda: server._server.connections._value == web.MAX_CONNECTIONS)


def test_a_camera_named_twice_or_more_cameras_than_the_bridge_has_are_refused(server):
    base = f"http://127.0.0.1:{server.port}/api/live"
    auth = {"Authorization": "Bearer " + "t" * 24}
    twice = requests.get(base + "?cameras=dock,lobby,dock,dock&after=-1,-1,-1,-1", headers=auth, timeout=15)
    assert twice.status_code == 400 and twice.json() == {
        "code": 400, "type": "BadRequest", "message": "camera named more than once: dock (name each camera once)"}
    many = requests.get(base + "?cameras=dock,lobby,nope", headers=auth, timeout=15)
    assert many.status_code == 400 and many.json() == {
        "code": 400, "type": "BadRequest", "message": "3 cameras named: this bridge has 2"}
    unknown = requests.get(base + "?cameras=nope,lobby", headers=auth, timeout=15)
    assert unknown.status_code == 404 and unknown.json() == {
        "code": 404, "type": "NotFound", "message": "no such camera: nope"}


def test_a_cookie_is_no_credential_and_the_page_itself_needs_none(server):
    base = f"http://127.0.0.1:{server.port}"
    cookie = {"Cookie": "video_ingest_token=" + "t" * 24}
    refused = requests.get(base + "/api/cameras", headers=cookie, timeout=5)
    assert refused.status_code == 401 and refused.json()["type"] == "Unauthorized"
    page = requests.get(base + "/", timeout=5)  # a navigation never sends the header: the page asks for the token
    assert page.status_code == 200 and b'<form id="login"' in page.content


def test_request_headers_trickled_a_byte_at_a_time_end_at_the_deadline(server, monkeypatch):
    monkeypatch.setattr(web._Handler, "headers_s", 1.0)
    slow = socket.create_connection(("127.0.0.1", server.port))
    slow.settimeout(0.3)
    request, closed = b"GET /api/cameras HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100, False
    for byte in request[:60]:  # a byte each 0.3 s for 18 s: never a second without one, never the whole headers
        try:
            slow.sendall(bytes([byte]))
            closed = slow.recv(100) == b""
        except TimeoutError:
            continue
        except OSError:  # reset: closed too
            closed = True
        if closed:
            break
    slow.close()
    assert closed
