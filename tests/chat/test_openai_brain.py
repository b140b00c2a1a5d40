"""The `openai` brain in-process, against the fake OpenAI-compatible server over real HTTP."""

from __future__ import annotations

import multiprocessing
import os
import re
import socket
import time
from datetime import UTC, datetime

import pytest

from chat.brains.builtin import BuiltinBrain
from chat.brains.openai import ModelTimeout, OpenAIBrain, prompt_messages
from continuity.brains import CUT_OFF, Context, HandoffNote, RecoveryNote, Turn, brain_load
from continuity.errors import BackendUnavailable, PermanentError
from devtools.fake_model import FakeOpenAI, reply_to
from tests.helpers.waiting import wait_for


@pytest.fixture
def fake():
    server = FakeOpenAI(delay=0.01).start()
    yield server
    server.stop()


@pytest.fixture
def brain(settings, fake) -> OpenAIBrain:
    settings.CONTINUITY_OPENAI_BASE_URL = fake.url
    settings.CONTINUITY_OPENAI_API_KEY = fake.api_key
    settings.CONTINUITY_OPENAI_MODEL = fake.model
    settings.CONTINUITY_OPENAI_IDLE_TIMEOUT = 5
    return OpenAIBrain()


def context_of(text: str, **fields) -> Context:
    return Context(owner_id=1, conversation_id=1, message_id=1, attempt=1, text=text, **fields)


def full_context() -> Context:
    return context_of(
        "What should I do next?",
        identity="You are Continuity.",
        facts={"name": "Ada", "goal": "learn Rust"},
        handoff=HandoffNote(
            version=3,
            reason="end_of_turn",
            written_at=datetime(2025, 1, 2, 21, 13, tzinfo=UTC),
            current_state="Working on: learn Rust",
            critical_context=["name: Ada"],
            next_steps=["Read chapter 4 of the book"],
            decisions=["Drafted a three-step plan"],
        ),
        summary="- You said: “I like tea”",
        history=[Turn("user", "I finished chapter 3"), Turn("assistant", "Well done!")],
        waiting=[Turn("user", "Also, what about lifetimes?")],
        recovery=RecoveryNote(
            kind="crash",
            label="a worker process stopped",
            interrupted_at=datetime(2025, 1, 2, 21, 14, tzinfo=UTC),
            down_seconds=12,
        ),
    )


def test_the_prompt_follows_the_assembly_order():
    messages = prompt_messages(full_context())

    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert [m["content"] for m in messages[1:]] == [
        "I finished chapter 3",
        "Well done!",
        "What should I do next?",
    ]
    system = messages[0]["content"]
    in_order = [
        "You are Continuity.",
        "- name: Ada",
        "### Current State\nWorking on: learn Rust",
        "1. Read chapter 4 of the book",
        "- Drafted a three-step plan",
        "- You said: “I like tea”",
        "1 more message(s) from the user are queued",
        "“Also, what about lifetimes?”",
        "was interrupted (a worker process stopped)",
    ]
    positions = [system.index(part) for part in in_order]
    assert positions == sorted(positions), system


def test_a_plain_context_is_the_identity_and_the_message():
    messages = prompt_messages(context_of("hello", identity="Be kind."))

    assert messages == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "hello"},
    ]


def test_a_question_whose_reply_was_deleted_is_merged_so_roles_alternate():
    context = context_of("And now?", history=[Turn("user", "First"), Turn("user", "Second")])

    assert [m["role"] for m in prompt_messages(context)] == ["system", "user"]
    assert prompt_messages(context)[1]["content"] == "First\n\nSecond\n\nAnd now?"


def test_respond_streams_the_reply_in_several_chunks(brain, fake):
    context = context_of("Tell me a story about a fox", identity="Be brief.")

    chunks = list(brain.respond(context, brain.plan(context)))

    assert len(chunks) >= 5 and all(chunks)
    assert "".join(chunks) == reply_to("Tell me a story about a fox")
    (request,) = fake.requests
    assert request["stream"] is True and request["model"] == fake.model
    assert request["messages"] == prompt_messages(context)


def test_plan_remember_and_task_state_keep_memory_without_calling_the_model(brain, fake):
    context = context_of("My name is Ada and my goal is to learn Rust")

    plan = brain.plan(context)

    # The name is the person's; the goal, with its plan, the conversation's.
    assert plan["facts"] == {"name": "Ada"} and plan["goal"] == "learn Rust"
    assert plan["steps"][0] == "Say what “learn Rust” looks like when it is done"
    assert brain.remember(context, plan, "reply") == plan["facts"]
    state = brain.task_state(context, plan, "reply")
    assert state["current_state"] == "Working on: learn Rust"
    assert state["next_steps"]
    assert brain.task_state(context, brain.plan(context_of("hello")), "reply") is None
    assert fake.requests == []


def test_summarize_asks_the_server_for_a_summary_that_extends_the_previous_one(brain, fake):
    turns = [Turn("user", "My name is Ada"), Turn("assistant", "Nice to meet you")]

    summary = brain.summarize(turns, "- You said: “I like tea”")

    (request,) = fake.requests
    assert not request.get("stream")
    assert request["messages"][0]["role"] == "system"
    assert "Keep every fact the user stated" in request["messages"][0]["content"]
    assert "- You said: “I like tea”" in summary  # the fake echoes what it was asked
    assert "user: My name is Ada" in summary


def test_a_wrong_key_is_a_permanent_error_naming_the_server(settings, brain, fake):
    settings.CONTINUITY_OPENAI_API_KEY = "sk-wrong"
    brain = OpenAIBrain()

    with pytest.raises(PermanentError) as raised:
        list(brain.respond(context_of("hello"), {"facts": {}}))

    assert str(raised.value) == f"The model server at {fake.url} refused the API key (401)."
    assert len(fake.requests) == 1  # refusals are not retried


def test_an_unknown_model_is_a_permanent_error(settings, brain, fake):
    settings.CONTINUITY_OPENAI_MODEL = "no-such-model"
    brain = OpenAIBrain()

    with pytest.raises(PermanentError, match=re.escape(f"at {fake.url} has no model")) as raised:
        list(brain.respond(context_of("hello"), {"facts": {}}))
    assert "'no-such-model' (404: The model `no-such-model` does not exist.)" in str(raised.value)

    with pytest.raises(PermanentError, match="has no model 'no-such-model'"):
        brain.summarize([Turn("user", "hello")], "")


def test_a_bad_request_is_a_permanent_error(brain, fake):
    fake.fail_next(400)

    with pytest.raises(PermanentError, match=r"refused the request for model 'fake-model' \(400"):
        list(brain.respond(context_of("hello"), {"facts": {}}))


@pytest.mark.parametrize("status", [500, 429, 503])
def test_a_transient_error_is_retried_by_the_client_and_yields_one_reply(brain, fake, status):
    fake.fail_next(status)

    reply = "".join(brain.respond(context_of("hello there"), {"facts": {}}))

    assert reply == reply_to("hello there")
    assert len(fake.requests) == 2


def test_when_the_client_runs_out_of_retries_the_server_is_unavailable(settings, fake):
    settings.CONTINUITY_OPENAI_BASE_URL = fake.url
    settings.CONTINUITY_OPENAI_API_KEY = fake.api_key
    settings.CONTINUITY_OPENAI_MODEL = fake.model
    settings.CONTINUITY_OPENAI_MAX_RETRIES = 1
    fake.fail_next(500, times=2)

    with pytest.raises(BackendUnavailable) as raised:
        list(OpenAIBrain().respond(context_of("hello"), {"facts": {}}))
    assert len(fake.requests) == 2
    assert str(raised.value) == (
        f"The model server at {fake.url} answered 500 for model 'fake-model': "
        "Failing on purpose with 500.."
    )
    assert raised.value.backend == f"openai {fake.url}" and raised.value.retry_after is None


def test_a_rate_limit_says_when_to_come_back(settings, fake):
    settings.CONTINUITY_OPENAI_BASE_URL = fake.url
    settings.CONTINUITY_OPENAI_API_KEY = fake.api_key
    settings.CONTINUITY_OPENAI_MODEL = fake.model
    settings.CONTINUITY_OPENAI_MAX_RETRIES = 0
    fake.retry_after = "7"
    fake.fail_next(429)

    with pytest.raises(BackendUnavailable) as raised:
        list(OpenAIBrain().respond(context_of("hello"), {"facts": {}}))
    assert raised.value.retry_after == 7.0


def test_a_server_that_is_down_is_unavailable_not_a_permanent_error(settings):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.CONTINUITY_OPENAI_BASE_URL = f"http://127.0.0.1:{port}/v1"
    settings.CONTINUITY_OPENAI_MAX_RETRIES = 0

    with pytest.raises(BackendUnavailable) as raised:
        list(OpenAIBrain().respond(context_of("hello"), {"facts": {}}))
    assert f"The model server at http://127.0.0.1:{port}/v1 could not be reached" in str(
        raised.value
    )


def test_silence_before_the_first_token_is_the_server_not_the_message(settings, brain, fake):
    settings.CONTINUITY_OPENAI_IDLE_TIMEOUT = 1
    fake.stall_after(words=0)

    with pytest.raises(BackendUnavailable, match="sent no token for 1 s"):
        list(OpenAIBrain().respond(context_of("hello"), {"facts": {}}))


def test_a_stalled_stream_raises_at_the_idle_timeout(settings, brain, fake):
    settings.CONTINUITY_OPENAI_IDLE_TIMEOUT = 1
    brain = OpenAIBrain()
    fake.stall_after(words=3)
    received: list[str] = []

    started = time.monotonic()
    with pytest.raises(ModelTimeout) as raised:
        for chunk in brain.respond(context_of("one two three four five"), {"facts": {}}):
            received.append(chunk)
    waited = time.monotonic() - started

    assert str(raised.value) == (
        f"The model server at {fake.url} sent no token for 1 s (model 'fake-model')."
    )
    assert received == ["You ", "said: ", "one "]
    assert 1 <= waited < 5, waited
    assert len(fake.requests) == 1  # a stream that went silent is not resent by the client


def test_the_openai_brain_is_registered(settings):
    settings.CONTINUITY_BRAIN = "openai"

    assert isinstance(brain_load(), OpenAIBrain)


def test_the_model_writes_the_title(brain, fake):
    title = brain.title(context_of("My goal is to ship the compiler"), "Let us plan it.")
    (request,) = fake.requests
    assert "title of two to six words" in request["messages"][0]["content"]
    assert request["max_tokens"] == 24 and not request.get("stream")
    assert title.startswith("You said: User: My goal is to ship the compiler")  # the fake echoes


def test_without_the_model_the_built_in_title_is_used(brain, fake):
    fake.fail_next(401)
    assert brain.title(context_of("My goal is to ship the compiler"), "") == "Ship the compiler"


def reply_and_ending(brain: OpenAIBrain, context: Context) -> tuple[list[str], object]:
    """The chunks `respond` yields, and what it returns (how the reply ended)."""
    chunks: list[str] = []
    replying = brain.respond(context, {"facts": {}})
    while True:
        try:
            chunks.append(next(replying))
        except StopIteration as end:
            return chunks, end.value


def test_a_reply_asks_for_max_tokens_and_ends_complete_at_stop(brain, fake, settings):
    chunks, ending = reply_and_ending(brain, context_of("hello there"))

    assert "".join(chunks) == reply_to("hello there") and ending is None
    (request,) = fake.requests
    assert request["max_tokens"] == settings.CONTINUITY_OPENAI_MAX_TOKENS == 1024


def test_a_reply_that_reaches_max_tokens_is_kept_and_said_cut_off(settings, fake):
    settings.CONTINUITY_OPENAI_BASE_URL = fake.url
    settings.CONTINUITY_OPENAI_API_KEY = fake.api_key
    settings.CONTINUITY_OPENAI_MODEL = fake.model
    settings.CONTINUITY_OPENAI_MAX_TOKENS = 3

    chunks, ending = reply_and_ending(OpenAIBrain(), context_of("one two three four"))

    assert chunks == ["You ", "said: ", "one "] and ending == CUT_OFF
    assert fake.requests[0]["max_tokens"] == 3


def test_a_stream_ended_without_a_finish_reason_is_the_server_not_an_answer(brain, fake):
    fake.interrupt_after(words=2)
    received: list[str] = []

    with pytest.raises(BackendUnavailable) as raised:
        for chunk in brain.respond(context_of("one two three four"), {"facts": {}}):
            received.append(chunk)

    assert received == ["You ", "said: "]
    assert str(raised.value) == (
        f"The model server at {fake.url} ended the reply without finishing it "
        "(no finish_reason; model 'fake-model')."
    )
    assert raised.value.backend == f"openai {fake.url}"


def test_summaries_are_bounded_and_a_cut_off_one_is_replaced_by_the_extractive_one(
    settings, brain, fake
):
    settings.CONTINUITY_OPENAI_SUMMARY_MAX_TOKENS = 5
    turns = [Turn("user", "My name is Ada and I like tea"), Turn("assistant", "Noted")]

    summary = brain.summarize(turns, "")

    (request,) = fake.requests
    assert request["max_tokens"] == 5
    # The model's summary stopped at its limit: it could have dropped a fact.
    assert (
        summary
        == BuiltinBrain().summarize(turns, "")
        == ("- You said: “My name is Ada and I like tea”")
    )


def test_a_failing_summary_or_title_is_not_retried_by_the_client(brain, fake):
    fake.fail_next(500, times=2)

    with pytest.raises(BackendUnavailable):
        brain.summarize([Turn("user", "My name is Ada")], "")
    title = brain.title(context_of("My goal is to ship the compiler"), "")

    assert title == "Ship the compiler"
    assert len(fake.requests) == 2  # one each: a retry would hold the worker longer


def test_keep_alive_comments_do_not_keep_a_stalled_stream_alive(settings, fake):
    settings.CONTINUITY_OPENAI_BASE_URL = fake.url
    settings.CONTINUITY_OPENAI_API_KEY = fake.api_key
    settings.CONTINUITY_OPENAI_MODEL = fake.model
    settings.CONTINUITY_OPENAI_IDLE_TIMEOUT = 1
    fake.keepalive = 0.2  # bytes keep coming: httpx's read timeout alone never fires
    fake.stall_after(words=3)
    received: list[str] = []

    with pytest.raises(ModelTimeout) as raised:
        for chunk in OpenAIBrain().respond(context_of("one two three four five"), {"facts": {}}):
            received.append(chunk)

    assert received == ["You ", "said: ", "one "]
    assert str(raised.value) == (
        f"The model server at {fake.url} sent no token for 1 s (model 'fake-model')."
    )


def test_a_refusal_stating_only_a_known_window_still_teaches_a_smaller_prompt(settings):
    import httpx
    import openai

    from chat.brains.openai import stated_sizes

    settings.CONTINUITY_OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    settings.CONTINUITY_OPENAI_CONTEXT_TOKENS = 4096
    said = (
        "This model's maximum context length is 4096 tokens. However, your request has 5000 "
        "input tokens. Please reduce the length of the input messages."
    )  # vLLM's wording
    response = httpx.Response(
        400, json={"error": {"message": said}}, request=httpx.Request("POST", "http://x/v1")
    )
    refusal = openai.BadRequestError(said, response=response, body={"message": said})
    assert stated_sizes(refusal) == {"window": 4096, "counted": 5000}

    # Without the count, the window it states is the one known: the estimate was short, and a
    # smaller prompt is guessed rather than the message given up on.
    assert OpenAIBrain.window_learn(2400, window=4096)  # the estimate was within the budget
    assert OpenAIBrain.context_window() < 4096


def test_what_one_process_learns_of_the_model_every_other_process_knows(brain):
    def refused() -> None:  # another pool process meets the refusal
        learned = OpenAIBrain.window_learn(4000, window=2048, counted=6000)
        os._exit(0 if learned else 1)

    child = multiprocessing.get_context("fork").Process(target=refused)
    child.start()
    child.join(timeout=30)

    assert child.exitcode == 0
    # This process never met a refusal: it reads what others learned at most once a second.
    wait_for(lambda: OpenAIBrain.context_window() == 2048, timeout=5, what="the window learned")
    assert OpenAIBrain.token_scale() == 1.5
    # What is learned only ever gets more cautious, whichever process learns it.
    assert not OpenAIBrain.window_learn(4000, window=4096, counted=5000)
    assert (OpenAIBrain.context_window(), OpenAIBrain.token_scale()) == (2048, 1.5)
