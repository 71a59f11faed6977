"""Recordings on the page, in Debian's Chromium (tests/browser.py): the real web server, in process,
in front of a real recorder (tests/recordings.py) holding the scripted scene with a noisy square
(about 6.4 Mbit/s: a clip of 20 s, 16 MB, is far larger than what Chromium reads ahead, and a seek
near its end lies beyond the 5 MB Chromium waits for its first request to reach rather than asking
anew). The events panel shows
each event's snapshot; a clip plays in place (its `currentTime` advances), and a seek far into it is
fetched by a byte range that the server answers 206 (read from the server's DEBUG log); a mark on
the camera's timeline plays its event.

In process (no camera, no TorchServe): the events are the test's, so the clip is what it asks.
`RECORDINGS_SCREENSHOT=FILE` keeps the page's picture.
"""

from __future__ import annotations

import logging
import os
import re
import time

import numpy as np
import pytest
from selenium.webdriver.common.by import By

from ingest import config
from ingest.record.settings import RecordMode, RecordSettings
from ingest.web import access
from ingest.web import server as web
from ingest.web.editor import Editor
from ingest.web.view import View
from tests import browser, recordings, scenes

TOKEN = "t" * 24
SECONDS, PRE_S, POST_S = 24, 10.0, 10.0
NOISE = 320  # pixels of the noisy square, bottom right
RANGE = re.compile(r"web: /api/events/[^/]+/clip: 206, bytes (\d+)-(\d+) of (\d+)")


def noisy(width: int, height: int, n: int) -> np.ndarray:
    out = scenes.frame(width, height, n)
    out[-NOISE:, -NOISE:] = np.random.default_rng(n).integers(0, 256, (NOISE, NOISE, 3), dtype=np.uint8)
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("web_recordings")
    video = scenes.make(tmp / "scene.ts", [(640, 360, scenes.FPS * SECONDS)], noisy)
    start = round(time.time()) - 2 * 3600.0
    feed = recordings.record(tmp, {"gate-1": video}, start, RecordSettings(
        mode=RecordMode.CONTINUOUS, pre_seconds=PRE_S, post_seconds=POST_S))
    ids = [feed.event("gate-1", 12.0, "crossed", "gate", "person", 1, box=(300, 60, 380, 140), size=(640, 360),
                      direction="in"),
           feed.event("gate-1", 13.0, "entered", "door", "car", 2, box=(40, 230, 110, 290), size=(640, 360))]
    feed.made(*ids)
    (tmp / "cameras.yaml").write_text("cameras:\n  - {name: gate-1, url: 'rtsp://gate.example/s'}\n")
    views = View()
    views.configure(config.load(tmp / "cameras.yaml", {}))
    server = web.WebServer(("127.0.0.1", 0), access.Token(TOKEN, made=True), views, Editor(None),
                           feed.recorder).start()
    driver = browser.chrome()
    try:
        yield {"url": f"http://127.0.0.1:{server.port}", "driver": driver, "ids": ids, "feed": feed}
    finally:
        driver.quit()
        server.close()
        feed.recorder.close()
        feed.lines.close()


def video(driver, expression: str):
    return driver.execute_script(f"const v = document.getElementById('player'); return {expression};")


def ranges(caplog) -> list[tuple[int, int, int]]:
    return [tuple(map(int, found.groups())) for r in caplog.records if (found := RANGE.search(r.getMessage()))]


def test_a_clip_plays_in_place_and_a_seek_is_a_range_request(served, caplog, tmp_path):
    caplog.set_level(logging.DEBUG, logger="ingest.web.server")
    driver, first = served["driver"], served["ids"][0]
    driver.get(f"{served['url']}/#token={TOKEN}")
    button = browser.wait(driver, "the Recordings button", lambda: next(
        (b for b in driver.find_elements(By.ID, "show-recordings") if b.is_displayed()), None))
    button.click()
    cards = browser.wait(driver, "both events' cards with their snapshots", lambda: driver.execute_script(
        "const cards = [...document.querySelectorAll('#recorded-events li[data-id]')];"
        "return cards.length === 2 && cards.every((c) => c.querySelector('img').naturalWidth === 640)"
        " ? cards.map((c) => [c.dataset.id, c.querySelector('strong').textContent]) : null;"))
    assert cards == [[served["ids"][1], "car #2 entered door"], [first, "person #1 crossed gate in"]]
    marks = driver.execute_script("return [...document.querySelectorAll('.timeline .marker')].map((m) => m.dataset.id)")
    assert sorted(marks) == sorted(served["ids"])
    assert driver.execute_script("return document.querySelectorAll('.timeline .span').length") == 1
    driver.find_element(By.CSS_SELECTOR, f"#recorded-events li[data-id='{first}'] button").click()
    browser.wait(driver, "the clip playing in its card", lambda: driver.execute_script(
        "const v = document.getElementById('player');"
        "return v.parentElement.dataset.id === arguments[0] && !v.paused && v.currentTime > 1.0;", first))
    duration = video(driver, "v.duration")
    assert abs(duration - (PRE_S + POST_S)) < 1.1, duration
    size = ranges(caplog)[0][2]
    assert ranges(caplog)[0][0] == 0 and size > 12_000_000  # the first request is a range too: bytes=0-
    before = len(ranges(caplog))
    video(driver, f"(v.currentTime = {duration - 3}, true)")
    browser.wait(driver, "the clip playing on from the seek", lambda: video(
        driver, f"!v.seeking && v.currentTime > {duration - 2.7}"))
    later = ranges(caplog)[before:]
    assert any(0 < first_byte < size for first_byte, _, _ in later), ranges(caplog)
    shot = os.environ.get("RECORDINGS_SCREENSHOT") or str(tmp_path / "recordings.png")
    video(driver, "(v.scrollIntoView({block: 'end'}), true)")  # the playing card, its controls shown
    driver.save_screenshot(shot)


def test_a_timeline_mark_plays_its_event(served):
    driver, second = served["driver"], served["ids"][1]
    driver.find_element(By.CSS_SELECTOR, f".timeline .marker[data-id='{second}']").click()
    browser.wait(driver, "the mark's clip playing under the timelines", lambda: video(
        driver, "v.parentElement.id === 'player-slot' && !v.paused && v.currentTime > 0.5"))
    assert "car #2 entered door" in driver.find_element(By.ID, "player-note").text
