"""What the browser tests share: signing in, sending from the page, and running code away from
Playwright's loop."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from django.db import connection
from playwright.sync_api import Page, expect

from tests.helpers.factories import PASSWORD
from tests.helpers.processes import WebProcess

T = TypeVar("T")


def log_in(page: Page, site: WebProcess, username: str, *, script: bool = True) -> None:
    """Sign in through the login page; `script`: the page runs JavaScript (then this waits for it
    to be ready)."""
    page.goto(f"{site.url}/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="What shall we work on?")).to_be_visible()
    if script:
        script_ready(page)


def script_ready(page: Page) -> None:
    """Wait until the page's script answers its keys (Enter sends): before, Enter in the message
    box adds a line, as without JavaScript."""
    expect(page.locator("html[data-script-ready]")).to_be_attached()


def send_from_page(page: Page, text: str) -> None:
    """Type `text` in the composer and press Send, as a person does."""
    page.get_by_label("Message").fill(text)
    page.get_by_role("button", name="Send").click()


def off_the_loop(function: Callable[..., T], **kwargs) -> T:
    """Call `function` in a fresh thread, where async_to_sync (publishing to the channel layer)
    works; its database connection is closed afterwards."""
    outcome: dict = {}

    def call() -> None:
        try:
            outcome["value"] = function(**kwargs)
        except BaseException as exc:  # re-raised in the test's thread
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=call)
    thread.start()
    thread.join(timeout=30)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


AXE = (
    Path(__file__).resolve().parent.parent / "browser" / "node_modules" / "axe-core" / "axe.min.js"
)


def accessibility_violations(page: Page) -> list[str]:
    """What axe-core finds wrong on the page as it is now (WCAG 2.2 A and AA rules), one line
    per rule with the elements it flags. Evaluated through the DevTools protocol, which the
    page's Content-Security-Policy does not govern, so the page under test stays unchanged."""
    # After a change of size or scheme, the page's ResizeObservers (a wide table's wrapper made
    # reachable by keyboard) run with its next frame: checked before that, it is half done. (A
    # page in the background may get no frames: then a second is waited instead.)
    page.evaluate(
        """() => new Promise((done) => {
            requestAnimationFrame(() => requestAnimationFrame(done));
            setTimeout(done, 1000);
        })"""
    )
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text())
    result = page.evaluate(
        """async () => await axe.run(document, {
            runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa",
                                            "wcag22aa", "best-practice"]},
            resultTypes: ["violations"],
        })"""
    )
    return [
        f"{violation['id']}: {violation['help']} at "
        + ", ".join(" ".join(node["target"]) for node in violation["nodes"][:5])
        for violation in result["violations"]
    ]
