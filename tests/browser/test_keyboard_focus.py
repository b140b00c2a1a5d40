"""Every in-thread action with the keyboard only, and where focus goes after it: to the thing
acted on, or to what replaced it (WCAG 2.4.3), never to <body>."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from continuity.models import Message, Run
from devtools.fake_model import FakeOpenAI, worker_settings
from tests.helpers.browser import log_in
from tests.helpers.console import dead_letter_make
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import WebProcess, WorkerProcess
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def fake():
    server = FakeOpenAI(delay=0.01, numbered=True).start()
    yield server
    server.stop()


def focused(page: Page) -> str:
    """What has keyboard focus: an element's id, or its tag name when it has none."""
    return page.evaluate("document.activeElement.id || document.activeElement.tagName")


def expect_focus_on(page: Page, element_id: str) -> None:
    wait_for(lambda: focused(page) == element_id, timeout=10, what=f"focus on #{element_id}")


def answered_and_ended(message: Message) -> None:
    """The page shows a reply once it is stored; its attempt ends just after."""
    wait_for(
        lambda: (
            message.runs.filter(state=Run.State.COMPLETED).exists()
            and not message.runs.filter(state=Run.State.RUNNING).exists()
        ),
        timeout=10,
        what=f"the attempt on message {message.pk} to end",
    )


def press(page: Page, locator, key: str = "Enter") -> None:
    """Reach a control as the keyboard does (it takes focus) and press a key on it."""
    locator.focus()
    page.keyboard.press(key)


def type_and_send(page: Page, text: str) -> None:
    page.get_by_label("Message").focus()
    page.keyboard.type(text)
    page.keyboard.press("Enter")


def test_regenerate_a_version_switch_edit_and_retry_leave_focus_on_their_exchange(
    page: Page, processes, fake
):
    user = UserFactory()
    chat = ConversationFactory(owner=user, brain="openai")
    dead = dead_letter_make(chat).message  # before a worker runs, which would answer it
    processes.add(WorkerProcess(**worker_settings(fake)))
    web = processes.add(WebProcess())
    log_in(page, web, user.username)
    page.goto(f"{web.url}/c/{chat.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")
    type_and_send(page, "Plan the trip")
    exchanges = page.locator("article.exchange")
    expect(exchanges.last).to_have_attribute("data-state", "done")
    first = Message.objects.get(conversation=chat, text="Plan the trip")

    # Regenerate: the new version of the exchange replaces the old one, and takes focus.
    press(page, page.get_by_role("button", name="Regenerate"))
    again = wait_for(
        lambda: Message.objects.filter(version_of=first).first(), timeout=10, what="a version"
    )
    expect_focus_on(page, f"exchange-{again.pk}")
    expect(exchanges.last).to_have_attribute("data-state", "done")
    answered_and_ended(again)  # versions switch only while nothing is being answered

    # A version switch: the version shown takes focus.
    press(page, page.get_by_role("button", name="Previous version"))
    expect_focus_on(page, f"exchange-{first.pk}")
    expect(page.get_by_text("Reply 1 of 2")).to_be_visible()

    # Edit, opened and saved from the keyboard: the edited version takes focus.
    press(page, page.locator(f"#exchange-{first.pk} [data-edit] > summary"))
    expect(page.locator(f"#edit-{first.pk}")).to_be_visible()
    page.keyboard.press("Tab")
    assert focused(page) == f"edit-{first.pk}"
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.type("Plan the trip to Rome")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")  # on "Save edit"
    edited = wait_for(
        lambda: Message.objects.filter(text="Plan the trip to Rome").first(),
        timeout=10,
        what="the edited version",
    )
    expect_focus_on(page, f"exchange-{edited.pk}")
    expect(page.locator(f"#exchange-{edited.pk}")).to_have_attribute("data-state", "done")
    answered_and_ended(edited)

    # Retry of a message that could not be processed: the message asked again takes focus.
    dead_exchange = page.locator(f"#exchange-{dead.pk}")
    expect(dead_exchange.locator("[data-outcome]")).to_be_visible()
    press(page, dead_exchange.get_by_role("button", name="Retry"))
    asked_again = wait_for(
        lambda: Message.objects.filter(reasked_from=dead).first(), timeout=10, what="a re-ask"
    )
    expect_focus_on(page, f"exchange-{asked_again.pk}")
    # The old exchange, rendered again as "sent again", did not pull focus back.
    expect(dead_exchange.locator("[data-outcome]")).to_contain_text("You sent this message again")
    assert focused(page) == f"exchange-{asked_again.pk}"


def test_stop_leaves_focus_on_the_stopped_exchange_and_delete_on_its_notice(page: Page, processes):
    processes.add(WorkerProcess(CONTINUITY_BUILTIN_TOKEN_DELAY="0.1"))
    web = processes.add(WebProcess())
    user = UserFactory()
    chat = ConversationFactory(owner=user, title="Trip plans")
    log_in(page, web, user.username)
    page.goto(f"{web.url}/c/{chat.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")
    type_and_send(page, "Hi, my name is Ada, my goal is to finish the migration, and I like tea.")
    stop = page.get_by_role("button", name="Stop")
    expect(page.locator("[data-streaming] .streamed")).not_to_be_empty(timeout=20_000)
    message = Message.objects.get(conversation=chat)
    press(page, stop)
    exchange = page.locator(f"#exchange-{message.pk}")
    expect(exchange.locator("[data-stopped]")).to_be_visible()
    expect_focus_on(page, f"exchange-{message.pk}")

    # Delete, from the conversation's options, with the keyboard: its notice takes focus.
    press(page, page.get_by_text("Conversation options"))
    press(page, page.get_by_role("link", name="Delete…"))
    expect(page).to_have_url(re.compile(r"/delete/$"))
    press(page, page.get_by_role("button", name="Delete for good"))
    notice = page.get_by_text("“Trip plans” deleted.")
    expect(notice).to_be_focused()
