"""Debian's Chromium, headless, driven through Playwright for Python.

For the dashboard's real-browser tests and benchmark. Playwright launches the system
browser by path, so `playwright install` and its browser download are never needed; the
tests skip where Chromium (`apt-get install chromium`) or Playwright (the `dev` extra) is
missing.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_available() -> bool:
    has_playwright = importlib.util.find_spec("playwright") is not None
    return has_playwright and shutil.which("chromium") is not None


@contextmanager
def chromium_page(width: int = 1400, height: int = 2000) -> Iterator[Page]:
    """One page of a fresh headless Chromium (Playwright's throwaway profile)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()


def wait_until(page: Page, predicate_js: str, timeout_s: float, arg: Any = None) -> Any:
    """The first truthy value of a JavaScript function polled in the page, None on timeout
    (a benchmark records the miss; a test asserts on it with the page text)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        handle = page.wait_for_function(predicate_js, arg=arg, timeout=timeout_s * 1000)
    except PlaywrightTimeout:
        return None
    return handle.json_value()


def page_text(page: Page) -> str:
    return page.inner_text("body")
