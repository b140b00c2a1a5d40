"""The "What I remember" page in Chromium: read, correct and forget, with htmx and the CSP."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from continuity.models import MemoryFact
from tests.helpers.browser import log_in
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory
from tests.helpers.processes import ARTIFACTS, WebProcess

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_memory_page_edits_and_forgets(page: Page, processes):
    violations: list[str] = []
    page.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    site = processes.add(WebProcess())
    user = UserFactory()
    conversation = ConversationFactory(owner=user, title="Knee and running")
    said = MessageFactory(conversation=conversation, text="Remember that my knee hurts")
    MemoryFact.objects.create(owner=user, key="name", value="Ada", source_message=said)
    MemoryFact.objects.create(owner=user, key="goal", value="run 10 km by June")
    MemoryFact.objects.create(owner=user, key="note", value="your knee hurts", source_message=said)

    log_in(page, site, user.username)
    page.get_by_role("link", name="Memory").click()
    expect(page.get_by_role("heading", name="What I remember about you")).to_be_visible()
    expect(page.get_by_text("every conversation you have with me")).to_be_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "memory-page.png", full_page=True)

    goal = page.locator('[data-fact-key="goal"]')
    expect(goal).to_contain_text("Source no longer available")
    goal.get_by_text("Edit").click()
    goal.get_by_label("Your goal").fill("run 5 km by June")
    goal.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").filter(has_text="Saved.")).to_be_visible()
    expect(page.locator('[data-fact-key="goal"] .fact-value')).to_have_text("run 5 km by June")

    note = page.locator('[data-fact-key="note"]')
    note.get_by_role("link", name="Forget…").click()
    expect(note).to_contain_text("Forget this?")
    note.get_by_role("button", name="Forget it").click()
    expect(page.locator('[data-fact-key="note"]')).to_have_count(0)
    expect(page).to_have_url(f"{site.url}/memory/")
    assert not MemoryFact.objects.filter(owner=user, key="note").exists()

    page.locator('[data-fact-key="name"] [data-source-link]').click()
    expect(page).to_have_url(f"{site.url}/c/{conversation.pk}/#exchange-{said.pk}")
    expect(page.locator(f"#exchange-{said.pk}")).to_be_visible()
    assert violations == []
