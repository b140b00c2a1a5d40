"""The reads of an attempt's startup context (`context.assembly` puts them together), and the
record of what it was given."""

from __future__ import annotations

from typing import NamedTuple

from django.conf import settings

from ..database.clock import datetime_value
from ..models import Handoff, Message, RunContext, Summary
from . import connection
from .messages import ANSWERED_QUESTION, CONVERSATION_WAITING
from .query import Query, every, inserting

HANDOFF_COLUMNS = (
    "id",
    "conversation_id",
    "version",
    "reason",
    *Handoff.SECTIONS,
    "author_id",
    "run_id",
    "created_at",
)

# The newest summary of the shown branch: one that covers turns now on a hidden branch (the
# conversation was edited before its end) would put them back into the prompt.
LATEST_SUMMARY = (
    "SELECT s.id, s.version, s.covers_through_id, s.text FROM continuity_summary AS s "
    "JOIN continuity_message AS m ON m.id = s.covers_through_id "
    "WHERE s.conversation_id = %s AND m.hidden_with_id IS NULL "
    "ORDER BY s.version DESC LIMIT 1"
)
# The answered questions of the shown branch before a message (its values: the conversation,
# the message, the conversation again), newest first. Written for the index of answered
# questions (`message_answered_question`, whose condition is ANSWERED_QUESTION), which
# holds exactly these rows in this order, whatever the statistics: the conversation and the
# bound are one range of (conversation, id) pairs, which the primary key cannot serve. As
# `conversation_id = %s AND id < %s`, a plan made for any value walked the message table's
# primary key back from the message, through every other conversation's messages. A question
# that stated a fact the person forgot is left out with its reply (`Message.forgotten_at`).
QUESTIONS = (
    f"{ANSWERED_QUESTION} AND (q.conversation_id, q.id) < (%s, %s) AND q.forgotten_at IS NULL "
    "AND (q.conversation_id, q.id) > (%s, 0) ORDER BY q.conversation_id DESC, q.id DESC"
)
# Those the newest summary does not cover.
AFTER_SUMMARY = f"t.id > COALESCE((SELECT covers_through_id FROM ({LATEST_SUMMARY}) AS s), 0)"
SUPPORT_WROTE = "(A person from support wrote this reply, not you.) "
# Each question with its reply and, on the newest question only, the checkpoint of its plan
# step (the task state it left).
TURN_COLUMNS = (
    "SELECT t.id, t.role, t.text, "
    "(SELECT a.id FROM continuity_message AS a WHERE a.reply_to_id = t.id), "
    # A reply from support (a takeover) is marked as such: the agent must not take it for its
    # own words.
    f"(SELECT CASE WHEN a.role = '{Message.Role.STAFF}' THEN '{SUPPORT_WROTE}' || a.text "
    "ELSE a.text END FROM continuity_message AS a WHERE a.reply_to_id = t.id), "
    "CASE WHEN t.id = MAX(t.id) OVER () THEN (SELECT c.id FROM continuity_checkpoint AS c "
    "WHERE c.message_id = t.id AND c.step = 'plan') END, "
    "CASE WHEN t.id = MAX(t.id) OVER () THEN (SELECT c.output FROM continuity_checkpoint AS c "
    "WHERE c.message_id = t.id AND c.step = 'plan') END "
)
# The most turns one read returns; more are read a window at a time
# (`context.assembly.turns_complete`).
TURNS_WINDOW = 200
# The turns after the summary among the newest TURNS_WINDOW + 1 questions, walked back from the
# message. A range of ids bounded by the summary leaves the planner a bound it cannot see (the
# summary is read by the same statement), and it then guesses the range is short: it walked
# the primary key through every message written since the summary, by every conversation (25
# ms for a conversation summarized 100,000 messages ago). Newest first with a limit, it reads
# the conversation's own questions only. Prepared like the others: its earlier form had to be
# planned at every run, which took the server more time than the rest of a message's
# statements together.
TURNS_SELECT = (
    f"{TURN_COLUMNS}FROM (SELECT q.id, q.role, q.text FROM continuity_message AS q "
    f"WHERE {QUESTIONS} LIMIT %s) AS t WHERE {AFTER_SUMMARY} ORDER BY t.id"
)


class TurnRow(NamedTuple):
    """A question, its reply if it has one, and on the newest question its plan checkpoint."""

    id: int
    role: str
    text: str
    reply_id: int | None
    reply_text: str | None
    plan_id: int | None
    plan_output: object


class Fact(NamedTuple):
    id: int
    key: str
    value: str


class Waiting(NamedTuple):
    """A message that waits behind the one being answered."""

    id: int
    role: str
    text: str


def summary_latest(*, conversation_id: int) -> Query[Summary | None]:
    def read(found: list[tuple]) -> Summary | None:
        if not found:
            return None
        ((pk, version, covers_through_id, text),) = found
        return connection.instance(
            Summary,
            id=pk,
            conversation_id=conversation_id,
            version=version,
            covers_through_id=covers_through_id,
            text=text,
        )

    return Query(LATEST_SUMMARY, [conversation_id], read)


def turns(*, conversation_id: int, before_id: int) -> Query[list[TurnRow]]:
    """Each question with its reply (a reply that staff deleted leaves its question alone, not
    the context broken), and the newest one's plan checkpoint. The reply is looked up by
    question, by its unique index: a join let the planner walk that index from its start,
    through every older reply of the table (5 ms at 100,000 messages). More than TURNS_WINDOW
    rows: see `context.assembly.turns_complete`."""

    def read(found: list[tuple]) -> list[TurnRow]:
        rows = [TurnRow._make(each) for each in found]
        if rows and rows[-1].plan_output is not None:
            rows[-1] = rows[-1]._replace(plan_output=connection.json_value(rows[-1].plan_output))
        return rows

    return Query(
        TURNS_SELECT,
        [conversation_id, before_id, conversation_id, TURNS_WINDOW + 1, conversation_id],
        read,
    )


def facts_current(*, owner_id: int) -> Query[list[Fact]]:
    """The owner's current facts (as `MemoryFact.objects.current()`)."""
    return Query(
        "SELECT id, key, value FROM continuity_memoryfact "
        "WHERE owner_id = %s AND superseded_at IS NULL ORDER BY key",
        [owner_id],
        every(Fact),
    )


def waiting_behind(*, conversation_id: int, message_id: int) -> Query[list[Waiting]]:
    """Messages that wait behind this one, at most a history's worth."""
    return Query(
        f"SELECT id, role, text FROM continuity_message WHERE {CONVERSATION_WAITING} AND id > %s "
        "ORDER BY id LIMIT %s",
        [conversation_id, message_id, settings.CONTINUITY_HISTORY_EXCHANGES],
        every(Waiting),
    )


def handoff_latest(*, conversation_id: int) -> Query[Handoff | None]:
    """The newest handoff of the shown branch: one written after a reply that is now on
    a hidden branch (the conversation was edited before it) describes a state left behind, and
    so does one written outside an attempt while that branch was shown (`Handoff.at_message`)."""

    def read(found: list[tuple]) -> Handoff | None:
        if not found:
            return None
        values = dict(zip(HANDOFF_COLUMNS, found[0], strict=True))
        values["created_at"] = datetime_value(values["created_at"])
        return connection.instance(Handoff, **values)

    return Query(
        f"SELECT {', '.join('h.' + column for column in HANDOFF_COLUMNS)} "
        "FROM continuity_handoff AS h LEFT JOIN continuity_run AS r ON r.id = h.run_id "
        "LEFT JOIN continuity_message AS m ON m.id = r.message_id "
        "LEFT JOIN continuity_message AS p ON p.id = h.at_message_id "
        "WHERE h.conversation_id = %s AND (h.run_id IS NULL OR m.hidden_with_id IS NULL) "
        "AND (h.at_message_id IS NULL OR p.hidden_with_id IS NULL) "
        "ORDER BY h.version DESC LIMIT 1",
        [conversation_id],
        read,
    )


def run_context_insert(**values) -> Query[RunContext]:
    """What an attempt was given, by reference, as `RunContext.objects.create(**values)`."""
    return inserting(RunContext, **values)
