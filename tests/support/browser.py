"""A real headless browser for the console's tests: Debian's chromium driven by its chromedriver through Selenium.

`make browser` (run by `.ci/run`) installs chromium and chromium-driver from Debian's packages. Where they are
missing, `headless_chromium` skips the test and says why.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

__all__ = ["By", "WebDriver", "WebDriverWait", "headless_chromium", "screenshot"]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@contextmanager
def headless_chromium(profile_dir: Path) -> Iterator[WebDriver]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        pytest.skip(f"no headless browser on this machine ({', '.join(missing)} missing): `make browser` installs "
                    "Debian's chromium and chromium-driver (it needs root and apt-get)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # headless, and nothing that reaches for the network: this machine's closed network refuses it, slowly
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--window-size=1280,900", f"--user-data-dir={profile_dir}"):
        options.add_argument(flag)
    # the driver is named: Selenium would otherwise look for one to download
    driver = webdriver.Chrome(options=options, service=Service(shutil.which(CHROMEDRIVER) or CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: WebDriver, path: Path) -> None:
    """The whole page, beyond the window's height, as a PNG at `path` (through the DevTools protocol)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
    path.write_bytes(base64.b64decode(shot["data"]))
