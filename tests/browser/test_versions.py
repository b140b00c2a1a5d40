"""Regenerate, edit and resend, switch versions, and older exchanges on scroll, in headless
Chromium with daphne, a Celery worker running the `openai` brain, and the fake model server
(whose answers are numbered, so a regenerated reply differs from the first)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from continuity.actions import version_show
from continuity.models import Message, Run, RunContext
from devtools.fake_model import FakeOpenAI, worker_settings
from tests.helpers.browser import accessibility_violations, log_in, off_the_loop
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.messages import answered
from tests.helpers.processes import ARTIFACTS, WebProcess, WorkerProcess
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def fake():
    server = FakeOpenAI(delay=0.01, numbered=True).start()
    yield server
    server.stop()


@pytest.fixture
def site(processes, fake) -> WebProcess:
    processes.add(WorkerProcess(**worker_settings(fake)))
    return processes.add(WebProcess())


def ask(page: Page, text: str) -> None:
    before = page.locator("article.exchange").count()
    page.get_by_label("Message").fill(text)
    page.get_by_label("Message").press("Enter")
    expect(page.locator("article.exchange")).to_have_count(before + 1)
    expect(page.locator("article.exchange").last).to_have_attribute("data-state", "done")


def replies(page: Page) -> list[str]:
    return [text.strip() for text in page.locator(".bubble.assistant").all_inner_texts()]


def shown(conversation) -> list[str]:
    rows = conversation.messages.shown().order_by("id")
    return list(rows.values_list("text", flat=True))


def test_regenerate_then_edit_then_walk_back_through_the_versions(page: Page, site):
    user = UserFactory()
    chat = ConversationFactory(owner=user)
    log_in(page, site, user.username)
    page.goto(f"{site.url}/c/{chat.pk}/")
    ask(page, "Plan the trip")
    ask(page, "Pack the bags")
    assert replies(page) == ["Take 1. You said: Plan the trip", "Take 1. You said: Pack the bags"]
    expect(page.get_by_role("button", name="Regenerate")).to_have_count(1)  # the last reply only

    # Regenerate: the new reply replaces the old one on the page; the old one is a version.
    page.get_by_role("button", name="Regenerate").click()
    expect(page.get_by_text("Reply 2 of 2")).to_be_visible()
    expect(page.locator(".bubble.assistant").last).to_have_text("Take 2. You said: Pack the bags")
    pack, pack_again = Message.objects.filter(text="Pack the bags").order_by("id")
    assert pack_again.version_of == pack and pack.hidden_with == pack
    assert pack.reply.text == "Take 1. You said: Pack the bags"  # kept
    assert wait_for(
        lambda: pack_again.runs.filter(state=Run.State.COMPLETED).count() == 1,
        timeout=10,
        what="one completed run of the regenerated message",
    )
    page.screenshot(path=ARTIFACTS / "versions-regenerated.png")
    page.locator("details.edit summary").first.click()  # the edit form open, too
    assert accessibility_violations(page) == []
    page.locator("details.edit summary").first.click()

    page.get_by_role("button", name="Previous version").click()
    expect(page.get_by_text("Reply 1 of 2")).to_be_visible()
    expect(page.locator(".bubble.assistant").last).to_have_text("Take 1. You said: Pack the bags")
    assert shown(chat)[-1] == "Take 1. You said: Pack the bags"

    # Edit the first message: a new branch from there; the later exchange goes with the old one.
    plan = Message.objects.get(text="Plan the trip")
    exchange = page.locator(f"#exchange-{plan.pk}")
    exchange.get_by_text("Edit", exact=True).click()
    exchange.get_by_label("Edited text").fill("Plan the holiday")
    exchange.get_by_role("button", name="Save edit").click()
    expect(page.get_by_text("Version 2 of 2")).to_be_visible()
    expect(page.locator(".bubble.assistant")).to_have_text(["Take 1. You said: Plan the holiday"])
    expect(page.get_by_text("Pack the bags")).to_have_count(0)
    holiday = Message.objects.get(text="Plan the holiday")
    assert holiday.version_of == plan and shown(chat) == [
        "Plan the holiday",
        "Take 1. You said: Plan the holiday",
    ]
    # What the model was given for the edited message: nothing of the other branch.
    context = RunContext.objects.get(run__message=holiday)
    assert context.turns == [] and context.waiting == []
    assert "Pack the bags" not in str(fake_messages_of(holiday))
    page.screenshot(path=ARTIFACTS / "versions-edited.png")

    # Back to the first version: its branch returns as it was left, "Reply 1 of 2" included.
    page.get_by_role("button", name="Previous version").click()
    expect(page.get_by_text("Version 1 of 2")).to_be_visible()
    expect(page.locator(".bubble.assistant")).to_have_text(
        ["Take 1. You said: Plan the trip", "Take 1. You said: Pack the bags"]
    )
    expect(page.get_by_text("Reply 1 of 2")).to_be_visible()
    page.reload()
    expect(page.get_by_text("Version 1 of 2")).to_be_visible()
    expect(page.locator(".bubble.assistant")).to_have_count(2)


def fake_messages_of(message: Message) -> list[str]:
    """The turns the attempt's context held, as texts (what the brain built its prompt from)."""
    context = RunContext.objects.get(run__message=message)
    return list(Message.objects.filter(pk__in=context.turns).values_list("text", flat=True))


def test_a_second_tab_follows_a_switch_of_versions(page: Page, site):
    user = UserFactory()
    chat = ConversationFactory(owner=user)
    log_in(page, site, user.username)
    page.goto(f"{site.url}/c/{chat.pk}/")
    ask(page, "Name a colour")
    other = page.context.new_page()
    other.goto(f"{site.url}/c/{chat.pk}/")
    expect(other.locator("[data-live-indicator]")).to_have_text("live")
    page.get_by_role("button", name="Regenerate").click()
    expect(other.locator(".bubble.assistant")).to_have_text(["Take 2. You said: Name a colour"])
    page.get_by_role("button", name="Previous version").click()
    expect(other.locator(".bubble.assistant")).to_have_text(["Take 1. You said: Name a colour"])
    expect(other.get_by_text("Reply 1 of 2")).to_be_visible()


def test_a_switch_of_versions_missed_while_offline_reloads_the_page_once_it_reconnects(
    page: Page, site, processes
):
    user = UserFactory()
    chat = ConversationFactory(owner=user)
    log_in(page, site, user.username)
    page.goto(f"{site.url}/c/{chat.pk}/")
    ask(page, "Name a colour")
    page.get_by_role("button", name="Regenerate").click()
    expect(page.get_by_text("Reply 2 of 2")).to_be_visible()
    expect(page.locator("article.exchange").last).to_have_attribute("data-state", "done")
    first = Message.objects.get(text="Name a colour", version_of__isnull=True)
    wait_for(
        lambda: not Run.objects.filter(state=Run.State.RUNNING).exists(),
        timeout=10,
        what="the regenerated attempt to end",
    )

    site.kill_all()
    expect(page.locator("[data-live-indicator]")).to_have_text(re.compile("reconnecting"))
    off_the_loop(version_show, message=first)  # published to nobody
    # The catch-up counts one more change of branch than the page saw, and no event follows
    # it: the page reloads.
    with page.expect_navigation(timeout=20_000):
        processes.add(WebProcess(port=site.port))
    expect(page.get_by_text("Reply 1 of 2")).to_be_visible()
    expect(page.locator(".bubble.assistant")).to_have_text(["Take 1. You said: Name a colour"])


def test_older_exchanges_load_when_scrolling_up(page: Page, site):
    user = UserFactory()
    chat = ConversationFactory(owner=user)
    for n in range(70):
        answered(chat, f"Question {n}")
    log_in(page, site, user.username)
    page.goto(f"{site.url}/c/{chat.pk}/")
    expect(page.locator("article.exchange")).to_have_count(30)
    expect(page.locator("article.exchange").last).to_contain_text("Question 69")
    for expected in (60, 70):
        page.locator("#exchanges").evaluate("box => { box.scrollTop = 0; }")
        expect(page.locator("article.exchange")).to_have_count(expected)
    expect(page.locator("article.exchange").first).to_contain_text("Question 0")
    expect(page.locator("[data-load-older]")).to_have_count(0)
    # What was in view stays in view: the older exchanges went above it.
    texts = page.locator("article.exchange .bubble.user .text").all_inner_texts()
    assert texts == [f"Question {n}" for n in range(70)]


# Where the exchange just below the "load older" marker is on screen right before an older page
# is swapped in, and one frame after it settled: how far the reader's place moved.
RECORD_OLDER_PAGE_SHIFTS = """
window.__olderShifts = [];
let anchor = null;
const loadsOlder = (event) => event.detail.requestConfig?.elt?.matches?.("[data-load-older]");
document.addEventListener("htmx:beforeSwap", (event) => {
  if (!loadsOlder(event)) return;
  const exchange = event.detail.requestConfig.elt.nextElementSibling;
  anchor = [exchange, exchange.getBoundingClientRect().top];
});
document.addEventListener("htmx:afterSettle", (event) => {
  if (!loadsOlder(event) || !anchor) return;
  const [exchange, top] = anchor;
  anchor = null; // settled once per element of the page: measured once
  requestAnimationFrame(() => {
    window.__olderShifts.push([exchange.id, exchange.getBoundingClientRect().top - top]);
  });
});
"""


def test_scrolling_up_with_the_wheel_loads_one_page_at_a_time_and_keeps_the_readers_place(
    page: Page, site
):
    user = UserFactory()
    chat = ConversationFactory(owner=user)
    for n in range(100):
        answered(chat, f"Question {n}")
    log_in(page, site, user.username)
    page.add_init_script(RECORD_OLDER_PAGE_SHIFTS)
    page.goto(f"{site.url}/c/{chat.pk}/")
    exchanges = page.locator("article.exchange")
    expect(exchanges).to_have_count(30)
    box = page.locator("#exchanges").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)

    for loaded in (30, 60, 90):
        while exchanges.count() == loaded:
            if page.locator(".htmx-request").count():  # loading: a notch now would be measured
                page.wait_for_timeout(20)
                continue
            page.mouse.wheel(0, -200)
            # Notch by notch at a person's pace: at 50 ms a loaded machine let the next notch
            # land while the page the last one revealed was loading, and measured it.
            page.wait_for_timeout(150)
        expect(exchanges).to_have_count(min(loaded + 30, 100))  # one page, not a cascade
        page.wait_for_timeout(300)  # a cascade would load the next page by now
        assert exchanges.count() == min(loaded + 30, 100)
        assert page.locator("#exchanges").evaluate("el => el.scrollTop") > 0
    expect(exchanges.first).to_contain_text("Question 0")
    shifts = wait_for(
        lambda: (found := page.evaluate("window.__olderShifts")) and len(found) == 3 and found,
        timeout=5,
        what="the three page loads measured",
    )
    assert all(abs(shift) < 50 for _, shift in shifts), shifts
