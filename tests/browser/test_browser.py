"""A person in headless Chromium, against daphne + a Celery worker + PostgreSQL + Redis."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from playwright.sync_api import Page, expect

from chat.brains.builtin import BuiltinBrain
from continuity.brains import Context
from continuity.context.assembly import context_text, run_context_load
from continuity.context.recoveries import restored_of
from continuity.models import Message, RunContext
from tests.helpers.browser import log_in
from tests.helpers.factories import PASSWORD, ConversationFactory, UserFactory
from tests.helpers.processes import (
    ARTIFACTS,
    WatchdogProcess,
    WebProcess,
    WorkerProcess,
    process_id,
)
from tests.helpers.waiting import wait_for, wait_streaming

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def site(processes):
    # Slow enough tokens that a person (and this test) can watch the reply stream in.
    processes.add(WorkerProcess(CONTINUITY_BUILTIN_TOKEN_DELAY="0.06"))
    return processes.add(WebProcess())


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
        "Learn Rust"  # the title the brain gave it: the stated goal
    )
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "browser-chat.png", full_page=True)


# Records every text the streaming bubbles show, from the first paint of each page.
RECORD_STREAMED_TEXT = """
window.__streamed = [];
new MutationObserver(() => {
  document.querySelectorAll("[data-streaming] .streamed").forEach((el) => {
    window.__streamed.push([el.closest("[data-streaming]").dataset.run, el.textContent]);
  });
}).observe(document, {childList: true, subtree: true, characterData: true});
"""


def builtin_reply(text: str) -> str:
    brain = BuiltinBrain()
    context = Context(owner_id=0, conversation_id=0, message_id=0, attempt=1, text=text)
    return brain.reply_text(context, brain.plan(context))


def test_a_crash_and_a_web_restart_mid_reply_leave_one_clean_reply_and_a_banner(
    page: Page, processes
):
    worker = processes.add(WorkerProcess(CONTINUITY_BUILTIN_TOKEN_DELAY="0.08"))
    processes.add(WatchdogProcess())
    web = processes.add(WebProcess())
    user = UserFactory()
    conversation = ConversationFactory(owner=user)
    text = "Hi, my goal is to finish the migration, and I like tea."
    body = builtin_reply(text)

    log_in(page, web, user.username)
    page.add_init_script(RECORD_STREAMED_TEXT)
    page.goto(f"{web.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")
    page.get_by_label("Message").fill("My name is Ada")
    page.get_by_label("Message").press("Enter")
    expect(page.locator(".bubble.assistant.markdown")).to_contain_text(
        "Nice to meet you, Ada!", timeout=30_000
    )
    page.get_by_label("Message").fill(text)
    page.get_by_label("Message").press("Enter")

    message = wait_for(
        lambda: Message.objects.filter(conversation=conversation, text=text).first(),
        timeout=10,
        what="the message",
    )
    crashed = wait_streaming(message)
    # The first token follows a new conversation, a drain and a plan: on a loaded machine,
    # more than the default 5 s.
    expect(page.locator("[data-streaming] .streamed")).not_to_be_empty(timeout=15_000)
    assert process_id(crashed) in worker.children()
    os.kill(process_id(crashed), signal.SIGKILL)

    retry = wait_for(
        lambda: message.runs.exclude(pk=crashed.pk).filter(reply_chunks__isnull=False).first(),
        timeout=30,
        what="the second attempt streaming",
    )
    exchange = page.locator(f"#exchange-{message.pk}")
    banner = exchange.locator("[data-recovery]")
    # The banner appears live, at this point of the conversation, once the retry resumes: one
    # short line, the details behind "Show what was recovered".
    expect(banner).to_contain_text("Sorry, I was cut off at")
    expect(banner).to_contain_text("and started again.")
    expect(banner.locator("[data-recovered]")).not_to_have_attribute("open", "")
    expect(banner).to_contain_text("(a worker process stopped) and picked up")
    expect(page.locator(f'[data-streaming][data-run="{retry.pk}"]')).to_be_visible()
    web.kill_all()  # the web tier dies mid-reply and comes back on the same address
    message.refresh_from_db()
    assert message.state == "processing" and not Message.objects.filter(reply_to=message).exists()
    processes.add(WebProcess(port=web.port))

    expect(page.locator("[data-live-indicator]")).to_have_text("live", timeout=15_000)
    reply = exchange.locator(".bubble.assistant.markdown")
    expect(reply).to_contain_text("Noted that you like tea.", timeout=30_000)
    expect(reply).to_have_count(1)
    final = Message.objects.get(reply_to=message).text
    # The banner says it, once: the reply answers as it would have, and nothing more.
    assert final == body
    expect(exchange).to_contain_text("cut off", use_inner_text=True)
    assert exchange.inner_text().count("cut off") == 1

    shown = page.evaluate("window.__streamed")
    assert {str(crashed.pk), str(retry.pk)} <= {run for run, _ in shown}
    # Every partial reply the person saw was the start of its attempt's reply: nothing doubled,
    # nothing from the crashed attempt glued to the retry.
    of_this_message = {str(crashed.pk): body, str(retry.pk): final}
    for run, streamed in shown:
        if run in of_this_message:
            assert of_this_message[run].startswith(streamed), (run, streamed)

    restored = restored_of(RunContext.objects.get(run=retry))
    expect(banner).to_contain_text(f"{restored.facts} thing")
    expect(banner).to_contain_text(f"our last {restored.turns} messages")
    expect(banner).to_contain_text("from my notes on this conversation")
    expect(banner).not_to_contain_text("handoff")
    page.screenshot(path=ARTIFACTS / "restart-banner.png", full_page=True)

    page.reload()
    expect(page.locator(f"#exchange-{message.pk} [data-recovery]")).to_contain_text(
        "Sorry, I was cut off at"
    )
    page.locator(f"#exchange-{message.pk}").get_by_text("Show what was recovered").click()
    expect(page.locator(f"#exchange-{message.pk} [data-recovery-words]")).to_contain_text(
        "I was interrupted at"
    )
    page.get_by_role("link", name="What I was given to go on").click()
    given = page.locator("[data-recovered-context]")
    expect(given).to_contain_text("What I remember about you")
    expect(page.locator("[data-technical-details]")).not_to_have_attribute("open", "")
    for line in context_text(run_context_load(retry.context)).splitlines():
        # Each remembered fact and each turn the attempt was given.
        if line.startswith(("- ", "User: ", "Assistant: ")):
            expect(given).to_contain_text(line.split(": ", 1)[1].replace("**", "")[:50])
    page.screenshot(path=ARTIFACTS / "recovered-context.png", full_page=True)


def test_a_send_after_signing_out_elsewhere_keeps_the_text_for_after_sign_in(page: Page, site):
    user = UserFactory()
    conversation = ConversationFactory(owner=user)
    log_in(page, site, user.username)
    page.goto(f"{site.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")

    other_tab = page.context.new_page()
    other_tab.goto(f"{site.url}/")
    with page.expect_websocket() as tried_again:
        other_tab.get_by_role("button", name="Log out").click()
        expect(other_tab).to_have_url(re.compile(r"/accounts/login/"))
        # The first tab's socket is closed by the logout, not left streaming to a signed-out
        # page.
        expect(page.locator("[data-live-indicator]")).to_have_text("signed out")
    # The page keeps trying (a sign-in elsewhere lets it back in): a refused try is still
    # "signed out", not "reconnecting…".
    if not tried_again.value.is_closed():
        tried_again.value.wait_for_event("socketerror")  # refused: no session
    expect(page.locator("[data-live-indicator]")).to_have_text("signed out")

    page.get_by_label("Message").fill("Remember that the deploy is on Friday")
    page.get_by_label("Message").press("Enter")
    errors = page.locator("[data-composer-errors]")
    expect(errors).to_have_text("You were signed out; sign in again (your message is kept).")
    assert not Message.objects.filter(conversation=conversation).exists()

    errors.get_by_role("link", name="sign in again").click()
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{site.url}/c/{conversation.pk}/")
    expect(page.get_by_label("Message")).to_have_value("Remember that the deploy is on Friday")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")


def test_an_edited_resend_after_a_lost_response_is_sent_as_a_new_message(page: Page, site):
    user = UserFactory()
    conversation = ConversationFactory(owner=user)
    log_in(page, site, user.username)
    page.goto(f"{site.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")
    lost = []

    def lose_the_first_response(route):
        if lost:
            route.continue_()
            return
        route.fetch()  # the POST reaches the server, which stores the message
        lost.append(route.request.post_data)
        route.abort()  # ...and the answer never reaches the page

    page.route(f"**/c/{conversation.pk}/messages/", lose_the_first_response)
    field = page.get_by_label("Message")
    field.fill("Book the room for Tuesday")
    field.press("Enter")
    expect(page.locator("[data-composer-errors]")).to_contain_text("press Enter to retry")
    assert lost and Message.objects.filter(text="Book the room for Tuesday").exists()

    field.fill("Book the room for Wednesday")
    field.press("Enter")
    expect(field).to_have_value("")

    def texts() -> list[str]:
        messages = Message.objects.filter(conversation=conversation, role="user").order_by("id")
        return list(messages.values_list("text", flat=True))

    wait_for(
        lambda: texts() == ["Book the room for Tuesday", "Book the room for Wednesday"],
        timeout=10,
        what=f"both texts to be stored as two messages, not {texts()}",
    )
    expect(page.locator("[data-exchange]")).to_have_count(2)


def test_a_known_client_id_with_other_text_is_explained_and_the_text_kept(page: Page, site):
    user = UserFactory()
    conversation = ConversationFactory(owner=user)
    log_in(page, site, user.username)
    page.goto(f"{site.url}/c/{conversation.pk}/")
    client_id = page.locator("#composer input[name=client_id]")
    used = client_id.input_value()
    field = page.get_by_label("Message")
    field.fill("Order more coffee")
    field.press("Enter")
    expect(field).to_have_value("")
    # A resend the page could not tell apart from a retry (e.g. from an older copy of the page).
    client_id.evaluate("(el, used) => { el.value = used; }", used)
    field.fill("Order more tea")
    field.press("Enter")
    expect(page.locator("[data-composer-errors]")).to_contain_text(
        "already sent with different text"
    )
    expect(field).to_have_value("Order more tea")
    field.press("Enter")
    expect(field).to_have_value("")
    wait_for(
        lambda: Message.objects.filter(conversation=conversation, text="Order more tea").exists(),
        timeout=10,
        what="the edited text to be sent as a new message",
    )


COUNT_SOCKETS = """
window.__sockets = 0;
window.__reconnectWaits = [];
const PageSocket = window.WebSocket;
window.WebSocket = class extends PageSocket {
  constructor(...args) { super(...args); window.__sockets += 1; }
};
const pageSetTimeout = window.setTimeout;
window.setTimeout = (callback, wait, ...args) => {
  if (callback && callback.name === "open") window.__reconnectWaits.push(wait);
  return pageSetTimeout(callback, wait, ...args);
};
"""


def test_a_restarted_web_server_has_the_page_live_within_two_seconds_of_listening(
    page: Page, processes
):
    """A restart of the web program (supervisorctl restart web) takes seconds: the page keeps
    asking about once a second meanwhile, not on a backoff that grew to ten, and says it is
    the connection that is being waited for."""
    web = processes.add(WebProcess())
    user = UserFactory()
    conversation = ConversationFactory(owner=user)
    log_in(page, web, user.username)
    page.add_init_script(COUNT_SOCKETS)
    page.goto(f"{web.url}/c/{conversation.pk}/")
    indicator = page.locator("[data-live-indicator]")
    expect(indicator).to_have_text("live")

    web.kill_all()
    expect(indicator).to_have_text("reconnecting…")
    # Down for as long as a slow restart: the page has tried eight times by then.
    wait_for(
        lambda: page.evaluate("window.__sockets") > 8,
        timeout=60,
        what="eight tries to reconnect",
        every=0.2,
    )
    processes.add(WebProcess(port=web.port))  # back once it answers on its port
    listening = time.monotonic()

    expect(indicator).to_have_text("live", timeout=2_000)
    assert time.monotonic() - listening < 2.5
    waits = page.evaluate("window.__reconnectWaits")
    assert max(waits) <= 1000, waits  # never more than a second between tries meanwhile
