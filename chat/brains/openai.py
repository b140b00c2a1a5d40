"""A brain backed by any OpenAI-compatible `/v1/chat/completions` server: vLLM, Ollama,
llama.cpp's server, OpenAI itself (docs/model-backends.md).

Only `respond` and `summarize` call the model. Memory stays deterministic: `plan` extracts the
facts the user stated with the built-in brain's rules, so what a person says about themselves
is remembered whatever the model makes of it.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager

import httpx
import openai
from django.conf import settings

from chat.brains.builtin import BuiltinBrain
from continuity.brains import CUT_OFF, Context, ToolRound, ToolSpec, ToolUse, Turn, Work
from continuity.context import context_tokens, tokens_estimate
from continuity.delivery import model_learn, model_learned
from continuity.errors import BackendUnavailable, ContextTooLong, PermanentError
from continuity.models import handoff_markdown
from continuity.words import clip

logger = logging.getLogger(__name__)
TITLE_INSTRUCTIONS = (
    "Write a title of two to six words for the conversation that starts with this exchange. "
    "Answer with the title only: no quotes, no final full stop."
)
SUMMARY_INSTRUCTIONS = (
    "You keep the running summary of a conversation between a user and an assistant. "
    "Write the previous summary again, extended with the new turns. Keep every fact the user "
    "stated (their name, goals, likes, things to remember, decisions), in their words where "
    "you can; leave out small talk. Answer with the summary only, as short bullet points."
)


# How servers say a prompt is longer than the window: OpenAI and vLLM ("maximum context length
# is …", `context_length_exceeded`), llama.cpp ("exceeds the available context size").
CONTEXT_EXCEEDED = re.compile(
    r"context[ _]length|maximum context|context size|context window|too many tokens", re.I
)
# What a refusal states (OpenAI's, vLLM's and llama-cpp-python's wording): the window, and the
# prompt's size by the server's count.
STATED_WINDOW = re.compile(r"maximum context length is (\d+) tokens", re.I)
STATED_PROMPT = re.compile(
    r"(\d+) in the messages|messages resulted in (\d+) tokens|request has (\d+) input tokens",
    re.I,
)
# Where servers count tokens with the model's own tokenizer: llama.cpp's server, then
# llama-cpp-python's.
TOKENIZER_PATHS = ("/tokenize", "/extras/tokenize")
# How much of a model's name a configuration problem quotes.
MODEL_NAME_SHOWN = 100
# How long a server may take to say its model's window (or count tokens) before it is left
# unknown, and how long an unknown one stays unasked.
WINDOW_ASK_TIMEOUT = 3
WINDOW_ASK_AGAIN = 60
LEARNED_READ_SECONDS = 1.0
SERVER_DOWN = "_server_down"  # in what `server_json` returns when nothing answered


class ModelTimeout(Exception):
    """The model server went silent: the attempt fails and is retried later, never hangs."""


def prompt_messages(context: Context, work: Work | None = None) -> list[dict]:
    """The chat messages for `context`: one system message (identity, memory, working notes,
    summary, what is queued, a restart, what to know of the tools), then the recent turns and
    the message to answer, then this reply's earlier rounds (`work`)."""
    turns = [*context.history, Turn("user", context.text)]
    system = {
        "role": "system",
        "content": system_prompt(context, tools_note=work.note if work else ""),
    }
    return [system, *alternating(turns), *rounds_messages(work.rounds if work else [])]


def rounds_messages(rounds: list[ToolRound]) -> list[dict]:
    """The reply's earlier rounds as the wire format has them, always well formed: each
    assistant message with tool calls is followed by one tool message per call id."""
    messages: list[dict] = []
    for done in rounds:
        calls = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in done.calls
        ]
        messages.append({"role": "assistant", "content": done.text, "tool_calls": calls})
        messages += [
            {
                "role": "tool",
                "tool_call_id": call.call_id,
                "content": done.results.get(call.call_id, NO_RESULT),
            }
            for call in done.calls
        ]
    return messages


# What the model reads for a call that has no result (none can be missing; the history stays
# well formed whatever happens).
NO_RESULT = "No result: the call was not run."


def tool_wire(spec: ToolSpec) -> dict:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.input_schema or {"type": "object", "properties": {}},
        },
    }


def tools_offered(specs: list[ToolSpec]) -> dict:
    """What a request says of the round's tools: none, or them and `tool_choice`, always said
    (llama-cpp-python's function-calling format ignores tools without it)."""
    if not specs:
        return {}
    choice: str | dict = settings.CONTINUITY_OPENAI_TOOL_CHOICE
    if choice not in ("auto", "required", "none"):
        named = any(spec.name == choice for spec in specs)
        choice = {"type": "function", "function": {"name": choice}} if named else "auto"
    return {"tools": [tool_wire(spec) for spec in specs], "tool_choice": choice}


def tool_use(call_id: str, name: str, arguments: str) -> ToolUse:
    """A call as the model wrote it; arguments that are not a JSON object are its problem,
    which it reads as the call's result, never a crash."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError as exc:
        problem = f"The arguments are not valid JSON ({exc}): {clip(arguments, 200)}"
        return ToolUse(call_id, name, {}, problem=problem)
    if not isinstance(parsed, dict):
        return ToolUse(call_id, name, {}, problem="The arguments must be a JSON object.")
    return ToolUse(call_id, name, parsed)


def system_prompt(context: Context, *, tools_note: str = "") -> str:
    parts = [context.identity.strip()]
    if context.facts:
        facts = "\n".join(f"- {key}: {value}" for key, value in context.facts.items())
        parts.append(f"About the user (what you remember in all their conversations):\n{facts}")
    if note := context.handoff:
        notes = handoff_markdown(
            written_at=note.written_at,
            current_state=note.current_state,
            critical_context=note.critical_context,
            next_steps=note.next_steps,
            decisions=note.decisions,
        )
        parts.append(
            "Your notes for this conversation (its goal, plan and what to keep in mind; other "
            f"conversations have their own):\n\n{notes}"
        )
    if summary := context.summary.strip():
        parts.append(f"Summary of the earlier conversation (those turns are not shown):\n{summary}")
    if context.waiting:
        waiting = "\n".join(f"- “{clip(turn.text, 200)}”" for turn in context.waiting)
        parts.append(
            f"{len(context.waiting)} more message(s) from the user are queued after this one; "
            f"answer only the current message, the others are answered next:\n{waiting}"
        )
    if recovery := context.recovery:
        parts.append(
            f"Your answer to the user's latest message was interrupted ({recovery.label}). "
            "The user's page already says so above your reply: do not mention it; answer "
            "the message."
        )
    parts.append(tools_note)
    return "\n\n".join(part for part in parts if part)


def alternating(turns: list[Turn]) -> list[dict[str, str]]:
    """Turns as chat messages, merging neighbours of one role: some chat templates (Mistral's)
    refuse two user messages in a row, which a reply deleted by staff would leave."""
    messages: list[dict[str, str]] = []
    for turn in turns:
        if messages and messages[-1]["role"] == turn.role:
            messages[-1]["content"] += f"\n\n{turn.text}"
        else:
            messages.append({"role": turn.role, "content": turn.text})
    return messages


# A canned answer for `OpenAIBrain.warm`, in the wire format of a streamed chat completion.
WARM_STREAM = (
    b'data: {"id":"w","object":"chat.completion.chunk","created":0,"model":"w","choices":'
    b'[{"index":0,"delta":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)
WARM_COMPLETION = {
    "id": "w",
    "object": "chat.completion",
    "created": 0,
    "model": "w",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
}


def call_gather(calls: dict[int, dict[str, str]], piece) -> None:
    """A streamed piece of a tool call, gathered by its `index`: its id and name come once,
    its arguments in pieces (parallel calls' pieces interleave)."""
    # A server that leaves the index out continues the last call; one that repeats an index
    # for a call with a new id begins another.
    index = piece.index if piece.index is not None else max(calls, default=0)
    if piece.id and calls.get(index, {}).get("id") not in ("", None, piece.id):
        index = max(calls) + 1
    call = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
    call["id"] = call["id"] or (piece.id or "")
    if piece.function is not None:
        call["name"] = call["name"] or (piece.function.name or "")
        call["arguments"] += piece.function.arguments or ""


def rounds_tokens(messages: list[dict]) -> int:
    """The estimated tokens of the reply's earlier rounds, which the context's count leaves
    out: their text, calls and results."""
    rounds = [
        message for message in messages if message.get("tool_calls") or message["role"] == "tool"
    ]
    return sum(tokens_estimate(json.dumps(message)) for message in rounds)


class OpenAIBrain:
    # The model's window as its server said it, by (base URL, model): asked once per process
    # (before the worker forks: `warm`), when CONTINUITY_OPENAI_CONTEXT_TOKENS does not say it.
    windows: dict[tuple[str, str], int | None] = {}
    asked: dict[tuple[str, str], float] = {}  # when it was last asked (monotonic clock)
    # Where the server counts tokens (one of TOKENIZER_PATHS), None when it does not.
    tokenizers: dict[tuple[str, str], str | None] = {}
    tokenizer_asked: dict[tuple[str, str], float] = {}
    # The most server tokens one estimated token has turned out to be (the server's count of a
    # prompt over CONTINUITY_TOKEN_ESTIMATOR's): the budget shrinks by it. Only ever grows.
    scales: dict[tuple[str, str], float] = {}
    # What a refusal taught is shared with every process (`model_learn`), and what the others
    # learned is read at most every LEARNED_READ_SECONDS (monotonic clock).
    learned_read: dict[tuple[str, str], float] = {}
    # The servers (by `key`) that send nothing streamed with tools (llama-cpp-python's, when the
    # model chose a call): their rounds with tools go unstreamed.
    streamless_tools: set[tuple[str, str]] = set()

    @classmethod
    def key(cls) -> tuple[str, str]:
        return (settings.CONTINUITY_OPENAI_BASE_URL, settings.CONTINUITY_OPENAI_MODEL)

    @classmethod
    def label(cls) -> str:
        return f"{settings.CONTINUITY_OPENAI_MODEL} (model server)"

    @classmethod
    def shared_key(cls) -> str:
        return " ".join(cls.key())

    @classmethod
    def learned_sync(cls) -> None:
        """Take in what other processes learned of the model: every pool process would otherwise
        meet its own refusal (and give its own attempt back) before it knew."""
        key, now = cls.key(), time.monotonic()
        if now - cls.learned_read.get(key, -LEARNED_READ_SECONDS) < LEARNED_READ_SECONDS:
            return
        cls.learned_read[key] = now
        learned = model_learned(cls.shared_key())
        if learned is None:
            return
        if learned.window and learned.window < (cls.windows.get(key) or learned.window + 1):
            cls.windows[key] = learned.window
        if learned.scale and learned.scale > cls.scales.get(key, 1.0):
            cls.scales[key] = learned.scale

    @classmethod
    def context_window(cls) -> int | None:
        """The model's context window in tokens: configured, else as its server said (or as any
        process learned from its refusals), else unknown (None: only CONTINUITY_CONTEXT_TOKENS
        bounds the prompt)."""
        cls.learned_sync()
        configured = settings.CONTINUITY_OPENAI_CONTEXT_TOKENS
        known = [window for window in (configured, cls.windows.get(cls.key())) if window]
        return min(known) if known else None

    @classmethod
    def window_learn(
        cls, refused_tokens: int, *, window: int | None = None, counted: int | None = None
    ) -> bool:
        """The server refused a prompt of about `refused_tokens` (estimated) as too long. What
        it stated is learned: its `window`, and the prompt's size by its own count (`counted`),
        which teaches how far the estimate is off. When it stated no count, and no window smaller
        than the one known (vLLM's "your request has N input tokens" aside), its window is taken
        to be small enough that the next prompt is compacted to three quarters of that, and
        less again if it is refused too. False when nothing smaller was learned: compaction
        cannot help (what is left is the newest exchange and the message), and trying again
        would only be refused again."""
        key, current = cls.key(), cls.context_window()
        learned = bool(counted and refused_tokens and cls.scale_learn(counted / refused_tokens))
        if window and current and window >= current and not counted:
            window = None  # the window it states is known: the estimate was short, so guess
        if not window and not counted:
            margin = 1 - settings.CONTINUITY_TOKEN_MARGIN
            budget = int(0.75 * refused_tokens / settings.CONTINUITY_COMPACT_AT)
            window = int(budget / margin) + cls.reply_tokens()
        if window and (not current or window < current):
            cls.windows[key] = window
            model_learn(cls.shared_key(), window=window)
            learned = True
        if learned:
            logger.warning(
                "Model %s at %s refused a prompt of about %d tokens: its window taken as %s, "
                "%.2f of its tokens per estimated one",
                key[1], key[0], refused_tokens, cls.context_window(), cls.token_scale(),
            )  # fmt: skip
        return learned

    @classmethod
    def token_scale(cls) -> float:
        cls.learned_sync()
        return cls.scales.get(cls.key(), 1.0)

    @classmethod
    def scale_learn(cls, ratio: float) -> bool:
        """The server counted `ratio` of its tokens per estimated one: True when that is more
        than known (the budget shrinks by it)."""
        if ratio <= cls.token_scale():
            return False
        cls.scales[cls.key()] = ratio
        model_learn(cls.shared_key(), scale=ratio)
        return True

    @classmethod
    def tokens_count(cls, text: str) -> int:
        """`text`'s tokens by the server's tokenizer where it has one; otherwise estimated, and
        scaled by what its counts taught."""
        counted = cls.tokens_counted(text)
        if counted is not None:
            return counted
        return math.ceil(tokens_estimate(text) * cls.token_scale())

    @classmethod
    def tokens_counted(cls, text: str) -> int | None:
        """`text`'s tokens as the server's own tokenizer counts them; None when it has none or
        cannot say now."""
        key = cls.key()
        if (
            key not in cls.tokenizers
            and time.monotonic() - cls.tokenizer_asked.get(key, -WINDOW_ASK_AGAIN)
            >= WINDOW_ASK_AGAIN
        ):
            cls.tokenizer_discover()
        if not (path := cls.tokenizers.get(key)):
            return None
        tokens = cls.server_json(cls.server_root() + path, post=tokenize_body(text))
        return len(tokens["tokens"]) if isinstance(tokens.get("tokens"), list) else None

    @classmethod
    def tokenizer_discover(cls) -> None:
        """Which of TOKENIZER_PATHS the server answers; remembered, also when it is none. A
        server that cannot be reached is asked again a minute later."""
        cls.tokenizer_asked[cls.key()] = time.monotonic()
        for path in TOKENIZER_PATHS:
            answer = cls.server_json(cls.server_root() + path, post=tokenize_body("ok"))
            if isinstance(answer.get("tokens"), list):
                cls.tokenizers[cls.key()] = path
                return
            if answer.get(SERVER_DOWN):
                return
        cls.tokenizers[cls.key()] = None

    @classmethod
    def server_root(cls) -> str:
        return settings.CONTINUITY_OPENAI_BASE_URL.rstrip("/").removesuffix("/v1")

    @classmethod
    def server_json(cls, url: str, *, post: dict | None = None) -> dict:
        """What the server answers at `url` (a GET, or a POST of the JSON `post`) as a JSON
        object, within WINDOW_ASK_TIMEOUT; empty when it cannot say (a refusal, not an object),
        and `{SERVER_DOWN: True}` when it could not be reached or cannot answer yet (5xx, 429:
        llama.cpp's while it loads its model)."""
        headers = {"Authorization": f"Bearer {settings.CONTINUITY_OPENAI_API_KEY or 'none'}"}
        try:
            with httpx.Client(timeout=WINDOW_ASK_TIMEOUT, headers=headers) as http:
                answer = http.get(url) if post is None else http.post(url, json=post)
        except httpx.HTTPError:
            return {SERVER_DOWN: True}
        if answer.status_code >= 500 or answer.status_code == 429:
            return {SERVER_DOWN: True}  # loading, overloaded: ask again later
        try:
            found = answer.json() if answer.is_success else {}
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}

    @classmethod
    def models_listed(cls) -> list[dict]:
        """The models the server lists at `/v1/models` (each `{"id": …}`, vLLM's with its
        `max_model_len`); none when it cannot say."""
        listed = cls.server_json(f"{settings.CONTINUITY_OPENAI_BASE_URL.rstrip('/')}/models")
        entries = listed.get("data")
        return (
            [entry for entry in entries if isinstance(entry, dict)]
            if isinstance(entries, list)
            else []
        )

    @classmethod
    def configuration_problem(cls) -> str:
        """What its server says is wrong with the configuration: the model is not among those
        it lists at `/v1/models`. Empty when it has it, or when it cannot say (down, or no
        list)."""
        base, model = settings.CONTINUITY_OPENAI_BASE_URL, settings.CONTINUITY_OPENAI_MODEL
        offered = [entry["id"] for entry in cls.models_listed() if entry.get("id")]
        if not offered or model in offered:
            return ""
        # Names clipped: the text is the key of its open alert's unique index, and a server
        # may report names of any length.
        names = ", ".join(repr(clip(name, MODEL_NAME_SHOWN)) for name in offered[:10])
        return (
            f"The model server at {base} has no model {clip(model, MODEL_NAME_SHOWN)!r}; it "
            f"offers {names}. Set CONTINUITY_OPENAI_MODEL to one of them: until then its answers "
            "fail, or come from another model."
        )

    @classmethod
    def concurrency(cls) -> int:
        """How many requests the server gets at once, from every worker (0: no limit)."""
        return settings.CONTINUITY_OPENAI_CONCURRENCY

    @classmethod
    def reply_tokens(cls) -> int:
        """The room kept in the window for the reply, which `max_tokens` asks for: at most
        half a known window (a 512-token model still gets a prompt)."""
        window = cls.context_window()
        limit = settings.CONTINUITY_OPENAI_MAX_TOKENS
        return min(limit, window // 2) if window else limit

    @classmethod
    def summary_tokens(cls) -> int:
        """How long a summary may be: at most an eighth of a known window, since every prompt
        after it carries it (a 512-token model keeps room for the conversation)."""
        window = cls.context_window()
        limit = settings.CONTINUITY_OPENAI_SUMMARY_MAX_TOKENS
        return min(limit, window // 8) if window else limit

    @classmethod
    def window_discover(cls) -> int | None:
        """Ask the server for the model's window, where it says: vLLM in `/v1/models`
        (`max_model_len`), llama.cpp's server in `/props` (`n_ctx`). Remembered when found; a
        server that is down or says nothing leaves it unknown, asked again next time."""
        base, model = settings.CONTINUITY_OPENAI_BASE_URL, settings.CONTINUITY_OPENAI_MODEL
        if settings.CONTINUITY_OPENAI_CONTEXT_TOKENS or (base, model) in cls.windows:
            return cls.context_window()
        if time.monotonic() - cls.asked.get((base, model), -WINDOW_ASK_AGAIN) < WINDOW_ASK_AGAIN:
            return None  # asked lately, and the server did not say
        cls.asked[(base, model)] = time.monotonic()
        cls.tokenizer_discover()
        listed = cls.models_listed()
        window = next((m.get("max_model_len") for m in listed if m.get("id") == model), None)
        if not window:
            generation = cls.server_json(f"{cls.server_root()}/props").get(
                "default_generation_settings"
            )
            window = generation.get("n_ctx") if isinstance(generation, dict) else None
        if isinstance(window, int) and window > 0:
            cls.windows[(base, model)] = window
            logger.info("Model %s at %s: a window of %d tokens", model, base, window)
        return cls.context_window()

    @classmethod
    def warm(cls) -> None:
        """Make the client's first requests now, one streamed and one not, against a canned
        answer (no network): the worker does before it forks its pool. The openai package
        imports its resources (about 530 modules) and builds its response models at a
        client's first request, 1.9 s of CPU: a new pool process, as after a crash, answered
        that much later, and a kill within those seconds found the same message again."""

        def answer(request: httpx.Request) -> httpx.Response:
            if b'"stream":true' in request.content.replace(b" ", b""):
                headers = {"content-type": "text/event-stream"}
                return httpx.Response(200, headers=headers, content=WARM_STREAM)
            return httpx.Response(200, json=WARM_COMPLETION)

        with httpx.Client(transport=httpx.MockTransport(answer)) as http:
            client = openai.OpenAI(base_url="http://warm.invalid/v1", api_key="w", http_client=http)
            asked = [{"role": "user", "content": "ok"}]
            with client.chat.completions.create(model="w", messages=asked, stream=True) as stream:
                for _ in stream:
                    pass
            client.chat.completions.create(model="w", messages=asked)
        cls.window_discover()  # once, here, for every pool process
        cls.tokens_counted("ok")  # and where the server counts tokens

    def __init__(self) -> None:
        self.window_discover()  # outside any transaction: a brain is made after the begin
        self.base_url = settings.CONTINUITY_OPENAI_BASE_URL
        self.model = settings.CONTINUITY_OPENAI_MODEL
        # Whose failures and backoff every conversation of this server shares (delivery's).
        self.backend = f"openai {self.base_url}"
        self.builtin = BuiltinBrain()
        self.client = openai.OpenAI(
            base_url=self.base_url,
            # Local servers ignore the key, but the client refuses to start without one.
            api_key=settings.CONTINUITY_OPENAI_API_KEY or "none",
            # httpx's read timeout bounds every wait for bytes: the first token and each gap.
            timeout=httpx.Timeout(
                settings.CONTINUITY_OPENAI_REQUEST_TIMEOUT,
                read=settings.CONTINUITY_OPENAI_IDLE_TIMEOUT,
            ),
            max_retries=settings.CONTINUITY_OPENAI_MAX_RETRIES,
            http_client=openai.DefaultHttpxClient(
                transport=KeepAliveBlind(
                    httpx.HTTPTransport(), silence=settings.CONTINUITY_OPENAI_IDLE_TIMEOUT
                )
            ),
        )

    def plan(self, context: Context) -> dict:
        """The facts the person stated about themselves, and a goal the message set for this
        conversation with its plan, picked out by the built-in brain's rules."""
        plan = self.builtin.plan(context)
        return {key: plan[key] for key in ("facts", "goal", "steps") if key in plan}

    def respond(
        self, context: Context, plan: dict, work: Work | None = None
    ) -> Generator[str, None, str | list[ToolUse] | None]:
        """One round of the reply as the server streams it, offering the tools `work` has. Its
        `finish_reason` says how it ended: `stop`, complete; `length`, cut off at `max_tokens`
        (kept, marked so); none at all, a stream the server ended without finishing the reply
        (llama-cpp-python's does when another request interrupts it): the attempt is given
        back, as for any server failure. Tool calls in the stream are the answer, whatever
        `finish_reason` says ("tool_calls", or "stop" from some servers). A server that sends
        nothing streamed with tools gets its rounds with tools unstreamed (learned once)."""
        work = work or Work()
        idle = settings.CONTINUITY_OPENAI_IDLE_TIMEOUT
        started = heard = False
        finished = None
        messages = prompt_messages(context, work)
        estimated = context_tokens(context) + rounds_tokens(messages)
        self.prompt_check(messages, estimated=estimated)
        tools = tools_offered(work.tools)
        if tools and self.key() in self.streamless_tools:
            return (yield from self.respond_unstreamed(messages, tools, estimated=estimated))
        calls: dict[int, dict[str, str]] = {}
        with self.errors_explained(
            timeout=f"sent no token for {idle:g} s",
            answering=lambda: started,
            prompt_tokens=estimated,
        ):
            stream = self.client.chat.completions.create(
                model=self.model,
                messages=messages,
                temperature=settings.CONTINUITY_OPENAI_TEMPERATURE,
                max_tokens=self.reply_tokens(),
                stream=True,
                **tools,
            )
            # Closing the stream (also when the attempt is stopped mid-reply and this generator
            # is closed) drops the connection, which tells the server to stop generating.
            with stream:
                try:
                    for chunk in stream:
                        heard = True
                        for choice in chunk.choices:  # none in a usage-only chunk
                            if choice.delta and choice.delta.content:
                                started = True
                                yield choice.delta.content
                            for piece in (choice.delta.tool_calls if choice.delta else None) or []:
                                started = True
                                call_gather(calls, piece)
                            finished = choice.finish_reason or finished
                except httpx.RemoteProtocolError:
                    if heard:
                        raise
                    if not tools:  # dropped before its first event: the server may say why
                        self.silence_explained(messages, estimated=estimated)
                        raise
        if not heard and tools:
            # llama-cpp-python's server answers a streamed request whose model chose to call a
            # tool with a 200 and nothing more (it raises "Automatic streaming tool choice is
            # not supported" after the headers). Asked unstreamed, it answers: learned, once.
            answer = yield from self.respond_unstreamed(messages, tools, estimated=estimated)
            logger.warning("%s sent nothing streamed with tools: unstreamed now", self.base_url)
            self.streamless_tools.add(self.key())
            return answer
        if not heard:
            self.silence_explained(messages, estimated=estimated)
        if finished is None:
            raise BackendUnavailable(
                f"The model server at {self.base_url} ended the reply without finishing it "
                f"(no finish_reason; model {self.model!r}).",
                backend=self.backend,
            )
        if calls and tools:
            return [
                tool_use(call["id"], call["name"], call["arguments"])
                for _, call in sorted(calls.items())
            ]
        return CUT_OFF if finished == "length" else None

    def respond_unstreamed(
        self, messages: list[dict], tools: dict, *, estimated: int
    ) -> Generator[str, None, str | list[ToolUse] | None]:
        """The round in one answer: its text comes at once, then its calls."""
        waited = settings.CONTINUITY_OPENAI_REQUEST_TIMEOUT
        with self.errors_explained(
            timeout=f"did not answer within {waited:g} s", prompt_tokens=estimated
        ):
            # Nothing arrives until the whole round is written: the idle timeout would cut it
            # off, so the request gets a timeout of its own.
            completion = self.client.with_options(
                timeout=httpx.Timeout(waited)
            ).chat.completions.create(
                model=self.model,
                messages=messages,
                temperature=settings.CONTINUITY_OPENAI_TEMPERATURE,
                max_tokens=self.reply_tokens(),
                **tools,
            )
        choice = completion.choices[0] if completion.choices else None
        if choice is None:
            raise BackendUnavailable(
                f"The model server at {self.base_url} answered with no choice (model "
                f"{self.model!r}).",
                backend=self.backend,
            )
        if choice.message.content:
            yield choice.message.content
        if choice.message.tool_calls:
            return [
                tool_use(call.id, call.function.name, call.function.arguments or "")
                for call in choice.message.tool_calls
            ]
        return CUT_OFF if choice.finish_reason == "length" else None

    def prompt_check(self, messages: list[dict[str, str]], *, estimated: int) -> None:
        """Where the server counts tokens, count the prompt: learn how far the estimate that
        compaction goes by is off, and never send what the window cannot hold. A prompt too
        long by a count that teaches more than was known is given back (ContextTooLong: the
        next attempt compacts to fit); one too long by what was already known is all compaction
        can make it (the newest exchange and the message), and is refused."""
        counted = self.tokens_counted(
            "\n".join(message.get("content") or "" for message in messages)
        )
        if counted is None:
            return
        learned = estimated > 0 and self.scale_learn(counted / estimated)
        window, reply = self.context_window(), self.reply_tokens()
        if not window or counted <= window - reply:
            return
        said = (
            f"The prompt is {counted:,} tokens by the model server's count at {self.base_url}; "
            f"model {self.model!r} has a window of {window:,}, with {reply:,} kept for its reply"
        )
        if learned:
            raise ContextTooLong(f"{said}: compacting to fit.")
        raise PermanentError(
            f"{said}, and compaction cannot make it shorter (what is left is the instructions, "
            "the working notes, the summary, the newest exchange and this message): too long "
            "for this model's window."
        )

    def silence_explained(self, messages: list[dict[str, str]], *, estimated: int) -> None:
        """A stream that sent no event at all: llama-cpp-python's server answers a prompt
        longer than the window so (its error comes after the 200, and it drops the answer).
        Asked again, not streamed and for one token, it says why, and a prompt too long is
        learned from (ContextTooLong); otherwise the stream stays an unfinished reply."""
        waited = settings.CONTINUITY_OPENAI_REQUEST_TIMEOUT
        with self.errors_explained(
            timeout=f"did not answer within {waited:g} s", prompt_tokens=estimated
        ):
            self.client.chat.completions.create(
                model=self.model, messages=messages, max_tokens=1, temperature=0
            )

    def remember(self, context: Context, plan: dict, reply: str) -> dict[str, str]:
        return plan["facts"]

    def task_state(self, context: Context, plan: dict, reply: str) -> dict | None:
        return self.builtin.task_state(context, plan, reply)

    def summarize(self, turns: list[Turn], previous_summary: str) -> str:
        """The model's summary; the built-in brain's extractive one when the model's came back
        empty or cut off at its length limit (either would silently drop the turns it
        replaces)."""
        transcript = "\n".join(f"{turn.role}: {turn.text}" for turn in turns)
        previous = previous_summary.strip() or "(none)"
        request = f"Previous summary:\n{previous}\n\nNew turns:\n{transcript}"
        waited = settings.CONTINUITY_OPENAI_SUMMARY_TIMEOUT
        try:
            with self.errors_explained(timeout=f"did not answer within {waited:g} s"):
                # Nothing arrives until the whole summary is written: the idle timeout would
                # cut it off, so the whole request gets a timeout of its own instead.
                completion = self.client.with_options(
                    timeout=httpx.Timeout(waited), max_retries=0
                ).chat.completions.create(
                    model=self.model,
                    messages=[
                        {"role": "system", "content": SUMMARY_INSTRUCTIONS},
                        {"role": "user", "content": request},
                    ],
                    temperature=0,
                    max_tokens=self.summary_tokens(),
                )
        except PermanentError as exc:
            if not CONTEXT_EXCEEDED.search(str(exc)):
                raise
            completion = None  # the turns to summarize are more than the window holds
        choice = completion.choices[0] if completion and completion.choices else None
        text = (choice.message.content or "").strip() if choice else ""
        if not text or choice.finish_reason == "length":
            logger.warning(
                "Summary from %s empty, cut off or too long to ask for; using the built-in one",
                self.base_url,
            )
            return self.builtin.summarize(turns, previous_summary)
        return text

    def title(self, context: Context, reply: str) -> str:
        """One short request, bounded in time; on any failure of the model server, the
        built-in brain's title (a title is not worth a failed answer, nor a worker's minute)."""
        try:
            waited = settings.CONTINUITY_OPENAI_TITLE_TIMEOUT
            with self.errors_explained(timeout=f"did not answer within {waited:g} s"):
                completion = self.client.with_options(
                    timeout=httpx.Timeout(waited), max_retries=0
                ).chat.completions.create(
                    model=self.model,
                    messages=[
                        {"role": "system", "content": TITLE_INSTRUCTIONS},
                        {"role": "user", "content": f"User: {context.text}\n\nAssistant: {reply}"},
                    ],
                    temperature=0,
                    max_tokens=24,
                )
            title = completion.choices[0].message.content if completion.choices else ""
        except Exception:
            logger.warning("No title from %s; using the built-in one", self.base_url, exc_info=True)
            title = ""
        return (title or "").strip().strip('"“”').rstrip(".") or self.builtin.title(context, reply)

    @contextmanager
    def errors_explained(
        self, *, timeout: str, answering=lambda: False, prompt_tokens: int | None = None
    ) -> Iterator[None]:
        """Refusals no retry can fix become PermanentError (the message is dead-lettered with
        the reason). A server that cannot answer (refused or dropped connections, 5xx and 429
        still failing after the client's own retries, silence before the first token) becomes
        BackendUnavailable: the attempt is given back and the server gets its backoff. Silence
        once it is `answering` becomes ModelTimeout when the server still answers a request for
        its models list (it stalled on this message, and the attempt fails), BackendUnavailable
        when it answers nothing at all (it froze: not the message's fault)."""
        server = f"The model server at {self.base_url}"
        try:
            yield
        except openai.AuthenticationError as exc:
            # The server's own text may echo part of the key: it stays out of dead letters.
            raise PermanentError(f"{server} refused the API key ({exc.status_code}).") from exc
        except openai.NotFoundError as exc:
            raise PermanentError(
                f"{server} has no model {self.model!r} ({exc.status_code}: {detail(exc)})."
            ) from exc
        except openai.BadRequestError as exc:
            said = detail(exc)
            exceeded = CONTEXT_EXCEEDED.search(said) and prompt_tokens is not None
            if exceeded and self.window_learn(prompt_tokens, **stated_sizes(exc)):
                raise ContextTooLong(
                    f"{server} refused the prompt of about {prompt_tokens} tokens as longer than "
                    f"model {self.model!r} can take ({exc.status_code}: {detail(exc)})."
                ) from exc
            raise PermanentError(
                f"{server} refused the request for model {self.model!r} "
                f"({exc.status_code}: {detail(exc)})."
            ) from exc
        except (openai.PermissionDeniedError, openai.UnprocessableEntityError) as exc:
            raise PermanentError(
                f"{server} refused the request for model {self.model!r} "
                f"({exc.status_code}: {detail(exc)})."
            ) from exc
        except (openai.APITimeoutError, httpx.TimeoutException) as exc:
            # Before the response: APITimeoutError (after the client's retries); mid-stream,
            # httpx's ReadTimeout comes straight through the stream's iterator.
            said = f"{server} {timeout} (model {self.model!r})."
            models = f"{self.base_url.rstrip('/')}/models"
            if answering() and not self.server_json(models).get(SERVER_DOWN):
                raise ModelTimeout(said) from exc  # it answers others: it stalled on this one
            if answering():
                said = f"{server} {timeout} mid-reply, and then answered nothing at all."
            raise BackendUnavailable(said, backend=self.backend) from exc
        except (openai.RateLimitError, openai.InternalServerError) as exc:
            raise BackendUnavailable(
                f"{server} answered {exc.status_code} for model {self.model!r}: {detail(exc)}.",
                backend=self.backend,
                retry_after=retry_after(exc.response),
            ) from exc
        except (openai.APIConnectionError, httpx.TransportError) as exc:
            # Refused, reset, or dropped mid-stream (a restart of the server).
            raise BackendUnavailable(
                f"{server} could not be reached for model {self.model!r} "
                f"({type(exc.__cause__ or exc).__name__}).",
                backend=self.backend,
            ) from exc


class KeepAliveBlind(httpx.BaseTransport):
    """A transport whose streamed answers count only what carries data as a sign of life. A
    server's keep-alive comments (`: ping`, which llama.cpp's sends every 15 s while a slot
    waits) are bytes, so httpx's read timeout never fires while they come, and the client does
    not show them: a server frozen mid-reply would hold the attempt for ever. Past `silence`
    seconds of nothing else, the stream fails with a ReadTimeout, as a silent one does."""

    def __init__(self, inner: httpx.BaseTransport, *, silence: float) -> None:
        self.inner = inner
        self.silence = silence

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            return response
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=DataOrSilence(response.stream, silence=self.silence),
            extensions=response.extensions,
            request=request,
        )

    def close(self) -> None:
        self.inner.close()


class DataOrSilence(httpx.SyncByteStream):
    def __init__(self, inner, *, silence: float) -> None:
        self.inner = inner
        self.silence = silence

    def __iter__(self) -> Iterator[bytes]:
        heard = time.monotonic()
        for part in self.inner:
            if any(line and not line.startswith(b":") for line in part.splitlines()):
                heard = time.monotonic()
            elif time.monotonic() - heard >= self.silence:
                raise httpx.ReadTimeout(f"only keep-alive comments for {self.silence:g} s")
            yield part

    def close(self) -> None:
        self.inner.close()


def tokenize_body(text: str) -> dict[str, str]:
    """What either tokenizer reads: llama.cpp's `content`, llama-cpp-python's `input`."""
    return {"content": text, "input": text}


def stated_sizes(exc: openai.APIStatusError) -> dict[str, int]:
    """The window and the prompt's size a context refusal states: in its message (OpenAI's
    wording, which vLLM and llama-cpp-python's server copy), or as llama.cpp's server's
    `n_ctx` and `n_prompt_tokens`."""
    body = exc.body if isinstance(exc.body, dict) else {}
    text = body.get("message") if isinstance(body.get("message"), str) else exc.response.text
    window, prompt = body.get("n_ctx"), body.get("n_prompt_tokens")
    if not isinstance(window, int) and (found := STATED_WINDOW.search(text or "")):
        window = int(found.group(1))
    if not isinstance(prompt, int) and (found := STATED_PROMPT.search(text or "")):
        prompt = int(next(group for group in found.groups() if group))
    sizes = {"window": window, "counted": prompt}
    return {name: size for name, size in sizes.items() if isinstance(size, int) and size > 0}


def retry_after(response: httpx.Response) -> float | None:
    """The seconds a server asked for in Retry-After (a number; a date is not worth parsing)."""
    try:
        return max(float(response.headers.get("retry-after", "")), 0.0)
    except ValueError:
        return None


def detail(exc: openai.APIStatusError) -> str:
    """The server's own error message (OpenAI's `{"error": {"message": ...}}`)."""
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return clip(body["message"], 200)
    return clip(exc.response.text or exc.response.reason_phrase, 200)
