"""The engine's hand-written SQL helpers (continuity.store.connection)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from continuity.models import Conversation
from continuity.store import connection as sql
from tests.helpers.postgres import another_session, protocol_of, sent


def title_seen_by_another_session(conversation_id: int) -> str:
    with another_session() as other:
        (title,) = other.execute(
            "SELECT title FROM continuity_conversation WHERE id = %s", [conversation_id]
        ).fetchone()
        return title


def retitle(conversation_id: int, title: str) -> sql.Statement:
    return (
        "UPDATE continuity_conversation SET title = %s WHERE id = %s RETURNING id",
        [title, conversation_id],
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("reads libpq's protocol trace of psycopg's pipeline")
def test_a_batch_that_ends_a_transaction_commits_it_in_the_same_round_trip(conversation):
    with CaptureQueriesContext(connection) as log, transaction.atomic():
        sql.batch(retitle(conversation.pk, "first"), retitle(conversation.pk, "then"), commit=True)
        # Committed already: another session sees it before the block ends.
        assert title_seen_by_another_session(conversation.pk) == "then"
    sent = [(entry["sql"], entry.get("batch")) for entry in log.captured_queries]
    assert sent[-2][0] == "COMMIT"
    assert sent[-2][1] is not None and sent[-2][1] == sent[-3][1]  # in the batch's round trip


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("reads libpq's protocol trace of psycopg's pipeline")
def test_a_batch_that_begins_a_transaction_sends_its_begin_with_its_statements(conversation):
    def begin_and_commit() -> None:
        with transaction.atomic():
            sql.batch(retitle(conversation.pk, "one"), retitle(conversation.pk, "two"), commit=True)

    protocol = protocol_of(begin_and_commit)
    statement = ["Bind", "Describe", "Execute"]
    # BEGIN, two UPDATEs and the COMMIT, then a single Sync: one round trip. psycopg by itself
    # would sync after the BEGIN and wait for its answer first, and send a Flush after the Sync.
    assert sent(protocol) == [*statement * 4, "Sync"]
    assert [text for _, kind, text in protocol if kind == "CommandComplete"] == [
        '"BEGIN"',
        '"UPDATE 1"',
        '"UPDATE 1"',
        '"COMMIT"',
    ]
    assert title_seen_by_another_session(conversation.pk) == "two"


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("reads libpq's protocol trace of psycopg's pipeline")
def test_a_batch_outside_a_transaction_sends_no_begin(conversation):
    protocol = protocol_of(
        lambda: sql.batch(retitle(conversation.pk, "one"), retitle(conversation.pk, "two"))
    )
    assert sent(protocol) == [*["Bind", "Describe", "Execute"] * 2, "Sync"]
    assert title_seen_by_another_session(conversation.pk) == "two"


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("reads libpq's protocol trace of psycopg's pipeline")
def test_a_batch_in_a_nested_block_rolls_back_with_that_block_alone(conversation):
    with transaction.atomic():
        sql.batch(retitle(conversation.pk, "outer"))
        with pytest.raises(RuntimeError), transaction.atomic():
            sql.batch(retitle(conversation.pk, "inner"), retitle(conversation.pk, "inner again"))
            raise RuntimeError("the inner block rolls back")
        assert sql.row(
            "SELECT title FROM continuity_conversation WHERE id = %s", [conversation.pk]
        ) == ("outer",)
    assert title_seen_by_another_session(conversation.pk) == "outer"


def test_the_psycopg_internals_that_a_batch_replaces_are_there():
    # `sql._sent_unread` replaces them on the pipeline while a batch is sent. Renamed, they
    # would be left in place silently: a round trip more per transaction, and results read
    # mid-pipeline after a BEGIN that was not synced.
    assert callable(psycopg.Pipeline._communicate_gen)
    assert callable(psycopg.Pipeline._sync_gen)


@pytest.mark.timeout(60)  # a send that blocks waits for the server forever
@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("reads libpq's protocol trace of psycopg's pipeline")
def test_values_larger_than_the_sockets_buffers_go_through_a_batch_both_ways(conversation):
    # Nothing is read until every statement was sent, and the server stops reading while its
    # results wait to be read: sending must never block.
    value = "x" * 16_000_000
    echo = ("SELECT length(%s), repeat('y', 16000000)", [value])
    with transaction.atomic():
        found = sql.batch(echo, retitle(conversation.pk, "after"), echo, commit=True)
    echoed = [(16_000_000, "y" * 16_000_000)]
    assert found == [echoed, [(conversation.pk,)], echoed]
    assert title_seen_by_another_session(conversation.pk) == "after"


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("reads libpq's protocol trace of psycopg's pipeline")
def test_a_failed_batch_commits_nothing(conversation):
    breaks = "UPDATE continuity_conversation SET id = NULL WHERE id = %s RETURNING id"
    with pytest.raises(IntegrityError), transaction.atomic():
        sql.batch(retitle(conversation.pk, "half"), (breaks, [conversation.pk]), commit=True)
    assert title_seen_by_another_session(conversation.pk) == conversation.title


def test_inside_an_outer_transaction_the_commit_is_left_to_it(conversation):
    # The test's own transaction is the outer one here.
    with pytest.raises(RuntimeError), transaction.atomic():
        sql.batch(retitle(conversation.pk, "rolled back"), commit=True)
        raise RuntimeError("the inner block rolls back")
    assert Conversation.objects.get(pk=conversation.pk).title == conversation.title


def synchronous_commit_now() -> str:
    (value,) = sql.row("SELECT current_setting('synchronous_commit')")
    return value


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("reads libpq's protocol trace of psycopg's pipeline")
def test_an_unflushed_commit_concerns_its_own_transaction_only():
    with transaction.atomic():
        sql.batch(*sql.unflushed_commit(), ("SELECT 1", []))
        assert synchronous_commit_now() == "off"
    assert synchronous_commit_now() == "on"


@pytest.mark.postgresql("reads libpq's protocol trace of psycopg's pipeline")
def test_inside_an_outer_transaction_no_commit_is_unflushed(db):
    # The test's own transaction is the outer one here: it must keep waiting for the disk.
    with transaction.atomic():
        assert sql.unflushed_commit() == []
    assert synchronous_commit_now() == "on"


def test_an_insert_stores_the_row_objects_create_would(conversation):
    """Each shape of insert is worked out once: defaults, the clock's fields and the given
    values still come out as `objects.create` writes them, insert after insert."""
    from continuity.models import Message

    earlier = None
    for text in ("first", "second"):
        fields = {"conversation_id": conversation.pk, "role": "user", "text": text}
        inserted = sql.insert(Message, **fields)
        created = Message.objects.create(**fields)
        stored, expected = (
            Message.objects.values().get(pk=each.pk) for each in (inserted, created)
        )
        for varies in ("id", "client_id", "created_at", "updated_at"):
            stored.pop(varies), expected.pop(varies)
        assert stored == expected
        assert inserted.created_at == inserted.updated_at  # one clock reading per insert
        assert earlier is None or inserted.created_at > earlier  # read at each insert
        earlier = created.created_at


def test_a_callable_default_is_called_at_each_insert(conversation):
    """A constant default is prepared once per shape; a callable one (a JSON field's `dict`)
    gives each row its own value, never one shared between rows."""
    from continuity.models import Checkpoint

    values = {"message_id": 1, "run_id": 1, "step": "plan"}
    (_, first), (_, second) = (sql.insert_statement(Checkpoint, **values) for _ in range(2))
    assert first["output"] == second["output"] == {}
    assert first["output"] is not second["output"]
