"""The engine's hand-written SQL helpers (continuity.sql)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from continuity import sql
from continuity.models import Conversation


def title_seen_by_another_session(conversation_id: int) -> str:
    db = connection.settings_dict
    with psycopg.connect(
        host=db["HOST"] or "127.0.0.1",
        port=db["PORT"] or 5432,
        user=db["USER"],
        password=db["PASSWORD"] or None,
        dbname=db["NAME"],
        autocommit=True,
    ) as other:
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
def test_a_batch_that_ends_a_transaction_commits_it_in_the_same_round_trip(conversation):
    with CaptureQueriesContext(connection) as log, transaction.atomic():
        sql.batch(retitle(conversation.pk, "first"), retitle(conversation.pk, "then"), commit=True)
        # Committed already: another session sees it before the block ends.
        assert title_seen_by_another_session(conversation.pk) == "then"
    sent = [(entry["sql"], entry.get("batch")) for entry in log.captured_queries]
    assert sent[-2][0] == "COMMIT"
    assert sent[-2][1] is not None and sent[-2][1] == sent[-3][1]  # in the batch's round trip


@pytest.mark.django_db(transaction=True)
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
def test_an_unflushed_commit_concerns_its_own_transaction_only():
    with transaction.atomic():
        sql.batch(*sql.unflushed_commit(), ("SELECT 1", []))
        assert synchronous_commit_now() == "off"
    assert synchronous_commit_now() == "on"


def test_inside_an_outer_transaction_no_commit_is_unflushed(db):
    # The test's own transaction is the outer one here: it must keep waiting for the disk.
    with transaction.atomic():
        assert sql.unflushed_commit() == []
    assert synchronous_commit_now() == "on"
