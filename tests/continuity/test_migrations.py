"""Data migrations, run on data the old code wrote: the database is migrated back to before
the migration, filled through the models as they were then, and migrated forward."""

from __future__ import annotations

import uuid
from contextlib import contextmanager

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_SCOPES = ("continuity", "0019_conversation_goals_and_forgetting")
SCOPES = ("continuity", "0020_goals_belong_to_conversations")


def migrated_to(target: tuple[str, str]):
    """The app registry as of `target`, once the database is migrated there."""
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


@contextmanager
def migrated_back_to(target: tuple[str, str]):
    """The database migrated back to `target` (its app registry given) and, after, forward to
    the latest migrations again."""
    try:
        yield migrated_to(target)
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.fixture
def migrated_back(request):
    """The app registry as of the migration the test names (indirect parametrization)."""
    with migrated_back_to(request.param) as apps:
        yield apps


@pytest.mark.parametrize("migrated_back", [BEFORE_SCOPES], indirect=True)
def test_goal_facts_become_the_goal_of_the_conversation_they_were_stated_in(migrated_back):
    apps = migrated_back
    user = apps.get_model("auth", "User").objects.create(username="ada")
    conversation_of = apps.get_model("continuity", "Conversation").objects.create
    bread, spanish, fresh = (conversation_of(owner=user, client_id=uuid.uuid4()) for _ in "abc")
    message = apps.get_model("continuity", "Message").objects.create
    baking = message(conversation=bread, role="user", text="My goal is to bake sourdough bread")
    said = message(conversation=spanish, role="user", text="My goal is to learn Spanish")
    fact = apps.get_model("continuity", "MemoryFact").objects.create
    # The person's one goal, in versions: the bread conversation's was superseded by Spanish.
    fact(owner=user, key="goal", value="bake sourdough bread", source_message=baking)
    apps.get_model("continuity", "MemoryFact").objects.update(superseded_at=timezone.now())
    fact(owner=user, key="goal", value="learn Spanish", source_message=said)
    fact(owner=user, key="name", value="Ada", source_message=said)
    handoff = apps.get_model("continuity", "Handoff").objects.create
    # As the old code wrote them: the person's facts copied in, and the newest goal leaking
    # into the bread conversation's notes at its next reply.
    handoff(
        conversation=bread,
        version=1,
        reason="end_of_turn",
        current_state="Working on: learn Spanish",
        critical_context="name: Ada\nThe oven runs 10 degrees hot",
        next_steps="Say what “learn Spanish” looks like when it is done\nBuy flour",
        decisions="Drafted a three-step plan for “learn Spanish”",
    )
    handoff(
        conversation=spanish,
        version=1,
        reason="end_of_turn",
        current_state="Working on: learn Spanish",
        critical_context="name: Ada",
    )

    after = migrated_to(SCOPES)
    # The models as they were then: today's have columns added since.
    handoffs = after.get_model("continuity", "Handoff").objects
    facts = after.get_model("continuity", "MemoryFact").objects

    newest = {
        conversation.pk: handoffs.filter(conversation_id=conversation.pk).latest("version")
        for conversation in (bread, spanish)
    }
    moved = newest[bread.pk]
    assert (moved.version, moved.reason) == (2, "scopes_split")
    assert moved.current_state == "Working on: bake sourdough bread"
    assert moved.critical_context == "The oven runs 10 degrees hot"
    assert (moved.next_steps, moved.decisions) == ("Buy flour", "")
    spanish_notes = newest[spanish.pk]
    assert (spanish_notes.version, spanish_notes.current_state) == (2, "Working on: learn Spanish")
    assert spanish_notes.critical_context == ""
    assert not handoffs.filter(conversation_id=fresh.pk).exists()
    assert list(facts.values_list("key", "value")) == [("name", "Ada")]


BEFORE_REPLIES = ("continuity", "0021_dead_letters_replaced_by_edits")
REPLIES = ("continuity", "0022_replies_follow_their_questions")


@pytest.mark.parametrize("migrated_back", [BEFORE_REPLIES], indirect=True)
def test_replies_hidden_with_a_later_question_are_shown_again(migrated_back):
    apps = migrated_back
    user = apps.get_model("auth", "User").objects.create(username="bea")
    chat = apps.get_model("continuity", "Conversation").objects.create(
        owner=user, client_id=uuid.uuid4()
    )
    message = apps.get_model("continuity", "Message").objects.create
    first = message(conversation=chat, role="user", text="first", state="done")
    second = message(conversation=chat, role="user", text="second", state="done")
    # As the old code left them after "second" was regenerated: hidden from its id on.
    first_reply = message(
        conversation=chat, role="assistant", text="One.", reply_to=first, hidden_with=second
    )
    Message = apps.get_model("continuity", "Message")
    Message.objects.filter(pk=second.pk).update(hidden_with=second)
    second_reply = message(
        conversation=chat, role="assistant", text="Two.", reply_to=second, hidden_with=second
    )

    # Read as of that migration: later ones add columns the database does not have yet.
    Migrated = migrated_to(REPLIES).get_model("continuity", "Message")

    shown = set(Migrated.objects.filter(hidden_with__isnull=True).values_list("pk", flat=True))
    assert shown == {first.pk, first_reply.pk}
    assert Migrated.objects.get(pk=first_reply.pk).version == 2
    assert Migrated.objects.get(pk=second_reply.pk).hidden_with_id == second.pk


BEFORE_ONE_ALERT = ("continuity", "0031_words_after_a_reply_and_exchanges")
ONE_ALERT = ("continuity", "0032_alert_one_open_model_missing_per_problem")


@pytest.mark.parametrize("migrated_back", [BEFORE_ONE_ALERT], indirect=True)
def test_copies_of_an_open_model_alert_are_closed_and_the_oldest_stays_open(migrated_back):
    alert = migrated_back.get_model("continuity", "Alert").objects.create
    wrong, other = "No model 'llama3.2'.", "No model 'qwen'."
    # As two workers starting at once stored them, beside an acknowledged one and another text.
    oldest = alert(kind="model_missing", text=wrong)
    copy = alert(kind="model_missing", text=wrong)
    acknowledged = alert(kind="model_missing", text=wrong, acknowledged_at=timezone.now())
    different = alert(kind="model_missing", text=other)
    paused = [alert(kind="conversation_paused", text="Paused.") for _ in range(2)]
    too_long = alert(kind="model_missing", text="No model " + "x" * 1_000)

    Alert = migrated_to(ONE_ALERT).get_model("continuity", "Alert")

    still_open = set(Alert.objects.filter(acknowledged_at=None).values_list("pk", flat=True))
    assert still_open == {oldest.pk, different.pk, *(each.pk for each in paused)}
    assert Alert.objects.get(pk=copy.pk).acknowledged_at == copy.created_at
    assert Alert.objects.get(pk=too_long.pk).acknowledged_at == too_long.created_at
    assert Alert.objects.get(pk=copy.pk).acknowledged_by is None
    assert Alert.objects.get(pk=acknowledged.pk).acknowledged_at == acknowledged.acknowledged_at
