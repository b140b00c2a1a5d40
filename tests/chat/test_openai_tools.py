"""The `openai` brain speaks the tools wire format, in-process against the fake server over
real HTTP: it sends the tools, gathers streamed calls by their index (parallel ones too),
whatever `finish_reason` says, reads bad arguments as the call's problem, sends a well-formed
history back, and goes unstreamed with a server that refuses to stream with tools."""

from __future__ import annotations

import json

import pytest

from chat.brains.openai import OpenAIBrain, prompt_messages
from continuity.brains import Context, ToolRound, ToolSpec, ToolUse, Work
from devtools.fake_model import FakeOpenAI

CALCULATE = ToolSpec(
    name="calculate",
    description="Work out an expression.",
    input_schema={"type": "object", "properties": {"expression": {"type": "string"}}},
    read_only=True,
)
SEARCH = ToolSpec(name="search_conversations", description="Search.", input_schema={})
WORK = Work(tools=[CALCULATE, SEARCH])


def context_of(text: str) -> Context:
    return Context(owner_id=1, conversation_id=1, message_id=1, attempt=1, text=text)


def brain_of(settings, fake: FakeOpenAI) -> OpenAIBrain:
    settings.CONTINUITY_OPENAI_BASE_URL = fake.url
    settings.CONTINUITY_OPENAI_API_KEY = fake.api_key
    settings.CONTINUITY_OPENAI_MODEL = fake.model
    settings.CONTINUITY_OPENAI_IDLE_TIMEOUT = 5
    settings.CONTINUITY_OPENAI_MAX_RETRIES = 0
    OpenAIBrain.streamless_tools.clear()
    return OpenAIBrain()


@pytest.fixture
def fake():
    server = FakeOpenAI(delay=0.001).start()
    yield server
    server.stop()


def round_of(brain: OpenAIBrain, context: Context, work: Work) -> tuple[str, object]:
    tokens = brain.respond(context, {"facts": {}}, work)
    text = []
    while True:
        try:
            text.append(next(tokens))
        except StopIteration as end:
            return "".join(text), end.value


@pytest.mark.parametrize("finish_reason", ["tool_calls", "stop"])
def test_parallel_streamed_calls_are_the_rounds_answer(settings, fake, finish_reason):
    brain = brain_of(settings, fake)
    fake.call_tools_next(
        ("calculate", {"expression": "17 * 23"}),
        ("search_conversations", {"query": "tea"}),
        finish_reason=finish_reason,
    )

    text, calls = round_of(brain, context_of("What is 17 * 23, and what about tea?"), WORK)

    assert text == ""
    assert [(call.name, call.arguments, call.problem) for call in calls] == [
        ("calculate", {"expression": "17 * 23"}, ""),
        ("search_conversations", {"query": "tea"}, ""),
    ]
    assert calls[0].call_id != calls[1].call_id
    (request,) = fake.requests
    assert [tool["function"]["name"] for tool in request["tools"]] == [
        "calculate",
        "search_conversations",
    ]
    assert request["tools"][0]["function"]["parameters"] == CALCULATE.input_schema
    assert request["tool_choice"] == "auto"


def test_a_configured_tool_choice_forces_that_tool_where_it_is_offered(settings, fake):
    brain = brain_of(settings, fake)
    settings.CONTINUITY_OPENAI_TOOL_CHOICE = "calculate"
    fake.call_tools_next(("calculate", {"expression": "1 + 1"}))

    round_of(brain, context_of("1 + 1?"), WORK)
    round_of(brain, context_of("and now?"), Work(tools=[SEARCH]))

    forced, elsewhere = fake.requests
    assert forced["tool_choice"] == {"type": "function", "function": {"name": "calculate"}}
    assert elsewhere["tool_choice"] == "auto"  # not offered in that round: the model chooses


def test_arguments_that_are_not_json_are_the_calls_problem_not_a_crash(settings, fake):
    brain = brain_of(settings, fake)
    fake.call_tools_next(("calculate", '{"expression": "1 +'))

    _, (call,) = round_of(brain, context_of("1 + ?"), WORK)

    assert call.arguments == {} and call.problem.startswith("The arguments are not valid JSON")


def test_no_tools_offered_sends_none_and_the_reply_is_text(settings, fake):
    brain = brain_of(settings, fake)
    fake.call_tools_next(("calculate", {"expression": "1 + 1"}))

    text, ending = round_of(brain, context_of("hello"), Work())

    assert text == "You said: hello" and ending is None
    assert "tools" not in fake.requests[0]


def test_the_history_sent_back_has_one_tool_message_per_call_id(settings, fake):
    brain = brain_of(settings, fake)
    done = ToolRound(
        text="Let me check.",
        calls=[
            ToolUse("a", "calculate", {"expression": "2 * 3"}),
            ToolUse("b", "search_conversations", {"query": "tea"}),
        ],
        results={"a": "2 * 3 = 6"},  # b's result is missing: the history still closes it
    )
    work = Work(tools=[CALCULATE], rounds=[done], note="The tool server x is down.")

    text, ending = round_of(brain, context_of("What is 2 * 3?"), work)

    assert ending is None and text
    messages = fake.requests[0]["messages"]
    assert messages == prompt_messages(context_of("What is 2 * 3?"), work)
    assistant, first, second = messages[-3:]
    assert assistant["role"] == "assistant" and assistant["content"] == "Let me check."
    assert [call["id"] for call in assistant["tool_calls"]] == ["a", "b"]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {
        "expression": "2 * 3"
    }
    assert (first["role"], first["tool_call_id"], first["content"]) == ("tool", "a", "2 * 3 = 6")
    assert (second["tool_call_id"], second["content"]) == ("b", "No result: the call was not run.")
    assert "The tool server x is down." in messages[0]["content"]


def test_a_server_that_refuses_to_stream_with_tools_is_asked_unstreamed_from_then_on(
    settings,
):
    server = FakeOpenAI(delay=0.001, streams_tool_calls=False).start()
    try:
        brain = brain_of(settings, server)
        server.call_tools_next(("calculate", {"expression": "6 * 7"}), times=2)

        _, (call,) = round_of(brain, context_of("6 * 7?"), WORK)
        _, (again,) = round_of(brain, context_of("6 * 7 again?"), WORK)

        assert call.arguments == again.arguments == {"expression": "6 * 7"}
        # Refused once streamed, then asked unstreamed; the second round is unstreamed at once.
        assert [request.get("stream", False) for request in server.requests] == [
            True,
            False,
            False,
        ]
    finally:
        server.stop()


def test_pieces_without_an_index_continue_the_last_call_and_a_new_id_begins_one():
    from types import SimpleNamespace as Piece

    from chat.brains.openai import call_gather

    calls: dict = {}
    for piece in [
        Piece(index=None, id="a", function=Piece(name="calculate", arguments='{"expr')),
        Piece(index=None, id=None, function=Piece(name=None, arguments='ession": "1"}')),
        Piece(index=0, id="b", function=Piece(name="calculate", arguments='{"expression": "2"}')),
    ]:
        call_gather(calls, piece)

    assert [(c["id"], json.loads(c["arguments"])) for _, c in sorted(calls.items())] == [
        ("a", {"expression": "1"}),
        ("b", {"expression": "2"}),
    ]
