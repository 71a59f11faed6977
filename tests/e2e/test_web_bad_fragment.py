"""The live page survives a fragment it cannot read: in Debian's Chromium (tests/browser.py), the
real web server and view of the bridge serve two frames-mode cameras' JPEGs, made from answer lines
as the cameras hand them over; one of `bad`'s lines carries a NaN score. The bridge writes it as
null (test_ingest_answers); here the view's header writer is Python's plain `json.dumps`, as an
older bridge had it, so the header says `NaN`, which no browser parses. The page skips it, says so
in the console, and keeps showing both cameras.

In-process (no camera, no TorchServe): the lines are the test's, so the bad header comes whatever
the bridge's other rooms do about NaNs.
"""

from __future__ import annotations

import io
import json
import math
import threading

import pytest
from PIL import Image

from ingest import config
from ingest.cameras.units import Unit
from ingest.web import access
from ingest.web import server as web
from ingest.web import view as view_module
from ingest.web.editor import Editor
from ingest.web.view import View
from tests import browser

CAMERAS = """\
cameras:
  - {name: good, url: 'rtsp://good.example/s', mode: frames}
  - {name: bad, url: 'rtsp://bad.example/s', mode: frames}
"""
TOKEN = "t" * 24
EVERY_S = 0.2


def jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (40, 40, 40)).save(out, "JPEG")
    return out.getvalue()


class Feeder:
    """Hands each camera a JPEG and its answer line every `EVERY_S`, as a camera would; once
    `poison` is set, one of `bad`'s lines has a NaN score, and `bad` has no more until `resume`."""

    def __init__(self, views: View) -> None:
        self.views, self.stop = views, threading.Event()
        self.poison, self.poisoned, self.resume = threading.Event(), threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def _run(self) -> None:
        body = jpeg()
        for seq in range(10**6):
            if self.stop.wait(EVERY_S):
                return
            for name in ("good", "bad"):
                if name == "bad" and self.poisoned.is_set() and not self.resume.is_set():
                    continue
                nan = name == "bad" and self.poison.is_set() and not self.poisoned.is_set()
                score = math.nan if nan else 0.9
                line = {"camera": name, "pts": float(seq), "status": 200, "width": 64, "height": 48,
                        "detections": [{"box": [8, 8, 40, 40], "label": "x", "track_id": 1, "score": score}]}
                self.views.released(name, Unit(seq, body, "image/jpeg", float(seq), float(seq), 1), [line])
                if nan:
                    self.poisoned.set()


def lenient_json(line: dict, separators: tuple[str, str]) -> tuple[str, dict]:
    return json.dumps(line, separators=separators), line  # NaN written as `NaN`: not JSON


@pytest.fixture
def served(tmp_path, monkeypatch):
    monkeypatch.setattr(view_module, "strict_json", lenient_json)
    path = tmp_path / "cameras.yaml"
    path.write_text(CAMERAS)
    views = View()
    views.configure(config.load(path, {}))
    server = web.WebServer(("127.0.0.1", 0), access.Token(TOKEN, made=True), views, Editor(None)).start()
    feeder = Feeder(views).start()
    driver = browser.chrome()
    try:
        yield {"url": f"http://127.0.0.1:{server.port}", "views": views, "feeder": feeder, "driver": driver}
    finally:
        driver.quit()
        feeder.stop.set()
        server.close()


def seq(driver, name: str) -> int:
    return driver.execute_script(f"const t = view.tiles.get({json.dumps(name)}); return t ? t.seq : -1;")


def test_a_header_that_is_not_json_is_skipped_and_every_camera_keeps_updating(served):
    driver, views, feeder = served["driver"], served["views"], served["feeder"]
    driver.get(f"{served['url']}/#token={TOKEN}")
    browser.wait(driver, "both cameras' pictures", lambda: seq(driver, "good") >= 0 and seq(driver, "bad") >= 0)
    feeder.poison.set()
    bad = views.camera("bad")
    assert bad is not None

    def poisoned():  # the fragment with the NaN, the newest until `resume`
        fragment = bad.next(-1, stills=False)
        nan = fragment and math.isnan(fragment.header["frames"][0]["detections"][0]["score"])
        return fragment if nan else None

    fragment = browser.wait(driver, "the bad fragment", poisoned)
    assert b'"score":NaN' in fragment.data  # what the page gets: a header that is not JSON
    good_then = seq(driver, "good")
    feeder.resume.set()
    browser.wait(driver, "both cameras past the bad fragment",
                 lambda: seq(driver, "bad") > fragment.seq and seq(driver, "good") > good_then + 3)
    logged = [e["message"] for e in driver.get_log("browser")]
    assert any("a fragment skipped, its header is not JSON" in m for m in logged), logged
    assert driver.execute_script("return !view.tiles.get('good').picture.hidden && !view.tiles.get('bad').picture.hidden")
