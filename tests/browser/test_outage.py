"""A person whose send meets a database outage, in headless Chromium."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from continuity.models import Message
from tests.helpers.browser import log_in
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.outages import database_refuses_connections
from tests.helpers.processes import WebProcess
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_send_during_a_database_outage_is_kept_and_sent_again_by_itself(page: Page, processes):
    # A request waits this long for a pooled connection (10 s by default, so that a crowd's
    # burst queues instead of failing), and a send is made again for this long (5 s by
    # default, so that a restart costs a slower send, not an error), before it answers 503.
    web = processes.add(WebProcess(DATABASE_POOL_TIMEOUT="2", CONTINUITY_SEND_OUTAGE_SECONDS="2"))
    user = UserFactory()
    conversation = ConversationFactory(owner=user)
    log_in(page, web, user.username)
    page.goto(f"{web.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")

    errors = page.locator("[data-composer-errors]")
    with database_refuses_connections():
        page.get_by_label("Message").fill("Remember that the invoices are due")
        page.get_by_label("Message").press("Enter")
        expect(errors).to_contain_text(
            "Your message is kept and will be sent again", timeout=15_000
        )
        expect(page.get_by_label("Message")).to_have_value("Remember that the invoices are due")
    # Nobody presses anything: the composer resends once the database answers again.
    expect(page.locator("[data-exchange] .bubble.user .text")).to_have_text(
        "Remember that the invoices are due", timeout=15_000
    )
    expect(page.get_by_label("Message")).to_have_value("")
    wait_for(
        lambda: Message.objects.filter(conversation=conversation).count() == 1,
        timeout=5,
        what="the message, stored once",
    )
