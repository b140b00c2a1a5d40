"""Handoffs: versioned working memory, written by the engine and edited by staff in the admin."""

from __future__ import annotations

import pytest
from django.urls import reverse

from continuity.actions import conversation_pause
from continuity.context.handoffs import handoff_write
from continuity.delivery.attempts.failures import attempt_end
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.processing import drain_conversation
from continuity.models import Handoff, MemoryFact, Message, Run
from tests.helpers.factories import UserFactory
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db


def answer(conversation, text: str) -> str:
    message = send(conversation, text)
    drain_conversation(conversation_id=conversation.pk)
    return Message.objects.get(reply_to=message).text


def test_versions_are_added_never_overwritten_and_render_as_the_seed_document(conversation):
    first = handoff_write(
        conversation_id=conversation.pk,
        reason=Handoff.Reason.AFTER_REPLY,
        sections={
            "current_state": "Working on: Q1 research report",
            "critical_context": ["Focus on APAC markets", "Draft in workspace/draft.md"],
            "next_steps": "Retry the Gartner fetch\nComplete synthesis",
            "decisions": ["Excluded EU data"],
        },
    )
    second = handoff_write(
        conversation_id=conversation.pk,
        reason=Handoff.Reason.PAUSE,
        sections={"current_state": "Paused"},
    )
    assert (first.version, second.version) == (1, 2)
    first.refresh_from_db()
    assert first.current_state == "Working on: Q1 research report"
    markdown = first.markdown()
    assert markdown.startswith("## Session Handoff — ")
    for expected in (
        "### Current State\nWorking on: Q1 research report",
        "### Critical Context\n- Focus on APAC markets\n- Draft in workspace/draft.md",
        "### Immediate Next Steps\n1. Retry the Gartner fetch\n2. Complete synthesis",
        "### Decisions Made\n- Excluded EU data",
    ):
        assert expected in markdown


def test_a_handoff_after_a_reply_is_written_only_when_the_task_state_changed(conversation):
    answer(conversation, "Hi, my name is Ada and my goal is to ship the compiler")
    handoff = Handoff.objects.get(conversation=conversation)
    assert (handoff.version, handoff.reason, handoff.author) == (1, "end_of_turn", None)
    assert handoff.run.message.text.startswith("Hi, my name is Ada")
    assert handoff.current_state == "Working on: ship the compiler"
    assert handoff.next_steps.splitlines()[0].startswith("Say what “ship the compiler”")
    assert "Drafted a three-step plan" in handoff.decisions
    # The name is the person's, in their memory: not a copy in this conversation's notes.
    assert handoff.critical_context == ""
    assert MemoryFact.objects.current().get(owner=conversation.owner, key="name").value == "Ada"

    answer(conversation, "hello")
    answer(conversation, "what is my goal?")
    answer(conversation, "I like green tea")  # the person's too
    assert conversation.handoffs.count() == 1  # nothing of the conversation's changed


def test_the_newest_handoff_is_working_memory_of_the_next_run(conversation):
    answer(conversation, "my goal is to learn Rust")
    handoff_write(
        conversation_id=conversation.pk,
        reason=Handoff.Reason.STAFF_EDIT,
        sections={"current_state": "Working on: learn Rust", "next_steps": "Read chapter 4"},
    )
    reply = answer(conversation, "Where were we?")
    assert "Read chapter 4" in reply
    run = Run.objects.filter(state="completed").order_by("id").last()
    assert run.context.handoff.version == 2
    # Working memory, not chat history: the handoff is no turn of the conversation.
    assert all("Read chapter 4" not in m.text for m in Message.objects.filter(role="user"))


def test_a_pause_writes_a_pause_handoff(conversation):
    conversation_pause(conversation=conversation, reason="3 crashes within 3600 s")
    handoff = conversation.handoffs.get()
    assert handoff.reason == "pause"
    assert "Paused: 3 crashes within 3600 s" in handoff.current_state


def test_a_crash_leaves_a_handoff_that_the_answer_then_clears(conversation):
    answer(conversation, "my goal is to learn Rust")
    message = send(conversation, "Ownership is confusing")
    run = attempt_begin(conversation_id=conversation.pk)
    attempt_end(run_id=run.pk, state=Run.State.CRASHED, error="boom", detected_by="watchdog")
    crash = conversation.handoffs.order_by("-version").first()
    assert crash.reason == "crash_recovery" and crash.run_id == run.pk
    assert "Interrupted while answering: “Ownership is confusing”" in crash.current_state
    assert crash.next_steps.startswith("Answer the interrupted message")

    Message.objects.filter(pk=message.pk).update(state="queued")
    conversation.__class__.objects.filter(pk=conversation.pk).update(retry_at=None)
    drain_conversation(conversation_id=conversation.pk)
    after = conversation.handoffs.order_by("-version").first()
    assert after.reason == "end_of_turn" and "Interrupted" not in after.current_state
    assert after.next_steps == crash.next_steps.split("\n", 1)[1]


@pytest.fixture
def staff_client(client):
    staff = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(staff)
    client.staff = staff
    return client


def test_staff_edit_in_the_admin_adds_a_version_with_the_editor(conversation, staff_client):
    answer(conversation, "my goal is to learn Rust")
    url = reverse("admin:continuity_handoff_edit", args=[conversation.pk])
    page = staff_client.get(url)
    assert page.status_code == 200
    assert "Say what “learn Rust” looks like" in page.content.decode()

    response = staff_client.post(
        url,
        {
            "current_state": "Working on: learn Rust",
            "critical_context": "Prefers short exercises",
            "next_steps": "Write a linked list in safe Rust\nRead about lifetimes",
            "decisions": "Skip macros for now",
            "based_on": 1,
        },
    )
    edited = conversation.handoffs.get(version=2)
    assert response.status_code == 302
    assert response.url == reverse("admin:continuity_handoff_change", args=[edited.pk])
    assert (edited.reason, edited.author) == ("staff_edit", staff_client.staff)
    assert conversation.handoffs.get(version=1).next_steps.startswith("Say what")

    # A stale form (based on version 1) cannot silently overwrite version 2's content.
    stale = staff_client.post(url, {"current_state": "x", "based_on": 1})
    assert stale.status_code == 200 and conversation.handoffs.count() == 2
    assert "A newer version was written meanwhile" in stale.content.decode()

    diff = staff_client.get(reverse("admin:continuity_handoff_diff", args=[edited.pk]))
    text = diff.content.decode()
    assert 'class="diff-added">+1. Write a linked list in safe Rust' in text
    assert 'class="diff-removed">-1. Say what' in text

    reply = answer(conversation, "where were we?")
    assert "Keep in mind:\n- Prefers short exercises" in reply
    assert reply.endswith("Next step: Write a linked list in safe Rust.")  # staff's, the one


def test_handoff_versions_are_read_only_in_the_admin(conversation, staff_client):
    handoff = handoff_write(
        conversation_id=conversation.pk, reason="end_of_turn", sections={"current_state": "A"}
    )
    change = staff_client.get(reverse("admin:continuity_handoff_change", args=[handoff.pk]))
    assert change.status_code == 200
    assert b'name="current_state"' not in change.content
    assert b"Edit the newest as a new version" in change.content
    conversation_page = staff_client.get(
        reverse("admin:continuity_conversation_change", args=[conversation.pk])
    )
    assert b"Edit the handoff as a new version" in conversation_page.content
    view = reverse("admin:continuity_handoff_change", args=[handoff.pk])
    assert f'href="{view}" class="inlineviewlink"'.encode() in conversation_page.content
    assert staff_client.post(
        reverse("admin:continuity_handoff_change", args=[handoff.pk]), {"current_state": "B"}
    ).status_code in (302, 403)
    handoff.refresh_from_db()
    assert handoff.current_state == "A"


def test_only_staff_with_permission_may_edit(conversation, client):
    client.force_login(UserFactory(is_staff=True))
    response = client.get(reverse("admin:continuity_handoff_edit", args=[conversation.pk]))
    assert response.status_code == 403
