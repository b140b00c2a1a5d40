"""Data migrations, run on data the old code wrote: the database is migrated back to before
the migration, filled through the models as they were then, and migrated forward."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from continuity.models import Handoff, MemoryFact

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_SCOPES = ("continuity", "0019_conversation_goals_and_forgetting")
SCOPES = ("continuity", "0020_goals_belong_to_conversations")


def migrated_to(target: tuple[str, str]):
    """The app registry as of `target`, once the database is migrated there."""
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


@pytest.fixture
def before_scopes():
    apps = migrated_to(BEFORE_SCOPES)
    yield apps
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_goal_facts_become_the_goal_of_the_conversation_they_were_stated_in(before_scopes):
    apps = before_scopes
    user = apps.get_model("auth", "User").objects.create(username="ada")
    conversation_of = apps.get_model("continuity", "Conversation").objects.create
    bread, spanish, fresh = (conversation_of(owner=user, client_id=uuid.uuid4()) for _ in "abc")
    message = apps.get_model("continuity", "Message").objects.create
    message(conversation=bread, role="user", text="My goal is to bake sourdough bread")
    said = message(conversation=spanish, role="user", text="My goal is to learn Spanish")
    fact = apps.get_model("continuity", "MemoryFact").objects.create
    fact(owner=user, key="goal", value="bake sourdough bread").delete()  # an old version
    fact(owner=user, key="goal", value="learn Spanish", source_message=said)
    fact(owner=user, key="name", value="Ada", source_message=said)
    handoff = apps.get_model("continuity", "Handoff").objects.create
    # As the old code wrote them: the person's facts copied in, and the newest goal leaking
    # into the bread conversation's notes at its next turn.
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

    migrated_to(SCOPES)

    newest = {
        conversation.pk: Handoff.objects.filter(conversation_id=conversation.pk).latest("version")
        for conversation in (bread, spanish)
    }
    moved = newest[bread.pk]
    assert (moved.version, moved.reason) == (2, "scopes_split")
    assert (moved.current_state, moved.critical_context) == ("", "The oven runs 10 degrees hot")
    assert (moved.next_steps, moved.decisions) == ("Buy flour", "")
    spanish_notes = newest[spanish.pk]
    assert (spanish_notes.version, spanish_notes.current_state) == (2, "Working on: learn Spanish")
    assert spanish_notes.critical_context == ""
    assert not Handoff.objects.filter(conversation_id=fresh.pk).exists()
    assert list(MemoryFact.objects.values_list("key", "value")) == [("name", "Ada")]
