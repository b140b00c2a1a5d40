"""Support takes a conversation over, answers as a person, and hands it back with a note."""

from __future__ import annotations

import re
import uuid

import pytest
from django.test import Client
from django.urls import reverse

from continuity import store
from continuity.context.assembly import history_exchanges
from continuity.context.handoffs import handoff_latest
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.branches import message_edit
from continuity.delivery.processing import drain_conversation
from continuity.delivery.takeover import (
    conversation_hand_back,
    conversation_take_over,
    staff_reply,
)
from continuity.errors import InvalidTransition
from continuity.models import Conversation, Message, Run, StaffAction
from continuity.store import contexts
from continuity.store.contexts import SUPPORT_WROTE
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db


def test_a_takeover_stops_the_reply_being_written_and_the_agent_answers_nothing():
    opal = UserFactory(username="opal", is_staff=True)
    chat = ConversationFactory()
    first = send(chat, "Hi, my name is Ada")
    run = attempt_begin(conversation_id=chat.pk)
    conversation_take_over(conversation=chat, by=opal, reason="The order looks wrong")

    assert Run.objects.get(pk=run.pk).state == "stopped"
    assert Message.objects.get(pk=first.pk).reply.stopped_by_staff
    waiting = send(chat, "Hello?")
    drain_conversation(conversation_id=chat.pk)  # a worker's drain: it begins nothing
    assert Message.objects.get(pk=waiting.pk).state == "queued"
    assert not Run.objects.filter(message=waiting).exists()
    kinds = list(StaffAction.objects.order_by("id").values_list("kind", flat=True))
    assert kinds == ["stop", "take_over"]


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
