"""(6) Streaming: from a send (an htmx POST to the message endpoint, as the page makes it) to
the first chunk of the reply on the conversation's websocket, through daphne, the Redis channel
layer and the worker; then many clients at once.

Each client is a signed-in person with a conversation, a websocket opened with the session
cookie and the page's Origin (and the page's first `sync`), and its own HTTP connection. The
send rate limit is raised for the run: it exists to stop one person, not a benchmark.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils.crypto import get_random_string

from continuity.models import Conversation

from .plan import Plan
from .rig import Rig
from .stats import Figure, Section, latency_figures, percentile
from .traffic import TEXT, all_answered

UNLIMITED = {"CONTINUITY_SEND_RATE": "1000000/second"}
CHUNK_TIMEOUT = 30  # live updates are at most once: a lost chunk is an error, not a hang
RESENDS = 5
MESSAGE_ID = re.compile(r'data-message-id="(\d+)"')
ARTICLE = re.compile(r"<article\b[^>]*>")
ATTRIBUTE = re.compile(r'(data-message-id|data-seq|data-state)="(\w+)"')


@dataclass(frozen=True)
class Visitor:
    conversation_id: int
    cookie: str
    csrf_token: str


def streaming_run(rig: Rig, plan: Plan) -> Section:
    rig.shared_worker()
    # As in production: it re-enqueues a conversation whose drain the worker gave up on.
    watchdog = rig.watchdog()
    visitors = visitors_new(plan.clients)
    single = [
        crowd_run(rig, visitors[:1], plan.stream_messages).latencies
        for _ in range(plan.repetitions)
    ]
    crowds = [crowd_run(rig, visitors, plan.client_messages) for _ in range(plan.repetitions)]
    watchdog.stop()
    clients = f"{plan.clients} clients × {plan.client_messages}"
    return Section(
        "streaming",
        "Streaming to websocket clients",
        figures=[
            *latency_figures("send → first chunk, one client", single),
            Figure(f"{clients}: completion", "s", [c.elapsed for c in crowds]),
            Figure(
                f"{clients}: send → first chunk p95",
                "ms",
                [percentile(c.latencies, 95) * 1000 for c in crowds],
            ),
            Figure(f"{clients}: errors", "errors", [sum(c.errors.values()) for c in crowds]),
            Figure(
                f"{clients}: peak PostgreSQL connections",
                "connections",
                [c.peak_connections for c in crowds],
            ),
            Figure(
                f"{clients}: connections still open once the clients left",
                "connections",
                [c.left_open for c in crowds],
            ),
        ],
        notes=streaming_notes(plan, crowds, rig.database.limit),
    )


def visitors_new(count: int) -> list[Visitor]:
    users = get_user_model().objects.bulk_create(
        get_user_model()(username=f"bench-visitor-{uuid.uuid4().hex[:12]}") for _ in range(count)
    )
    conversations = Conversation.objects.bulk_create(
        Conversation(owner=user, title="Bench stream") for user in users
    )
    visitors = []
    for user, conversation in zip(users, conversations, strict=True):
        browser = Client()
        browser.force_login(user)
        session = browser.cookies[settings.SESSION_COOKIE_NAME].value
        token = get_random_string(32)  # a CSRF secret, as the cookie carries it
        cookie = f"{settings.SESSION_COOKIE_NAME}={session}; {settings.CSRF_COOKIE_NAME}={token}"
        visitors.append(Visitor(conversation.pk, cookie, token))
    return visitors


@dataclass
class Crowd:
    latencies: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    elapsed: float = 0.0
    peak_connections: int = 0
    left_open: int = 0


def crowd_run(rig: Rig, visitors: list[Visitor], messages: int) -> Crowd:
    """One repetition, against a daphne of its own: it keeps database connections open after
    the clients have left (see the notes), so it is stopped before the wait for the replies
    still held up, which must not spill into the next repetition."""
    web, base_url = rig.web(**UNLIMITED)
    with rig.database.peak_connections() as peak:
        result = asyncio.run(crowd(base_url, visitors, messages))
    result.peak_connections, result.left_open = peak.value, rig.database.connections()
    web.stop()
    all_answered([v.conversation_id for v in visitors], timeout=300)
    return result


async def crowd(base_url: str, visitors: list[Visitor], messages: int) -> Crowd:
    """Every visitor opens its socket; then all send `messages` messages each, one after the
    other, each once the first chunk of the previous reply arrived."""
    result = Crowd()
    clients = [PageClient(base_url, visitor, result) for visitor in visitors]
    await asyncio.gather(*(client.open() for client in clients))
    started = time.perf_counter()
    await asyncio.gather(*(client.converse(messages) for client in clients if client.opened))
    result.elapsed = time.perf_counter() - started
    await asyncio.gather(*(client.close() for client in clients if client.opened))
    return result


class PageClient:
    """What the conversation page does: a websocket, and POSTs of the composer."""

    def __init__(self, base_url: str, visitor: Visitor, result: Crowd) -> None:
        self.base_url, self.visitor, self.result = base_url, visitor, result
        self.first_chunk: dict[int, float] = {}
        self.waiting: dict[int, asyncio.Future] = {}
        self.opened = False

    async def open(self) -> None:
        """Open the socket (a failure is counted, and this client sends nothing)."""
        from websockets.asyncio.client import connect

        ws_url = self.base_url.replace("http", "ws", 1)
        try:
            self.socket = await connect(
                f"{ws_url}/ws/c/{self.visitor.conversation_id}/",
                additional_headers=self.headers(),
                open_timeout=60,
            )
            await self.socket.send(json.dumps({"type": "sync", "after": 0, "waiting": []}))
        except Exception as error:
            self.result.errors[f"socket not opened: {type(error).__name__}"] += 1
            return
        self.reader = asyncio.create_task(self.read())
        self.http = self.http_client()
        self.opened = True

    def headers(self) -> dict[str, str]:
        return {"Cookie": self.visitor.cookie, "Origin": self.base_url}

    def http_client(self):
        import httpx

        # httpx logs each request at INFO: thousands of lines would bury the report.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        return httpx.AsyncClient(
            base_url=self.base_url,
            headers={
                **self.headers(),
                "HX-Request": "true",
                "X-CSRFToken": self.visitor.csrf_token,
            },
            timeout=120,
        )

    async def read(self) -> None:
        try:
            async for frame in self.socket:
                event = json.loads(frame)
                if event.get("type") == "chunk":
                    self.reply_seen(event["message_id"])
                elif event.get("type") == "exchanges":
                    for message_id in replied_in(event["html"]):
                        self.reply_seen(message_id)
        finally:
            for waiter in self.waiting.values():
                if not waiter.done():
                    waiter.set_exception(SocketClosed("the socket closed"))

    def reply_seen(self, message_id: int) -> None:
        self.first_chunk.setdefault(message_id, time.perf_counter())
        waiter = self.waiting.pop(message_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def converse(self, messages: int) -> None:
        for _ in range(messages):
            try:
                self.result.latencies.append(await self.send())
            except TimeoutError:
                self.result.errors[f"no chunk within {CHUNK_TIMEOUT} s"] += 1
            except Exception as error:  # counted, and this client stops
                self.result.errors[f"send failed: {type(error).__name__} {error}"] += 1
                return

    async def send(self) -> float:
        started = time.perf_counter()
        response = await self.post(TEXT.format(n=uuid.uuid4().hex[:6]), str(uuid.uuid4()))
        message_id = int(MESSAGE_ID.search(response.text).group(1))
        if self.reader.done():
            raise SocketClosed("the socket closed")
        if message_id not in self.first_chunk:
            self.waiting[message_id] = asyncio.get_running_loop().create_future()
            await asyncio.wait_for(self.waiting[message_id], CHUNK_TIMEOUT)
        return self.first_chunk[message_id] - started

    async def post(self, text: str, client_id: str):
        """POST the composer; on a 503 send it again after Retry-After with the same client id,
        as the page does (each 503 is counted)."""
        for _ in range(RESENDS):
            response = await self.http.post(
                f"/c/{self.visitor.conversation_id}/messages/",
                data={"text": text, "client_id": client_id},
            )
            if response.status_code != 503:
                break
            self.result.errors["HTTP 503, sent again after Retry-After"] += 1
            await asyncio.sleep(int(response.headers.get("Retry-After") or 3))
        if response.status_code != 200:
            raise SendRefused(f"HTTP {response.status_code}")
        return response

    async def close(self) -> None:
        await self.http.aclose()
        await self.socket.close()
        self.reader.cancel()


def replied_in(html: str) -> list[int]:
    """The messages whose rendered exchange shows reply text: answered, or chunks streamed. A
    socket owed the rendering of a message sends that instead of the message's chunks."""
    replied = []
    for tag in ARTICLE.findall(html):
        attributes = dict(ATTRIBUTE.findall(tag))
        if attributes.get("data-state") == "done" or int(attributes.get("data-seq", 0)) > 0:
            replied.append(int(attributes["data-message-id"]))
    return replied


class SendRefused(Exception):
    pass


class SocketClosed(Exception):
    pass


def error_counts(errors: Counter) -> str:
    return "; ".join(f"{n} × {kind.strip()}" for kind, n in errors.most_common())


def streaming_notes(plan: Plan, crowds: list[Crowd], connection_limit: int) -> list[str]:
    errors = sum((c.errors for c in crowds), Counter())
    limit = (
        f"the run's role may hold {connection_limit} (`--connection-limit`)"
        if connection_limit
        else "no limit of the run's own"
    )
    return [
        "Each repetition runs against a daphne of its own, with the shared worker and a "
        "watchdog (production clocks).",
        f"One client: {plan.stream_messages} messages per repetition, each sent once the "
        "previous reply's first chunk arrived. With the zero-think brain a reply is written "
        "within one flush interval, so its first chunk is usually the whole reply. A socket "
        "that still owes the page a rendering of the message sends that rendering instead of "
        "the chunks; its arrival counts as the first chunk when it shows reply text.",
        f"Crowd: {plan.clients} clients open their sockets all at once, then all "
        f"send at once, {plan.client_messages} message(s) each, one after the other; "
        "completion is from the first send until every client saw the first chunk of its last "
        "reply (or gave up on it); p95 over every message answered with a chunk. Errors: "
        f"each 503 (sent again after Retry-After, up to {RESENDS} times, as the page does), "
        f"missing chunks (none within {CHUNK_TIMEOUT} s), refused sends, broken connections"
        + (f"; over all repetitions: {error_counts(errors)}." if errors else " (none)."),
        "PostgreSQL connections to the run's database: the peak of samples taken every 0.2 s "
        "from pg_stat_activity during the crowd, and the count once every client has closed "
        f"its socket, before daphne stops ({limit}; the server's max_connections applies "
        "too).",
    ]
