"""A real browser for the tests: Debian's `chromium`, headless, driven by Selenium through Debian's
`chromedriver` (both named by path: Selenium never looks for or downloads a browser)."""

from __future__ import annotations

import io
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from PIL import Image

WIDTH, HEIGHT = 1400, 1000


def chrome() -> Any:
    """A headless Chromium of `WIDTH` x `HEIGHT` CSS pixels, one device pixel each."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not (os.path.exists(binary) and os.path.exists(driver)):
        pytest.fail("the web view's tests need Debian's browser: apt-get install chromium chromium-driver")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never download anything
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--autoplay-policy=no-user-gesture-required", "--force-device-scale-factor=1",
                     f"--window-size={WIDTH},{HEIGHT}", "--disable-background-networking", "--no-first-run"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def wait(driver: Any, what: str, condition: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Polls until `condition()` is truthy; fails naming `what` and the browser's console."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    console = [entry["message"] for entry in driver.get_log("browser")][-10:]
    pytest.fail(f"timed out waiting for {what}; the browser's console: {console}")


def screenshot(element: Any) -> np.ndarray:
    """`element` as the browser shows it, `[height, width, 3]` RGB."""
    return np.asarray(Image.open(io.BytesIO(element.screenshot_as_png)).convert("RGB"))
