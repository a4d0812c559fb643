"""Headless Debian Chromium driven by Playwright, collecting console errors and saving screenshots."""

import atexit
import contextlib
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, Page, Playwright, sync_playwright

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


_shared: list[tuple[Playwright, Browser]] = []


def _browser() -> Browser:
    """The process's one headless Chromium, launched on first use; close_browser() or the exit ends it."""
    if _shared and not _shared[0][1].is_connected():
        close_browser()
    if not _shared:
        playwright = sync_playwright().start()
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS
        )
        _shared.append((playwright, browser))
        atexit.register(close_browser)  # a script's (a benchmark's) Chromium ends with it too
    return _shared[0][1]


def close_browser() -> None:
    """End the shared Chromium, if one runs (the integration tests' session does, when it ends)."""
    while _shared:
        playwright, browser = _shared.pop()
        with contextlib.suppress(Exception):
            browser.close()
        playwright.stop()


@contextmanager
def browser_page(
    width: int = 1440, height: int = 900, *, http_credentials: dict[str, str] | None = None
) -> Iterator[tuple[Page, list[str]]]:
    """A fresh page, in a context of its own (no cookie, cache or storage from another test) of the shared
    Chromium, and the list its console errors and page errors are appended to."""
    errors: list[str] = []
    context = _browser().new_context(
        viewport={"width": width, "height": height},
        accept_downloads=True,
        http_credentials=http_credentials,  # type: ignore[arg-type]  # a TypedDict
    )
    try:
        page = context.new_page()
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        yield page, errors
    finally:
        context.close()


def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


# What the tests wait for is checked ten times a second. Playwright's default checks on every animation
# frame, which keeps the browser drawing frames (a fifth of its CPU) while a page waits on a deadline.
POLL_MS = 100


def wait_until(page: Page, expression: str, arg: object = None, *, timeout: float) -> None:
    """Wait until the JavaScript function `expression` (given `arg`) returns true; `timeout` in ms."""
    page.wait_for_function(expression, arg=arg, timeout=timeout, polling=POLL_MS)


def settle(page: Page, timeout_ms: int = 120_000) -> None:
    """Wait until Dash has no callback in flight (nothing marked loading), no card still says what it waits
    for (a view computed in the background: "waiting for …", "computing …"), and the page has painted."""
    wait_until(
        page,
        "() => window.dash_clientside !== undefined"
        " && !document.querySelector('[data-dash-is-loading=\"true\"]')"
        " && ![...document.querySelectorAll('.gw-pending')]"
        "      .some(e => /^(waiting for|computing)/.test(e.innerText))",
        timeout=timeout_ms,
    )
    page.wait_for_timeout(400)


def table_rows(page: Page, name: str) -> list[dict[str, str]]:
    """The rendered cells of the UI table `name` (its download name), one dict per row keyed by column,
    once the table is on the page (a page just navigated to draws its tables a moment after its URL)."""
    page.wait_for_selector(f"#table-{name}", state="attached", timeout=60_000)
    settle(page)
    rows: list[dict[str, str]] = page.eval_on_selector_all(
        f"#table-{name} tbody tr",
        "rows => rows.map(r => Object.fromEntries("
        "Array.from(r.querySelectorAll('td')).map(td => [td.dataset.col, td.innerText.trim()])))",
    )
    return rows


def wait_for_location(page: Page, path_and_query: str, timeout_ms: int = 60_000) -> None:
    """Wait until the address bar shows `path_and_query` (Dash changes it with pushState, no navigation)."""
    wait_until(
        page, "want => location.pathname + location.search === want", arg=path_and_query, timeout=timeout_ms
    )


def choose(page: Page, dropdown_id: str, option: str) -> None:
    """Pick `option` in the multi-select dropdown `dropdown_id` as a user does: open it, search, click.

    Each step waits for what it acts on (the menu opens and filters asynchronously), so no keystroke is
    typed before the search box has focus.
    """
    page.click(f"#{dropdown_id}")
    page.fill(".dash-dropdown-search", option)
    page.locator(".dash-dropdown-option", has_text=re.compile(f"^{re.escape(option)}$")).click()
    page.keyboard.press("Escape")
