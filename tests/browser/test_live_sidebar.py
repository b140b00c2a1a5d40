"""The title, the sidebar's tags and the conversation list follow changes live, from the same
socket as the exchanges: no reload."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from continuity.actions import conversation_pause, conversation_resume
from continuity.models import Conversation
from tests.helpers.browser import log_in, off_the_loop
from tests.helpers.factories import UserFactory
from tests.helpers.processes import WebProcess, WorkerProcess
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_title_tags_and_list_update_live(page: Page, processes):
    processes.add(WorkerProcess())
    web = processes.add(WebProcess())
    user = UserFactory()
    log_in(page, web, user.username)

    # A first message whose first words make a poor title: the brain's title replaces it live.
    page.get_by_label("Message").fill("```python def add(a, b)``` — my goal is to learn Rust")
    page.get_by_role("button", name="Send").click()
    expect(page).to_have_url(re.compile(r"/c/\d+/$"))
    chat = Conversation.objects.get(owner=user)
    title = page.locator("#conversation-title")
    sidebar = page.get_by_role("navigation", name="Conversations")
    expect(title).to_have_text("Learn Rust", timeout=20_000)
    expect(sidebar.get_by_role("link", name="Learn Rust")).to_be_visible()
    expect(page).to_have_title("Learn Rust · Continuity")

    # Paused by the crash-loop breaker, then resumed by staff: the tag comes and goes.
    entry = sidebar.locator("li", has=page.get_by_role("link", name="Learn Rust"))
    off_the_loop(conversation_pause, conversation=chat, reason="3 crashes within 3600 s")
    expect(entry.locator(".tag")).to_have_text("paused")
    expect(page.locator("[data-paused]")).to_be_visible()
    off_the_loop(
        conversation_resume, conversation=chat, by=UserFactory(is_staff=True), reason="fixed"
    )
    expect(entry.locator(".tag")).to_have_count(0)
    expect(page.locator("[data-paused]")).to_have_count(0)

    # In another tab: a new conversation appears in this tab's list, a rename changes the title,
    # and archiving tags the title and takes it off the list.
    other = page.context.new_page()
    other.goto(f"{web.url}/")
    other.get_by_label("Message").fill("My name is Ada")
    other.get_by_role("button", name="Send").click()
    expect(other).to_have_url(re.compile(r"/c/\d+/$"))
    second = wait_for(
        lambda: Conversation.objects.exclude(pk=chat.pk).filter(owner=user).first(),
        timeout=10,
        what="the second conversation",
    )
    expect(sidebar.locator(f'a[href="/c/{second.pk}/"]')).to_be_visible()

    other.goto(f"{web.url}/c/{chat.pk}/")
    other.get_by_text("Conversation options").click()
    other.get_by_label("Title").fill("Rust, slowly")
    other.get_by_role("button", name="Rename").click()
    expect(title).to_have_text("Rust, slowly")
    expect(sidebar.get_by_role("link", name="Rust, slowly")).to_be_visible()
    other.get_by_text("Conversation options").click()
    other.get_by_role("button", name="Archive").click()
    expect(title.locator(".tag")).to_have_text("archived")
    expect(sidebar.get_by_role("link", name="Rust, slowly")).to_have_count(0)
    # The page's own links still work: the list was replaced, not broken.
    sidebar.locator(f'a[href="/c/{second.pk}/"]').click()
    expect(page).to_have_url(f"{web.url}/c/{second.pk}/")


def test_two_conversations_of_the_same_title_are_told_apart(page: Page, processes):
    from tests.helpers.browser import accessibility_violations
    from tests.helpers.factories import ConversationFactory

    web = processes.add(WebProcess())
    user = UserFactory()
    twins = [ConversationFactory(owner=user, title="Trip planning") for _ in range(2)]
    log_in(page, web, user.username)
    page.goto(f"{web.url}/c/{twins[0].pk}/")
    sidebar = page.get_by_role("navigation", name="Conversations")
    for twin in twins:
        started = sidebar.locator(f'a[href="/c/{twin.pk}/"] [data-started]')
        expect(started).to_have_text(re.compile(r"· \S"))  # when it was started, in local time
    assert not accessibility_violations(page)
