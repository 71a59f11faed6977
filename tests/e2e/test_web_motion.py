"""Motion first (issue 48) on the web page, in Debian's Chromium (tests/browser.py).

The live view: the real web server and view of the bridge, in process, serve a frames-mode camera's
JPEGs made from answer lines as the camera hands them over, lines that carry `looked`, `regions`,
`motion` and `lighting` as the results do (docs/ingest.md). With the page's "motion" box ticked, the
overlay shows the frame's motion boxes and regions where the line put them, the camera's motion
mask, "not looked at" on a frame the model skipped (the boxes of its last look kept), and nothing
of it once the box is cleared.

The editor: the real `video-ingest --web` (tests/editor_bridge.py, cameras at a dead port): a
motion mask drawn with the mouse is written into the camera's `motion:` (its threshold kept), the
bridge's own check accepts it and the bridge serves it back; a camera with `motion: off` says masks
apply when motion is on, and offers no mask tool.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from PIL import Image
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

from ingest import config
from ingest.cameras.units import Unit
from ingest.web import access
from ingest.web import server as web
from ingest.web.editor import Editor
from ingest.web.view import View
from tests import browser
from tests.editor_bridge import TOKEN, Bridge
from tests.rtsp_server import free_port

WIDTH, HEIGHT = 320, 180
MASK = [[0.0, 0.0], [0.25, 0.0], [0.25, 0.2], [0.0, 0.2]]
CAMERAS = f"""\
cameras:
  - name: dock
    url: rtsp://dock.example/s
    mode: frames
    motion: {{threshold: 25, mask: [{MASK}]}}
"""
SCREENSHOTS = Path("/tmp")
EVERY_S = 0.15
GREY = (40, 40, 40)
PERSON = {"box": [20, 110, 60, 170], "label": "person", "track_id": 3, "score": 0.9}
CAR = {"box": [230, 60, 300, 120], "label": "car", "track_id": 4, "score": 0.8}
#: Looked at in two regions: the car moved (inside the right region), the person did not.
LOOKED = {"looked": True, "regions": [[200, 40, 310, 130], [90, 20, 170, 90]],
          "motion": [[235, 65, 295, 115], [100, 30, 160, 80]], "detections": [CAR]}
SKIPPED = {"looked": False, "regions": [], "motion": []}
WHOLE = {"looked": True, "regions": [[0, 0, WIDTH, HEIGHT]], "motion": [], "lighting": True, "detections": []}


def jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (WIDTH, HEIGHT), GREY).save(out, "JPEG", quality=95)
    return out.getvalue()


class Feeder:
    """Hands the camera a JPEG with the answer line `line` every `EVERY_S`, as a camera would."""

    def __init__(self, views: View) -> None:
        self.views, self.stop = views, threading.Event()
        self.line: dict[str, Any] = {"looked": True, "regions": [[0, 0, WIDTH, HEIGHT]], "motion": [],
                                     "detections": [PERSON]}
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def _run(self) -> None:
        body = jpeg()
        for seq in range(10**6):
            if self.stop.wait(EVERY_S):
                return
            line = {"camera": "dock", "segment": seq, "pts": float(seq), "capture_time": float(seq), "status": 200,
                    "width": WIDTH, "height": HEIGHT, **self.line}
            self.views.released("dock", Unit(seq, body, "image/jpeg", float(seq), float(seq), 1), [line])


@pytest.fixture
def served(tmp_path):
    path = tmp_path / "cameras.yaml"
    path.write_text(CAMERAS)
    views = View()
    views.configure(config.load(path, {}))
    server = web.WebServer(("127.0.0.1", 0), access.Token(TOKEN, made=True), views, Editor(path, {})).start()
    feeder = Feeder(views).start()
    driver = browser.chrome()
    try:
        yield {"url": f"http://127.0.0.1:{server.port}", "feeder": feeder, "driver": driver}
    finally:
        driver.quit()
        feeder.stop.set()
        server.close()


def dock(driver, expression: str) -> Any:
    return driver.execute_script(f"const t = view.tiles.get('dock'); return t ? {expression} : null;")


def placed(at: dict[str, float], box: list[float]) -> list[float]:
    """A box of frame pixels in the overlay's pixels, as the page places the picture."""
    return [at["x"] + box[0] * at["scale"], at["y"] + box[1] * at["scale"],
            at["x"] + box[2] * at["scale"], at["y"] + box[3] * at["scale"]]


def near(picture: np.ndarray, x: float, y: float, colour: Any, reach: int = 2) -> bool:
    """Whether a pixel within `reach` of (x, y) has the `colour` (a predicate of r, g, b)."""
    patch = picture[max(0, round(y) - reach):round(y) + reach + 1, max(0, round(x) - reach):round(x) + reach + 1]
    return any(colour(*map(int, rgb)) for row in patch for rgb in row)


def red(r: int, g: int, b: int) -> bool:
    return r > g + 60 and r > b + 60 and g < 120


def orange(r: int, g: int, b: int) -> bool:
    return r > 180 and 90 < g < 200 and b < 90


def test_the_motion_box_shows_each_frames_motion_regions_and_mask_and_what_was_not_looked_at(served):
    driver, feeder = served["driver"], served["feeder"]
    driver.get(f"{served['url']}/?camera=dock#token={TOKEN}")
    browser.wait(driver, "dock's pictures with its box", lambda: dock(driver, "t.drawn.length === 1 && t.at"))
    assert dock(driver, "t.motionDrawn") is None  # the box is not ticked: no motion drawn
    driver.find_element(By.ID, "motion").click()
    feeder.line = LOOKED
    drawn = browser.wait(driver, "the motion of a frame looked at in two regions", lambda: dock(
        driver, "t.motionDrawn && t.motionDrawn.motion.length === 2 && t.motionDrawn"))
    at = dock(driver, "t.at")
    assert drawn["looked"] is True and drawn["lighting"] is False
    assert np.allclose(drawn["regions"], [placed(at, b) for b in LOOKED["regions"]], atol=0.01)
    assert np.allclose(drawn["motion"], [placed(at, b) for b in LOOKED["motion"]], atol=0.01)
    boxes = dock(driver, "t.drawn")  # the car, looked at; the person, not in a region: kept from its last look
    assert sorted((b["label"], b.get("held", False)) for b in boxes) == [("car", False), ("person", True)]

    frame = driver.find_element(By.CSS_SELECTOR, "#stage .frame")
    png = frame.screenshot_as_png
    (SCREENSHOTS / "web_motion.png").write_bytes(png)
    driver.save_screenshot(str(SCREENSHOTS / "web_motion_page.png"))  # the page, its "motion" box ticked
    picture = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    for x1, y1, x2, y2 in drawn["motion"]:  # each edge of each motion box, in red
        for x, y in (((x1 + x2) / 2, y1), ((x1 + x2) / 2, y2), (x1, (y1 + y2) / 2), (x2, (y1 + y2) / 2)):
            assert near(picture, x, y, red), (x, y)
    for x1, y1, x2, _ in drawn["regions"]:  # dashed: somewhere along its top edge, in orange
        assert any(near(picture, x, y1, orange, 1) for x in np.linspace(x1, x2, 12))
    mask = placed(at, [MASK[2][0] * WIDTH / 2, MASK[2][1] * HEIGHT / 2, 0, 0])[:2]  # inside the mask: lighter
    assert picture[round(mask[1]), round(mask[0])].mean() > sum(GREY) / 3 + 30

    feeder.line = SKIPPED
    skipped = browser.wait(driver, "a frame not looked at", lambda: dock(
        driver, "t.motionDrawn && t.motionDrawn.looked === false && t.motionDrawn"))
    assert skipped["regions"] == [] and skipped["motion"] == []
    assert sorted(b["label"] for b in dock(driver, "t.drawn")) == ["car", "person"]  # both kept from the last look
    (SCREENSHOTS / "web_motion_not_looked.png").write_bytes(frame.screenshot_as_png)

    feeder.line = WHOLE
    browser.wait(driver, "a whole look after a change of light",
                 lambda: dock(driver, "t.motionDrawn && t.motionDrawn.lighting"))
    assert dock(driver, "t.drawn") == []  # looked at whole and nothing there: none kept

    driver.find_element(By.ID, "motion").click()
    browser.wait(driver, "the motion overlay gone", lambda: dock(driver, "t.motionDrawn === null"))
    assert driver.execute_script("return sessionStorage.getItem('video_ingest_motion')") == "0"


def dead_camera_list(port: int) -> str:
    return ("# cameras of the test: keep this comment\ndefaults:\n  track: true\ncameras:\n"
            f"  - name: dock\n    url: rtsp://127.0.0.1:{port}/dock\n"
            "    motion:\n      threshold: 25   # the dock's light flickers\n"
            f"  - name: lobby\n    url: rtsp://127.0.0.1:{port}/lobby\n    motion: off\n")


def draw(driver, points: list[tuple[float, float]]) -> None:
    """Clicks each point on the large camera's picture, at fractions of its frame."""
    canvas = driver.find_element(By.CSS_SELECTOR, "#stage .overlay")
    at = driver.execute_script("return view.focused.at")
    width, height = canvas.size["width"], canvas.size["height"]
    actions = ActionChains(driver)
    for x, y in points:
        offset = (round(at["x"] + x * at["width"] * at["scale"] - width / 2),
                  round(at["y"] + y * at["height"] * at["scale"] - height / 2))
        actions.move_to_element_with_offset(canvas, *offset).click()
    actions.perform()


def test_a_motion_mask_drawn_in_the_editor_is_saved_into_the_cameras_motion_and_accepted(tmp_path):
    path = tmp_path / "cameras.yaml"
    path.write_text(dead_camera_list(free_port()))
    bridge = Bridge(tmp_path, path)
    driver = browser.chrome()
    try:
        driver.get(f"http://127.0.0.1:{bridge.port}/?camera=dock#token={TOKEN}")
        # Nothing answered at a dead port: the page places a picture of the camera's size only
        # once it has one, so the test gives the tile a frame size to draw on.
        browser.wait(driver, "the editor", lambda: driver.find_element(By.ID, "draw-mask").is_enabled()
                     and driver.execute_script("return view.focused && view.focused.scene.motion"))
        driver.execute_script("const t = view.focused; t.frames = {frames: [], width: 640, height: 360}; "
                              "t.video.hidden = true; t.redraw();")
        driver.find_element(By.ID, "draw-mask").click()
        assert driver.find_element(By.ID, "motion").is_selected()  # drawing a mask shows the motion overlay
        corners = [(0.6, 0.05), (0.95, 0.05), (0.95, 0.2), (0.6, 0.2)]
        draw(driver, corners)
        driver.find_element(By.ID, "add").click()
        listed = driver.execute_script("return [...document.querySelectorAll('#shapes li[data-kind=mask]')]"
                                       ".map((li) => [li.dataset.name, li.firstChild.textContent])")
        assert listed == [["mask-1", "motion mask 1 (4 corners)"]]
        driver.find_element(By.ID, "save").click()
        saved = browser.wait(driver, "the save", lambda: driver.find_element(By.ID, "editor-saved").text
                             if "saved" in driver.find_element(By.ID, "editor-saved").text
                             else driver.find_element(By.ID, "editor-error").text)
        assert saved.startswith("saved;"), saved
        text = path.read_text()
        assert "# the dock's light flickers" in text and text.startswith("# cameras of the test")
        entry = yaml.safe_load(text)["cameras"][0]
        assert entry["motion"]["threshold"] == 25
        assert np.allclose(entry["motion"]["mask"], [corners], atol=0.01)
        bridge.wait("the bridge running the mask", lambda: bridge.scene("dock")["motion"]["mask"]
                    and np.allclose(bridge.scene("dock")["motion"]["mask"], [corners], atol=0.01))

        driver.get(f"http://127.0.0.1:{bridge.port}/?camera=lobby#token={TOKEN}")
        note = browser.wait(driver, "lobby's editor", lambda: driver.find_element(By.ID, "save").is_enabled()
                            and driver.find_element(By.ID, "mask-note").text)
        assert note == "Motion is off for this camera: motion masks apply when it is on (motion: on in the camera list)."
        assert not driver.find_element(By.ID, "draw-mask").is_enabled()
    finally:
        driver.quit()
        bridge.close()
