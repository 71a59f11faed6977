"""video-ingest end to end: the real CLI, a real gst-rtsp-server, a real TorchServe.

One TorchServe (frame_quality only) and one RTSP server serve the whole module. One video-ingest
process (`fleet`) carries nine cameras from a YAML file for most tests, which run in file order
on it: answers in order (TCP and UDP), a port where nothing listens, garbage on a port, frames
mode, an HTTP MJPEG camera, a resolution change, a stall, renewed keys, a YAML edit, and at last
SIGTERM with requests in flight. The
server-killed test and the credentials test run their own small servers and processes.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.ingest_cli import Ingest
from tests.e2e.server import TorchServe
from tests.rtsp_server import GarbageServer, MjpegServer, RtspServer, free_port
from tests.support import frame, jpeg

SIZE = (160, 96)
FPS = 15
MODEL = "frame_quality"


def check_in_order(answers: list[dict[str, Any]], size: tuple[int, int] | None = SIZE) -> None:
    """Segments in sequence order, pts rising within each, capture times always rising, all 200."""
    assert answers, "no answers"
    assert [a["status"] for a in answers] == [200] * len(answers)
    segments = [a["segment"] for a in answers]
    assert segments == sorted(segments)
    captures = [a["capture_time"] for a in answers]
    assert all(later > earlier for earlier, later in zip(captures, captures[1:])), captures
    for seg in set(segments):
        pts = [a["pts"] for a in answers if a["segment"] == seg]
        assert pts == sorted(pts) and len(set(pts)) == len(pts)
    if size:
        assert {(a["width"], a["height"]) for a in answers} == {size}
    assert all(set(a["outputs"]) == {"brightness", "contrast", "sharpness"} for a in answers)


@pytest.fixture(scope="module")
def torchserve(archives, tmp_path_factory):
    ts = TorchServe(tmp_path_factory.mktemp("ingest_ts"), {MODEL: archives / f"{MODEL}.mar"},
                    overlays=[f"load_models={MODEL}.mar\n"]).start()
    yield ts
    ts.stop()


@pytest.fixture(scope="module")
def rtsp(tmp_path_factory):
    mounts = {name: (*SIZE, FPS) for name in ("a", "b", "f", "resize", "stall", "late")}
    with RtspServer(mounts, log=tmp_path_factory.mktemp("rtsp") / "gst.log") as server:
        yield server


@pytest.fixture(scope="module")
def mjpeg():
    camera = MjpegServer([jpeg(frame(SIZE[1], SIZE[0], seed)) for seed in range(4)], fps=10).start()
    yield camera
    camera.stop()


@pytest.fixture(scope="module")
def garbage():
    server = GarbageServer().start()
    yield server
    server.stop()


def _yaml(rtsp: RtspServer, garbage: GarbageServer, mjpeg: MjpegServer, nothing: int, with_late: bool = False) -> str:
    cams = [("a", rtsp.url("a"), ""), ("b", rtsp.url("b"), ""), ("f", rtsp.url("f"), "    mode: frames\n"),
            ("b-udp", rtsp.url("b"), "    transport: udp\n"), ("mjpeg", mjpeg.url, ""),
            ("resize", rtsp.url("resize"), ""), ("stall", rtsp.url("stall"), "    stall_seconds: 2\n"),
            ("nothing", f"rtsp://127.0.0.1:{nothing}/x", "")]
    cams.append(("late", rtsp.url("late"), "") if with_late else ("garbage", f"rtsp://127.0.0.1:{garbage.port}/x", ""))
    # every frame answered: the bridge's own behaviour, without motion first (tests/e2e/test_motion.py)
    return "defaults:\n  motion: off\ncameras:\n" + "".join(f"  - name: {n}\n    url: {u}\n{extra}" for n, u, extra in cams)


@pytest.fixture(scope="module")
def fleet(torchserve, rtsp, garbage, mjpeg, tmp_path_factory):
    work = tmp_path_factory.mktemp("fleet")
    nothing = free_port()
    (work / "cameras.yaml").write_text(_yaml(rtsp, garbage, mjpeg, nothing))
    ingest = Ingest(work, torchserve, ["--config", str(work / "cameras.yaml")])
    ingest.yaml = work / "cameras.yaml"
    ingest.nothing = nothing
    ingest.mjpeg = mjpeg
    yield ingest
    ingest.kill()


def test_two_cameras_answered_in_order_with_pts(fleet):
    for camera in ("a", "b", "b-udp"):
        fleet.wait(f"3 segments of {camera}", lambda c=camera: len({x["segment"] for x in fleet.answers(c)}) >= 3)
    for camera in ("a", "b", "b-udp"):
        answers = fleet.answers(camera)
        check_in_order(answers)
        first = [a for a in answers if a["segment"] == answers[0]["segment"]]
        assert 12 <= len(first) <= 20  # about one second of 15 fps (cut at the key frame every 15)
        assert [round(b["pts"] - a["pts"], 3) for a, b in zip(first, first[1:])] == [0.067] * (len(first) - 1)
        assert all(0 < a["latency_ms"] < 10_000 for a in answers), [a for a in answers if not 0 < a["latency_ms"] < 10_000][:3]
    [connected] = fleet.events("a", "connected")
    assert (connected["codec"], connected["width"], connected["height"], connected["mode"]) == ("h264", 160, 96,
                                                                                                   "segments")
    answered = {x["segment"] for x in fleet.answers("a")}
    assert fleet.metric("video_ingest_segments_total", camera="a", status="200") >= len(answered)
    assert fleet.metric("video_ingest_up", camera="a") == 1
    assert 0 < fleet.metric("video_ingest_lag_seconds", camera="a") < 10
    rss = int(re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{fleet.process.pid}/status").read_text())[1]) * 1024
    assert abs(fleet.metric("process_resident_memory_bytes") - rss) < rss / 10  # the bridge's own, for an alert


def test_nothing_listening_is_retried_with_backoff_and_the_others_go_on(fleet):
    fleet.wait("3 reconnects of nothing", lambda: len(fleet.events("nothing", "reconnecting")) >= 3)
    attempts = fleet.events("nothing", "reconnecting")
    assert [e["attempt"] for e in attempts] == list(range(1, len(attempts) + 1))
    assert all(0.5 <= e["delay_s"] <= 30 for e in attempts)
    assert all("Connection refused" in e["reason"] for e in fleet.events("nothing", "disconnected"))
    assert fleet.events("nothing", "connected") == []
    assert fleet.metric("video_ingest_reconnects_total", camera="nothing") >= 3
    assert fleet.metric("video_ingest_up", camera="nothing") == 0
    before = len(fleet.answers("a"))
    fleet.wait("more answers of a", lambda: len(fleet.answers("a")) > before + 15)


def test_garbage_on_the_port_is_a_disconnect_not_a_crash(fleet, garbage):
    fleet.wait("2 reconnects of garbage", lambda: len(fleet.events("garbage", "reconnecting")) >= 2)
    assert garbage.connections >= 2
    assert fleet.events("garbage", "connected") == []
    assert len(fleet.events("garbage", "disconnected")) >= 2
    assert fleet.process.poll() is None


def test_frames_mode_sends_five_jpeg_frames_a_second(fleet):
    fleet.wait("10 frames of f", lambda: len(fleet.answers("f")) >= 10)
    answers = fleet.answers("f")
    check_in_order(answers)
    assert len({a["segment"] for a in answers}) == len(answers)  # one frame per request
    steps = [round(b["pts"] - a["pts"], 3) for a, b in zip(answers, answers[1:])]
    assert all(s >= 0.2 for s in steps), steps  # 5 of the 15 frames a second
    assert fleet.events("f", "connected")[0]["mode"] == "frames"
    assert fleet.metric("video_ingest_frames_total", camera="f", status="200") >= len(answers)


def test_an_http_mjpeg_camera_is_sampled_by_arrival_and_sent_as_it_came(fleet):
    fleet.wait("10 frames of mjpeg", lambda: len(fleet.answers("mjpeg")) >= 10)
    [connected] = fleet.events("mjpeg", "connected")
    assert (connected["codec"], connected["mode"]) == ("mjpeg", "frames")  # segments asked: MJPEG goes as frames
    answers = fleet.answers("mjpeg")
    check_in_order(answers)
    steps = [b["pts"] - a["pts"] for a, b in zip(answers, answers[1:])]
    # 5 of the 10 a second, by arrival time: one a 0.2 s slot (arrival jitter moves single steps)
    assert statistics.median(steps) == pytest.approx(0.2, abs=0.03) and all(0.05 < s < 0.4 for s in steps), steps
    span = answers[-1]["capture_time"] - answers[0]["capture_time"]
    assert span == pytest.approx(answers[-1]["pts"] - answers[0]["pts"], abs=0.05)


def test_resolution_change_mid_stream(fleet, rtsp, torchserve):
    workers = torchserve.worker_pids(MODEL)
    fleet.wait("answers of resize", lambda: fleet.answers("resize"))
    mark = len(fleet.lines())
    rtsp.resize("resize", 176, 144)
    fleet.wait("answers at 176x144", lambda: [a for a in fleet.answers("resize", mark) if a["width"] == 176])
    answers = fleet.answers("resize")
    assert {(a["width"], a["height"]) for a in answers} == {(160, 96), (176, 144)}
    assert [a["status"] for a in answers] == [200] * len(answers)
    check_in_order(answers, size=None)
    assert len(fleet.events("resize", "connected")) == 1  # same connection
    assert torchserve.worker_pids(MODEL) == workers  # and the same worker


def test_a_stalled_stream_reconnects_and_comes_back(fleet, rtsp):
    fleet.wait("answers of stall", lambda: fleet.answers("stall"))
    mark = len(fleet.lines())
    rtsp.stall("stall", True)
    fleet.wait("a stall", lambda: fleet.events("stall", "disconnected", mark), timeout=30)
    assert fleet.events("stall", "disconnected", mark)[0]["reason"] == "stalled: no data for 2 s"
    fleet.wait("a reconnect", lambda: fleet.events("stall", "reconnecting", mark))
    assert fleet.metric("video_ingest_reconnects_total", camera="stall") >= 1
    rtsp.stall("stall", False)
    back = len(fleet.lines())
    fleet.wait("answers again", lambda: fleet.answers("stall", back), timeout=60)
    check_in_order(fleet.answers("stall"))


def test_renewed_keys_lose_no_answer(fleet, torchserve):
    old = torchserve.key()
    answer = requests.post(f"{torchserve.management_url}/token?type=inference",
                           headers=torchserve.auth("API"), timeout=30)
    assert answer.status_code == 200
    assert torchserve.key() != old
    mark = len(fleet.lines())
    fleet.wait("answers with the new key", lambda: len(fleet.answers("a", mark)) > 20)
    statuses = {x["status"] for x in fleet.lines() if "status" in x}
    assert statuses == {200}  # not one 400 InvalidKeyException anywhere


def test_yaml_edit_adds_and_removes_cameras_and_keeps_the_others(fleet, rtsp, garbage):
    mark = len(fleet.lines())
    fleet.yaml.write_text(_yaml(rtsp, garbage, fleet.mjpeg, fleet.nothing, with_late=True))
    fleet.wait("late answered", lambda: fleet.answers("late", mark), timeout=60)
    [reloaded] = fleet.events(None, "reloaded", mark)
    assert reloaded["cameras"] == ["a", "b", "b-udp", "f", "late", "mjpeg", "nothing", "resize", "stall"]
    [stopped] = fleet.events("garbage", "stopped", mark)
    assert stopped["sent"] == 0
    assert fleet.events("a", "connected", mark) == [] and fleet.events("a", "stopped", mark) == []
    before = len(fleet.answers("a"))
    fleet.wait("a goes on", lambda: len(fleet.answers("a")) > before)
    assert "garbage" not in fleet.metrics()
    fleet.yaml.write_text("cameras:\n  - name: a\n    url: rtsp://h/x\n    mode: sideways\n")
    fleet.wait("the bad edit refused", lambda: fleet.events(None, "config_error", mark))
    assert fleet.events(None, "config_error", mark)[0]["message"].startswith(
        "camera 'a': mode = 'sideways': use one of segments, frames")
    fleet.wait("a still goes on", lambda: len(fleet.answers("a")) > before + 15)


def test_sigterm_with_requests_in_flight_answers_or_counts_them(fleet, torchserve):
    """The model stops for 5 s (SIGSTOP): each live camera has 2 requests in flight, 2 segments
    queued and the older ones dropped (`latest`); SIGTERM then, the model back 2 s later."""
    [worker] = torchserve.worker_pids(MODEL)
    os.kill(worker, signal.SIGSTOP)
    try:
        time.sleep(5.0)
        dropped = fleet.metric("video_ingest_dropped_total", camera="a", reason="behind")
        started = time.monotonic()
        fleet.process.send_signal(signal.SIGTERM)
        time.sleep(2.0)
    finally:
        os.kill(worker, signal.SIGCONT)
    code = fleet.process.wait(timeout=15)
    took = time.monotonic() - started
    assert code == 0 and took < 10, (code, took)
    lines = fleet.lines()
    for camera in ("a", "b", "resize", "late"):
        [stopped] = [x for x in lines if x["camera"] == camera and x.get("event") == "stopped"]
        answered = {x["segment"] for x in lines if x["camera"] == camera and "status" in x}
        assert (stopped["in_flight_at_stop"], stopped["queued_at_stop"]) == (2, 2), stopped
        assert stopped["answered"] == len(answered)
        assert stopped["sent"] == stopped["answered"] + stopped["abandoned"] + stopped["dropped"].get("unavailable", 0)
        assert stopped["abandoned"] == 0  # the model came back within the drain: all answered
        assert stopped["dropped"].get("behind", 0) >= 1
        drops = [x["segment"] for x in lines if x["camera"] == camera and x.get("event") == "dropped"]
        assert not set(drops) & answered
    assert dropped >= 1
    assert lines[-1]["event"] == "stopped"


def test_a_file_is_paced_every_segment_answered_and_the_run_ends_with_it(torchserve, tmp_path):
    from tests.videos import segment

    video = tmp_path / "demo.ts"
    video.write_bytes(segment("mpegts", width=160, height=96, frames=45, fps=15, gop=15, bframes=0))
    started = time.monotonic()
    ingest = Ingest(tmp_path, torchserve, ["--camera", f"demo={video}"])
    try:
        code = ingest.process.wait(timeout=60)
    finally:
        ingest.kill()
    assert code == 0 and time.monotonic() - started >= 2.0  # paced at 15 fps: about 3 s
    answers = ingest.answers("demo")
    check_in_order(answers)
    assert [a["segment"] for a in answers] == [0] * 15 + [1] * 15 + [2] * 15
    [stopped] = ingest.events("demo", "stopped")
    assert (stopped["sent"], stopped["answered"], stopped["dropped"]) == (3, 3, {})
    assert ingest.events("demo", "disconnected")[0]["reason"] == "end of stream"


def test_killed_rtsp_server_restarted_frames_again_capture_times_still_rising(torchserve, tmp_path):
    camera = RtspServer({"cam": (*SIZE, FPS)}, log=tmp_path / "gst.log").start()
    ingest = Ingest(tmp_path, torchserve, ["--camera", f"cam={camera.url('cam')}", "--motion", "off"])
    try:
        ingest.wait("answers", lambda: len({x["segment"] for x in ingest.answers("cam")}) >= 2)
        camera.kill()
        ingest.wait("the disconnect", lambda: ingest.events("cam", "disconnected"))
        ingest.wait("2 reconnect attempts", lambda: len(ingest.events("cam", "reconnecting")) >= 2)
        mark = len(ingest.lines())
        camera.start()
        ingest.wait("answers after the restart", lambda: len(ingest.answers("cam", mark)) >= 15, timeout=60)
        assert len(ingest.events("cam", "connected")) == 2
        check_in_order(ingest.answers("cam"))
        assert ingest.metric("video_ingest_reconnects_total", camera="cam") >= 2
        code, took = ingest.stop()
        assert code == 0 and took < 10
    finally:
        ingest.kill()
        camera.stop()


def test_credentials_appear_in_no_output(torchserve, tmp_path):
    user, password, wrong = "viewer-7f3k", "pw-Zq81xLm", "pw-Wr0ngPass"
    camera = RtspServer({"cam": (*SIZE, FPS)}, credentials=(user, password), log=tmp_path / "gst.log").start()
    (tmp_path / "cameras.yaml").write_text(
        "cameras:\n"
        f"  - name: good\n    url: rtsp://{user}:${{CAM_PASSWORD}}@127.0.0.1:{camera.port}/cam\n"
        "  - name: whole\n    url: ${CAM_URL}\n"
        f"  - name: refused\n    url: rtsp://{user}:${{WRONG_PASSWORD}}@127.0.0.1:{camera.port}/cam\n")
    env = {"CAM_PASSWORD": password, "WRONG_PASSWORD": wrong, "CAM_URL": camera.url("cam", (user, password))}
    ingest = Ingest(tmp_path, torchserve, ["--config", str(tmp_path / "cameras.yaml"), "--log-level", "DEBUG"], env)
    try:
        for name in ("good", "whole"):
            ingest.wait(f"answers of {name}", lambda n=name: ingest.answers(n))
        ingest.wait("refusals", lambda: len(ingest.events("refused", "disconnected")) >= 2)
        assert "401" in ingest.events("refused", "disconnected")[0]["reason"]
        metrics = ingest.metrics()
        code, _ = ingest.stop()
        assert code == 0
    finally:
        ingest.kill()
        camera.stop()
    outputs = {"results": ingest.results.read_text(), "log": ingest.log(), "metrics": metrics}
    assert "connected" in outputs["results"] and "video_ingest_up" in metrics
    for where, text in outputs.items():
        for secret in (user, password, wrong, env["CAM_URL"]):
            assert secret not in text, f"{secret!r} in the {where}"


def test_the_bridge_runs_with_jemalloc_as_the_image_runs_it(torchserve, tmp_path):
    """deploy/Dockerfile's video-ingest preloads jemalloc (its memory stays flat where glibc's malloc
    lets it creep): the same preload here, with PyAV's FFmpeg, OpenCV and the rest loaded."""
    camera = RtspServer({"cam": (*SIZE, FPS)}, log=tmp_path / "gst.log").start()
    ingest = Ingest(tmp_path, torchserve, ["--camera", f"cam={camera.url('cam')}", "--motion", "off"],
                    env={"LD_PRELOAD": "libjemalloc.so.2"})
    try:
        ingest.wait("answers", lambda: len(ingest.answers("cam")) >= 15)
        maps = Path(f"/proc/{ingest.process.pid}/maps").read_text()
        assert "libjemalloc.so.2" in maps
        check_in_order(ingest.answers("cam"))
        code, _ = ingest.stop()
        assert code == 0
        assert "cannot be preloaded" not in ingest.log()
    finally:
        ingest.kill()
        camera.stop()


def test_a_refused_key_is_logged_once_and_its_return_too(torchserve, tmp_path):
    """A key TorchServe refuses even after the file is read again (expired with no video-keys
    beside TorchServe, or wrong): each answer says so, and the log says it once, with the fix;
    once the file holds a good key, answers are 200 again and the log says that once too."""
    camera = RtspServer({"cam": (*SIZE, FPS)}, log=tmp_path / "gst.log").start()
    token = tmp_path / "token"
    token.write_text("not-the-key\n")
    ingest = Ingest(tmp_path, torchserve, ["--camera", f"cam={camera.url('cam')}", "--motion", "off", "--token-file", str(token)])
    try:
        refused = ingest.wait("refused answers", lambda: len(ingest.answers("cam")) >= 3 and ingest.answers("cam"))
        assert {(a["status"], a["type"]) for a in refused} == {(400, "InvalidKeyException")}
        token.write_text(torchserve.key() + "\n")
        back = len(ingest.lines())
        ingest.wait("answers with the good key", lambda: len(ingest.answers("cam", back)) >= 15, timeout=60)
        assert ingest.answers("cam", back)[-1]["status"] == 200
        code, _ = ingest.stop()
        assert code == 0
        log = ingest.log()
        assert log.count("TorchServe refuses the key from") == 1, log
        assert f"refuses the key from {token}, also read again: it expired or is wrong" in log
        assert "run video-keys beside it" in log
        assert log.count(f"TorchServe accepts the key from {token} again") == 1, log
    finally:
        ingest.kill()
        camera.stop()


def test_a_torchserve_restart_is_waited_out_with_new_keys(torchserve, tmp_path):
    """Last: it restarts the module's TorchServe. Meanwhile units are retried and, as newer ones
    wait (`latest`), dropped as `unavailable`; after the restart the new key is read and answers
    come again. Nothing is answered 400 (refused key) and the process never stops."""
    camera = RtspServer({"cam": (*SIZE, FPS)}, log=tmp_path / "gst.log").start()
    ingest = Ingest(tmp_path, torchserve, ["--camera", f"cam={camera.url('cam')}", "--motion", "off"])
    try:
        ingest.wait("answers", lambda: ingest.answers("cam"))
        old_key = torchserve.key()
        torchserve.stop()
        mark = len(ingest.lines())
        ingest.wait("drops while TorchServe is down",
                    lambda: [e for e in ingest.events("cam", "dropped", mark) if e["reason"] == "unavailable"])
        torchserve.start()
        assert torchserve.key() != old_key
        back = len(ingest.lines())
        ingest.wait("answers after the restart", lambda: len(ingest.answers("cam", back)) >= 15, timeout=60)
        check_in_order(ingest.answers("cam"))
        assert {x["status"] for x in ingest.lines() if "status" in x} == {200}
        code, _ = ingest.stop()
        assert code == 0
    finally:
        ingest.kill()
        camera.stop()
