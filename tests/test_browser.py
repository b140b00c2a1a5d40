"""A person in headless Chromium, against daphne + a Celery worker + PostgreSQL + Redis."""

from __future__ import annotations

import re
import shutil

import pytest
from playwright.sync_api import Page, expect

from tests.factories import PASSWORD, UserFactory
from tests.processes import ARTIFACTS, WebProcess, WorkerProcess, process_env

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "headless": True,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    }


@pytest.fixture
def site(processes):
    # Slow enough tokens that a person (and this test) can watch the reply stream in.
    env = process_env(CONTINUITY_BUILTIN_TOKEN_DELAY="0.06")
    processes.add(WorkerProcess(env=env))
    return processes.add(WebProcess(env=env))


def log_in(page: Page, site: WebProcess, username: str) -> None:
    page.goto(f"{site.url}/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="What shall we work on?")).to_be_visible()


def test_chat_streams_replies_and_survives_a_reload(page: Page, site):
    user = UserFactory()
    log_in(page, site, user.username)

    composer = page.get_by_label("Message")
    composer.fill("Hi, my name is Ada and my goal is to learn Rust")
    composer.press("Enter")
    expect(page).to_have_url(re.compile(r"/c/\d+/$"))
    expect(page.locator("[data-live-indicator]")).to_have_text("live")

    first = page.locator("[data-exchange]").nth(0)
    streaming = first.locator("[data-streaming] .streamed")
    expect(streaming).not_to_be_empty(timeout=20_000)  # part of the reply, before the end
    expect(first.locator(".bubble.assistant.markdown")).to_contain_text(
        "Nice to meet you, Ada!", timeout=30_000
    )
    expect(first.locator(".state")).to_have_text(re.compile("Done"))

    composer = page.get_by_label("Message")
    composer.fill("line one")
    composer.press("Shift+Enter")
    composer.type("What's my name?")
    composer.press("Enter")
    second = page.locator("[data-exchange]").nth(1)
    expect(second.locator(".bubble.user")).to_contain_text("line one")
    expect(second.locator(".bubble.user br")).to_have_count(1)
    expect(second.locator(".bubble.assistant.markdown")).to_have_text(
        "Your name is Ada.", timeout=30_000
    )
    expect(page.get_by_label("Message")).to_have_value("")

    page.get_by_label("Message").press("Enter")
    expect(page.locator("[data-composer-errors]")).to_have_text("Type a message before sending.")

    page.reload()
    expect(page.locator("[data-exchange]")).to_have_count(2)
    expect(page.locator(".bubble.assistant.markdown").nth(0)).to_contain_text("learn Rust")
    expect(page.locator(".bubble.assistant.markdown").nth(1)).to_have_text("Your name is Ada.")
    expect(page.get_by_role("navigation", name="Conversations")).to_contain_text(
        "Hi, my name is Ada"
    )
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "browser-chat.png", full_page=True)
