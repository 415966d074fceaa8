"""A real headless Chromium (Debian's, ``make uideps``) driven by Playwright, for the web
UI's tests; every request the page makes is kept, to show none leaves the UI's origin.

Playwright's Python package brings its driver (Node.js, in the wheel); its own browser
download is never used: the launch names ``/usr/bin/chromium``. The flags keep Chromium off
the network beyond the page (no background fetches, updates or sync: this machine's
network is closed and the UI must need nothing else).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Page, Request, sync_playwright

CHROMIUM = Path(os.environ.get("AGENTRUN_TEST_CHROMIUM", "/usr/bin/chromium"))
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-features=Translate,OptimizationHints,MediaRouter"]
SHOTS = Path(__file__).resolve().parents[2] / "build" / "ui-screenshots"


@dataclass
class Browsing:
    """One page in a fresh browser context, and every URL it requested."""

    page: Page
    requested: list[str] = field(default_factory=list)

    def shot(self, name: str) -> Path:
        """A full-page screenshot in ``build/ui-screenshots/`` (kept with the test output)."""
        SHOTS.mkdir(parents=True, exist_ok=True)
        where = SHOTS / f"{name}.png"
        self.page.screenshot(path=str(where), full_page=True)
        return where


def available() -> str | None:
    """Why no browser test can run here, or None."""
    if not CHROMIUM.is_file() and shutil.which(str(CHROMIUM)) is None:
        return f"no Chromium at {CHROMIUM}: make uideps installs Debian's"
    return None


@contextmanager
def browser() -> Iterator[object]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=FLAGS)
        try:
            yield launched
        finally:
            launched.close()


@contextmanager
def browsing(launched: object, *, timeout_ms: float = 30_000) -> Iterator[Browsing]:
    """A new context (its own cookies) and page on ``launched``, its requests recorded."""
    context = launched.new_context(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    try:
        page = context.new_page()
        page.set_default_timeout(timeout_ms)
        made = Browsing(page=page)

        def seen(request: Request) -> None:
            made.requested.append(request.url)
        page.on("request", seen)
        yield made
    finally:
        context.close()


def send(page: Page, word: str, fields: dict[str, str]) -> str:
    """Open ``word``'s form, fill ``fields`` (by name), send it; the answer's words."""
    section = page.locator(f"#command-{word}")
    if not section.evaluate("e => e.open"):
        section.locator("summary").click()  # a keyboard user's Enter does the same
    form = section.locator("form")
    for name, value in fields.items():
        target = form.locator(f"[name='{name}']")
        if target.evaluate("e => e.tagName") == "SELECT":
            target.select_option(value)
        else:
            target.fill(value)
    answer = page.locator("#answer .answer")
    before = answer.get_attribute("data-id") if answer.count() else ""
    form.locator("button[type=submit]").click()
    page.wait_for_function(
        "before => { const a = document.querySelector('#answer .answer');"
        " return a !== null && a.dataset.id !== before; }", arg=before, timeout=90_000)
    return str(page.locator("#answer .said").inner_text())
