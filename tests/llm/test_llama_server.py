"""The `openai` brain against a real OpenAI-compatible server nobody here wrote: llama.cpp's,
through llama-cpp-python's server, with its default options (it interrupts the stream being
answered when another request comes) and a 512-token window, serving a tiny random model.

Run by `make test-llm` (docs/model-backends.md), which builds the server from PyPI. What the
server sent back is checked from the proxy in front of it, as it said it."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from chat.brains.openai import OpenAIBrain
from continuity.delivery.processing import drain_conversation
from continuity.models import Conversation, DeadLetter, Message, Summary, ToolCall
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.messages import send
from tests.llm.servers import MODEL, LlamaServer, RecordingProxy
from tests.llm.tiny_model import WORDS, tiny_model_write

pytestmark = pytest.mark.django_db(transaction=True)

SHORT = "Now just say hello."


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return tiny_model_write(tmp_path_factory.mktemp("llm") / "tiny.gguf")


@pytest.fixture
def llama(tiny_model, settings):
    """The server, and the recording proxy the brain talks to."""
    server = LlamaServer(tiny_model, context_tokens=512).start()
    proxy = RecordingProxy(server.url).start()
    settings.CONTINUITY_OPENAI_BASE_URL = f"{proxy.url}/v1"
    settings.CONTINUITY_OPENAI_MODEL = MODEL
    settings.CONTINUITY_OPENAI_API_KEY = ""
    settings.CONTINUITY_DRAIN_SLICE_SECONDS = 60
    # An interrupted stream is the server's failure: waited out briefly here, and never
    # the point at which its conversations stop trying.
    settings.CONTINUITY_BACKEND_BACKOFF_SECONDS = [0.05, 0.1, 0.2]
    settings.CONTINUITY_BACKEND_UNAVAILABLE_AFTER = 1000
    settings.ADMINS = []
    yield proxy
    proxy.stop()
    server.stop()


def answered(question: Message, *, within: float = 120) -> Message:
    """Drain its conversation until the question has its reply (an attempt the server cut
    short is given back and tried again)."""
    deadline = time.monotonic() + within
    while not (reply := Message.objects.filter(reply_to=question).first()):
        assert time.monotonic() < deadline, f"no reply to message {question.pk}"
        Conversation.objects.filter(pk=question.conversation_id).update(retry_at=None)
        drain_conversation(conversation_id=question.conversation_id)
    return reply


def assert_as_the_server_sent_it(reply: Message, proxy: RecordingProxy) -> None:
    """Never empty, and a reply the server finished (`stop`), or one it cut at the length
    limit that is marked so."""
    assert reply.text.strip()
    ending = "length" if reply.cut_off else "stop"
    sent = [answer for answer in proxy.streamed() if answer["finish_reason"] == ending]
    assert reply.text in [answer["text"] for answer in sent]


def said(number: int, words: int) -> str:
    """A message of the model's own words (a token each)."""
    return " ".join(WORDS[(number * 7 + n) % len(WORDS)] for n in range(words))


def test_a_message_longer_than_the_window_is_refused_before_it_is_sent(llama, settings):
    # llama-cpp-python's server does not say its window: it is configured, as --n_ctx is.
    settings.CONTINUITY_OPENAI_CONTEXT_TOKENS = 512
    owner = UserFactory()
    chat = ConversationFactory(owner=owner, brain="openai")
    page = Client()
    page.force_login(owner)
    long = " ".join(f"word{n}" for n in range(2500))[: settings.CONTINUITY_MAX_MESSAGE_CHARS]

    refused = page.post(
        reverse("chat:message_send", args=[chat.pk]),
        {"text": long, "client_id": str(uuid.uuid4())},
        headers={"HX-Request": "true"},
    )

    assert refused.status_code == 422
    tokens = OpenAIBrain.tokens_count(long)  # by the server's own tokenizer
    assert tokens > 512
    assert f"This message is about {tokens:,} tokens; the model&#x27;s window is 512" in (
        refused.content.decode()
    )
    assert not Message.objects.filter(conversation=chat).exists()
    assert llama.streamed() == []

    reply = answered(send(chat, SHORT))
    assert_as_the_server_sent_it(reply, llama)


def test_a_window_the_server_does_not_say_is_learned_from_its_refusal(llama):
    owner = UserFactory()
    chat = ConversationFactory(owner=owner, brain="openai")
    long = send(chat, " ".join(f"word{n}" for n in range(1500)))

    for _ in range(3):  # the empty stream is asked about, learned from, then refused
        drain_conversation(conversation_id=chat.pk)

    assert OpenAIBrain.context_window() == 512  # as the server stated it
    assert [answer["text"] for answer in llama.streamed()] == [""]  # its empty stream, once
    dead = DeadLetter.objects.get(message=long)
    assert "window of 512" in dead.reason and "too long for this model" in dead.reason
    assert not Message.objects.filter(reply_to=long).exists()  # never an empty reply

    reply = answered(send(chat, SHORT))
    assert_as_the_server_sent_it(reply, llama)
    page = Client()
    page.force_login(owner)
    again = page.post(
        reverse("chat:message_send", args=[chat.pk]),
        {"text": long.text, "client_id": str(uuid.uuid4())},
        headers={"HX-Request": "true"},
    )
    assert again.status_code == 422  # refused before it is stored, now the window is known


def test_five_exchanges_past_the_window_are_compacted_and_answered(llama, settings):
    settings.CONTINUITY_OPENAI_CONTEXT_TOKENS = 512
    # What compaction cannot shorten (the instructions, the notes, the summary, the newest
    # exchange and the message) holds the random model's last reply and summary: with 100
    # tokens each, once in four CI runs it passed the 412 the window leaves, and the message
    # was refused as too long. 60 still needs compaction by the fifth exchange.
    settings.CONTINUITY_OPENAI_MAX_TOKENS = 60
    chat = ConversationFactory(owner=UserFactory(), brain="openai")

    replies = [answered(send(chat, said(number, 25))) for number in range(5)]

    # Five exchanges, far fewer than CONTINUITY_HISTORY_EXCHANGES (20): compacted by tokens.
    assert Summary.objects.filter(conversation=chat).exists()
    for reply in replies:
        assert_as_the_server_sent_it(reply, llama)
    assert not DeadLetter.objects.exists()


ROUNDS_TO_SEE_AN_INTERRUPTION = 4


def drain_at_once(conversations: list[Conversation], questions: list[Message]) -> None:
    """Each conversation drained on a thread of its own, all at once, until answered."""

    def drain(question: Message) -> None:
        try:
            answered(question)
        finally:
            connection.close()

    threads = [threading.Thread(target=drain, args=(question,)) for question in questions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)


def test_four_conversations_answered_at_once_by_a_server_that_interrupts(llama, settings):
    settings.CONTINUITY_OPENAI_CONTEXT_TOKENS = 512
    questions: list[Message] = []
    # A new request ends the stream being answered (`[DONE]`, no finish_reason), when it comes
    # before that stream's end: the random model's replies are sometimes short enough that
    # none was cut. Then four more conversations are asked at once, a few times at most.
    for round_ in range(ROUNDS_TO_SEE_AN_INTERRUPTION):
        chats = [ConversationFactory(owner=UserFactory(), brain="openai") for _ in range(4)]
        asked = [send(chat, said(4 * round_ + number, 12)) for number, chat in enumerate(chats)]
        llama.gather(4)  # the four first requests reach the server together
        drain_at_once(chats, asked)
        questions += asked
        cut_short = [answer for answer in llama.streamed() if answer["finish_reason"] is None]
        if cut_short:
            break

    assert cut_short, f"no stream was cut short in {ROUNDS_TO_SEE_AN_INTERRUPTION} rounds"
    # Those attempts were given back, and every stored reply is one the server finished.
    for question in questions:
        assert_as_the_server_sent_it(Message.objects.get(reply_to=question), llama)
    assert not DeadLetter.objects.exists()


def test_a_concurrency_limit_of_one_means_no_stream_is_interrupted(llama, settings):
    settings.CONTINUITY_OPENAI_CONTEXT_TOKENS = 512
    settings.CONTINUITY_OPENAI_CONCURRENCY = 1
    chats = [ConversationFactory(owner=UserFactory(), brain="openai") for _ in range(4)]
    questions = [send(chat, said(number, 12)) for number, chat in enumerate(chats)]

    drain_at_once(chats, questions)

    for question in questions:
        assert_as_the_server_sent_it(Message.objects.get(reply_to=question), llama)
    assert len(llama.streamed()) == 4  # one stream per reply, none cut short
    assert all(answer["finish_reason"] in ("stop", "length") for answer in llama.answers)


def test_a_real_tool_call_goes_to_the_server_and_its_result_comes_back(llama, settings):
    """Told to call `calculate` (tool_choice names it, and llama.cpp's server then constrains
    the call to the tool's input schema with a grammar: even this random model writes a valid
    one), the model's call streams back as tool_calls deltas, is recorded and run, and its
    result goes to the server in the next round, the last (offered no tools), which answers
    with text."""
    settings.CONTINUITY_OPENAI_CONTEXT_TOKENS = 512
    settings.CONTINUITY_OPENAI_TOOL_CHOICE = "calculate"
    settings.CONTINUITY_TOOL_ROUNDS = 1
    chat = ConversationFactory(owner=UserFactory(), brain="openai")
    question = send(chat, SHORT)

    reply = answered(question)

    call = ToolCall.objects.get(message=question)
    assert (call.tool, call.round, call.problem) == ("calculate", 1, "")
    assert isinstance(call.arguments["expression"], str)
    assert call.state in ("done", "error") and call.result  # the model's sum may not add up
    asked_for_it, answered_with_it = [a for a in llama.streamed() if a["status"] == 200][-2:]
    assert asked_for_it["asked"]["tool_choice"] == {
        "type": "function",
        "function": {"name": "calculate"},
    }
    assert asked_for_it["text"] == ""
    sent_back = answered_with_it["asked"]["messages"]
    assert sent_back[-2]["tool_calls"][0]["id"] == call.call_id
    assert sent_back[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": call.result}
    assert "tools" not in answered_with_it["asked"]
    assert reply.text == answered_with_it["text"] and reply.text.strip()


def test_a_server_that_sends_nothing_streamed_with_tools_is_asked_unstreamed(tmp_path, settings):
    """llama-cpp-python's `chatml-function-calling` format, the model choosing for itself
    (`tool_choice` "auto"): when it chooses a call, a streamed request gets a 200 and nothing
    more (the server raises "Automatic streaming tool choice is not supported" after the
    headers). The round is asked again unstreamed, and from then on every round with tools of
    that server is: its calls are recorded and run, and the reply is written."""
    # This format writes the tools' definitions into the prompt: a window that holds them.
    model = tiny_model_write(tmp_path / "tiny-4k.gguf", context_tokens=4096)
    server = LlamaServer(model, context_tokens=4096, chat_format="chatml-function-calling")
    server.start()
    proxy = RecordingProxy(server.url).start()
    try:
        settings.CONTINUITY_OPENAI_BASE_URL = f"{proxy.url}/v1"
        settings.CONTINUITY_OPENAI_MODEL = MODEL
        settings.CONTINUITY_OPENAI_API_KEY = ""
        settings.CONTINUITY_OPENAI_CONTEXT_TOKENS = 4096
        settings.CONTINUITY_OPENAI_MAX_TOKENS = 64
        settings.CONTINUITY_TOOL_ROUNDS = 1
        OpenAIBrain.streamless_tools.clear()
        chat = ConversationFactory(owner=UserFactory(), brain="openai")

        first = answered(send(chat, SHORT))
        second = answered(send(chat, "And once more, hello."))

        assert first.text.strip() and second.text.strip()
        calls = ToolCall.objects.filter(message__conversation=chat)
        assert calls.count() >= 2 and not calls.exclude(problem="").exists()
        with_tools = [a for a in proxy.answers if a["asked"].get("tools")]
        assert [a["stream"] for a in with_tools] == [True, False, False]
        assert with_tools[0]["text"] == "" and with_tools[0]["finish_reason"] is None
        assert OpenAIBrain.key() in OpenAIBrain.streamless_tools
    finally:
        proxy.stop()
        server.stop()
