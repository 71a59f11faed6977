"""The live view and the zone editor in a real browser: Debian's Chromium, headless (tests/browser.py),
against the scripted scene (tests/scenes.py) over a real gst-rtsp-server that asks for a password,
the planted detector in a real TorchServe, and the real `video-ingest --web`.

Three cameras: `dock` in segments mode from the camera list (tracked, a zone and a line: the one
the editor edits), `lobby` in frames mode given with `--camera` (read-only), and `hevc`, a file of
the same scene in H.265, which this Chromium cannot play through Media Source Extensions (stills).

`UPDATE_SCREENSHOTS=1` writes the pictures of docs/ingest.md and the README (docs/images/).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import requests
import yaml
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

from tests import browser, scenes
from tests.e2e.ingest_cli import Ingest
from tests.e2e.tracks import MODEL, camera
from tests.rtsp_server import RtspServer, free_port
from tests.support import ROOT
from tests.videos import ffmpeg

PASSWORD = "pw-Zq81x-secret"
CREDENTIALS = ("viewer", PASSWORD)
COMMENT = "# the loading dock: keep this comment (the editor round-trips the file)\n"
SHOTS = ROOT / "docs" / "images"
#: The middle of a box's stroke lies within this many pixels of the video's own (at the scale it
#: is shown: the detector's box and the encoder's blurred edge) of its square's edge.
VIDEO_PX = 2
#: Pauses dock's video from inside a frame callback, on a frame with both boxes drawn, when the
#: video's time is well inside that frame (Chromium calls back with `currentTime` -0.07 to +0.13 s
#: off the frame it presents: paused anywhere else, the picture would be a frame away from its boxes),
#: both boxes of that frame's own answer (motion: a box `held` from an earlier look is where it was then).
PAUSE_INSIDE_A_FRAME = """
const t = view.tiles.get("dock"), video = t.video, frame = arguments[0];
const check = (_, meta) => {
  t.drawAt(meta.mediaTime);
  const into = video.currentTime - meta.mediaTime;
  if (t.drawn.filter((d) => !d.held).length === 2 && into > frame / 4 && into < frame * 3 / 4) {
    t.held = true;
    video.pause();
    t.pausedAt = { mediaTime: meta.mediaTime, currentTime: video.currentTime };
  } else {
    video.requestVideoFrameCallback(check);
  }
};
t.pausedAt = null;
video.requestVideoFrameCallback(check);
"""


@pytest.fixture(scope="module")
def bridge(detector, videos, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("web")
    hevc = tmp / "hevc.ts"
    subprocess.run([ffmpeg(), "-v", "error", "-i", str(videos["steady"]), "-c:v", "libx265", "-preset", "ultrafast",
                    "-x265-params", "log-level=error:keyint=15:bframes=0", "-f", "mpegts", str(hevc)], check=True)
    rtsp = RtspServer({"steady": videos["steady"]}, credentials=CREDENTIALS, log=tmp / "gst.log").start()
    cameras = tmp / "cameras.yaml"
    dock = camera("dock", rtsp.url("steady").replace("rtsp://", "rtsp://viewer:${CAM_PASSWORD}@"))
    hevc_camera = {"name": "hevc", "url": str(hevc), "loop": True, "track": True, "snapshot_seconds": 1}
    cameras.write_text(COMMENT + yaml.safe_dump({"cameras": [dock, hevc_camera]}, sort_keys=False))
    port = free_port()
    token_file = tmp / "web_token.json"
    ingest = Ingest(tmp, detector, ["--config", str(cameras), "--camera", f"lobby={rtsp.url('steady', CREDENTIALS)}", "--motion", "off",
                                    "--mode", "frames", "--track", "--web", f"127.0.0.1:{port}",
                                    "--web-token-file", str(token_file)],
                    env={"CAM_PASSWORD": PASSWORD}, model=MODEL)
    driver = None
    try:
        ingest.wait("the web view", lambda: "the web view is on" in ingest.log())
        token = json.loads(token_file.read_text())["web"]["key"]
        ingest.wait("dock's first answers", lambda: ingest.answers("dock"))
        driver = browser.chrome()
        yield {"ingest": ingest, "url": f"http://127.0.0.1:{port}", "token": token, "cameras": cameras,
               "driver": driver}
    finally:
        if driver is not None:
            driver.quit()
        ingest.kill()
        rtsp.stop()


def get(bridge, path: str, **kwargs) -> requests.Response:
    headers = {"Authorization": f"Bearer {bridge['token']}", **kwargs.pop("headers", {})}
    return requests.get(bridge["url"] + path, headers=headers, timeout=20, **kwargs)


def page(bridge, camera_name: str | None = None):
    """The browser on the view (one camera large with `camera_name`), the token in the address."""
    driver = bridge["driver"]
    query = f"?camera={camera_name}" if camera_name else ""
    driver.get(f"{bridge['url']}/{query}#token={bridge['token']}")
    return driver


def tile(driver, name: str, expression: str):
    return driver.execute_script(f"const t = view.tiles.get({json.dumps(name)}); return t ? {expression} : null;")


def test_every_request_without_the_token_gets_401_and_a_cookie_is_no_token(bridge):
    url = bridge["url"]
    for path in ("/api/cameras", "/api/cameras/dock/state", "/api/live?cameras=dock",
                 "/api/cameras/dock/scene", "/api/cameras/dock/events"):
        response = requests.get(url + path, timeout=20)
        assert response.status_code == 401, path
        assert response.json()["type"] == "Unauthorized"
    assert requests.get(url + "/", timeout=20).status_code == 200  # the page holds no data: it asks for the token
    assert requests.get(url + "/api/cameras", headers={"Authorization": "Bearer wrong-token-0123456789"},
                        timeout=20).status_code == 401
    # A cookie reaches every port of the host: it is no credential, to read or to save.
    cookie = {"Cookie": f"video_ingest_token={bridge['token']}"}
    assert requests.get(url + "/api/cameras", headers=cookie, timeout=20).status_code == 401
    before = bridge["cameras"].read_bytes()
    saved = requests.put(url + "/api/cameras/dock/scene", headers=cookie, json={"zones": [], "lines": []}, timeout=20)
    assert saved.status_code == 401 and bridge["cameras"].read_bytes() == before
    # A page of another site that resolves to this address (DNS rebinding) is refused.
    assert get(bridge, "/api/cameras", headers={"Host": "attacker.example:80"}).status_code == 403


class Recorder:
    """An HTTP server on another port of the bridge's host: each request's headers, kept."""

    def __init__(self) -> None:
        seen: list[dict[str, str]] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(dict(self.headers))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_token_entered_stays_in_the_tab_no_port_gets_a_cookie_and_the_page_works(bridge):
    driver, other = bridge["driver"], Recorder()
    try:
        driver.get(bridge["url"] + "/")
        driver.execute_script("sessionStorage.clear()")
        driver.get(bridge["url"] + "/")
        browser.wait(driver, "the token's form", lambda: driver.find_element(By.ID, "login").is_displayed())
        driver.find_element(By.ID, "token").send_keys(bridge["token"])
        driver.find_element(By.CSS_SELECTOR, "#login button").click()
        browser.wait(driver, "three cameras live: video, JPEGs and stills",
                     lambda: len(driver.find_elements(By.CSS_SELECTOR, "#grid .tile")) == 3
                     and tile(driver, "dock", "t.video.currentTime > 0 && t.drawn.length > 0")
                     and tile(driver, "lobby", "!t.picture.hidden && t.drawn.length > 0")
                     and tile(driver, "hevc", "t.stills && !t.picture.hidden && t.drawn.length > 0"), timeout=60)
        assert driver.execute_script("return sessionStorage.getItem('video_ingest_token')") == bridge["token"]
        assert driver.execute_script("return document.cookie") == ""
        assert driver.execute_cdp_cmd("Network.getAllCookies", {})["cookies"] == []
        driver.get(other.url)  # another port of the same host: a cookie of the bridge's would come along
        browser.wait(driver, "the other port's request", lambda: other.seen)
        assert [h for h in other.seen if "Cookie" in h] == []
    finally:
        other.close()


def test_the_video_plays_and_each_square_is_boxed_where_it_is(bridge):
    driver = page(bridge, "dock")
    browser.wait(driver, "dock's video to play", lambda: (tile(driver, "dock", "t.video.currentTime") or 0) > 0.5)
    first = tile(driver, "dock", "t.video.currentTime")
    time.sleep(2)
    assert tile(driver, "dock", "t.video.currentTime") > first + 1  # the video element's time advances
    # Pause on a frame where both squares are drawn, and look at the picture as shown.
    driver.execute_script(PAUSE_INSIDE_A_FRAME, 1 / scenes.FPS)
    browser.wait(driver, "a pause well inside a frame with both boxes", lambda: tile(driver, "dock", "t.pausedAt"))
    time.sleep(0.5)
    assert tile(driver, "dock", "t.drawn.filter((d) => !d.held).length") == 2
    frame = driver.find_element(By.CSS_SELECTOR, "#stage .frame")
    picture = browser.screenshot(frame)
    scale, stroke = tile(driver, "dock", "[t.at.scale, t.overlay.getContext('2d').lineWidth]")
    tolerance = VIDEO_PX * scale
    r, g, b = (picture[..., i].astype(int) for i in range(3))
    box = (g > 200) & (r < 130) & (b < 130)
    for name, mask in (("red", (r > 130) & (g < 90) & (b < 90)), ("blue", (b > 130) & (r < 90) & (g < 90))):
        ys, xs = np.nonzero(mask)
        assert len(xs) > 100, f"no {name} square in the picture"
        square = np.array([xs.min(), ys.min(), xs.max(), ys.max()])
        near = np.zeros_like(box)
        x1, y1, x2, y2 = square
        near[max(0, y1 - 20):y2 + 21, max(0, x1 - 20):x2 + 21] = True
        bys, bxs = np.nonzero(box & near)
        assert len(bxs) > 50, f"no box drawn around the {name} square {square.tolist()}"
        drawn = np.array([bxs.min(), bys.min(), bxs.max(), bys.max()]) + np.array([1, 1, -1, -1]) * stroke / 2
        assert np.abs(drawn - square).max() <= tolerance, (name, square.tolist(), drawn.tolist(), tolerance)
    tile(driver, "dock", "(t.held = false, t.pausedAt = null, t.video.play(), true)")


def page_counts(driver) -> dict[tuple[str, ...], int]:
    """The zone and line cells of the large camera's tables (read in one go: they are redrawn each second)."""
    cells = driver.execute_script("return [...document.querySelectorAll('#zones td[data-zone], #lines td[data-line]')]"
                                  ".map((c) => [{...c.dataset}, c.textContent])")
    return {("zone", d["zone"], d["label"]) if "zone" in d else ("line", d["line"], d["direction"], d["label"]): int(text)
            for d, text in cells}


def metric_counts(ingest: Ingest, name: str) -> dict[tuple[str, ...], int]:
    from tsutil import prom

    counts = {}
    for sample in prom.samples(ingest.metrics()):
        x = sample.labels
        if x.get("camera") != name:
            continue
        if sample.name == "video_ingest_zone_objects":
            counts[("zone", x["zone"], x["label"])] = int(sample.value)
        elif sample.name == "video_ingest_line_crossings_total":
            counts[("line", x["line"], x["direction"], x["label"])] = int(sample.value)
    return counts


def test_the_counts_on_the_page_equal_the_metrics_and_events_have_thumbnails(bridge):
    driver = page(bridge, "dock")
    ingest = bridge["ingest"]
    # Both directions of the red crossing counted: the table then has every cell the metrics have.
    browser.wait(driver, "the gate's in and out", lambda: {k[2] for k in metric_counts(ingest, "dock") if k[0] == "line"}
                 >= {"in", "out"}, timeout=60)
    browser.wait(driver, "the page's counts to equal the metrics",
                 lambda: (seen := page_counts(driver)) and seen == {**seen, **metric_counts(ingest, "dock")}
                 and set(seen) == set(metric_counts(ingest, "dock")), timeout=20)
    kinds = driver.execute_script("return [...document.querySelectorAll('#events li')].map((e) => e.dataset.event)")
    assert set(kinds) >= {"entered", "crossed"}
    browser.wait(driver, "an event's thumbnail", lambda: driver.execute_script(
        "return [...document.querySelectorAll('#events img')].some((i) => i.complete && i.naturalWidth > 0)"))
    state = dict(driver.execute_script("return [...document.querySelectorAll('#state dd')].map((e) => [e.dataset.key, e.textContent])"))
    assert state["up"] == "yes" and float(state["answered fps"]) > 0


def draw(driver, name: str, points: list[tuple[float, float]], drag: bool) -> None:
    """Draws on the large camera's picture with the mouse, at fractions of its frame."""
    canvas = driver.find_element(By.CSS_SELECTOR, "#stage .overlay")
    at = tile(driver, name, "t.at")
    width, height = canvas.size["width"], canvas.size["height"]

    def offset(point):  # from the canvas's centre, in CSS pixels (one device pixel each here)
        x = at["x"] + point[0] * at["width"] * at["scale"]
        y = at["y"] + point[1] * at["height"] * at["scale"]
        return round(x - width / 2), round(y - height / 2)

    actions = ActionChains(driver)
    if drag:
        actions.move_to_element_with_offset(canvas, *offset(points[0])).click_and_hold()
        actions.move_to_element_with_offset(canvas, *offset(points[1])).release()
    else:
        for point in points:
            actions.move_to_element_with_offset(canvas, *offset(point)).click()
    actions.perform()


def test_a_line_drawn_with_the_mouse_is_saved_applied_without_reconnecting_and_counts(bridge):
    driver = page(bridge, "dock")
    ingest = bridge["ingest"]
    browser.wait(driver, "the editor", lambda: driver.find_element(By.ID, "draw-line").is_enabled()
                 and tile(driver, "dock", "t.at"))
    driver.find_element(By.ID, "draw-line").click()
    draw(driver, "dock", [(0.7, 0.05), (0.7, 0.95)], drag=True)
    driver.find_element(By.ID, "shape-name").send_keys("gate2")
    driver.find_element(By.ID, "shape-classes").send_keys("red")
    driver.find_element(By.ID, "add").click()
    lines_before = len(ingest.lines())
    driver.find_element(By.ID, "save").click()
    browser.wait(driver, "the save", lambda: "saved" in driver.find_element(By.ID, "editor-saved").text
                 or driver.find_element(By.ID, "editor-error").text)
    assert not driver.find_element(By.ID, "editor-error").text
    text = bridge["cameras"].read_text()
    assert text.startswith(COMMENT) and "${CAM_PASSWORD}" in text  # comments and the variable kept
    saved = yaml.safe_load(text)["cameras"]
    assert [c["name"] for c in saved] == ["dock", "hevc"]
    gates = {line["name"]: line for line in saved[0]["lines"]}
    assert set(gates) == {"gate", "gate2"} and gates["gate2"]["classes"] == ["red"]
    assert np.allclose([*gates["gate2"]["from"], *gates["gate2"]["to"]], [0.7, 0.05, 0.7, 0.95], atol=0.01)
    # Applied by the hot reload, without a reconnect: then the next red crossing of x = 0.7 counts.
    ingest.wait("the reload", lambda: ingest.events(None, "reloaded", since=lines_before))
    ingest.wait("a crossing of gate2", lambda: [e for e in ingest.events("dock", "crossed", since=lines_before)
                                                if e["line"] == "gate2"], timeout=40)
    after = ingest.lines()[lines_before:]
    crossing = next(i for i, e in enumerate(after) if e.get("line") == "gate2")
    reasons = [e.get("reason") for e in after[:crossing] if e["camera"] == "dock" and e.get("event") == "disconnected"]
    assert set(reasons) <= {"end of stream"}, reasons  # only the scene's own end, never the save
    browser.wait(driver, "gate2 counted on the page",
                 lambda: ("line", "gate2", after[crossing]["direction"], "red") in page_counts(driver), timeout=20)
    browser.wait(driver, "gate2 drawn", lambda: tile(driver, "dock", "t.scene.lines.some((l) => l.name === 'gate2')"))
    if os.environ.get("UPDATE_SCREENSHOTS"):
        driver.set_window_size(browser.WIDTH, 1500)  # the whole large view, its editor included
        time.sleep(1)
        driver.execute_script("window.scrollTo(0, 0)")
        driver.find_element(By.ID, "focus").screenshot(str(SHOTS / "web-editor.png"))
        driver.set_window_size(browser.WIDTH, browser.HEIGHT)


def test_an_invalid_polygon_shows_the_bridges_message_and_changes_nothing(bridge):
    driver = page(bridge, "dock")
    browser.wait(driver, "the editor", lambda: driver.find_element(By.ID, "draw-zone").is_enabled()
                 and tile(driver, "dock", "t.at"))
    before = bridge["cameras"].read_bytes()
    driver.find_element(By.ID, "draw-zone").click()
    draw(driver, "dock", [(0.2, 0.2), (0.6, 0.6)], drag=False)  # two corners only
    driver.find_element(By.ID, "shape-name").send_keys("flat")
    driver.find_element(By.ID, "add").click()
    driver.find_element(By.ID, "save").click()
    error = browser.wait(driver, "the error", lambda: driver.find_element(By.ID, "editor-error").text)
    assert "camera 'dock': zone 'flat': polygon: give at least 3 points [x, y]" in error
    assert bridge["cameras"].read_bytes() == before


def test_a_camera_given_on_the_command_line_is_read_only_and_shows_its_jpegs(bridge):
    driver = page(bridge, "lobby")
    note = browser.wait(driver, "the read-only note", lambda: driver.find_element(By.ID, "editor-note").text)
    assert "given with --camera" in note and not driver.find_element(By.ID, "save").is_enabled()
    browser.wait(driver, "lobby's boxes on its JPEG", lambda: tile(driver, "lobby", "!t.picture.hidden && t.drawn.length"))
    assert requests.put(bridge["url"] + "/api/cameras/lobby/scene", json={"zones": [], "lines": []}, timeout=20,
                        headers={"Authorization": f"Bearer {bridge['token']}"}).status_code == 409


def test_a_codec_the_browser_cannot_play_falls_back_to_stills_and_says_so(bridge):
    driver = page(bridge, "hevc")
    notice = browser.wait(driver, "the notice", lambda: tile(driver, "hevc", "t.notice.hidden ? '' : t.notice.textContent"))
    assert "cannot play" in notice and "stills" in notice
    browser.wait(driver, "a still with its boxes", lambda: tile(driver, "hevc", "!t.picture.hidden && t.drawn.length"),
                 timeout=40)


def test_the_grid_shows_every_camera_and_no_response_holds_the_password(bridge):
    driver = page(bridge)
    browser.wait(driver, "three tiles", lambda: len(driver.find_elements(By.CSS_SELECTOR, "#grid .tile")) == 3)
    browser.wait(driver, "pictures in the tiles", lambda: all(tile(driver, n, "t.drawn.length > 0 || t.seq >= 0")
                                                             for n in ("dock", "lobby", "hevc")))
    if os.environ.get("UPDATE_SCREENSHOTS"):
        time.sleep(2)
        driver.find_element(By.ID, "grid").screenshot(str(SHOTS / "web-grid.png"))
    bodies = [get(bridge, path).content for path in
              ("/", "/static/view.js", "/static/editor.js", "/static/style.css", "/api/cameras")]
    for name in ("dock", "lobby", "hevc"):
        bodies += [get(bridge, f"/api/cameras/{name}/{what}").content for what in ("state", "counts", "events", "scene")]
    bodies.append(get(bridge, "/api/live?cameras=dock,lobby,hevc").content)
    for body in bodies:
        assert PASSWORD.encode() not in body
        assert b"rtsp://" not in body and b"hevc.ts" not in body  # no camera URL either
    assert PASSWORD not in bridge["ingest"].log()
