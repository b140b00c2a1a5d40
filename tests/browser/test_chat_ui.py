"""The chat as a person sees it: Markdown while a reply streams, code with Copy buttons, times,
the app-shell layout and the 390 px drawer, light and dark themes, keyboard shortcuts, a skip
link and one announcement per change of an answer's status."""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import Browser, Page, expect

from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.inbox import message_accept
from continuity.live.events import publish_reply_chunk
from continuity.models import Conversation, Message
from tests.helpers.browser import accessibility_violations, log_in, off_the_loop
from tests.helpers.console import dead_letter_make
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import ARTIFACTS, WebProcess, WorkerProcess
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CODE = 'def greet(name):\n    return f"Hello, {name}!"  # say hello'
REPLY = (
    "Here is the plan, **step by step**:\n\n1. Write `greet`\n2. Call it\n\n"
    f"```python\n{CODE}\n```\n\nThen [read the docs](https://docs.python.org/3/)."
)
LIGHT_BG, DARK_BG = "rgb(246, 247, 249)", "rgb(15, 19, 26)"

# Every text the status region was given, in order: it must change once per change of state.
RECORD_ANNOUNCEMENTS = """
window.__announced = [];
document.addEventListener("DOMContentLoaded", () => {
  const status = document.querySelector("[data-answer-status]");
  if (!status) return;
  new MutationObserver(() => window.__announced.push(status.textContent))
    .observe(status, {childList: true, characterData: true, subtree: true});
});
"""


@pytest.fixture
def site(processes):
    # Slow enough tokens that a person (and this test) can watch the reply stream in.
    processes.add(WorkerProcess(CONTINUITY_BUILTIN_TOKEN_DELAY="0.06"))
    return processes.add(WebProcess())


@pytest.fixture
def web(processes):
    return processes.add(WebProcess())


def csp_violations(page: Page) -> list[str]:
    found: list[str] = []
    page.on(
        "console",
        lambda m: found.append(m.text) if "Content Security Policy" in m.text else None,
    )
    return found


def answered_conversation(owner, exchanges: int = 1) -> Conversation:
    """A conversation whose last exchange shows a list, code and a link; the earlier ones make
    it longer than a screen."""
    chat = ConversationFactory(owner=owner, title="Greeting in Python")
    for n in range(exchanges):
        last = n == exchanges - 1
        text = "Show me a greeting\n    in Python, please" if last else f"Question {n}"
        asked = message_accept(conversation=chat, text=text, client_id=uuid.uuid4())
        Message.objects.create(
            conversation=chat,
            role="assistant",
            text=REPLY if last else f"Answer {n}, **briefly**.",
            state="done",
            reply_to=asked,
        )
        Message.objects.filter(pk=asked.pk).update(state="done")
    return chat


def open_chat(page: Page, server: WebProcess, chat: Conversation) -> None:
    page.goto(f"{server.url}/c/{chat.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")


def body_background(page: Page) -> str:
    return page.evaluate("getComputedStyle(document.body).backgroundColor")


def test_markdown_shows_while_the_reply_streams_and_the_status_is_announced_once(page: Page, site):
    log_in(page, site, UserFactory().username)
    page.add_init_script(RECORD_ANNOUNCEMENTS)
    composer = page.get_by_label("Message")
    composer.fill("My goal is to learn Rust")
    composer.press("Enter")
    expect(page).to_have_url(re.compile(r"/c/\d+/$"))
    streaming = page.locator("[data-streaming]")
    # Formatted before the reply is final: the bold goal, then the numbered plan.
    expect(streaming.locator(".streamed-html strong")).to_have_text("learn Rust", timeout=20_000)
    expect(streaming.locator(".streamed-html ol li").first).to_be_visible()
    expect(streaming.locator(".streamed")).to_be_hidden()  # the raw text, kept for the chunks
    assert "**" not in streaming.inner_text()
    reply = page.locator(".bubble.assistant.markdown")
    expect(reply.locator("ol li")).to_have_count(3, timeout=30_000)
    expect(reply.locator("strong")).to_have_text("learn Rust")
    expect(streaming).to_have_count(0)

    # One announcement per change, none per token; the exchanges are not a live region.
    expect(page.locator("[data-answer-status]")).to_have_text("Answered")
    announced = [text for text in page.evaluate("window.__announced") if text]
    assert announced in (["Answering…", "Answered"], ["Answered"]), announced
    assert page.locator("#exchanges").get_attribute("aria-live") is None


def test_a_hostile_streamed_chunk_is_shown_as_text_and_runs_nothing(page: Page, web):
    user = UserFactory()
    chat = ConversationFactory(owner=user)
    message = message_accept(conversation=chat, text="Say something", client_id=uuid.uuid4())
    run = attempt_begin(conversation_id=chat.pk)
    violations = csp_violations(page)
    log_in(page, web, user.username)
    open_chat(page, web, chat)
    expect(page.locator(f'[data-streaming][data-run="{run.pk}"]')).to_be_attached()

    hostile = (
        'Hi **there** <img src=x onerror="window.__pwned = 1"> '
        '<script>window.__pwned = 2</script> <a href="javascript:window.__pwned = 3">a</a> '
        "[b](javascript:window.__pwned=4) ![c](http://evil.example/pixel.png) "
        '<svg onload="window.__pwned = 5"></svg> <b onmouseover="window.__pwned = 6">d</b>'
    )
    off_the_loop(
        publish_reply_chunk,
        conversation_id=chat.pk,
        message_id=message.pk,
        run_id=run.pk,
        seq=1,
        text=hostile,
    )
    shown = page.locator("[data-streaming] .streamed-html")
    expect(shown.locator("strong")).to_have_text("there")
    expect(shown).to_contain_text('<img src=x onerror="window.__pwned = 1">')  # as text
    for selector in ["img", "script", "svg", "b", "[onerror]", "[onload]", "[onmouseover]"]:
        expect(shown.locator(selector)).to_have_count(0)
    hrefs = shown.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert not any(href and href.lower().startswith("javascript:") for href in hrefs), hrefs
    assert "http://evil.example/pixel.png" in hrefs  # the image became a link
    page.locator("[data-streaming]").hover()
    page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned") is None
    # Nothing reached the CSP either: the sanitizer stopped it first.
    assert violations == []


def test_copy_buttons_put_code_and_messages_on_the_clipboard(browser: Browser, web):
    user = UserFactory()
    chat = answered_conversation(user)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=web.url)
    page = context.new_page()
    log_in(page, web, user.username)
    open_chat(page, web, chat)

    code = page.locator(".bubble.assistant.markdown pre.highlight")
    expect(code.locator("span.k").first).to_have_text("def")  # highlighted on the server
    assert code.get_attribute("style") is None
    page.get_by_role("button", name="Copy code").click()
    expect(page.locator("[data-answer-status]")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == CODE

    page.get_by_role("button", name="Copy what you wrote").last.click()
    expect(page.locator("[data-answer-status]")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == (
        "Show me a greeting\n    in Python, please"
    )
    page.get_by_role("button", name="Copy reply").last.click()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("Here is the plan, step by step:") and CODE in copied
    assert "Copy" not in copied  # the buttons' labels are not part of the text
    context.close()


def test_messages_show_their_time_and_user_text_keeps_its_spacing(page: Page, web):
    user = UserFactory()
    chat = answered_conversation(user)
    log_in(page, web, user.username)
    open_chat(page, web, chat)
    asked = page.locator(".bubble.user").last
    expect(asked.locator(".text")).to_have_css("white-space", "pre-wrap")
    assert asked.locator(".text").inner_text() == "Show me a greeting\n    in Python, please"
    for time in [asked.locator("time"), page.locator("[data-reply-meta] time").last]:
        expect(time).to_have_attribute("datetime", re.compile(r"^\d{4}-\d\d-\d\dT"))
        expect(time).to_have_attribute("title", re.compile(r"\d{4}"))
        expect(time).to_have_text(re.compile(r"\d\d:\d\d"))


def test_the_head_sidebar_and_composer_stay_in_view_in_a_long_conversation(page: Page, web):
    user = UserFactory()
    chat = answered_conversation(user, exchanges=25)
    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(page, web, user.username)
    open_chat(page, web, chat)
    exchanges = page.locator("#exchanges")
    assert exchanges.evaluate("el => el.scrollHeight > el.clientHeight")  # it scrolls...
    assert page.evaluate("document.scrollingElement.scrollHeight <= innerHeight")  # the page not
    expect(page.get_by_role("button", name="Copy code")).to_be_in_viewport()  # opens at the end
    exchanges.evaluate("el => { el.scrollTop = 0; }")
    asked = page.locator(".bubble.user .text")
    expect(asked.get_by_text("Question 0", exact=True)).to_be_in_viewport()
    for fixed in [
        page.locator(".topbar"),
        page.locator("[data-live-indicator]"),
        page.get_by_role("navigation", name="Conversations"),
        page.get_by_label("Message"),
        page.get_by_role("button", name="Send"),
    ]:
        expect(fixed).to_be_in_viewport()


def test_keyboard_skip_link_search_and_new_chat(page: Page, web):
    user = UserFactory()
    chat = answered_conversation(user)
    log_in(page, web, user.username)
    open_chat(page, web, chat)

    # First in the tab order: one Shift+Tab back from the first link of the top bar.
    page.get_by_role("link", name="Continuity", exact=True).focus()
    page.keyboard.press("Shift+Tab")
    skip = page.get_by_role("link", name="Skip to the message box")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"
    page.keyboard.press("Enter")
    expect(page.get_by_label("Message")).to_be_focused()

    expect(page.locator("#composer .hint")).to_contain_text("Ctrl+K to search")
    # On a phone-wide window the hint keeps to one line (it took three at 390 px).
    page.set_viewport_size({"width": 390, "height": 800})
    one_line = """(() => {
        const hint = document.querySelector('#composer .hint');
        const size = parseFloat(getComputedStyle(hint).fontSize);
        return hint.getBoundingClientRect().height < 2 * size;
    })()"""
    assert page.evaluate(one_line)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.keyboard.press("Control+k")
    expect(page.locator("#search-q")).to_be_focused()
    page.keyboard.press("Control+Shift+O")
    expect(page).to_have_url(f"{web.url}/")
    expect(page.get_by_role("heading", name="What shall we work on?")).to_be_visible()


def test_at_390_px_the_conversations_drawer_opens_from_the_header(browser: Browser, web):
    user = UserFactory()
    chat = answered_conversation(user)
    ConversationFactory(owner=user, title="Another conversation")
    for script in (True, False):
        context = browser.new_context(
            viewport={"width": 390, "height": 844}, java_script_enabled=script
        )
        page = context.new_page()
        log_in(page, web, user.username, script=script)
        page.goto(f"{web.url}/c/{chat.pk}/")
        drawer = page.get_by_role("navigation", name="Conversations")
        expect(drawer).to_be_hidden()
        opener = page.locator(".topbar").get_by_role(
            "button" if script else "link", name="Conversations"
        )
        opener.click()
        expect(drawer).to_be_visible()
        expect(drawer.get_by_role("link", name="Another conversation")).to_be_visible()
        if script:
            expect(opener).to_have_attribute("aria-expanded", "true")
            expect(drawer.get_by_role("link", name="+ New conversation")).to_be_focused()
            page.screenshot(path=ARTIFACTS / "chat-390-drawer.png")
            assert accessibility_violations(page) == []
        drawer.get_by_role("link", name="Close").click()
        expect(drawer).to_be_hidden()
        if script:
            expect(opener).to_be_focused()
            page.keyboard.press("Control+k")  # search opens the drawer on a small screen
            expect(page.locator("#search-q")).to_be_focused()
            page.keyboard.press("Escape")  # and Esc closes it
            expect(drawer).to_be_hidden()
            expect(opener).to_be_focused()
        context.close()


def test_dark_mode_follows_the_system_and_the_theme_picker(page: Page, web):
    user = UserFactory()
    chat = answered_conversation(user)
    log_in(page, web, user.username)
    open_chat(page, web, chat)
    assert body_background(page) == LIGHT_BG
    page.emulate_media(color_scheme="dark")
    assert body_background(page) == DARK_BG

    theme = page.get_by_label("Theme")
    expect(theme).to_have_value("system")
    theme.select_option("light")  # a choice beats the system's setting, and is kept
    assert page.evaluate("document.documentElement.dataset.theme") == "light"
    assert body_background(page) == LIGHT_BG
    page.reload()
    assert body_background(page) == LIGHT_BG
    page.emulate_media(color_scheme="light")
    page.get_by_label("Theme").select_option("dark")
    assert body_background(page) == DARK_BG
    page.goto(f"{web.url}/memory/")  # every page, not only the chat
    assert body_background(page) == DARK_BG
    page.get_by_label("Theme").select_option("system")
    assert page.evaluate("document.documentElement.dataset.theme") is None
    assert body_background(page) == LIGHT_BG


@pytest.mark.parametrize("width", [1280, 390])
def test_no_accessibility_violations_in_either_theme_and_screenshots(browser: Browser, web, width):
    user = UserFactory()
    chat = answered_conversation(user, exchanges=3)
    Conversation.objects.filter(pk=chat.pk).update(state="paused")  # the banner shows too
    context = browser.new_context(viewport={"width": width, "height": 900 if width > 400 else 844})
    page = context.new_page()
    violations = csp_violations(page)
    log_in(page, web, user.username)
    ARTIFACTS.mkdir(exist_ok=True)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.goto(f"{web.url}/")
        expect(page.get_by_role("heading", name="What shall we work on?")).to_be_visible()
        assert accessibility_violations(page) == [], (scheme, width, "/")
        open_chat(page, web, chat)
        expect(page.get_by_role("button", name="Copy code")).to_be_visible()
        assert accessibility_violations(page) == [], (scheme, width, "a conversation")
        # Nothing wider than the screen: long code scrolls inside its own block.
        assert page.locator("main.chat").evaluate("el => el.scrollWidth <= el.clientWidth")
        page.screenshot(path=ARTIFACTS / f"chat-{width}-{scheme}.png")
    assert violations == []
    context.close()


def test_the_other_pages_are_accessible_in_the_dark_theme(page: Page, web):
    staff = UserFactory(is_staff=True)
    chat = answered_conversation(staff)
    dead_letter_make(chat, "Summarize [[broken]]")
    log_in(page, web, staff.username)
    page.emulate_media(color_scheme="dark")
    for path in [
        "/memory/",
        "/accounts/password/",
        "/conversations/",
        "/search/?q=greeting",
        "/dashboard/",
        "/dashboard/dead-letters/",
    ]:
        page.goto(web.url + path)
        page.wait_for_load_state("networkidle")
        assert body_background(page) == DARK_BG, path
        assert accessibility_violations(page) == [], path


# Each WebSocket the page opens, and the wait before each reconnect the page schedules.
RECORD_RECONNECTS = """
window.__sockets = [];
window.__reconnectWaits = [];
const PageSocket = window.WebSocket;
window.WebSocket = class extends PageSocket {
  constructor(...args) { super(...args); window.__sockets.push(this); }
};
const pageSetTimeout = window.setTimeout;
window.setTimeout = (callback, wait, ...args) => {
  if (callback && callback.name === "open") window.__reconnectWaits.push(wait);
  return pageSetTimeout(callback, wait, ...args);
};
"""


def test_pages_that_lose_their_socket_reconnect_after_random_waits_not_all_at_once(page: Page, web):
    """Equal jitter: each reconnect waits a random time between half the backoff and all of it
    (a quarter to half a second after one failure), so a restarted server is not met by every
    page in the same instant."""
    user = UserFactory()
    chat = ConversationFactory(owner=user)
    log_in(page, web, user.username)
    page.add_init_script(RECORD_RECONNECTS)
    open_chat(page, web, chat)
    for closed in range(1, 9):
        page.evaluate("window.__sockets.at(-1).close()")
        wait_for(
            lambda n=closed: page.evaluate("window.__sockets.length") > n,
            timeout=10,
            what="the page to open a new socket",
        )
        expect(page.locator("[data-live-indicator]")).to_have_text("live")
    waits = page.evaluate("window.__reconnectWaits")
    assert len(waits) == 8 and all(250 <= wait <= 500 for wait in waits), waits
    assert len(set(waits)) > 1, waits
