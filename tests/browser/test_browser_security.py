"""The Content Security Policy in a real browser: nothing we serve, nor the admin, violates it."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.helpers.factories import PASSWORD, ConversationFactory, UserFactory
from tests.helpers.processes import WebProcess

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BAD_INK = "rgb(170, 17, 17)"


@pytest.mark.parametrize("debug", ["0", "1"])
def test_pages_and_the_admin_run_under_the_csp(page: Page, processes, csp_violations, debug):
    site = processes.add(WebProcess(DEBUG=debug))
    staff = UserFactory(is_staff=True, is_superuser=True)
    conversation = ConversationFactory(owner=staff)

    page.goto(f"{site.url}/accounts/signup/")
    page.get_by_label("Username").fill("newcomer")
    page.get_by_label("Password", exact=True).fill("123")
    page.get_by_label("Password confirmation").fill("123")
    page.get_by_role("button", name="Create account").click()
    error = page.get_by_role("alert").filter(has_text="too short")
    expect(error).to_be_visible()
    assert error.evaluate("e => getComputedStyle(e).color") == BAD_INK
    expect(page.get_by_label("Password confirmation")).to_have_attribute("aria-invalid", "true")

    page.goto(f"{site.url}/admin/login/")
    page.get_by_label("Username").fill(staff.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(
        page.get_by_role("link", name="Log out").or_(page.get_by_text("Log out"))
    ).to_be_visible()
    for path in ["/admin/", "/admin/auth/user/", f"/admin/auth/user/{staff.pk}/change/"]:
        page.goto(f"{site.url}{path}")

    page.goto(f"{site.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")  # the websocket is up
    page.get_by_label("Message").fill("![t](http://evil.example/pixel.png)")
    page.get_by_label("Message").press("Enter")
    expect(page.locator("[data-exchange]")).to_have_count(1)
    for path in ["/", "/accounts/password/", "/dashboard/", "/memory/"]:
        page.goto(f"{site.url}{path}")
        expect(page).to_have_url(re.compile(re.escape(path) + "$"))
    assert csp_violations == []
