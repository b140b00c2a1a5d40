"""The fake model server's tool calls, read by the official `openai` client as any
OpenAI-compatible server's would be: streamed deltas told apart by `index`, parallel calls with
their argument pieces interleaved, either spelling of the end, and the unstreamed form."""

from __future__ import annotations

import json

import pytest
from openai import OpenAI

from devtools.fake_model import FakeOpenAI, reply_to

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    for name in ("search_conversations", "calculate")
]


@pytest.fixture
def fake():
    server = FakeOpenAI(delay=0).start()
    yield server
    server.stop()


def client_of(fake: FakeOpenAI) -> OpenAI:
    return OpenAI(base_url=fake.url, api_key=fake.api_key, max_retries=0)


def streamed_calls(fake: FakeOpenAI, **request) -> tuple[dict[int, dict], str | None, int]:
    """The calls as a client accumulates them from the deltas, by index; the finish reason;
    and how many deltas carried a piece of arguments."""
    calls: dict[int, dict] = {}
    finish, pieces = None, 0
    stream = client_of(fake).chat.completions.create(
        model=fake.model,
        messages=[{"role": "user", "content": "What is 17 × 23, and what did I say about tea?"}],
        stream=True,
        **request,
    )
    for event in stream:
        choice = event.choices[0]
        finish = choice.finish_reason or finish
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = delta.id or call["id"]
            call["name"] += (delta.function.name or "") if delta.function else ""
            if delta.function and delta.function.arguments:
                call["arguments"] += delta.function.arguments
                pieces += 1
    return calls, finish, pieces


@pytest.mark.parametrize("finish_reason", ["tool_calls", "stop"])
def test_parallel_calls_stream_as_deltas_told_apart_by_index(fake, finish_reason):
    fake.call_tools_next(
        ("calculate", {"expression": "17 * 23"}),
        ("search_conversations", {"query": "tea", "limit": 5}),
        finish_reason=finish_reason,
    )
    calls, finish, pieces = streamed_calls(fake, tools=TOOLS)
    assert finish == finish_reason
    assert [calls[i]["name"] for i in sorted(calls)] == ["calculate", "search_conversations"]
    assert json.loads(calls[0]["arguments"]) == {"expression": "17 * 23"}
    assert json.loads(calls[1]["arguments"]) == {"query": "tea", "limit": 5}
    assert calls[0]["id"] != calls[1]["id"] and all(call["id"] for call in calls.values())
    assert pieces > 2  # in pieces, as a model streams them, not whole


def test_calls_unstreamed_come_whole_in_the_message(fake):
    fake.call_tools_next(("calculate", {"expression": "2 + 2"}))
    answer = client_of(fake).chat.completions.create(
        model=fake.model, messages=[{"role": "user", "content": "2 + 2?"}], tools=TOOLS
    )
    (choice,) = answer.choices
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "calculate",
        {"expression": "2 + 2"},
    )


def test_calls_answer_only_a_request_that_offers_tools_and_then_text_again(fake):
    fake.call_tools_next(("calculate", {"expression": "1 + 1"}))
    no_tools = client_of(fake).chat.completions.create(
        model=fake.model, messages=[{"role": "user", "content": "hello"}]
    )
    assert no_tools.choices[0].message.content == reply_to("hello")
    calls, _, _ = streamed_calls(fake, tools=TOOLS)
    assert calls[0]["name"] == "calculate"
    again, finish, _ = streamed_calls(fake, tools=TOOLS)
    assert (again, finish) == ({}, "stop")  # the queued answer was used: text this time
