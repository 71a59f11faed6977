"""The zone editor's page (ingest/web/static/editor.js) in a real browser (Debian's Chromium,
headless) against the real `video-ingest --web`: a save made from an older version of the camera
list (here a hand edit while the page was open) is refused, the page says so and reloads the
camera's zones and lines, and the next save, made from what it reloaded, is written. Cameras point
at a port where nothing listens: no camera server or TorchServe is needed."""

from __future__ import annotations

from selenium.webdriver.common.by import By

from tests import browser
from tests.editor_bridge import TOKEN, Bridge, camera_list
from tests.rtsp_server import free_port


def test_a_save_from_a_page_older_than_the_file_is_refused_and_the_page_reloads(tmp_path):
    config = tmp_path / "cameras.yaml"
    config.write_text(camera_list(["dock", "lobby"], free_port()))
    bridge = Bridge(tmp_path, config)
    driver = browser.chrome()
    try:
        driver.get(f"http://127.0.0.1:{bridge.port}/?camera=dock#token={TOKEN}")
        shapes = "#shapes li"

        def listed() -> list[str]:
            return [li.get_attribute("data-name") for li in driver.find_elements(By.CSS_SELECTOR, shapes)]

        browser.wait(driver, "the editor", lambda: driver.find_element(By.ID, "save").is_enabled()
                     and listed() == ["door", "yard", "gate"])
        edited = config.read_text().replace("# cameras of the test", "# cameras of the test, edited by hand")
        config.write_text(edited)
        driver.find_element(By.CSS_SELECTOR, "#shapes li[data-name=yard] button").click()
        assert listed() == ["door", "gate"]
        driver.find_element(By.ID, "save").click()
        error = browser.wait(driver, "the refusal", lambda: driver.find_element(By.ID, "editor-error").text)
        assert error == (f"Not saved: {config} changed since this page read it (another tab or a hand edit): "
                         "reload the camera's scene and make the change again (the camera's zones and lines "
                         "were reloaded).")
        browser.wait(driver, "the reloaded list", lambda: listed() == ["door", "yard", "gate"])
        assert config.read_text() == edited
        driver.find_element(By.CSS_SELECTOR, "#shapes li[data-name=yard] button").click()
        driver.find_element(By.ID, "save").click()
        saved = browser.wait(driver, "the save", lambda: driver.find_element(By.ID, "editor-saved").text)
        assert saved == "saved; the bridge applies it within a second, without reconnecting the camera"
        assert driver.find_element(By.ID, "editor-error").text == ""
        yard = "      - name: yard\n        polygon: [[0.5, 0.1], [0.9, 0.1], [0.9, 0.9]]\n"
        assert config.read_text() == edited.replace(yard, "", 1)  # dock's yard gone, the hand edit kept
    finally:
        driver.quit()
        bridge.close()
