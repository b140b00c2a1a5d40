"""A conversation's own notes page: its owner reads, corrects and forgets lines of them; no
one else can open or change them."""

from __future__ import annotations

import pytest
from django.urls import reverse

from continuity.context.handoffs import handoff_latest, handoff_write
from continuity.models import Handoff
from tests.helpers.factories import ConversationFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def noted(conversation):
    handoff_write(
        conversation_id=conversation.pk,
        reason=Handoff.Reason.AFTER_REPLY,
        sections={
            "current_state": "Working on: bake bread",
            "critical_context": "The oven runs hot\nCorrection from the user: Monday",
            "next_steps": "Buy flour",
        },
    )
    return conversation


def test_the_owner_reads_the_conversations_own_notes(owner_client, noted):
    page = owner_client.get(reverse("chat:notes", args=[noted.pk])).content.decode()
    assert "<p data-notes-goal>bake bread</p>" in page
    assert "The oven runs hot" in page and "Buy flour" in page
    assert "No other conversation sees them" in page
    other = ConversationFactory(owner=noted.owner)
    empty = owner_client.get(reverse("chat:notes", args=[other.pk])).content.decode()
    assert "bake bread" not in empty and "No notes yet." in empty


def test_a_correction_is_added_and_an_empty_one_refused(owner_client, noted):
    url = reverse("chat:notes_correct", args=[noted.pk])
    refused = owner_client.post(url, {"text": "  "})
    assert refused.status_code == 422 and "This field is required." in refused.content.decode()
    assert handoff_latest(conversation_id=noted.pk).version == 1

    added = owner_client.post(url, {"text": "The deadline is Friday"}, follow=True)
    latest = handoff_latest(conversation_id=noted.pk)
    assert (latest.version, latest.reason) == (2, "user_correction")
    assert latest.critical_context.endswith("Correction from the user: The deadline is Friday")
    assert "Added. The assistant reads it from its next reply on." in added.content.decode()


def test_a_line_is_forgotten_once(owner_client, noted):
    url = reverse("chat:notes_forget", args=[noted.pk])
    line = {"section": "critical_context", "line": "The oven runs hot"}
    owner_client.post(url, line)
    latest = handoff_latest(conversation_id=noted.pk)
    assert (latest.version, latest.reason) == (2, "forgotten")
    assert latest.critical_context == "Correction from the user: Monday"
    again = owner_client.post(url, line, follow=True)
    assert "That note was already gone." in again.content.decode()
    assert handoff_latest(conversation_id=noted.pk).version == 2
    assert owner_client.post(url, {"section": "next_steps", "line": "x"}).status_code == 422


@pytest.mark.parametrize("name", ["notes", "notes_correct", "notes_forget"])
def test_no_one_else_opens_or_changes_them(client, noted, name):
    url = reverse(f"chat:{name}", args=[noted.pk])
    method = client.get if name == "notes" else client.post
    data = {} if name == "notes" else {"text": "x", "section": "critical_context", "line": "x"}
    anonymous = method(url, data)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith(reverse("login"))
    client.force_login(UserFactory())
    assert method(url, data).status_code == 404
    assert handoff_latest(conversation_id=noted.pk).version == 1
