"""No non-finite number leaves video-ingest: a model server answering NaN (a tiny real HTTP server
in place of TorchServe) gets a `BadAnswer` line saying why, and every line the real CLI writes is
strict JSON (RFC 8259: no NaN, no Infinity)."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time

import pytest
import requests

from ingest.cameras.clock import WallClock
from ingest.sinks.output import Lines
from ingest.sinks.redact import Redactor
from tests.support import ROOT
from tests.videos import segment

NAN_BOX = (b'{"frames": [{"pts": 0.0, "width": 160, "height": 96, '
           b'"detections": [{"box": [NaN, 4.0, 50.0, 60.0], "score": 0.9, "label": "person"}]}]}')
WHY = ("NonFinite: the answer holds NaN: a number JSON cannot hold (the model or handler gave a NaN or "
       "infinite value)")


def strict(text: str) -> object:
    """`text` parsed as RFC 8259 JSON: NaN, Infinity and -Infinity raise."""
    def refuse(name: str) -> object:
        raise ValueError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=refuse)


class NanServer:
    """Answers every POST with 200 and `body` (a model server gone wrong), counting them."""

    def __init__(self, body: bytes) -> None:
        self.posts = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                self.rfile.read(int(self.headers["Content-Length"]))
                owner.posts += 1  # one handler thread (HTTPServer, not Threading): no race
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_nan_answer_is_a_bad_answer_line_saying_why_and_every_line_is_strict_json(tmp_path):
    video = tmp_path / "dock.mp4"
    video.write_bytes(segment("mp4", frames=30, fps=15, gop=15, bframes=0))
    results = tmp_path / "results.jsonl"
    server = NanServer(NAN_BOX)
    try:
        done = subprocess.run([sys.executable, "-m", "ingest.cli", "--url", server.url, "--model", "m",
                               "--camera", f"dock={video}", "--mode", "frames", "--sample-fps", "5",
                               "--results", str(results)], cwd=ROOT, capture_output=True, text=True,
                              timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [strict(text) for text in results.read_text().splitlines()]  # raises on a bare NaN
    answers = [x for x in lines if "event" not in x]
    assert len(answers) == server.posts == 10  # 2 s at 5 frames a second, one line per answer
    assert {(x["status"], x["type"], x["message"]) for x in answers} == {(200, "BadAnswer", WHY)}
    assert not any("detections" in x for x in answers)


def test_a_bad_answer_is_counted_as_one_not_as_a_200(tmp_path):
    """The metrics an operator alerts on: a refused 200 counts its request's frames under
    `bad_answer`, never under 200, and sets no lag."""
    from tests.rtsp_server import free_port
    from tsutil import prom

    video = tmp_path / "dock.mp4"
    video.write_bytes(segment("mp4", frames=150, fps=15, gop=15, bframes=0))
    port, server = free_port(), NanServer(NAN_BOX)
    ingest = subprocess.Popen([sys.executable, "-m", "ingest.cli", "--url", server.url, "--model", "m",
                               "--camera", f"dock={video}", "--mode", "frames", "--sample-fps", "5",
                               "--results", str(tmp_path / "r.jsonl"), "--metrics-port", str(port)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    def bad() -> float:
        try:
            text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        except requests.ConnectionError:  # not listening yet
            return 0.0
        return prom.total(text, "video_ingest_frames_total", camera="dock", status="bad_answer")

    try:
        deadline = time.monotonic() + 30
        while bad() < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    finally:
        ingest.kill()
        ingest.wait(10)
        server.stop()
    assert prom.total(text, "video_ingest_frames_total", camera="dock", status="bad_answer") >= 2
    assert prom.total(text, "video_ingest_frames_total", camera="dock", status="200") == 0
    assert prom.total(text, "video_ingest_lag_seconds", camera="dock") == 0


def test_a_non_finite_number_that_reaches_the_results_is_written_as_null(tmp_path, caplog):
    """A bug upstream of the writer (the client refuses such answers) still gives strict JSON."""
    lines = Lines(tmp_path / "r.jsonl", Redactor(), WallClock())
    lines.write([{"camera": "dock", "status": 200, "box": [float("nan"), 1.0, float("inf")], "pts": 2.5}])
    lines.close()
    [text] = (tmp_path / "r.jsonl").read_text().splitlines()
    assert strict(text) == {"camera": "dock", "status": 200, "box": [None, 1.0, None], "pts": 2.5}
    assert [r.getMessage() for r in caplog.records] == [
        "a line held a non-finite number, written as null (a bug): camera dock, keys ['box', 'camera', 'pts', 'status']"]


@pytest.mark.parametrize("body, held", [(b'{"frames": [{"pts": Infinity}]}', "Infinity"),
                                        (b'{"frames": [{"pts": -Infinity}]}', "-Infinity"),
                                        (b'{"frames": [{"pts": 1e999}]}', "1e999 (beyond a float's range)")])
def test_every_non_finite_spelling_is_refused(body, held):
    from ingest.cameras.client import Client, Keys

    server = NanServer(body)
    client = Client(server.url, "m", Keys(None))
    try:
        answer = client.post(b"x", {"Content-Type": "image/jpeg"})
    finally:
        client.close()
        server.stop()
    assert (answer.status, answer.body) == (200, None)
    assert answer.error == WHY.replace("holds NaN", f"holds {held}")


def test_a_fragment_for_the_page_has_a_strict_json_header_whatever_its_numbers():
    """The page parses each fragment's header with JSON.parse, which refuses a bare NaN."""
    from ingest.web.view import Fragment

    fragment = Fragment.make(7, "jpeg", {"camera": "dock", "pts": float("nan"),
                                         "frames": [{"box": [float("-inf"), 1.5]}]}, b"JPEG")
    size = int.from_bytes(fragment.data[:4], "big")
    assert int.from_bytes(fragment.data[4:8], "big") == 4 and fragment.data[8 + size:] == b"JPEG"
    assert strict(fragment.data[8:8 + size].decode()) == {"seq": 7, "kind": "jpeg", "camera": "dock", "pts": None,
                                                          "frames": [{"box": [None, 1.5]}]}


def test_a_key_refused_after_a_reread_is_logged_once_per_change(tmp_path, caplog):
    """Every answer is judged; the log says so only when the verdict changes (no key held: the file
    named and the flag that fixes it)."""
    import logging

    from ingest.cameras.client import Keys

    keys = Keys(tmp_path / "key_file.json")  # missing: no key is sent
    assert keys.current() is None
    with caplog.at_level(logging.INFO, logger="ingest.cameras.client"):
        for refused in (False, True, True, True, False, False, True):
            keys.judged(refused)
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    none = (f"TorchServe wants a key and {tmp_path / 'key_file.json'} holds none (missing or empty): every camera is "
            "answered 400 until it does (--token-file: TorchServe's key_file.json)")
    back = f"TorchServe accepts the key from {tmp_path / 'key_file.json'} again"
    assert said == [("WARNING", none), ("INFO", back), ("WARNING", none)]


def test_what_the_model_looked_at_is_copied_into_the_lines_and_a_frame_not_sent_has_its_own_line():
    """Motion first (issue 48): `looked`, `regions`, `motion` and `lighting` go from each frame of
    the answer into its line; a frame not looked at has no `detections` (not a frame without
    objects), and neither has the line of a frame the bridge did not send."""
    from ingest.cameras.client import Answer
    from ingest.cameras.units import Unit
    from ingest.sinks.results import result_lines, unlooked_line

    unit = Unit(7, b"", "video/mp2t", 1000.0, 2.0, 2, frame_times=((2.0, 1000.0), (2.5, 1000.5)), session=1)
    looked = {"pts": 0.0, "width": 160, "height": 96, "looked": True, "regions": [[0, 0, 160, 96]],
              "motion": [[10, 20, 30, 40]], "lighting": True, "detections": []}
    skipped = {"pts": 0.5, "width": 160, "height": 96, "looked": False, "regions": [], "motion": []}
    first, second = result_lines("dock", unit, Answer(200, {"frames": [looked, skipped]}), 1001.0)
    assert {k: first[k] for k in ("looked", "regions", "motion", "lighting", "detections")} == {
        "looked": True, "regions": [[0, 0, 160, 96]], "motion": [[10, 20, 30, 40]], "lighting": True, "detections": []}
    assert second == {"camera": "dock", "segment": 7, "pts": 2.5, "capture_time": 1000.5, "status": 200,
                      "width": 160, "height": 96, "looked": False, "regions": [], "motion": [], "latency_ms": 500.0}
    [plain] = result_lines("dock", unit, Answer(200, {"frames": [{"pts": 0.0, "width": 160, "height": 96,
                                                                  "detections": []}]}), 1001.0)
    assert not plain.keys() & {"looked", "regions", "motion", "lighting"}  # motion off: the lines of today
    frame = Unit(8, b"", "image/jpeg", 1002.0, 4.0, 1, session=1)
    assert unlooked_line("dock", frame, 160, 96, [(1, 2, 3, 4)], 1002.25) == {
        "camera": "dock", "segment": 8, "pts": 4.0, "capture_time": 1002.0, "status": 200, "width": 160,
        "height": 96, "looked": False, "regions": [], "motion": [[1, 2, 3, 4]], "latency_ms": 250.0}
    assert strict(json.dumps(second)) == second
