"""A phone: 390 px wide, a touch screen. The conversation gets the screen, not the chrome."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.helpers.browser import accessibility_violations, log_in
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.messages import answered
from tests.helpers.processes import ARTIFACTS, WebProcess

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


@pytest.fixture
def site(processes):
    return processes.add(WebProcess())


@pytest.fixture
def phone(browser: Browser):
    context = browser.new_context(viewport=PHONE, has_touch=True, is_mobile=True)
    yield context.new_page()
    context.close()


def test_at_390_px_the_first_message_starts_in_the_top_quarter(phone, site):
    user = UserFactory(username="ada.lovelace.analytical")  # a long name, as people have
    chat = ConversationFactory(owner=user, title="Planning the trip to Rome with the family")
    answered(chat, "Plan the trip")
    log_in(phone, site, user.username)
    phone.goto(f"{site.url}/c/{chat.pk}/")
    expect(phone.locator("[data-live-indicator]")).to_have_text("live")

    first = phone.locator("article.exchange").first.bounding_box()
    assert first["y"] < PHONE["height"] / 4, f"the first message starts at {first['y']:.0f} px"
    topbar = phone.locator(".topbar").bounding_box()
    assert topbar["height"] < 60, f"the top bar is {topbar['height']:.0f} px: it wrapped"
    # A touch screen has no Enter key to teach, nor Ctrl+K.
    expect(phone.locator("#composer .hint")).to_be_hidden()
    assert phone.evaluate("document.scrollingElement.scrollWidth <= innerWidth")
    assert accessibility_violations(phone) == []
    # The account links fold under the person's name, and open from it.
    account = phone.locator("[data-account-menu] > summary")
    expect(account).to_have_text(user.username)
    expect(phone.get_by_role("link", name="Memory")).to_be_hidden()
    account.tap()
    expect(phone.get_by_role("link", name="Memory")).to_be_visible()
    expect(phone.get_by_role("button", name="Log out")).to_be_visible()
    assert accessibility_violations(phone) == []
    account.tap()
    ARTIFACTS.mkdir(exist_ok=True)
    for scheme in ("light", "dark"):
        phone.emulate_media(color_scheme=scheme)
        phone.screenshot(path=ARTIFACTS / f"conversation-390px-{scheme}.png")


def test_a_narrow_window_with_a_keyboard_keeps_the_hint(browser: Browser, site):
    context = browser.new_context(viewport=PHONE)  # a narrow desktop window: no touch
    page = context.new_page()
    user = UserFactory()
    chat = ConversationFactory(owner=user)
    answered(chat, "Plan the trip")
    log_in(page, site, user.username)
    page.goto(f"{site.url}/c/{chat.pk}/")
    expect(page.locator("#composer .hint")).to_be_visible()
    context.close()
