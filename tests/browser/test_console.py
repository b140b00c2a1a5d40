"""Staff in the console, a user on their conversation: both in headless Chromium, against the
whole stack (daphne, real Celery workers, the watchdog, PostgreSQL, Redis)."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.db.models.functions import Now
from playwright.sync_api import Browser, Page, expect

from continuity.delivery.inbox import message_accept
from continuity.models import Conversation, DeadLetter, HistoryBucket, Message, Run, StaffAction
from tests.helpers.brains import KILL_TWICE
from tests.helpers.browser import accessibility_violations, log_in
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import ARTIFACTS, WatchdogProcess, WebProcess, WorkerProcess
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FAULTY = {"CONTINUITY_BRAIN": "faulty", "CONTINUITY_BUILTIN_TOKEN_DELAY": "0.01"}
POISON = "[[invalid]]"  # the faulty brain's PermanentError: dead-lettered at the first attempt


def page_of(browser: Browser, site: WebProcess, username: str, **user) -> Page:
    UserFactory(username=username, **user)
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    log_in(page, site, username)
    return page


def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / name, full_page=True)


def assert_accessible(page: Page) -> None:
    assert accessibility_violations(page) == [], page.url


def dead_letter_of(message_text: str) -> DeadLetter:
    return wait_for(
        lambda: DeadLetter.objects.filter(message__text=message_text).first(),
        timeout=30,
        what=f"a dead letter for {message_text!r}",
    )


def test_staff_edit_and_retry_a_poison_message_and_its_user_sees_one_reply(browser, processes):
    processes.add(WorkerProcess(**FAULTY))
    processes.add(WatchdogProcess())
    site = processes.add(WebProcess())
    user = page_of(browser, site, "ann")
    staff = page_of(browser, site, "opal", is_staff=True)

    poison = f"{POISON} My name is Ada"
    user.get_by_label("Message").fill(poison)
    user.keyboard.press("Enter")
    expect(user.locator('[data-outcome="pending"]')).to_contain_text(
        "set aside for staff to review"  # ADMINS is empty in the tests: nobody was mailed
    )
    dead_letter = dead_letter_of(poison)

    staff.goto(f"{site.url}/dashboard/")
    expect(staff.locator('[data-tile="dead-letters"] .n')).to_have_text("1")
    screenshot(staff, "console-overview.png")
    assert_accessible(staff)
    staff.locator('[data-tile="dead-letters"]').click()
    staff.locator(f'[data-dead-letter="{dead_letter.pk}"]').get_by_role(
        "link", name=re.compile("My name is Ada")
    ).last.click()
    expect(staff.locator("[data-message-text]")).to_have_text(poison)
    expect(staff.locator('[data-attempt="1"]')).to_contain_text("PermanentError")
    screenshot(staff, "console-dead-letter.png")
    assert_accessible(staff)
    staff.get_by_label("Corrected message").fill("My name is Ada")
    staff.locator('[data-action="edit"]').get_by_label("Reason (optional)").fill("marker removed")
    staff.get_by_role("button", name="Edit and retry").click()
    expect(staff.locator(".flash")).to_contain_text("Asked again as message")
    expect(staff.locator('[data-audit="edit_and_retry"]')).to_contain_text("marker removed")
    screenshot(staff, "console-dead-letter-retried.png")
    assert_accessible(staff)

    # The user's open page follows without a reload: the notice changes, the re-ask is answered.
    expect(user.locator('[data-outcome="retried"]')).to_contain_text(
        "Staff sent this message again, corrected"
    )
    expect(user.locator("[data-reasked-from]")).to_contain_text("Edited by staff and sent again")
    expect(user.locator(".bubble.assistant")).to_have_count(1)
    expect(user.locator(".bubble.assistant")).to_contain_text("Nice to meet you, Ada")
    assert_accessible(user)
    user.reload()
    expect(user.locator(".bubble.assistant")).to_have_count(1)

    replies = Message.objects.filter(conversation=dead_letter.conversation, role="assistant")
    assert [reply.reply_to.text for reply in replies] == ["My name is Ada"]
    action = StaffAction.objects.get(dead_letter=dead_letter)
    assert (action.kind, action.actor_name, action.details["original_text"]) == (
        "edit_and_retry",
        "opal",
        poison,
    )


def test_bulk_retry_of_five_asks_each_once_after_the_fix_is_deployed(browser, processes):
    broken = processes.add(WorkerProcess(**FAULTY))
    owner = UserFactory()
    texts = [f"{POISON} question {n}" for n in range(5)]
    for text in texts:
        chat = ConversationFactory(owner=owner)
        message_accept(conversation=chat, text=text, client_id=uuid.uuid4())
    letters = [dead_letter_of(text) for text in texts]
    broken.stop()
    processes.add(WorkerProcess(CONTINUITY_BUILTIN_TOKEN_DELAY="0.01"))  # the fixed brain
    site = processes.add(WebProcess())
    staff = page_of(browser, site, "opal", is_staff=True)

    staff.goto(f"{site.url}/dashboard/dead-letters/?status=pending&q=question")
    staff.get_by_role("button", name="Retry all 5…").click()
    expect(staff.get_by_role("heading", name="Retry 5 dead letters?")).to_be_visible()
    screenshot(staff, "console-bulk-confirmation.png")
    assert_accessible(staff)
    staff.get_by_role("button", name="Yes, retry 5").click()
    expect(staff.locator(".flash")).to_contain_text("5 dead letters retried")

    reasks = wait_for(
        lambda: (
            found
            if len(
                found := list(
                    Message.objects.filter(reasked_from__in=[d.message_id for d in letters])
                )
            )
            == 5
            and all(m.state == "done" for m in found)
            else None
        ),
        timeout=60,
        what="the five re-asks to be answered",
    )
    for reask in reasks:
        assert Run.objects.filter(message=reask).count() == 1  # one new attempt each
        assert Message.objects.filter(reply_to=reask).count() == 1
        assert not Message.objects.filter(reply_to_id=reask.reasked_from_id).exists()
    assert set(DeadLetter.objects.values_list("status", flat=True)) == {"retried"}
    assert StaffAction.objects.filter(kind="retry").count() == 5


def test_console_pages_work_at_390_px_and_without_javascript(browser, processes):
    site = processes.add(WebProcess())
    chat = ConversationFactory(state="paused", paused_reason="3 crashes in 1 hour")
    UserFactory(username="opal", is_staff=True)
    context = browser.new_context(viewport={"width": 390, "height": 844}, java_script_enabled=False)
    page = context.new_page()
    page.goto(f"{site.url}/accounts/login/?next=/dashboard/paused/")
    page.get_by_label("Username").fill("opal")
    page.get_by_label("Password").fill("correct horse battery staple")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(f'[data-conversation="{chat.pk}"]')).to_be_visible()
    for path in [
        "/dashboard/",
        "/dashboard/dead-letters/",
        "/dashboard/crashes/",
        "/dashboard/alerts/",
    ]:
        page.goto(site.url + path)
        # Nothing wider than the screen, except inside the scrollable table wrappers.
        overflow = page.evaluate("document.documentElement.scrollWidth")
        assert overflow <= 390, (path, overflow)
    page.goto(f"{site.url}/dashboard/conversations/{chat.pk}/")
    page.get_by_label("Reason").fill("worker fixed")
    page.get_by_role("button", name="Resume").click()
    expect(page.locator('[data-state="active"]')).to_be_visible()
    expect(page.locator('[data-audit="resume"]')).to_contain_text("worker fixed")
    screenshot(page, "console-conversation-390.png")


def test_staff_retry_now_from_the_waiting_page_and_the_message_is_answered(browser, processes):
    chat = ConversationFactory(owner=UserFactory(), title="Long backoff")
    asked = message_accept(conversation=chat, text="My name is Ada", client_id=uuid.uuid4())
    Message.objects.filter(pk=asked.pk).update(attempts=1)
    # A crashed attempt's backoff, far off: only Retry now gets it answered soon. Set before
    # a worker runs, which would otherwise answer the message at once.
    Conversation.objects.filter(pk=chat.pk).update(retry_at=Now() + timedelta(minutes=10))
    processes.add(WorkerProcess())
    site = processes.add(WebProcess())
    staff = page_of(browser, site, "opal", is_staff=True)

    staff.goto(f"{site.url}/dashboard/waiting/")
    row = staff.locator(f'[data-waiting="{chat.pk}"]')
    expect(row.locator("[data-why]")).to_have_text("Backing off after a failed or crashed attempt")
    expect(row).to_contain_text(re.compile(r"in (9|10) min"))
    for width, scheme in ((1280, "light"), (1280, "dark"), (390, "light"), (390, "dark")):
        staff.set_viewport_size({"width": width, "height": 900})
        staff.emulate_media(color_scheme=scheme)
        assert_accessible(staff)
        screenshot(staff, f"console-waiting-{width}-{scheme}.png")
    staff.set_viewport_size({"width": 1280, "height": 900})

    row.get_by_text("Retry now…").click()
    row.get_by_label("Why end its wait now").fill("The model server is back")
    row.get_by_role("button", name="Retry now").click()
    expect(staff.get_by_text("Long backoff: its wait is over, it is tried now.")).to_be_visible()
    wait_for(
        lambda: Message.objects.get(pk=asked.pk).state == "done", timeout=30, what="the answer"
    )
    staff.reload()
    expect(staff.locator(f'[data-waiting="{chat.pk}"]')).to_have_count(0)
    action = StaffAction.objects.get(kind="retry_now")
    assert (action.reason, action.conversation_id) == ("The model server is back", chat.pk)


def test_staff_stop_a_reply_from_the_console_while_its_user_watches(browser, processes):
    processes.add(WorkerProcess(CONTINUITY_BUILTIN_TOKEN_DELAY="0.1"))
    site = processes.add(WebProcess())
    user = page_of(browser, site, "ann")
    staff = page_of(browser, site, "opal", is_staff=True)

    user.get_by_label("Message").fill(
        "Hi, my name is Ada, my goal is to finish the migration, and I like tea."
    )
    user.get_by_role("button", name="Send").click()
    expect(user.locator("[data-streaming] .streamed")).not_to_be_empty(timeout=20_000)
    run = Run.objects.get(state="running")

    staff.goto(f"{site.url}/dashboard/")
    staff.locator(f'[data-stop-run="{run.pk}"]').click()
    expect(staff.get_by_role("heading", name=f"Stop attempt {run.pk}?")).to_be_visible()
    assert_accessible(staff)
    staff.get_by_label("Why stop it").fill("A runaway reply")
    staff.get_by_role("button", name="Stop the reply").click()
    expect(staff.get_by_text(f"Attempt {run.pk} stopped")).to_be_visible()

    stopped = user.locator("[data-stopped]")
    expect(stopped).to_have_text("Stopped by staff: this reply was cut short.")
    expect(user.locator("[data-streaming]")).to_have_count(0)
    reply = Message.objects.get(reply_to=run.message_id)
    assert reply.stopped_by_staff and reply.text  # what was written stays
    assert StaffAction.objects.get(kind="stop").reason == "A runaway reply"


def test_the_timeline_of_a_message_that_crashed_twice_then_was_answered(browser, processes):
    processes.add(WorkerProcess(**FAULTY))
    processes.add(WatchdogProcess())
    site = processes.add(WebProcess())
    user = page_of(browser, site, "ann")
    staff = page_of(browser, site, "opal", is_staff=True)
    user.get_by_label("Message").fill(f"{KILL_TWICE} Hi, my name is Ada and I like tea.")
    user.keyboard.press("Enter")
    message = wait_for(
        lambda: Message.objects.filter(text__startswith=KILL_TWICE, state="done").first(),
        timeout=60,
        what="the answer after two crashes",
    )
    # The person's page: one short line for the two interruptions, said once.
    exchange = user.locator(f"#exchange-{message.pk}")
    expect(exchange.locator(".banner.recovery")).to_have_count(1)
    expect(exchange.locator(".banner.recovery")).to_contain_text("and 2 times in all")
    expect(exchange.locator(".bubble.assistant")).not_to_contain_text("interrupted")

    # Found from the message id the user's page has (#exchange-<id>).
    staff.goto(f"{site.url}/dashboard/")
    staff.get_by_label("Message id").fill(f"exchange-{message.pk}")
    staff.get_by_role("button", name="Timeline").click()
    expect(staff.get_by_role("heading", name=f"Timeline of message {message.pk}")).to_be_visible()
    events = staff.locator("[data-timeline] li")
    kinds = [event.get_attribute("data-event") for event in events.all()]
    # The reply and its attempt's end are stored in one transaction: either may be listed last.
    assert kinds[0] == "accepted" and "reply" in kinds[-2:]
    assert kinds.count("crash") == 4  # each crash: its last sign of life, and when noticed
    assert kinds.count("recovery") == 2 and kinds.count("attempt") >= 4
    expect(events.filter(has_text="Attempt 3 started")).to_have_count(1)
    expect(events.filter(has_text="crash noticed")).to_have_count(2)
    assert_accessible(staff)
    screenshot(staff, "console-timeline.png")


def every_width_and_scheme(page: Page, name: str) -> None:
    for width, scheme in ((1280, "light"), (1280, "dark"), (390, "light"), (390, "dark")):
        page.set_viewport_size({"width": width, "height": 900})
        page.emulate_media(color_scheme=scheme)
        assert_accessible(page)
        screenshot(page, f"{name}-{width}-{scheme}.png")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.emulate_media(color_scheme="light")


def test_staff_shrink_a_pool_and_shut_a_worker_down_from_the_workers_table(browser, processes):
    worker = processes.add(WorkerProcess(concurrency=2, CONTINUITY_BUILTIN_TOKEN_DELAY="0.05"))
    site = processes.add(WebProcess())
    user = page_of(browser, site, "ann")
    staff = page_of(browser, site, "opal", is_staff=True)
    staff.goto(f"{site.url}/dashboard/")
    staff.get_by_role("link", name="Workers", exact=True).first.click()
    row = staff.locator(f'[data-worker="{worker.node}"]')

    def pool_shown() -> str:  # a worker busy starting up may not answer the first time
        staff.reload()
        return row.locator("[data-pool]").inner_text()

    wait_for(lambda: pool_shown() == "2 processes, 0 busy", timeout=15, what="a pool of 2")
    every_width_and_scheme(staff, "console-workers")

    row.get_by_role("link", name="Shrink pool…").click()
    expect(staff.get_by_role("heading", name=f"Shrink the pool of {worker.node}?")).to_be_visible()
    every_width_and_scheme(staff, "console-worker-shrink")
    staff.get_by_label("Why").fill("A quiet night")
    staff.get_by_role("button", name="Shrink the pool").click()
    expect(
        staff.get_by_text(f"Worker {worker.node} shrank its pool by one: it has 1 process now.")
    ).to_be_visible()
    # The page it leads to shows the pool as it is now, without a reload.
    expect(row.locator("[data-pool]")).to_have_text(re.compile(r"^1 process, \d busy$"))
    expect(staff.locator('[data-audit="pool_shrink"]')).to_contain_text("A quiet night")

    # A graceful shutdown while the user watches a reply: it is handed over, not lost.
    user.get_by_label("Message").fill(
        "Hi, my name is Ada, my goal is to finish the migration, and I like tea."
    )
    user.get_by_role("button", name="Send").click()
    expect(user.locator("[data-streaming] .streamed")).not_to_be_empty(timeout=20_000)
    row.get_by_role("link", name="Shut down…").click()
    staff.get_by_label("Why").fill("Moving to a new host")
    staff.get_by_role("button", name="Shut it down").click()
    expect(staff.get_by_text(f"Worker {worker.node} shuts down")).to_be_visible()
    wait_for(lambda: not worker.alive(), timeout=40, what="the worker to exit", every=0.2)
    staff.reload()
    expect(row.locator(".status")).to_have_text("stopped")
    expect(row.locator("[data-pool]")).to_have_text("–")
    expect(user.locator("#conversation-status")).to_contain_text(
        "as soon as a worker is free", timeout=15_000
    )
    processes.add(WorkerProcess())
    expect(user.locator("article.exchange").last).to_have_attribute(
        "data-state", "done", timeout=30_000
    )
    message = Message.objects.get(text__startswith="Hi, my name is Ada")
    assert list(message.runs.order_by("id").values_list("state", flat=True)) == [
        "interrupted",
        "completed",
    ]


def test_the_history_charts_show_what_the_watchdog_counted(browser, processes):
    processes.add(WorkerProcess())
    processes.add(WatchdogProcess(CONTINUITY_HISTORY_EVERY_SECONDS="0.5"))
    site = processes.add(WebProcess())
    user = page_of(browser, site, "ann")
    staff = page_of(browser, site, "opal", is_staff=True)
    for text in ("Hi, my name is Ada", "What is my name?"):
        user.get_by_label("Message").fill(text)
        user.keyboard.press("Enter")
        expect(user.locator("article.exchange").last).to_have_attribute("data-state", "done")
    wait_for(
        lambda: HistoryBucket.objects.filter(queue_depth__isnull=False).exists(),
        timeout=10,
        what="a queue depth sample",
    )

    staff.goto(f"{site.url}/dashboard/")
    staff.get_by_role("link", name="History").click()
    answered = staff.locator('[data-chart="answered"] figcaption')
    expect(answered).to_contain_text("Messages answered: 2 over the last 24 hours")
    expect(staff.locator('[data-chart="latency"] figcaption')).to_contain_text(re.compile("p50"))
    expect(staff.locator('[data-chart="queue"] figcaption')).to_contain_text("at most")
    every_width_and_scheme(staff, "console-history")
    staff.get_by_role("link", name="7 days").click()
    expect(answered).to_contain_text("Messages answered: 2 over the last 7 days")
    assert_accessible(staff)


def test_the_tools_page_shows_each_tools_calls_and_links_its_failures(browser, processes):
    from continuity.models import ToolCall

    site = processes.add(WebProcess())
    chat = ConversationFactory(title="Ledger")
    message = Message.objects.create(conversation=chat, text="Append rent", state="done")
    for position, state in enumerate(["done", "done", "error", "in_doubt", "denied"]):
        ToolCall.objects.create(
            message=message, round=1, position=position, call_id=f"c{position}",
            tool="ledger_append", source="ledger", state=state, started_at=Now(), ended_at=Now(),
            result="The server said no." if state == "error" else "",
        )  # fmt: skip
    staff = page_of(browser, site, "opal", is_staff=True)

    staff.goto(f"{site.url}/dashboard/")
    staff.get_by_role("link", name="Tools").click()
    row = staff.locator('[data-tool="ledger_append"]')
    expect(row.locator("[data-calls]")).to_have_text("5")
    expect(row.locator("[data-errors]")).to_have_text("1")
    expect(row.locator("[data-in-doubt]")).to_have_text("1")
    expect(row.locator("[data-denied]")).to_have_text("1")
    every_width_and_scheme(staff, "console-tools")
    staff.locator("[data-failure]").first.get_by_role("link").click()
    expect(staff).to_have_url(re.compile(rf"/dashboard/messages/{message.pk}/timeline/"))
