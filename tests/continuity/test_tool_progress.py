"""A slow MCP tool's progress, as its server reports it, stored on its call while it runs (the
page shows it live), against the real MCP test server."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from continuity.delivery.processing import drain_conversation
from continuity.models import Message, ToolCall
from tests.helpers.brains import tool_trigger
from tests.helpers.factories import ConversationFactory
from tests.helpers.messages import send
from tests.helpers.processes import McpServerProcess
from tests.helpers.tool_servers import ledger_server
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_slow_tools_progress_is_stored_as_it_comes_and_its_call_ends_done(processes, settings):
    server = processes.add(McpServerProcess())
    settings.CONTINUITY_MCP_SERVERS = [ledger_server(server.url)]
    conversation = ConversationFactory(brain="faulty")
    message = send(conversation, tool_trigger("wait", seconds=3))

    def drain() -> None:
        try:
            drain_conversation(conversation_id=conversation.pk)
        finally:
            connection.close()

    draining = threading.Thread(target=drain)
    draining.start()
    seen = wait_for(
        lambda: ToolCall.objects.filter(message=message, state="running", progress__gte=1).first(),
        timeout=20,
        what="the call's first progress while it runs",
    )
    draining.join(timeout=30)

    assert (seen.progress_total, seen.progress_message) == (3, f"Waited {seen.progress:g} of 3 s")
    call = ToolCall.objects.get(pk=seen.pk)
    assert (call.state, call.result) == ("done", "Waited 3 s.")
    assert "Waited 3 s." in Message.objects.get(reply_to=message).text
