"""Tool calls as the person sees them, with real workers and the real MCP test server: each
call a block that appears and changes state live; a call a SIGKILL left in doubt asks its owner,
and Run again and Skip do what they say. axe-core finds nothing wrong, light and dark, at 1280
and 390 px."""

from __future__ import annotations

import os
import re
import signal
from collections import Counter

import pytest
from playwright.sync_api import Page, expect

from continuity.models import Message, Run, ToolCall
from devtools.mcp_server import ledger_lines
from tests.helpers.brains import tool_trigger
from tests.helpers.browser import accessibility_violations, log_in, send_from_page
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import (
    ARTIFACTS,
    McpServerProcess,
    WatchdogProcess,
    WebProcess,
    WorkerProcess,
    process_id,
)
from tests.helpers.tool_servers import ledger_servers_env
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SIZES = [{"width": 1280, "height": 900}, {"width": 390, "height": 844}]


def open_chat(page: Page, web, conversation) -> None:
    log_in(page, web, conversation.owner.username)
    page.goto(f"{web.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")


def screenshot(page: Page, name: str) -> None:
    """For the record (test-artifacts/): how the page looked at this step."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png", full_page=True)


def assert_clean_everywhere(page: Page) -> None:
    for size in SIZES:
        page.set_viewport_size(size)
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            assert accessibility_violations(page) == [], (size, scheme)
    page.emulate_media(color_scheme="light")
    page.set_viewport_size(SIZES[0])


def test_a_built_in_tool_call_appears_live_as_a_block_in_the_reply(page: Page, processes):
    processes.add(WorkerProcess())
    web = processes.add(WebProcess())
    conversation = ConversationFactory(owner=UserFactory())
    open_chat(page, web, conversation)

    send_from_page(page, "Remember that I like tea")

    block = page.locator("[data-tool-call]")
    expect(block).to_have_attribute("data-tool-state", "done", timeout=20_000)
    expect(block.locator("summary")).to_contain_text("Remembered a fact · done")
    expect(page.locator(".bubble.assistant")).to_contain_text("I'll remember that you like tea.")
    block.locator("summary").click()
    expect(block.locator(".tool-arguments")).to_contain_text("you like tea")
    expect(block.locator(".tool-result")).to_have_text("Remembered (note): you like tea")
    assert_clean_everywhere(page)


def test_a_call_left_in_doubt_by_a_sigkill_is_run_again_or_skipped_from_the_page(
    page: Page, processes
):
    tools = processes.add(McpServerProcess())
    servers = ledger_servers_env(tools.url)
    processes.add(WorkerProcess(CONTINUITY_BRAIN="faulty", CONTINUITY_MCP_SERVERS=servers))
    processes.add(WatchdogProcess())
    web = processes.add(WebProcess())
    conversation = ConversationFactory(owner=UserFactory())
    open_chat(page, web, conversation)

    def ledger() -> Counter:
        return Counter(line["key"] for line in ledger_lines(tools.ledger))

    def kill_while_it_runs(entry: str) -> ToolCall:
        send_from_page(page, tool_trigger("ledger_append", entry=entry, first_wait=30))
        running = wait_for(
            lambda: ToolCall.objects.filter(state="running").first(), timeout=20, what="a call"
        )
        wait_for(lambda: ledger()[str(running.key)], timeout=20, what="the server to run it")
        os.kill(process_id(Run.objects.get(state="running")), signal.SIGKILL)
        return wait_for(
            lambda: ToolCall.objects.filter(state="in_doubt").first(), timeout=30, what="doubt"
        )

    call = kill_while_it_runs("rent")
    doubt = page.locator(f'[data-in-doubt="{call.pk}"]')
    expect(doubt).to_contain_text(
        "I was running ledger_append when I was interrupted, and I can't tell whether it happened",
        timeout=20_000,
    )
    expect(page.locator("[data-deciding]")).to_be_visible()
    screenshot(page, "tool-in-doubt")
    assert_clean_everywhere(page)

    doubt.get_by_role("button", name="Run again").click()
    reply = page.locator(f"#exchange-{call.message_id} .bubble.assistant")
    expect(reply).to_contain_text("The person chose Run again", timeout=30_000)
    expect(page.locator("[data-deciding]")).to_have_count(0)
    assert ledger() == {str(call.key): 2}  # once cut off, once chosen: the same key

    second = kill_while_it_runs("gas")
    doubt = page.locator(f'[data-in-doubt="{second.pk}"]')
    doubt.get_by_role("button", name="Skip").click()
    reply = page.locator(f"#exchange-{second.message_id} .bubble.assistant")
    expect(reply).to_contain_text("The person chose Skip", timeout=30_000)
    block = page.locator(f'[data-tool-call="{second.pk}"]')
    expect(block).to_have_attribute("data-tool-state", "skipped")
    assert ledger()[str(second.key)] == 1
    # The page shows the reply as it streams: it is stored a moment later.
    wait_for(
        lambda: Message.objects.filter(conversation=conversation, role="assistant").count() == 2,
        timeout=20,
        what="both replies stored",
    )
    expect(page.locator(".tool-call summary").first).to_have_text(
        re.compile(r"Called ledger_append on ledger · done")
    )


def test_an_approval_is_asked_on_the_page_and_each_answer_does_what_it_says(page: Page, processes):
    tools = processes.add(McpServerProcess())
    servers = ledger_servers_env(tools.url, asks_first=True)
    processes.add(WorkerProcess(CONTINUITY_BRAIN="faulty", CONTINUITY_MCP_SERVERS=servers))
    web = processes.add(WebProcess())
    conversation = ConversationFactory(owner=UserFactory())
    open_chat(page, web, conversation)

    def entries() -> Counter:
        return Counter(
            line["arguments"]["entry"] for line in ledger_lines(tools.ledger)
            if line["tool"] == "ledger_append"
        )  # fmt: skip

    def asked(entry: str) -> ToolCall:
        send_from_page(page, tool_trigger("ledger_append", entry=entry))
        call = wait_for(
            lambda: ToolCall.objects.filter(state="awaiting").first(), timeout=20, what="the ask"
        )
        expect(page.locator(f'[data-awaiting="{call.pk}"]')).to_contain_text(
            "I'd like to run ledger_append on ledger", timeout=20_000
        )
        return call

    call = asked("rent")
    block = page.locator(f'[data-tool-call="{call.pk}"]')
    expect(block.locator(".tool-arguments")).to_contain_text("rent")
    expect(page.locator("[data-approval-due]")).to_contain_text("Waiting for your answer")
    screenshot(page, "tool-approval")
    assert_clean_everywhere(page)

    page.locator(f'[data-awaiting="{call.pk}"]').get_by_role(
        "button", name="Allow", exact=True
    ).click()
    reply = page.locator(f"#exchange-{call.message_id} .bubble.assistant")
    expect(reply).to_contain_text("Appended 'rent'", timeout=30_000)
    expect(block).to_have_attribute("data-tool-state", "done")
    expect(page.locator("[data-approval-due]")).to_have_count(0)
    assert entries() == {"rent": 1}

    denied = asked("gas")
    page.locator(f'[data-awaiting="{denied.pk}"]').get_by_role("button", name="Deny").click()
    reply = page.locator(f"#exchange-{denied.message_id} .bubble.assistant")
    expect(reply).to_contain_text("The person denied this call", timeout=30_000)
    expect(page.locator(f'[data-tool-call="{denied.pk}"]')).to_have_attribute(
        "data-tool-state", "denied"
    )
    assert entries() == {"rent": 1}
    assert_clean_everywhere(page)


def test_a_slow_tool_shows_its_progress_and_time_live(page: Page, processes):
    tools = processes.add(McpServerProcess())
    servers = ledger_servers_env(tools.url)
    processes.add(WorkerProcess(CONTINUITY_BRAIN="faulty", CONTINUITY_MCP_SERVERS=servers))
    web = processes.add(WebProcess())
    conversation = ConversationFactory(owner=UserFactory())
    open_chat(page, web, conversation)

    send_from_page(page, tool_trigger("wait", seconds=5))

    progress = page.locator("[data-tool-progress]")
    expect(progress).to_contain_text(re.compile(r"Waited [1-4] of 5 s"), timeout=20_000)
    expect(page.locator("[data-running-for]")).to_have_text(re.compile(r"[1-9] s"))
    screenshot(page, "tool-progress")
    assert_clean_everywhere(page)
    block = page.locator("[data-tool-call]")
    expect(block).to_have_attribute("data-tool-state", "done", timeout=20_000)
    expect(block.locator("summary")).to_contain_text("Called wait on ledger · done")
    expect(page.locator(".bubble.assistant")).to_contain_text("Waited 5 s.")
