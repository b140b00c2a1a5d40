"""Browser tests run in a pytest process of their own (`pytest tests/browser`; `make test` runs
it after the rest), because of what Playwright's sync API leaves behind: an event loop on the
main thread. In that process the ORM calls between page actions need DJANGO_ALLOW_ASYNC_UNSAFE,
and async_to_sync no longer works on the main thread (`tests.helpers.browser.off_the_loop` runs code
elsewhere). The other tests, and every daphne, worker and watchdog
(`tests.helpers.processes.process_env`), run without the flag, as production does.
"""

from __future__ import annotations

import os

import pytest
from playwright.sync_api import Page

from tests.browser.launch import CHROMIUM_LAUNCH

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, **CHROMIUM_LAUNCH}


@pytest.fixture
def csp_violations(page: Page) -> list[str]:
    """Chromium reports each blocked script, style, image or connection on the console."""
    found: list[str] = []
    page.on(
        "console",
        lambda message: (
            found.append(f"{page.url}: {message.text}")
            if "Content Security Policy" in message.text
            else None
        ),
    )
    return found
