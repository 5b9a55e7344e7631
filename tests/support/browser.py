"""A real browser for the console's tests: Debian's chromium driven by Playwright (its own
browser download is not reachable here), a fresh context per test, a screenshot on failure."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Dialog, Page, async_playwright

__all__ = [
    "ARTIFACTS",
    "ConsolePage",
    "chromium",
    "console_page",
    "find_chromium",
    "screenshot_on_failure",
]

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
"""Screenshots of failed tests (git-ignored)."""


def find_chromium() -> str:
    """The system chromium (`CHATD_CHROMIUM`, else chromium on PATH)."""
    path = os.environ.get("CHATD_CHROMIUM") or shutil.which("chromium")
    if not path:
        raise RuntimeError("chromium is missing: apt-get install -y chromium (as .ci/run does)")
    return path


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless chromium for this process's tests."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=find_chromium(),
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        try:
            yield browser
        finally:
            await browser.close()


@dataclass
class ConsolePage:
    """A page of the console and what it did that a test forbids."""

    page: Page
    url: str
    """The console's address (`http://host:port/console/`)."""
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """Uncaught exceptions in the page."""

    async def sign_in(self, key: str) -> None:
        """Open the console and sign in with `key`."""
        await self.page.goto(self.url)
        await self.page.get_by_role("textbox", name="API key").fill(key)
        await self.page.get_by_role("button", name="Sign in").click()
        await self.page.get_by_role("navigation", name="Chats").wait_for()

    async def screenshot(self, name: str) -> Path:
        """Save the whole page in `ARTIFACTS` as `<name>.png`."""
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:120] + ".png")
        await self.page.screenshot(path=str(path))
        return path

    async def open_chat(self, chat_id: str) -> None:
        """Show a chat (the signed-in tab keeps its key)."""
        await self.page.goto(f"{self.url}#/chats/{chat_id}")
        await self.page.get_by_role("textbox", name="Message", exact=True).wait_for()


@asynccontextmanager
async def console_page(browser: Browser, url: str, name: str) -> AsyncIterator[ConsolePage]:
    """A fresh context and page at the console; a screenshot in `ARTIFACTS` if the body
    raises (a fixture, which sees no exception, calls `screenshot` itself)."""
    context = await browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(30_000)
    page = await context.new_page()
    console = ConsolePage(page, url)

    async def on_dialog(dialog: Dialog) -> None:
        console.dialogs.append(f"{dialog.type}: {dialog.message}")
        await dialog.dismiss()

    def on_error(error: Any) -> None:
        console.errors.append(str(error))

    page.on("dialog", on_dialog)
    page.on("pageerror", on_error)
    try:
        yield console
    except BaseException:
        await _last_screenshot(console, name)
        raise
    finally:
        await context.close()


async def _last_screenshot(console: ConsolePage, name: str) -> None:
    try:
        print(f"screenshot of the failure: {await console.screenshot(name)}")
    except Exception as err:  # the page may be gone with the failure
        print(f"no screenshot of {name}: {err}")


@asynccontextmanager
async def screenshot_on_failure(
    console: ConsolePage, name: str, failed: Any
) -> AsyncIterator[None]:
    """For a fixture: after the test, a screenshot if `failed()` says it failed."""
    yield
    if failed():
        await _last_screenshot(console, name)
