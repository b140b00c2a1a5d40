"""A person past the socket cap: the refused tab says so calmly, and connects by itself once
another tab closes."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.helpers.browser import accessibility_violations, log_in
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import WebProcess

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_tab_past_the_cap_says_so_and_connects_when_another_closes(page: Page, processes):
    site = processes.add(WebProcess(CONTINUITY_SOCKETS_PER_USER="1"))
    user = UserFactory()
    conversation = ConversationFactory(owner=user, title="Crowded")
    log_in(page, site, user.username)
    page.goto(f"{site.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")

    second = page.context.new_page()
    second.goto(f"{site.url}/c/{conversation.pk}/")
    expect(second.locator("[data-live-indicator]")).to_have_text("too many tabs")
    notice = second.locator("[data-composer-errors]")
    expect(notice).to_contain_text("Too many tabs are open")
    assert accessibility_violations(second) == []

    page.close()  # its socket is counted out; the second tab's next try gets in
    expect(second.locator("[data-live-indicator]")).to_have_text("live", timeout=20_000)
    expect(notice).to_be_empty()
