"""Long-term facts about a user, versioned: a value is never changed in place.

A changed value is a new row and the old row is marked superseded, so a run's stored context
(fact ids) renders as the brain saw it. Read the current facts with
`MemoryFact.objects.current().filter(owner=…)`; change them only through these functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q, QuerySet
from django.db.models.functions import Now

from ..models import Checkpoint, Handoff, MemoryFact, Message, Summary
from .assembly import summary_latest
from .compaction import SENTENCE_END, summary_write
from .handoffs import conversation_row_lock, handoff_revise


def memory_facts_of(owner) -> QuerySet[MemoryFact]:
    """The owner's current facts, with the message each was learned from (None once deleted)."""
    return (
        MemoryFact.objects.current()
        .filter(owner=owner)
        .select_related("source_message__conversation")
    )


def owner_lock(owner_id: int) -> None:
    """Fact writes of one person are serialized on their user row: a key's current version is
    superseded and the next one created under it, so the replies of several conversations written
    by several workers at once never race to create the same key (seen in chaos runs)."""
    list(get_user_model().objects.select_for_update().filter(pk=owner_id).values_list("pk"))


def memory_remember(
    *, owner_id: int, key: str, value: str, source_message: Message | None = None
) -> MemoryFact:
    """Set the owner's fact `key` to `value`: a new version if it changed, else the current one."""
    with transaction.atomic():
        owner_lock(owner_id)
        current = (
            MemoryFact.objects.current()
            .select_for_update()
            .filter(owner_id=owner_id, key=key)
            .first()
        )
        if current is not None:
            return fact_replace(current=current, value=value, source_message=source_message)
        return MemoryFact.objects.create(
            owner_id=owner_id, key=key, value=value, source_message=source_message
        )


def memory_fact_revise(
    *, fact: MemoryFact, value: str, source_message: Message | None = None
) -> MemoryFact:
    """Change a current fact's value (the memory page's edit); returns the new version, which
    keeps the message the fact came from unless another is given."""
    with transaction.atomic():
        owner_lock(fact.owner_id)
        current = MemoryFact.objects.current().select_for_update().get(pk=fact.pk)
        return fact_replace(
            current=current, value=value, source_message=source_message or current.source_message
        )


def memory_fact_forget(*, fact: MemoryFact, after_commit: bool = False) -> int:
    """Forget a fact with every earlier version of it: the user asked for it to be gone, so
    old runs' contexts show it as forgotten rather than keep a copy. What came from it goes too,
    and stays gone: the messages that stated it are left out of every later context and
    compaction (`Message.forgotten_at`), and each of the person's conversations whose newest
    handoff or summary holds what was written from it gets a new version without those lines
    ("Forgotten by the user"), so no later context, summary or prompt has it. The messages stay
    on the page until the person deletes them."""
    with transaction.atomic():
        # A reply's end stores its facts under this lock: none lands between the read and the
        # delete, to bring the fact back.
        owner_lock(fact.owner_id)
        versions = MemoryFact.objects.filter(owner_id=fact.owner_id, key=fact.key)
        values = [value for value in versions.values_list("value", flat=True) if value.strip()]
        statements = statements_of(owner_id=fact.owner_id, key=fact.key, values=values)
        deleted, _ = versions.delete()
        Message.objects.filter(pk__in=statements).update(forgotten_at=Now())
    forget_traces = partial(
        traces_forget, owner_id=fact.owner_id, key=fact.key, values=values, statements=statements
    )
    if after_commit:
        # Rewriting the notes locks the person's conversations, which a reply elsewhere locks
        # before the person: inside a longer transaction (a tool's round) that holds the
        # person's lock to its end, it waits for the commit.
        transaction.on_commit(forget_traces)
    else:
        forget_traces()
    return deleted


def statements_of(*, owner_id: int, key: str, values: list[str]) -> list[int]:
    """The person's messages that stated the fact: the source of each version, and every message
    whose remember step learned one of its values (said again, it made no new version)."""
    sources = MemoryFact.objects.filter(
        owner_id=owner_id, key=key, source_message__isnull=False
    ).values_list("source_message_id", flat=True)
    told = {value.casefold() for value in values}
    learned = Checkpoint.objects.filter(
        step="remember", message__conversation__owner_id=owner_id, output__facts__has_key=key
    ).values_list("message_id", "output")
    return sorted(
        {*sources} | {pk for pk, output in learned if str(output["facts"][key]).casefold() in told}
    )


@dataclass(frozen=True)
class FactTraces:
    """What was written from a fact, line by line: its `key: value` lines, and the sentences
    that stated it, quoted. A line that only uses the same word ("plan a week in Lisbon", with
    `likes: Lisbon` forgotten) is not the fact's, and stays."""

    mention: re.Pattern
    entry: re.Pattern
    sentences: list[str]
    stated_in: set[int]  # the conversations the stating messages are in

    def in_line(self, line: str) -> bool:
        said = folded(line)
        return bool(self.entry.match(line)) or any(each in said for each in self.sentences)

    def without(self, text: str, *, mentions_too: bool = False) -> str:
        """`text` without the fact's lines, and with `mentions_too` without every line that
        uses its value."""
        return "\n".join(
            line
            for line in text.splitlines()
            if not (self.in_line(line) or (mentions_too and self.mention.search(line)))
        )


def folded(text: str) -> str:
    return " ".join(text.split()).rstrip(".!?").casefold()


def fact_traces(*, key: str, values: list[str], statements: list[int]) -> FactTraces | None:
    # A value clipped with "…" by what it is mentioned with so far still matches.
    values = [word for word in (value.rstrip("…").strip() for value in values) if word]
    if not values:
        return None
    either = "|".join(re.escape(value) for value in values)
    # Whole words, whatever the value starts or ends with ("C++", "tea.").
    mention = re.compile(rf"(?<!\w)(?:{either})(?!\w)", re.IGNORECASE)
    found = list(Message.objects.filter(pk__in=statements).values_list("conversation_id", "text"))
    stated = [
        each for _, text in found for each in SENTENCE_END.split(text) if mention.search(each)
    ]
    return FactTraces(
        mention=mention,
        entry=re.compile(rf"^\W*{re.escape(key)}\s*[:=]\s*(?:{either})\W*$", re.IGNORECASE),
        sentences=[sentence for sentence in map(folded, stated) if sentence],
        stated_in={conversation_id for conversation_id, _ in found},
    )


def traces_forget(*, owner_id: int, key: str, values: list[str], statements: list[int]) -> None:
    """Rewrite the newest handoff and summary of each of the person's conversations without what
    was written from the fact. A summary of a conversation where it was stated also loses every
    line that uses its value: it was written from the statement, and a model summarizes in its
    own words. A handoff keeps such lines: a goal or a plan is the conversation's, not the
    fact's."""
    traces = fact_traces(key=key, values=values, statements=statements)
    if traces is None:
        return
    held = Q()
    for value in values:
        held |= (
            Q(current_state__icontains=value)
            | Q(critical_context__icontains=value)
            | Q(next_steps__icontains=value)
            | Q(decisions__icontains=value)
        )
    noted = Handoff.objects.filter(held, conversation__owner_id=owner_id)
    for conversation_id in set(noted.values_list("conversation_id", flat=True)):
        handoff_revise(
            conversation_id=conversation_id,
            reason=Handoff.Reason.FORGOTTEN,
            edit=lambda sections: {name: traces.without(text) for name, text in sections.items()},
        )
    summarized = Q()
    for value in values:
        summarized |= Q(text__icontains=value)
    summaries = Summary.objects.filter(summarized, conversation__owner_id=owner_id)
    for conversation_id in set(summaries.values_list("conversation_id", flat=True)):
        with transaction.atomic():
            conversation_row_lock(conversation_id)  # no compaction writes one meanwhile
            latest = summary_latest(conversation_id=conversation_id)
            if latest is None:
                continue
            text = traces.without(latest.text, mentions_too=conversation_id in traces.stated_in)
            if text == latest.text:
                continue
            summary_write(
                conversation_id=conversation_id,
                covers_through_id=latest.covers_through_id,
                text=text or "(Forgotten by the user.)",
            )


def fact_replace(*, current: MemoryFact, value: str, source_message: Message | None) -> MemoryFact:
    if current.value == value:
        return current
    MemoryFact.objects.filter(pk=current.pk).update(superseded_at=Now())
    return MemoryFact.objects.create(
        owner_id=current.owner_id, key=current.key, value=value, source_message=source_message
    )


def memory_remember_all(*, owner_id: int, message_id: int, facts: dict[str, str]) -> None:
    """The facts one message stated. Rows are locked in key order, whatever order the brain
    gave: no two attempts deadlock."""
    source = Message(pk=message_id)  # only its id is stored, as the fact's source
    for key, value in sorted(facts.items()):
        memory_remember(owner_id=owner_id, key=key, value=value, source_message=source)
