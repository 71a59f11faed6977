"""The README's quick start as written: `./serve.sh`, the curl it prints answers 200, the camera
demo it prints shows the tracked face in a real browser (Debian's Chromium) and records a clip of
it that plays in the page, `./serve.sh stop`.

It runs in a copy of the checkout (sharing this run's .venv), so its model_store/, logs/ and
key_file.json do not touch the working tree; `VIDEO_TS_PORT_OFFSET` and its own TMPDIR keep it
apart from any other TorchServe.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests import support
from tsutil import properties
from tsutil.server import env_port_offset, wait_until

README = (support.ROOT / "README.md").read_text()
SHOWN = "http://127.0.0.1:8080"  # the address the README shows (offset 0)


def _readme_block(after: str, language: str) -> str:
    return support.fenced_block(support.ROOT / "README.md", after, language)


def _command(text: str) -> list[str]:
    """A shell command with its line continuations joined, as words."""
    return shlex.split(text.replace("\\\n", " "))


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    copy = support.copy_checkout(tmp_path_factory.mktemp("quickstart") / "repo")
    # copytree keeps mtimes, so setup.sh finds this venv up to date with pyproject.toml (and with
    # the ingest extra serve.sh asks for: the test extra includes it).
    (copy / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return copy


def test_serve_sh_prints_a_curl_that_answers_200_and_stop_stops_it(checkout, tmp_path):
    offset = env_port_offset()
    inference = properties.parse(properties.overlay(properties.SHIPPED.read_text(),
                                                    properties.port_overrides(offset)))["inference_address"]
    env = {**os.environ, "VIDEO_TS_PORT_OFFSET": str(offset), "TMPDIR": str(tmp_path)}
    try:
        started = subprocess.run(["./serve.sh"], cwd=checkout, env=env, capture_output=True, text=True,
                                 timeout=900)
        assert started.returncode == 0, started.stderr[-3000:]
        printed = started.stdout[started.stdout.index("Try:\n") + 5:started.stdout.index("Watch face_detector")]
        curl = _command(printed.replace(inference, SHOWN))
        assert curl == _command(_readme_block("it is this one", "bash")), printed
        assert "./serve.sh stop" in started.stdout

        answer = subprocess.run(["bash", "-c", printed.strip() + " -sS -w '\\n%{http_code}'"], cwd=checkout,
                                capture_output=True, text=True, timeout=120)
        body, status = answer.stdout.rsplit("\n", 1)
        assert status == "200", answer.stdout + answer.stderr
        got = json.loads(body)
        shown = json.loads(_readme_block("it is this one", "json"))
        assert got["frames"][0].keys() == shown["frames"][0].keys()
        assert (got["stream_id"], got["frame_id"]) == (shown["stream_id"], shown["frame_id"]) == (None, None)
        assert (got["frames"][0]["width"], got["frames"][0]["height"]) == (451, 300)
        pixels = support.decoded((checkout / "data" / "images" / "chelsea.png").read_bytes())
        support.assert_quality(got["frames"][0]["outputs"], pixels)
        support.assert_quality(shown["frames"][0]["outputs"], pixels)  # the README shows real values

        faces = subprocess.run(["bash", "-c", _readme_block("the faces it answers", "bash").strip().replace(SHOWN, inference)
                                + " -sS -w '\\n%{http_code}'"], cwd=checkout, capture_output=True, text=True, timeout=120)
        body, status = faces.stdout.rsplit("\n", 1)
        assert status == "200", faces.stdout + faces.stderr
        assert json.loads(body) == json.loads(_readme_block("the faces it answers", "json"))

        _demo_shows_the_tracked_face(checkout, started.stdout, inference, tmp_path)

        stopped = subprocess.run(["./serve.sh", "stop"], cwd=checkout, env=env, capture_output=True, text=True,
                                 timeout=120)
        assert stopped.returncode == 0, stopped.stderr
        assert wait_until(lambda: _refused(inference), 60), f"{inference} still answers after serve.sh stop"
    finally:  # a failed assertion above still stops both (serve.sh stop ends video-keys too)
        subprocess.run(["./serve.sh", "stop"], cwd=checkout, env=env, capture_output=True, timeout=120)


def _demo_shows_the_tracked_face(checkout: Path, printed: str, inference: str, tmp_path: Path) -> None:
    """The live view's demo command, as serve.sh prints it and docs/ingest.md shows it, in a browser."""
    from tests import browser
    from tests.rtsp_server import free_port

    line = next(x.strip() for x in printed[printed.index("Watch face_detector"):].splitlines()
                if x.strip().startswith(".venv/bin/video-ingest"))
    shown = support.fenced_block(support.ROOT / "docs" / "ingest.md", "A demo on a fresh clone", "bash").strip()
    assert line == shown
    assert f"`{line}`" in " ".join(README.split())  # the quick start's words, its line breaks aside
    assert (checkout / "data" / "demo.ts").is_file()  # made by serve.sh
    port = free_port()
    command = _command(line.replace("127.0.0.1:8095", f"127.0.0.1:{port}"))
    log = tmp_path / "demo.log"
    with log.open("w") as err:
        demo = subprocess.Popen([*command, "--url", inference, "--results", str(tmp_path / "demo.jsonl")],
                                cwd=checkout, stdout=subprocess.DEVNULL, stderr=err)
    driver = None
    try:
        assert wait_until(lambda: "#token=" in log.read_text(), 60), log.read_text()
        address = re.search(r"(http://\S+#token=\S+)", log.read_text())[1]
        driver = browser.chrome()
        driver.get(address)
        faces = browser.wait(driver, "the face drawn with its track id", lambda: driver.execute_script(
            "const t = view.tiles.get('demo'); return t && t.drawn.filter((d) => d.label === 'face' && "
            "Number.isInteger(d.track_id))"), timeout=60)
        assert len(faces) == 1
        _a_clip_plays(driver, tmp_path / "demo.jsonl")
    finally:
        if driver is not None:
            driver.quit()
        demo.terminate()
        demo.wait(timeout=30)


def _a_clip_plays(driver, results: Path) -> None:
    """The quick start's last words: once a clip of the face is made, Recordings, then its Play
    plays it in the page."""
    from selenium.webdriver.common.by import By

    from tests import browser

    def clipped() -> str | None:
        text = results.read_text() if results.exists() else ""
        made = [json.loads(line) for line in text.splitlines() if '"event": "clip"' in line]
        return made[0]["of"] if made else None

    assert wait_until(clipped, 60), "no clip made: " + results.read_text()[-2000:]
    event = clipped()
    browser.wait(driver, "the Recordings button", lambda: next(
        (b for b in driver.find_elements(By.ID, "show-recordings") if b.is_displayed()), None)).click()
    card = f"#recorded-events li[data-id='{event}']"
    browser.wait(driver, "the event's card with its snapshot", lambda: driver.execute_script(
        "const c = document.querySelector(arguments[0]); const i = c && c.querySelector('img');"
        "return i && i.naturalWidth === 640;", card))
    driver.find_element(By.CSS_SELECTOR, f"{card} button").click()
    browser.wait(driver, "its clip playing in the card", lambda: driver.execute_script(
        "const v = document.getElementById('player');"
        "return v.parentElement.dataset.id === arguments[0] && !v.paused && v.currentTime > 1.0;", event))


def _refused(url: str) -> bool:
    try:
        requests.get(url + "/ping", timeout=5)
    except requests.ConnectionError:
        return True
    return False
