"""Support takes a conversation over, answers as a person, and hands it back with a note."""

from __future__ import annotations

import re
import uuid

import pytest
from django.test import Client
from django.urls import reverse

from chat.brains.builtin import BuiltinBrain
from continuity import store
from continuity.actions import (
    conversation_hand_back,
    conversation_take_over,
    message_edit,
    staff_reply,
)
from continuity.context.assembly import history_exchanges
from continuity.context.handoffs import handoff_latest
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.processing import drain_conversation
from continuity.errors import InvalidTransition
from continuity.models import Conversation, Message, ReplyChunk, Run, StaffAction
from continuity.selectors import exchanges_of
from continuity.store import contexts
from continuity.store.contexts import SUPPORT_WROTE
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db


def test_a_takeover_gives_the_attempt_back_and_supports_reply_answers_its_question():
    opal = UserFactory(username="opal", is_staff=True)
    chat = ConversationFactory()
    first = send(chat, "Hi, my name is Ada")
    run = attempt_begin(conversation_id=chat.pk)
    conversation_take_over(conversation=chat, by=opal, reason="The order looks wrong")

    run.refresh_from_db()
    assert (run.state, run.error) == ("interrupted", "Taken over by support: The order looks wrong")
    first.refresh_from_db()
    assert (first.state, first.attempts, first.interruptions) == ("queued", 0, 1)  # not charged
    assert not Message.objects.filter(reply_to=first).exists()
    waiting = send(chat, "Hello?")
    drain_conversation(conversation_id=chat.pk)  # a worker's drain: it begins nothing
    assert Message.objects.get(pk=waiting.pk).state == "queued"
    assert not Run.objects.filter(message=waiting).exists()
    action = StaffAction.objects.get()
    assert (action.kind, action.details) == ("take_over", {"interrupted_run": run.pk})

    # While it waits, the page shows that the attempt stopped and why, not as an answer.
    (shown,) = exchanges_of(conversation=chat, message_ids=[first.pk])
    assert shown.reply is None
    assert shown.interrupted.why == "support took the conversation over"
    reply = staff_reply(conversation=chat, by=opal, text="Hi Ada, I'm Opal", answering=first.pk)
    assert (reply.reply_to_id, reply.role) == (first.pk, "staff")
    assert exchanges_of(conversation=chat, message_ids=[first.pk])[0].reply == reply


def taking_over_while(conversation, *, opal, answering: str, at_token: int | None):
    """A brain that takes `conversation` over when it answers `answering`: while it plans (the
    attempt only just begun), or at its `at_token`th token (mid-stream)."""
    planned, streamed = BuiltinBrain.plan, BuiltinBrain.respond

    def take_over():
        conversation_take_over(conversation=conversation, by=opal, reason="I'll answer this")

    def plan(self, context):
        if at_token is None and context.text == answering:
            take_over()
        return planned(self, context)

    def respond(self, context, plan, work):
        for index, token in enumerate(streamed(self, context, plan, work)):
            if index == at_token and context.text == answering:
                take_over()
            yield token

    return plan, respond


@pytest.mark.parametrize("at_token", [None, 3], ids=["just-begun", "mid-stream"])
def test_support_answers_the_question_a_takeover_interrupted(monkeypatch, settings, at_token):
    settings.CONTINUITY_STREAM_FLUSH_SECONDS = 0  # each token is stored as it comes
    opal = UserFactory(username="opal", is_staff=True)
    chat = ConversationFactory()
    question = send(chat, "My goal is to return a parcel I sent to the wrong address")
    plan, respond = taking_over_while(chat, opal=opal, answering=question.text, at_token=at_token)
    monkeypatch.setattr(BuiltinBrain, "plan", plan)
    monkeypatch.setattr(BuiltinBrain, "respond", respond)

    drain_conversation(conversation_id=chat.pk)  # stopped by its fence: nothing written

    question.refresh_from_db()
    assert (question.state, question.attempts) == ("queued", 0)
    assert not Message.objects.filter(reply_to=question).exists()
    written = ReplyChunk.objects.filter(message=question).exists()
    assert written == (at_token is not None)
    reply = staff_reply(conversation=chat, by=opal, text="I've sent a return label")
    assert reply.reply_to_id == question.pk


def test_in_a_burst_the_takeover_leaves_the_next_question_to_support(monkeypatch):
    opal = UserFactory(username="opal", is_staff=True)
    chat = ConversationFactory()
    first = send(chat, "Hello")
    second = send(chat, "My parcel went to the wrong address")
    third = send(chat, "Can you help?")
    plan, respond = taking_over_while(chat, opal=opal, answering=second.text, at_token=None)
    monkeypatch.setattr(BuiltinBrain, "plan", plan)

    # The second question's attempt begins in the transaction that stores the first reply.
    drain_conversation(conversation_id=chat.pk)

    assert Message.objects.get(reply_to=first).role == "assistant"
    assert [each.pk for each in chat.messages.waiting().order_by("pk")] == [second.pk, third.pk]
    assert staff_reply(conversation=chat, by=opal, text="On it").reply_to_id == second.pk
    assert staff_reply(conversation=chat, by=opal, text="Yes").reply_to_id == third.pk


def test_after_the_hand_back_the_agent_answers_the_question_the_takeover_interrupted():
    opal = UserFactory(username="opal", is_staff=True)
    chat = ConversationFactory()
    question = send(chat, "My goal is to bake bread")
    attempt_begin(conversation_id=chat.pk)
    conversation_take_over(conversation=chat, by=opal, reason="x")
    conversation_hand_back(conversation=chat, by=opal, note="Nothing to add")

    drain_conversation(conversation_id=chat.pk)

    reply = Message.objects.get(reply_to=question)
    assert reply.role == "assistant" and "bake bread" in reply.text
    assert Run.objects.filter(message=question).count() == 2


def test_support_answers_the_oldest_waiting_message_as_a_person():
    opal = UserFactory(username="opal", first_name="Opal", is_staff=True)
    chat = ConversationFactory()
    conversation_take_over(conversation=chat, by=opal, reason="x")
    with pytest.raises(InvalidTransition, match="Nothing to answer"):
        staff_reply(conversation=chat, by=opal, text="Hi!")
    question = send(chat, "My order is wrong")
    later = send(chat, "It has three items, not two")

    reply = staff_reply(conversation=chat, by=opal, text="Let me fix that")
    assert (reply.role, reply.author, reply.reply_to_id) == ("staff", opal, question.pk)
    assert Message.objects.get(pk=question.pk).state == "done"
    # The agent's context marks it as support's, not its own words.
    turns = history_exchanges(
        store.execute(contexts.turns(conversation_id=chat.pk, before_id=later.pk))
    )
    assert turns[-1][1].text == f"{SUPPORT_WROTE}Let me fix that"
    assert Message.objects.get(pk=later.pk).state == "queued"
    sam = UserFactory(is_staff=True)
    with pytest.raises(InvalidTransition, match="Only the person who took"):
        staff_reply(conversation=chat, by=sam, text="Me too")
    # While support has messages to answer, the person's edits wait, and are told why.
    with pytest.raises(InvalidTransition, match="Support is answering your messages here"):
        message_edit(message=question, text="My order is fine", client_id=uuid.uuid4())


def test_handing_back_writes_the_note_into_a_handoff_and_the_agent_answers_in_order():
    opal = UserFactory(username="opal", first_name="Opal", is_staff=True)
    chat = ConversationFactory()
    conversation_take_over(conversation=chat, by=opal, reason="x")
    waiting = send(chat, "where were we?")
    conversation_hand_back(conversation=chat, by=opal, note="Order 123 now has three items.")

    chat.refresh_from_db()
    assert chat.state == "active" and chat.taken_over_by is None and chat.handed_back_at
    handoff = handoff_latest(conversation_id=chat.pk)
    assert handoff.reason == "handed_back" and handoff.author == opal
    assert "Handed back by Opal from support: Order 123 now has three items." in (
        handoff.critical_context
    )
    drain_conversation(conversation_id=chat.pk)
    reply = Message.objects.get(pk=waiting.pk).reply
    assert reply.role == "assistant"
    assert "Order 123 now has three items." in reply.text  # the recap keeps the note in mind
    with pytest.raises(InvalidTransition):
        conversation_hand_back(conversation=chat, by=opal, note="again")


def test_the_person_sees_who_joined_their_replies_and_that_the_assistant_is_back(client):
    opal = UserFactory(username="opal", first_name="Opal", is_staff=True)
    chat = ConversationFactory()
    client.force_login(chat.owner)
    conversation_take_over(conversation=chat, by=opal, reason="x")
    send(chat, "Hello?")
    staff_reply(conversation=chat, by=opal, text="Hi, I'm Opal")
    page = client.get(reverse("chat:conversation", args=[chat.pk])).content.decode()
    assert "Opal from support joined the conversation." in page
    assert "data-staff-reply" in page and "Opal · support" in page and "Hi, I&#x27;m Opal" in page
    conversation_hand_back(conversation=chat, by=opal, note="Said hello.")
    page = client.get(reverse("chat:conversation", args=[chat.pk])).content.decode()
    assert "The assistant is back" in page and "joined the conversation" not in page


STAFF_ACTIONS = [
    ("dashboard:take_over", {"take-over-reason": "looks stuck"}),
    ("dashboard:hand_back", {"note": "fixed"}),
]


@pytest.mark.parametrize(("name", "data"), STAFF_ACTIONS)
def test_takeover_actions_are_for_staff_only_by_post_with_the_csrf_token(name, data):
    chat = ConversationFactory()
    if name == "dashboard:hand_back":
        conversation_take_over(conversation=chat, by=UserFactory(is_staff=True), reason="x")
    state = Conversation.objects.get(pk=chat.pk).state
    url = reverse(name, args=[chat.pk])
    anonymous = Client().post(url, data)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith(reverse("login"))
    owner = Client()
    owner.force_login(chat.owner)  # the person cannot act as support in their own conversation
    assert owner.post(url, data).status_code == 403
    no_token = Client(enforce_csrf_checks=True)
    no_token.force_login(UserFactory(is_staff=True))
    assert no_token.post(url, data).status_code == 403
    staff = Client()
    staff.force_login(UserFactory(is_staff=True))
    assert staff.get(url).status_code == 405
    assert Conversation.objects.get(pk=chat.pk).state == state
    assert staff.post(url, data).status_code == 302
    assert Conversation.objects.get(pk=chat.pk).state != state


def test_only_staff_reply_as_support_and_the_person_cannot_write_as_staff():
    opal = UserFactory(is_staff=True)
    chat = ConversationFactory()
    conversation_take_over(conversation=chat, by=opal, reason="x")
    send(chat, "Hello?")
    url = reverse("dashboard:staff_reply", args=[chat.pk])
    owner = Client()
    owner.force_login(chat.owner)
    assert owner.post(url, {"text": "I am support"}).status_code == 403
    # The composer takes text only: a role or an author in the form is ignored.
    owner.post(
        reverse("chat:message_send", args=[chat.pk]),
        {"text": "Me again", "client_id": str(uuid.uuid4()), "role": "staff", "author": opal.pk},
    )
    assert Message.objects.get(text="Me again").role == "user"
    assert not Message.objects.filter(role="staff").exists()
    staff = Client()
    staff.force_login(opal)
    assert staff.post(url, {"text": "Hi"}).status_code == 302
    assert Message.objects.get(role="staff").text == "Hi"
    thread = staff.get(reverse("dashboard:thread", args=[chat.pk]))
    assert thread.status_code == 200 and b"Hi" in thread.content
    stamp = re.search(r'name="stamp" value="([^"]+)"', thread.content.decode())[1]
    unchanged = staff.get(reverse("dashboard:thread", args=[chat.pk]), {"stamp": stamp})
    assert unchanged.status_code == 204  # the poll swaps nothing: nothing is read out again
    send(chat, "One more thing")
    changed = staff.get(reverse("dashboard:thread", args=[chat.pk]), {"stamp": stamp})
    assert changed.status_code == 200 and b"One more thing" in changed.content
