"""Headless Debian Chromium driven by Playwright, collecting console errors and saving screenshots."""

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
# The machine's network is closed: keep Chromium from phoning home (each attempt is an error).
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise RuntimeError("Debian chromium is not installed: run `make test`, which installs it")
    return path


@contextmanager
def browser_page(width: int = 1440, height: int = 900) -> Iterator[tuple[Page, list[str]]]:
    """A fresh page and the list its console errors and page errors are appended to."""
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            yield page, errors
        finally:
            browser.close()


def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
