"""The web console in a real headless browser (Debian's chromium, driven by chromedriver through Selenium).

What only a browser shows: the login form, posted from the console's own page (the browser says so in `Origin`
and `Sec-Fetch-Site`), leaves a session cookie the pages then accept, that is not the token and that no script can
read; the SVG pictures are laid out with a real size; a page without a token sends the browser to the login form;
logging out makes the pages refuse again, even to a copy of the old cookie. `make browser` (run by `.ci/run`)
installs chromium and chromium-driver from Debian's packages; without them these tests are skipped, saying so.

With `LSMLAKE_SCREENSHOT_DIR` set, the pages are also saved there as PNG (the README's picture comes from it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.browser import By, WebDriver, WebDriverWait, headless_chromium, screenshot
from tests.support.security import Tokens


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    with headless_chromium(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


def _shoot(driver: WebDriver, name: str) -> None:
    out = os.environ.get("LSMLAKE_SCREENSHOT_DIR")
    if out:
        screenshot(driver, Path(out) / f"{name}.png")


def test_without_a_token_the_browser_is_sent_to_the_login_form(ui: int, browser: WebDriver) -> None:
    browser.delete_all_cookies()
    browser.get(f"http://127.0.0.1:{ui}/table/db/busy")
    assert browser.find_element(By.TAG_NAME, "h1").text == "401"
    assert not browser.find_elements(By.CSS_SELECTOR, "svg.lsm")  # nothing of the table leaks
    browser.find_element(By.LINK_TEXT, "Log in with a token").click()
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "token"))
    assert browser.current_url.endswith("/login")


def test_an_unknown_token_is_refused(ui: int, browser: WebDriver, tokens: Tokens) -> None:
    _log_in(browser, ui, tokens.unknown)
    assert "not valid" in browser.find_element(By.TAG_NAME, "body").text
    assert browser.find_elements(By.ID, "token")  # the login form again, and no cookie
    assert browser.get_cookie("lsmlake_session") is None
    assert not browser.find_elements(By.CSS_SELECTOR, "tr.table-row")


def test_logged_in_the_pages_show_the_tables_and_their_buckets(ui: int, browser: WebDriver, tokens: Tokens) -> None:
    _log_in(browser, ui, tokens.reader)
    # the cookie the login answer set opens the table list, holds a session id, not the token, and is out of reach
    # of scripts (HttpOnly)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Tables"
    cookie = browser.get_cookie("lsmlake_session")
    assert cookie is not None and cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert tokens.reader not in cookie["value"]
    assert browser.execute_script("return document.cookie") == ""
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.table-row")
    assert [r.find_element(By.TAG_NAME, "a").text for r in rows] == ["db.busy", "db.calm"]
    assert "STALLED" in rows[0].text
    _shoot(browser, "console-tables")

    rows[0].find_element(By.TAG_NAME, "a").click()
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "svg.lsm"))
    assert browser.find_element(By.TAG_NAME, "h1").text == "db.busy"
    pictures = browser.find_elements(By.CSS_SELECTOR, "svg.lsm")
    assert len(pictures) == 2
    for svg in pictures:  # laid out by the browser with a real size, six level-0 runs drawn in each
        assert svg.size["width"] > 50 and svg.size["height"] > 20
        runs = svg.find_elements(By.CSS_SELECTOR, 'rect.run[data-level="0"]')
        assert len(runs) == 6 and all(r.size["width"] > 0 for r in runs)
    assert "STALLED" in browser.find_element(By.ID, "figures").text
    _shoot(browser, "console-table")


def test_values_stay_text_in_the_browser(ui: int, browser: WebDriver, tokens: Tokens) -> None:
    """Partition values holding HTML are shown as text: no element of theirs exists in the page."""
    _log_in(browser, ui, tokens.reader)
    browser.get(f"http://127.0.0.1:{ui}/table/db/busy")
    assert "<i>2026</i>" in browser.find_element(By.TAG_NAME, "body").text
    assert not browser.find_elements(By.CSS_SELECTOR, "body i")


def test_logging_out_closes_the_pages(ui: int, browser: WebDriver, tokens: Tokens) -> None:
    _log_in(browser, ui, tokens.reader)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Tables"
    cookie = browser.get_cookie("lsmlake_session")
    assert cookie is not None
    browser.find_element(By.CSS_SELECTOR, "form.logout button").click()
    WebDriverWait(browser, 30).until(lambda d: d.current_url.endswith("/login"))
    assert browser.get_cookie("lsmlake_session") is None
    browser.get(f"http://127.0.0.1:{ui}/")
    assert browser.find_element(By.TAG_NAME, "h1").text == "401"
    # the old cookie, put back: its session ended on the server
    browser.add_cookie({"name": "lsmlake_session", "value": cookie["value"], "path": "/"})
    browser.get(f"http://127.0.0.1:{ui}/")
    assert browser.find_element(By.TAG_NAME, "h1").text == "401"
    assert "log in again" in browser.find_element(By.TAG_NAME, "body").text


def _log_in(browser: WebDriver, port: int, token: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"http://127.0.0.1:{port}/login")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.execute_script("document.documentElement.dataset.form = 'login'")  # marks the form's page
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # the answer (the tables, or the form again with a 401) is another page: without the mark, and loaded
    WebDriverWait(browser, 30).until(lambda d: d.execute_script(
        "return document.documentElement.dataset.form === undefined && document.readyState === 'complete'"))
