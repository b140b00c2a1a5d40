"""A reply's tool calls on the page and in the exports: a block per call with what it did,
its arguments and its result as escaped text; the decision a call in doubt asks for."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from continuity.delivery.processing import drain_conversation
from continuity.models import Conversation, ToolCall
from tests.helpers.factories import ConversationFactory
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat(client):
    conversation = ConversationFactory(title="Tea")
    client.force_login(conversation.owner)
    send(conversation, "Remember that I like <b>tea</b> ```")
    drain_conversation(conversation_id=conversation.pk)
    return conversation


def test_the_page_shows_each_call_as_a_block_with_its_result_escaped(client, chat):
    page = client.get(reverse("chat:conversation", args=[chat.pk])).content.decode()

    call = ToolCall.objects.get()
    assert f'data-tool-call="{call.pk}" data-tool-state="done"' in page
    assert "Remembered a fact" in page
    assert "<dt>fact</dt><dd>you like &lt;b&gt;tea&lt;/b&gt; ```</dd>" in page
    assert "Remembered (note): you like &lt;b&gt;tea&lt;/b&gt;" in page
    assert "<b>tea</b>" not in page.split("data-tool-calls")[1].split("</div>")[0]


def test_the_exports_carry_the_calls(client, chat):
    markdown = client.get(reverse("chat:export_md", args=[chat.pk])).content.decode()
    exported = json.loads(client.get(reverse("chat:export_json", args=[chat.pk])).content)

    assert "**Remembered a fact** (`remember`, done)" in markdown
    assert "- fact: you like <b>tea</b> ```" in markdown
    # The result is fenced with more backticks than it holds: it cannot end the fence.
    assert "````text\nRemembered (note): you like <b>tea</b> ```\n````" in markdown
    (question, reply) = exported["messages"]
    assert question["tool_calls"] == [
        {
            "tool": "remember",
            "source": "built-in",
            "round": 1,
            "state": "done",
            "arguments": {"fact": "you like <b>tea</b> ```"},
            "result": "Remembered (note): you like <b>tea</b> ```",
            "result_cut": False,
            "decision": "",
        }
    ]
    assert "tool_calls" not in reply


def test_a_call_in_doubt_asks_its_owner_and_the_status_says_why_nothing_goes_on(client, chat):
    call = ToolCall.objects.get()
    ToolCall.objects.filter(pk=call.pk).update(state="in_doubt")
    Conversation.objects.filter(pk=chat.pk).update(state="deciding")

    page = client.get(reverse("chat:conversation", args=[chat.pk])).content.decode()

    assert f'data-in-doubt="{call.pk}"' in page
    assert "I was running <strong>remember</strong> when I was interrupted" in page
    assert 'name="choice" value="run_again">Run again</button>' in page
    assert 'name="choice" value="skip" class="secondary">Skip</button>' in page
    assert "data-deciding" in page


def test_a_result_longer_than_the_limit_is_cut_and_the_block_says_so(client, settings):
    settings.CONTINUITY_TOOL_RESULT_BYTES = 40
    conversation = ConversationFactory()
    client.force_login(conversation.owner)
    send(conversation, "My train to Lyon leaves at noon from platform nine, " * 3)
    drain_conversation(conversation_id=conversation.pk)
    send(conversation, "What did I say about Lyon?")
    drain_conversation(conversation_id=conversation.pk)

    call = ToolCall.objects.get()
    assert call.result_cut and "[Cut: the result was" in call.result
    assert len(call.result.split("\n[Cut:")[0].encode()) <= 40
    page = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert "data-result-cut" in page
