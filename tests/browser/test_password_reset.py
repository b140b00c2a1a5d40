"""A person who forgot their password: from the login page's link, through the mailed link,
to signing in with the new password; every page without an axe violation, light and dark."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.helpers.browser import accessibility_violations
from tests.helpers.factories import PASSWORD, UserFactory
from tests.helpers.processes import WebProcess
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NEW_PASSWORD = "a fresh spring passphrase"


def accessible_in_both_schemes(page: Page) -> None:
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        assert accessibility_violations(page) == [], (page.url, scheme)
    page.emulate_media(color_scheme="light")


def test_a_forgotten_password_is_reset_from_the_login_page(page: Page, processes, tmp_path):
    outbox = tmp_path / "mail"
    site = processes.add(
        WebProcess(
            EMAIL_BACKEND="django.core.mail.backends.filebased.EmailBackend",
            EMAIL_FILE_PATH=str(outbox),
            SITE_URL="http://site.example:8000",
        )
    )
    user = UserFactory(email="ada@example.org")

    page.goto(f"{site.url}/accounts/login/")
    page.get_by_role("link", name="Forgot your password?").click()
    expect(page.get_by_role("heading", name="Forgot your password?")).to_be_visible()
    accessible_in_both_schemes(page)
    page.get_by_label("Email").fill("ada@example.org")
    page.get_by_role("button", name="Send the link").click()
    expect(page.get_by_role("heading", name="Check your email")).to_be_visible()
    accessible_in_both_schemes(page)

    mailed = wait_for(lambda: list(outbox.glob("*.log")), timeout=10, what="the reset mail")
    body = mailed[0].read_text()
    link = re.search(r"http://site\.example:8000(/accounts/password/reset/\S+/)", body).group(1)
    page.goto(site.url + link)  # the mail names the site's address; the test's server is here
    expect(page.get_by_role("heading", name="Choose a new password")).to_be_visible()
    accessible_in_both_schemes(page)
    page.get_by_label("New password", exact=True).fill(NEW_PASSWORD)
    page.get_by_label("New password confirmation").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Set the new password").click()
    expect(page.get_by_role("heading", name="Password changed")).to_be_visible()
    accessible_in_both_schemes(page)

    page.get_by_role("link", name="Log in").click()
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill(PASSWORD)  # the old one no longer works
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_be_visible()
    page.get_by_label("Password").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{site.url}/")
