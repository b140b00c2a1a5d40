"""Read models for the chat pages and the staff dashboard."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace

from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchRank, SearchVector
from django.db import connection
from django.db.models import (
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    Max,
    Min,
    Q,
    QuerySet,
    prefetch_related_objects,
)
from django.db.models.functions import Now

from .context.recoveries import (
    WHAT_HAPPENED,
    RecoveryWords,
    given_back_unstarted,
    recovery_words,
    run_stop_kind,
)
from .errors import AWAITING_APPROVAL
from .models import Alert, Conversation, Message, Recovery, ReplyChunk, Run, ToolCall


@dataclass(frozen=True)
class Exchange:
    """A user message with its reply, or with the part of the reply streamed so far."""

    message: Message
    reply: Message | None
    streaming_run_id: int | None = None
    streamed_text: str = ""
    last_seq: int = 0
    recoveries: tuple[RecoveryBanner, ...] = ()
    stopped_attempts: int = 0  # its attempts that crashed or were interrupted mid-answer
    versions: Versions | None = None
    interrupted: Interrupted | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def reply_note(self) -> ReplyNote | None:
        return reply_note(reply=self.reply) if self.reply is not None else None


@dataclass(frozen=True)
class ReplyNote:
    """Why a reply ended before it was finished, said under it (and in an export)."""

    kind: str  # "stopped" or "cut-off": the page marks the note data-stopped or data-cut-off
    text: str


def reply_note(*, reply: Message) -> ReplyNote | None:
    """The note of a reply that was stopped (by its person or by staff) or that the model cut
    off at its length limit; None for a finished one."""
    if reply.stopped:
        by = "Stopped by staff" if reply.stopped_by_staff else "Stopped"
        if not reply.text:
            return ReplyNote("stopped", f"{by} before anything was written.")
        at_request = "" if reply.stopped_by_staff else " at your request"
        return ReplyNote("stopped", f"{by}: this reply was cut short{at_request}.")
    if reply.cut_off:
        return ReplyNote("cut-off", "Cut off: the model reached its length limit.")
    return None


@dataclass(frozen=True)
class Interrupted:
    """The last attempt of a message that waits to be answered again: what it had written
    (shown dimmed until the next attempt's stream replaces it), when and why it stopped."""

    text: str
    at: object  # a datetime: its last sign of life
    why: str
    awaiting: bool = False  # not cut off: given back while its tool calls wait for approval


@dataclass(frozen=True)
class Versions:
    """The versions of a message (edits, regenerated replies), each the start of a branch."""

    ids: tuple[int, ...]
    shown: int  # the id of the version on the shown branch
    edited: bool  # some version has other text: the switcher goes with the message, not the reply

    @property
    def position(self) -> int:
        return self.ids.index(self.shown) + 1

    @property
    def previous(self) -> int | None:
        at = self.ids.index(self.shown)
        return self.ids[at - 1] if at else None

    @property
    def next(self) -> int | None:
        at = self.ids.index(self.shown)
        return self.ids[at + 1] if at + 1 < len(self.ids) else None


@dataclass(frozen=True)
class RecoveryBanner:
    """A restart banner, shown with the exchange whose answer was interrupted and resumed."""

    pk: int
    words: RecoveryWords


def conversations_of(*, owner) -> QuerySet[Conversation]:
    """Every conversation of the owner, archived ones included (they open and are searched)."""
    return Conversation.objects.filter(owner=owner)


SIDEBAR_SIZE = 50  # the newest; the rest are one click away, on the paginated list


def sidebar_conversations_of(*, owner) -> QuerySet[Conversation]:
    return conversations_of(owner=owner).filter(archived_at__isnull=True)


def sidebar_shown(*, conversations: Iterable[Conversation]) -> list[Conversation]:
    """The sidebar's entries, each marked `shares_title` when another one has the same title:
    the sidebar then says when each was started, so that they can be told apart."""
    shown = list(conversations)
    titles = Counter(str(conversation).casefold() for conversation in shown)
    for conversation in shown:
        conversation.shares_title = titles[str(conversation).casefold()] > 1
    return shown


EXCHANGES_PAGE = 30
# An exchange starts at each of the person's messages, and at each message the assistant wrote
# of its own accord (a reminder come due), which answers nothing.
EXCHANGE_STARTS = Q(role=Message.Role.USER) | Q(role=Message.Role.ASSISTANT, reply_to__isnull=True)


def exchanges_of(*, conversation: Conversation, message_ids: Iterable[int]) -> list[Exchange]:
    """The exchanges of these user messages, hidden ones included (a page removes them)."""
    messages = conversation.messages.filter(EXCHANGE_STARTS, pk__in=list(message_ids))
    return exchanges_from(messages=messages)


def exchange_as_accepted(*, conversation: Conversation, message: Message) -> Exchange:
    """The exchange of a message `message_accept` returned. One untouched since it was stored
    has nothing else to show, and is shown as stored (the page's socket brings every later
    change, in newer versions); a resubmitted one may have moved on, and is read again."""
    untouched = message.version == 1 and message.state == Message.State.QUEUED
    if untouched and message.version_of_id is None:
        return Exchange(message=message, reply=None)
    return exchanges_of(conversation=conversation, message_ids=[message.pk])[0]


@dataclass(frozen=True)
class ExchangesPage:
    exchanges: list[Exchange]
    older_than: int | None  # the oldest shown id, when older exchanges are left to load


def exchanges_page(
    *, conversation: Conversation, before: int | None = None, since: int | None = None
) -> ExchangesPage:
    """The shown branch's newest EXCHANGES_PAGE exchanges (before message `before`), or every
    one from message `since` on (a search result links into the past)."""
    shown = conversation.messages.shown().filter(EXCHANGE_STARTS)
    if before is not None:
        shown = shown.filter(pk__lt=before)
    window = shown.filter(pk__gte=since) if since is not None else shown
    limit = EXCHANGES_PAGE if since is None else EXCHANGES_PAGE * 20
    ids = sorted(window.order_by("-id").values_list("pk", flat=True)[:limit])
    older = ids and shown.filter(pk__lt=ids[0]).exists()
    return ExchangesPage(
        exchanges=exchanges_from(messages=Message.objects.filter(pk__in=ids)),
        older_than=ids[0] if older else None,
    )


def exchanges_from(*, messages: QuerySet[Message]) -> list[Exchange]:
    """Related rows are read only for the messages whose state can have them: most renderings
    are of a message still queued or being answered (live updates), which then cost one plain
    query, plus its stored chunks while it streams."""
    messages = list(messages.order_by("id"))
    settled = [m for m in messages if m.state not in Message.WAITING_STATES]
    settled_ids = {m.pk for m in settled}
    # A reply is stored in the transaction that marks its message done; a message that could
    # not be answered has its dead letter.
    prefetch_related_objects(settled, "reply")
    prefetch_related_objects(
        [m for m in messages if m.state == Message.State.DEAD], "dead_letter__retried_as"
    )
    prefetch_related_objects(
        [m for m in messages if m.reasked_from_id], "reasked_from__dead_letter"
    )
    streaming = streaming_runs(
        message_ids=[m.pk for m in messages if m.state == Message.State.PROCESSING]
    )
    # Tried: a message whose calls wait for approval had its attempt given back uncounted, and
    # what was written before them shows too. A queued message never changed since it was
    # accepted (its first version) was never begun: it costs no query.
    waiting = [
        m.pk
        for m in messages
        if m.role == Message.Role.USER
        and m.state in Message.WAITING_STATES
        and (m.attempts + m.interruptions > 0 or m.version > 1)
        and m.pk not in streaming
    ]
    interrupted = interrupted_runs(message_ids=waiting)
    # A recovery is recorded for an attempt that follows another on the same message: a
    # crashed attempt keeps its count, an interrupted one moves it to `interruptions`.
    resumed = [m.pk for m in messages if m.attempts + m.interruptions > 1]
    banners = recovery_banners(message_ids=resumed)
    stopped = stopped_attempts(message_ids=resumed)
    # A version is added only while nothing in the conversation is waiting, so a message with
    # later versions is a version itself or settled.
    versions = versions_of(
        messages=[
            m
            for m in messages
            if m.role == Message.Role.USER
            and m.hidden_with_id is None
            and (m.version_of_id or m.pk in settled_ids)
        ]
    )
    # A message that no attempt began on has no tool call yet.
    calls = tool_calls_of(
        message_ids=[
            m.pk
            for m in messages
            if m.role == Message.Role.USER and (m.attempts + m.interruptions > 0 or m.pk in waiting)
        ]
    )
    return [
        Exchange(
            message=m,
            reply=getattr(m, "reply", None) if m.pk in settled_ids else None,
            recoveries=banners.get(m.pk, ()),
            stopped_attempts=stopped.get(m.pk, 0),
            versions=versions.get(m.pk),
            interrupted=interrupted.get(m.pk),
            tool_calls=calls.get(m.pk, ()),
            **streaming.get(m.pk, {}),
        )
        for m in messages
    ]


def tool_calls_of(*, message_ids: list[int]) -> dict[int, tuple[ToolCall, ...]]:
    """The tool calls of each message's reply, in the order they were asked for."""
    found: dict[int, list[ToolCall]] = {}
    if message_ids:
        for call in ToolCall.objects.filter(message_id__in=message_ids).order_by(
            "round", "position"
        ):
            found.setdefault(call.message_id, []).append(call)
    return {message_id: tuple(calls) for message_id, calls in found.items()}


def versions_of(*, messages: list[Message]) -> dict[int, Versions]:
    """For each shown message that has other versions: all of them, in the order written."""
    if not messages:
        return {}
    roots = {m.version_of_id or m.pk for m in messages}
    later = Message.objects.filter(version_of_id__in=roots).order_by("id")
    rows = list(later.values_list("version_of_id", "pk", "text"))
    if not rows:
        return {}
    groups: dict[int, list[tuple[int, str]]] = {}
    first_texts = dict(Message.objects.filter(pk__in=roots).values_list("pk", "text"))
    for root, pk, text in rows:
        first = [(root, first_texts[root])] if root in first_texts else []  # deleted by staff
        groups.setdefault(root, first).append((pk, text))
    found = {}
    for m in messages:
        group = groups.get(m.version_of_id or m.pk)
        if group and len(group) > 1:
            found[m.pk] = Versions(
                ids=tuple(pk for pk, _ in group),
                shown=m.pk,
                edited=len({text for _, text in group}) > 1,
            )
    return found


def recovery_banners(*, message_ids: list[int]) -> dict[int, tuple[RecoveryBanner, ...]]:
    if not message_ids:
        return {}
    found: dict[int, tuple[RecoveryBanner, ...]] = {}
    for recovery in Recovery.objects.filter(message_id__in=message_ids).order_by("id"):
        banner = RecoveryBanner(pk=recovery.pk, words=recovery_words(recovery))
        found[recovery.message_id] = (*found.get(recovery.message_id, ()), banner)
    return found


def stopped_attempts(*, message_ids: list[int]) -> dict[int, int]:
    """For each message, how many of its attempts crashed or were interrupted mid-answer (not
    those given back before the model wrote: the person saw no interruption). A message
    dead-lettered after three crashes had three, and two recoveries."""
    if not message_ids:
        return {}
    found: Counter[int] = Counter()
    for run in Run.objects.filter(
        message_id__in=message_ids, state__in=(Run.State.CRASHED, Run.State.INTERRUPTED)
    ).only("message_id", "state", "error"):
        if not given_back_unstarted(run):
            found[run.message_id] += 1
    return dict(found)


def streaming_runs(*, message_ids: Iterable[int]) -> dict[int, dict]:
    """For each message being answered: its live run and the chunks that run has stored."""
    runs = Run.objects.filter(message_id__in=list(message_ids), state=Run.State.RUNNING)
    found: dict[int, dict] = {}
    for run in runs:
        chunks = list(ReplyChunk.objects.filter(run=run).order_by("seq").values_list("seq", "text"))
        found[run.message_id] = {
            "streaming_run_id": run.pk,
            "streamed_text": "".join(text for _, text in chunks),
            "last_seq": chunks[-1][0] if chunks else 0,
        }
    return found


def interrupted_runs(*, message_ids: Iterable[int]) -> dict[int, Interrupted]:
    """For each message waiting to be answered again: its last attempt that was interrupted
    (not one only given back before it began), and what that attempt wrote."""
    ids = list(message_ids)
    if not ids:
        return {}
    # A message has a few attempts at most (its crashes are capped): read them all, keep the last.
    runs = (
        Run.objects.filter(message_id__in=ids)
        .exclude(state=Run.State.RUNNING)
        .order_by("message_id", "-pk")
        .only("pk", "message_id", "state", "error", "heartbeat_at", "ended_at")
    )
    latest: dict[int, Run] = {}
    for run in runs:
        if not given_back_unstarted(run) or run.error.startswith(AWAITING_APPROVAL):
            latest.setdefault(run.message_id, run)
    texts: dict[int, list[str]] = {}
    chunks = ReplyChunk.objects.filter(run__in=[run.pk for run in latest.values()])
    for run_id, text in chunks.order_by("run_id", "seq").values_list("run_id", "text"):
        texts.setdefault(run_id, []).append(text)
    return {
        message_id: Interrupted(
            text="".join(texts.get(run.pk, ())),
            at=run.heartbeat_at
            if run.state == Run.State.CRASHED
            else run.ended_at or run.heartbeat_at,
            why=WHAT_HAPPENED[run_stop_kind(run)],
            awaiting=run.error.startswith(AWAITING_APPROVAL),
        )
        for message_id, run in latest.items()
    }


def newest_message_id(*, conversation: Conversation) -> int:
    return conversation.messages.aggregate(newest=Max("pk"))["newest"] or 0


@dataclass(frozen=True)
class Backoff:
    """A backoff a waiting message sits out: the seconds left, and how many times in a row the
    message crashed (each crash makes the next wait longer)."""

    seconds: int
    crashes: int


def backoff_of(*, conversation: Conversation) -> Backoff | None:
    """The backoff until an interrupted message is tried again (on the database's clock), or
    None when no message waits on one: paused, an attempt running, nothing queued. While the
    model server is unavailable or busy, every queued message waits on it, tried or not.
    `conversation` is freshly read: without a retry time set there is nothing to ask."""
    if conversation.retry_at is None:
        return None
    tried = Q(messages__attempts__gt=0) | Q(messages__interruptions__gt=0)
    if conversation.waiting_for in (
        Conversation.WaitingFor.MODEL,
        Conversation.WaitingFor.MODEL_BUSY,
    ):
        tried = Q()
    found = (
        Conversation.objects.filter(
            tried,
            pk=conversation.pk,
            state=Conversation.State.ACTIVE,
            retry_at__gt=Now(),
            messages__role=Message.Role.USER,
            messages__state=Message.State.QUEUED,
        )
        .exclude(runs__state=Run.State.RUNNING)
        .values("pk")
        .annotate(
            wait=Max(ExpressionWrapper(F("retry_at") - Now(), output_field=DurationField())),
            crashes=Max("messages__attempts"),
        )
        .values_list("wait", "crashes")
        .first()
    )
    if found is None:
        return None
    wait, crashes = found
    return Backoff(seconds=max(1, math.ceil(wait.total_seconds())), crashes=crashes or 0)


def conversation_status(*, conversation: Conversation) -> dict:
    """What the status next to the composer needs: the conversation's state, any backoff, and
    whether an interrupted message waits for a worker with no backoff (after a planned
    restart, say)."""
    backoff = backoff_of(conversation=conversation)
    retry_in = backoff.seconds if backoff else None
    resuming = (
        retry_in is None
        and conversation.state == Conversation.State.ACTIVE
        and conversation.messages.shown()
        .filter(
            Q(attempts__gt=0) | Q(interruptions__gt=0),
            ~Exists(Run.objects.filter(conversation_id=conversation.pk, state=Run.State.RUNNING)),
            role=Message.Role.USER,
            state=Message.State.QUEUED,
        )
        .exists()
    )
    # "The assistant is back" after support handed it back, until the agent has answered
    # (both times on the database's clock).
    back = conversation.handed_back_at is not None and not (
        Run.objects.filter(
            conversation_id=conversation.pk,
            state=Run.State.COMPLETED,
            started_at__gt=conversation.handed_back_at,
        ).exists()
    )
    approval_due = None
    if (
        conversation.state == Conversation.State.ACTIVE
        and conversation.waiting_for == Conversation.WaitingFor.APPROVAL
        and conversation.retry_at is not None
    ):
        approval_due = ToolCall.objects.filter(
            message__conversation_id=conversation.pk,
            message__state__in=Message.WAITING_STATES,
            state=ToolCall.State.AWAITING,
        ).aggregate(due=Min("approval_due_at"))["due"]

    def no_worker() -> bool:
        """No worker runs (the watchdog's open alert) while this conversation has a message
        waiting: asked by the status only where nothing else explains the wait."""
        return (
            conversation.state == Conversation.State.ACTIVE
            and Alert.objects.filter(
                kind=Alert.Kind.NO_WORKER, acknowledged_at__isnull=True
            ).exists()
            and conversation.messages.filter(
                role=Message.Role.USER, state__in=Message.WAITING_STATES
            ).exists()
        )

    return {
        "conversation": conversation,
        "no_worker": no_worker,
        "approval_due": approval_due,
        "retry_in": None if approval_due else retry_in,
        # Why the backoff is as long as it is: it grows with each crash of the same message.
        "crashes": backoff.crashes
        if backoff and conversation.waiting_for == Conversation.WaitingFor.ATTEMPT
        else 0,
        "resuming": resuming,
        "support": conversation.taken_over_by if conversation.state == "taken_over" else None,
        "assistant_back": back and conversation.state == Conversation.State.ACTIVE,
    }


@dataclass(frozen=True)
class SearchHit:
    conversation: Conversation
    snippet: str  # plain text; the found words between MARK_START and MARK_END
    message_id: int | None = None  # the exchange found: its user message


MARK_START, MARK_END = "\x02", "\x03"
SEARCH_LIMIT = 50


def search_finds_word_forms() -> bool:
    """Whether search is PostgreSQL's full-text search (word forms, ranking, "phrases" and
    -word), rather than the substring search other databases get: the page says which."""
    return connection.vendor == "postgresql"


def conversations_search(*, owner, query: str) -> list[SearchHit]:
    """The owner's conversations whose title or messages match, best first: PostgreSQL
    full-text search (English stemming, web-search syntax), or a plain substring search on
    other databases."""
    query = query.strip()
    if not query:
        return []
    # What the person sees: a message on a branch that is not shown would open elsewhere.
    messages = Message.objects.filter(conversation__owner=owner).shown()
    if search_finds_word_forms():
        found = full_text_hits(messages=messages, query=query)
    else:
        found = substring_hits(messages=messages, query=query)
    seen = [hit.conversation.pk for hit in found]
    by_title = conversations_of(owner=owner).filter(title__icontains=query).exclude(pk__in=seen)
    titled = [SearchHit(conversation=c, snippet="") for c in by_title[:SEARCH_LIMIT]]
    return [*titled, *found][:SEARCH_LIMIT]


def earlier_versions_search(*, owner, query: str) -> list[SearchHit]:
    """The owner's conversations with a match in messages an edit or a regeneration replaced
    (hidden versions), which `conversations_search` leaves out: the search page says where
    they are rather than skip them silently."""
    query = query.strip()
    if not query:
        return []
    messages = Message.objects.filter(conversation__owner=owner, hidden_with__isnull=False)
    if search_finds_word_forms():
        found = full_text_hits(messages=messages, query=query)
    else:
        found = substring_hits(messages=messages, query=query)
    # The exchange found is not on the branch shown: the link opens the conversation.
    return [replace(hit, message_id=None) for hit in found]


def substring_hits(*, messages: QuerySet[Message], query: str) -> list[SearchHit]:
    """One hit per conversation: its first matching message."""
    first: dict[int, SearchHit] = {}
    for m in messages.filter(text__icontains=query).select_related("conversation")[:SEARCH_LIMIT]:
        first.setdefault(
            m.conversation_id,
            SearchHit(
                conversation=m.conversation,
                snippet=snippet_around(text=m.text, query=query),
                message_id=m.reply_to_id or m.pk,
            ),
        )
    return list(first.values())


def full_text_hits(*, messages: QuerySet[Message], query: str) -> list[SearchHit]:
    search = SearchQuery(query, search_type="websearch", config="english")
    best_per_conversation = (
        messages.annotate(document=SearchVector("text", config="english"))
        .filter(document=search)
        .annotate(
            rank=SearchRank(SearchVector("text", config="english"), search),
            snippet=SearchHeadline(
                "text",
                search,
                config="english",
                start_sel=MARK_START,
                stop_sel=MARK_END,
                max_words=30,
                min_words=10,
            ),
        )
        .order_by("conversation_id", "-rank", "-id")
        .distinct("conversation_id")
    )
    rows = sorted(
        best_per_conversation.select_related("conversation")[:SEARCH_LIMIT],
        key=lambda m: (-m.rank, -m.pk),
    )
    return [
        SearchHit(
            conversation=m.conversation,
            snippet=ellipsized(snippet=m.snippet, text=m.text),
            message_id=m.reply_to_id or m.pk,
        )
        for m in rows
    ]


# How much of a message a search result shows around what it found, in characters.
SNIPPET_BEFORE, SNIPPET_AFTER = 60, 140


def snippet_around(*, text: str, query: str) -> str:
    """The words around the first place `text` has `query` (any case), the match marked, cut at
    word boundaries, with "…" where the text goes on."""
    at = text.lower().find(query.lower())
    if at < 0:
        return ellipsized(snippet=text[: SNIPPET_BEFORE + SNIPPET_AFTER], text=text)
    start, end = max(at - SNIPPET_BEFORE, 0), min(at + len(query) + SNIPPET_AFTER, len(text))
    if start > 0 and (space := text.find(" ", start, at)) >= 0:
        start = space + 1
    if end < len(text) and (space := text.rfind(" ", at + len(query), end)) >= 0:
        end = space
    found = text[at : at + len(query)]
    window = f"{text[start:at]}{MARK_START}{found}{MARK_END}{text[at + len(query) : end]}"
    return f"{'…' if start > 0 else ''}{window.strip()}{'…' if end < len(text) else ''}"


def ellipsized(*, snippet: str, text: str) -> str:
    """`snippet`, a part of `text` (marks aside), with "…" where the text goes on past it."""
    bare = snippet.replace(MARK_START, "").replace(MARK_END, "").strip()
    head = "" if text.lstrip().startswith(bare[:20]) else "…"
    tail = "" if text.rstrip().endswith(bare[-20:]) else "…"
    return f"{head}{snippet.strip()}{tail}"
