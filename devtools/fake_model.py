"""A small OpenAI-compatible server for the tests and chaos runs: real HTTP, real streaming, faults
on demand.

It runs on a thread of the process that starts it; worker subprocesses reach it over TCP at `.url`.
Streamed replies are Server-Sent Events in the `chat.completion.chunk` format, one word per
chunk, sent with HTTP/1.1 chunked transfer encoding as vLLM and Ollama send them, ending with
`data: [DONE]`. The reply is "You said: <the last user message>", so a test can tell which
message a reply answers.

It behaves as real servers do where the suite needs it: a word is a token, and a reply longer
than the request's `max_tokens` ends there with `finish_reason: length`; `interrupt_after`
ends streams early with `[DONE]` and no `finish_reason`, as llama-cpp-python's server does when
another request interrupts one; `empty_next` answers with an empty stream. With
`context_tokens` it has a window, which it tells at `/props` as llama.cpp's server does, and a
prompt longer than the window gets what llama-cpp-python's server answers: a streamed request,
a 200 dropped before its first event; one not streamed, a 400 that states the window and the
prompt's size. With `tokenizer` it counts tokens at `/tokenize`, as llama.cpp's server does;
`counts` says what a token is to it: a word, or a character (as a byte-level vocabulary's).

Tool calls: `call_tools_next` answers the next request that offers `tools` with calls instead
of text, streamed as OpenAI streams them: each call's id and name in its first delta, its
arguments in pieces after it, calls told apart by their `index` (several at once: parallel
calls, their pieces interleaved), ending with `finish_reason` "tool_calls" or, as some servers
say it, "stop".
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORD = re.compile(r"\S+\s*")
# Status → (type, code) of the error body, as OpenAI sends them.
ERRORS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}


def reply_to(text: str) -> str:
    return f"You said: {text}"


class FakeOpenAI:
    def __init__(
        self,
        *,
        api_key: str = "test-key",
        model: str = "fake-model",
        delay: float = 0.02,
        numbered: bool = False,
        context_tokens: int | None = None,
        overflow: str = "empty",
        tells_window: bool = True,
        tokenizer: bool = False,
        counts: str = "words",
        streams_tool_calls: bool = True,
        first_round_calls: tuple[tuple[str, dict | str], ...] = (),
    ) -> None:
        """`numbered`: each streamed answer to the same text starts "Take N." (regenerated
        replies differ, as a sampling model's do). `streams_tool_calls` False: a streamed
        request that it would answer with calls gets what llama-cpp-python's server sends when
        its model chose a call (it raises "Automatic streaming tool choice is not supported"
        after the headers): a 200 and nothing more; only an unstreamed one gets them.
        `first_round_calls`: every request that offers tools and has no tool result yet (a
        reply's first round) is answered with these calls; the round after them, with text
        (the chaos runs' tools)."""
        self.streams_tool_calls = streams_tool_calls
        self.first_round_calls = first_round_calls
        self.numbered = numbered
        self.context_tokens = context_tokens
        # A prompt past the window: "empty" (llama-cpp-python's empty stream) or "error"
        # (vLLM's and OpenAI's 400). `tells_window`: whether /props says the window.
        self.overflow = overflow
        self.tells_window = tells_window
        self.tokenizer = tokenizer
        self.counts = counts
        self.api_key = api_key
        self.model = model
        self.delay = delay  # seconds between streamed words
        self.requests: list[dict] = []  # JSON bodies of chat completion requests, in order
        self.lock = threading.Lock()
        self.failures: list[int] = []
        self.retry_after: str | None = None  # sent with each failure, when set
        self.stalls: list[int] = []
        self.interruptions: list[int] = []
        self.keepalive: float | None = None  # seconds between `: ping` comments in a stall
        self.empties: list[bool] = []
        self.tool_calls: list[ToolCalls] = []  # the answers of the next requests with tools
        self.freezes: list[int] = []
        self.thawed = threading.Event()  # cleared: the whole server answers nothing
        self.thawed.set()
        self.overflows = 0  # prompts longer than the window, answered with nothing
        self.answered: dict[int, bool] = {}  # by handler thread: its request is counted done
        self.active = 0  # chat completion requests being answered now
        self.most_active = 0  # the most at once
        self.released = threading.Event()
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self, port: int = 0) -> FakeOpenAI:
        """Serve on `port` (0: a free one); a stopped server starts again on its own port."""
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(self))
        self.server.daemon_threads = True
        serve = partial(self.server.serve_forever, poll_interval=0.05)  # a quick `stop()`
        threading.Thread(target=serve, daemon=True).start()
        return self

    def stop(self) -> None:
        self.released.set()  # stalled replies end, so their threads do too
        self.server.shutdown()
        self.server.server_close()

    def fail_next(self, status: int, *, times: int = 1) -> None:
        """The next `times` chat completion requests get `status` with an OpenAI error body."""
        with self.lock:
            self.failures += [status] * times

    def stall_after(self, *, words: int, times: int = 1) -> None:
        """The next `times` streamed replies go silent after `words` words, until `stop()`."""
        with self.lock:
            self.stalls += [words] * times

    def interrupt_after(self, *, words: int, times: int = 1) -> None:
        """The next `times` streamed replies end after `words` words with `data: [DONE]` and no
        `finish_reason`: cut short, without saying so."""
        with self.lock:
            self.interruptions += [words] * times

    def freeze_after(self, *, words: int) -> None:
        """The next streamed reply freezes the whole server after `words` words: that stream,
        every other one and every request (`/v1/models` too) get nothing until `thaw()`."""
        with self.lock:
            self.freezes.append(words)

    def thaw(self) -> None:
        self.thawed.set()

    def frozen_wait(self) -> None:
        while not (self.thawed.wait(0.05) or self.released.is_set()):
            pass

    def call_tools_next(
        self, *calls: tuple[str, dict | str], finish_reason: str = "tool_calls", times: int = 1
    ) -> None:
        """The next `times` requests that offer tools are answered with these calls (a name and
        its arguments each; several: parallel calls), then `finish_reason`."""
        with self.lock:
            self.tool_calls += [ToolCalls(calls, finish_reason)] * times

    def empty_next(self, *, times: int = 1) -> None:
        """The next `times` streamed replies are empty: the role, then `[DONE]`."""
        with self.lock:
            self.empties += [True] * times

    def streamed(self) -> list[dict]:
        """The streamed chat requests: the answers (titles and summaries are not streamed)."""
        with self.lock:
            return [body for body in self.requests if body.get("stream")]

    def chat_requests(self) -> int:
        return len(self.streamed())

    def tokens_of(self, text: str) -> int:
        return len(text) if self.counts == "characters" else len(WORD.findall(text))

    def prompt_tokens(self, body: dict) -> int:
        """A prompt's length as this server counts it: its messages' tokens."""
        return sum(self.tokens_of(m.get("content") or "") for m in body.get("messages") or [])

    def answering(self, change: int) -> None:
        """One more request being answered (+1), or one fewer (-1; once per request)."""
        with self.lock:
            if change < 0 and self.answered.get(threading.get_ident()):
                return
            self.answered[threading.get_ident()] = change < 0
            self.active += change
            self.most_active = max(self.most_active, self.active)

    def take_tool_calls(self, body: dict) -> ToolCalls | None:
        with self.lock:
            if self.tool_calls:
                return self.tool_calls.pop(0)
        first_round = not any(m.get("role") == "tool" for m in body.get("messages") or [])
        return ToolCalls(self.first_round_calls) if self.first_round_calls and first_round else None

    def take(self, queue: list[int]) -> int | None:
        with self.lock:
            return queue.pop(0) if queue else None

    def record(self, body: dict) -> None:
        with self.lock:
            self.requests.append(body)


def handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(OpenAIHandler):
        pass

    Handler.fake = fake
    return Handler


class OpenAIHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as real servers do
    fake: FakeOpenAI

    def log_message(self, format: str, *args) -> None:
        pass  # keep the test output clean

    def do_GET(self) -> None:
        self.fake.frozen_wait()
        if (
            self.path.rstrip("/") == "/props"
            and self.fake.context_tokens
            and self.fake.tells_window
        ):
            settings = {"n_ctx": self.fake.context_tokens}
            return self.json(200, {"default_generation_settings": settings})
        if self.path.rstrip("/") != "/v1/models":
            return self.error(404, "Not found.", type_="invalid_request_error")
        if not self.authorized():
            return None
        model = {"id": self.fake.model, "object": "model", "created": 0, "owned_by": "fake"}
        return self.json(200, {"object": "list", "data": [model]})

    def do_POST(self) -> None:
        self.fake.frozen_wait()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path.rstrip("/") == "/tokenize" and self.fake.tokenizer:
            return self.json(200, {"tokens": [0] * self.fake.tokens_of(body.get("content") or "")})
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self.error(404, "Not found.", type_="invalid_request_error")
        self.fake.record(body)
        if not self.authorized():
            return None
        # Counted until its last word is written: before the client can see that it ended.
        self.fake.answering(+1)
        try:
            return self.answer(body)
        finally:
            self.fake.answering(-1)  # an error, or a stream cut short

    def answer(self, body: dict) -> None:
        if (status := self.fake.take(self.fake.failures)) is not None:
            return self.error(status, f"Failing on purpose with {status}.")
        if body.get("model") != self.fake.model:
            return self.error(404, f"The model `{body.get('model')}` does not exist.")
        asked = last_user_text(body.get("messages") or [])
        text = reply_to(asked)
        if self.fake.context_tokens and (asked_tokens := self.fake.prompt_tokens(body)) > (
            window := self.fake.context_tokens
        ):
            self.fake.overflows += 1
            if self.fake.overflow == "empty" and body.get("stream"):
                return self.nothing()
            return self.error(
                400,
                f"This model's maximum context length is {window} tokens. However, your "
                f"messages resulted in {asked_tokens} tokens.",
            )
        if body.get("tools") and body.get("stream") and not self.fake.streams_tool_calls:
            with self.fake.lock:
                refuses = bool(self.fake.tool_calls)
            if refuses:
                return self.nothing()
        if body.get("tools") and (calls := self.fake.take_tool_calls(body)) is not None:
            if body.get("stream"):
                return self.stream_tool_calls(calls)
            self.fake.answering(-1)
            return self.json(200, tool_completion(self.fake.model, calls))
        if body.get("stream"):
            if self.fake.numbered:
                takes = [last_user_text(b.get("messages") or []) for b in self.fake.streamed()]
                text = f"Take {takes.count(asked)}. {text}"
            return self.stream(text, max_tokens=body.get("max_tokens"))
        words, finish = WORD.findall(text), "stop"
        limit = body.get("max_tokens")
        if limit is not None and len(words) > limit:
            words, finish = words[:limit], "length"
        self.fake.answering(-1)
        return self.json(200, completion(self.fake.model, "".join(words), finish))

    def authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {self.fake.api_key}":
            return True
        self.error(401, "Incorrect API key provided.")
        return False

    def stream(self, text: str, *, max_tokens: int | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        stall = self.fake.take(self.fake.stalls)
        freeze = self.fake.take(self.fake.freezes)
        interrupt = self.fake.take(self.fake.interruptions)
        words = [] if self.fake.take(self.fake.empties) else WORD.findall(text)
        finish = "stop"
        if max_tokens is not None and len(words) > max_tokens:
            words, finish = words[:max_tokens], "length"
        chunk_id = f"chatcmpl-{uuid.uuid4().hex}"
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client left
            self.event(chunk(chunk_id, self.fake.model, {"role": "assistant", "content": ""}))
            for index, word in enumerate(words):
                if index == stall:
                    # Silent, or with a keep-alive comment every `keepalive` seconds.
                    while not self.fake.released.wait(self.fake.keepalive):
                        self.send_chunk(b": ping\n\n")
                    self.close_connection = True
                    return
                if index == interrupt:
                    break
                if index == freeze:
                    self.fake.thawed.clear()
                self.fake.frozen_wait()
                time.sleep(self.fake.delay)
                self.event(chunk(chunk_id, self.fake.model, {"content": word}))
            else:
                self.fake.answering(-1)
                self.event(chunk(chunk_id, self.fake.model, {}, finish_reason=finish))
            self.send_chunk(b"data: [DONE]\n\n")
            self.send_chunk(b"")

    def stream_tool_calls(self, calls: ToolCalls) -> None:
        """The calls' deltas: every call's first (its id and name), then the pieces of their
        arguments, a piece of each call in turn, as a server generating parallel calls sends
        them."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk_id, model = f"chatcmpl-{uuid.uuid4().hex}", self.fake.model
        pieces = [arguments_pieces(arguments) for _, arguments in calls.calls]
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client left
            self.event(chunk(chunk_id, model, {"role": "assistant", "content": None}))
            for index, (name, _) in enumerate(calls.calls):
                opening = {"index": index, "id": call_id(chunk_id, index), "type": "function"}
                opening["function"] = {"name": name, "arguments": ""}
                self.event(chunk(chunk_id, model, {"tool_calls": [opening]}))
            for turn in range(max(map(len, pieces), default=0)):
                for index, parts in enumerate(pieces):
                    if turn < len(parts):
                        time.sleep(self.fake.delay)
                        piece = {"index": index, "function": {"arguments": parts[turn]}}
                        self.event(chunk(chunk_id, model, {"tool_calls": [piece]}))
            self.fake.answering(-1)
            self.event(chunk(chunk_id, model, {}, finish_reason=calls.finish_reason))
            self.send_chunk(b"data: [DONE]\n\n")
            self.send_chunk(b"")

    def nothing(self) -> None:
        """A 200 dropped before its first event: llama-cpp-python's server raises its error
        only once the response has begun, and closes the connection mid-body."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True

    def event(self, data: dict) -> None:
        self.send_chunk(f"data: {json.dumps(data)}\n\n".encode())

    def send_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def json(self, status: int, data: dict, **headers: str) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def error(self, status: int, message: str, *, type_: str | None = None) -> None:
        kind, code = ERRORS.get(status, ("api_error", None))
        error = {"message": message, "type": type_ or kind, "param": None, "code": code}
        retry_after = self.fake.retry_after
        self.json(status, {"error": error}, **({"Retry-After": retry_after} if retry_after else {}))


def last_user_text(messages: list[dict]) -> str:
    users = [m.get("content") or "" for m in messages if m.get("role") == "user"]
    return users[-1] if users else ""


def chunk(chunk_id: str, model: str, delta: dict, *, finish_reason: str | None = None) -> dict:
    return {
        "id": chunk_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


@dataclass(frozen=True)
class ToolCalls:
    """An answer made of tool calls: (name, arguments) each, and how it says it ended."""

    calls: tuple[tuple[str, dict | str], ...]  # arguments as a string: sent as written
    finish_reason: str = "tool_calls"


def arguments_text(arguments: dict | str) -> str:
    """A call's arguments as the model writes them: JSON, or (a string) whatever it wrote."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def call_id(chunk_id: str, index: int) -> str:
    return f"call_{chunk_id[-8:]}_{index}"


def arguments_pieces(arguments: dict | str, size: int = 7) -> list[str]:
    """A call's arguments as JSON text, in the small pieces a model streams."""
    text = arguments_text(arguments)
    return [text[start : start + size] for start in range(0, len(text), size)] or [""]


def tool_completion(model: str, calls: ToolCalls) -> dict:
    """The calls, not streamed: what a server answers a request with `stream` false."""
    chunk_id = f"chatcmpl-{uuid.uuid4().hex}"
    tool_calls = [
        {
            "id": call_id(chunk_id, index),
            "type": "function",
            "function": {"name": name, "arguments": arguments_text(arguments)},
        }
        for index, (name, arguments) in enumerate(calls.calls)
    ]
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    return {
        "id": chunk_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": calls.finish_reason}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def completion(model: str, text: str, finish_reason: str = "stop") -> dict:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def worker_settings(fake: FakeOpenAI) -> dict[str, str]:
    """The environment of a worker whose default brain is `openai`, pointed at `fake`."""
    return {
        "CONTINUITY_BRAIN": "openai",
        "CONTINUITY_OPENAI_BASE_URL": fake.url,
        "CONTINUITY_OPENAI_API_KEY": fake.api_key,
        "CONTINUITY_OPENAI_MODEL": fake.model,
    }
