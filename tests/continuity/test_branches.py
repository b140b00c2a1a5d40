"""Versions and branches: regenerate the last reply, edit a sent message, show another version;
what the next attempt is given follows the shown branch."""

from __future__ import annotations

import uuid

import pytest

from continuity.actions import dead_letter_retry, message_edit, reply_regenerate, version_show
from continuity.context.assembly import context_gather, summary_latest
from continuity.context.compaction import summary_write
from continuity.context.handoffs import handoff_correct, handoff_latest, handoff_write
from continuity.delivery.processing import drain_conversation
from continuity.errors import ClientIdReused, InvalidMessage, InvalidTransition
from continuity.models import Conversation, Handoff, Message, Run
from continuity.selectors import exchanges_of, exchanges_page
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory
from tests.helpers.messages import answered, send, store_reply

pytestmark = pytest.mark.django_db


def shown_texts(conversation: Conversation) -> list[str]:
    shown = conversation.messages.shown().order_by("id")
    return list(shown.values_list("text", flat=True))


@pytest.fixture
def chat():
    conversation = ConversationFactory()
    for text in ("one", "two", "three"):
        answered(conversation, text)
    return conversation


def test_regenerate_asks_the_last_message_again_and_keeps_the_old_reply(chat):
    last = chat.messages.get(text="three")
    again = reply_regenerate(message=last, client_id=uuid.uuid4())
    assert (again.text, again.state, again.version_of_id) == ("three", "queued", last.pk)
    assert again.pk > last.reply.pk  # at the end: answered in order, with its own checkpoints
    assert shown_texts(chat) == ["one", "Reply to one", "two", "Reply to two", "three"]
    assert set(Message.objects.filter(hidden_with=last).values_list("text", flat=True)) == {
        "three",
        "Reply to three",
    }
    chat.refresh_from_db()
    assert chat.branch_changes == 1
    store_reply(again, "Another reply to three")
    [exchange] = exchanges_of(conversation=chat, message_ids=[again.pk])
    assert (exchange.versions.ids, exchange.versions.position) == ((last.pk, again.pk), 2)
    assert not exchange.versions.edited  # same text: the switcher goes with the reply


def test_regenerate_is_refused_on_an_earlier_reply_and_while_a_message_waits(chat):
    with pytest.raises(InvalidTransition, match="Only the last reply"):
        reply_regenerate(message=chat.messages.get(text="two"), client_id=uuid.uuid4())
    MessageFactory(conversation=chat, text="four")  # queued
    with pytest.raises(InvalidTransition, match="Wait until the reply is finished"):
        reply_regenerate(message=chat.messages.get(text="three"), client_id=uuid.uuid4())
    with pytest.raises(InvalidTransition, match="Wait until the reply is finished"):
        message_edit(message=chat.messages.get(text="one"), text="uno", client_id=uuid.uuid4())
    assert not Message.objects.filter(hidden_with__isnull=False).exists()


def test_a_resubmitted_form_adds_one_version(chat):
    client_id = uuid.uuid4()
    last = chat.messages.get(text="three")
    first = reply_regenerate(message=last, client_id=client_id)
    assert reply_regenerate(message=last, client_id=client_id) == first
    assert Message.objects.filter(version_of__isnull=False).count() == 1


def test_editing_a_message_starts_a_branch_and_the_next_attempt_sees_only_it(chat):
    two = chat.messages.get(text="two")
    edited = message_edit(message=two, text="  two, corrected  ", client_id=uuid.uuid4())
    assert (edited.text, edited.version_of_id) == ("two, corrected", two.pk)
    assert shown_texts(chat) == ["one", "Reply to one", "two, corrected"]
    refs = context_gather(message=edited)
    turns = Message.objects.in_bulk(refs.turns)
    assert [turns[pk].text for pk in refs.turns] == ["one", "Reply to one"]
    [exchange] = exchanges_of(conversation=chat, message_ids=[edited.pk])
    assert exchange.versions.edited and exchange.versions.position == 2


def test_an_empty_edit_is_refused_and_changes_nothing(chat):
    with pytest.raises(InvalidMessage):
        message_edit(message=chat.messages.get(text="two"), text="   ", client_id=uuid.uuid4())
    assert shown_texts(chat)[-1] == "Reply to three"


def test_showing_a_version_again_brings_back_its_whole_branch(chat):
    two = chat.messages.get(text="two")
    edited = message_edit(message=two, text="deux", client_id=uuid.uuid4())
    store_reply(edited, "Reply to deux")
    four = answered(chat, "four on the deux branch")
    hidden = dict(chat.messages.filter(hidden_with=two).values_list("pk", "version"))
    version_show(message=two)
    assert shown_texts(chat) == [
        "one", "Reply to one", "two", "Reply to two", "three", "Reply to three",
    ]  # fmt: skip
    # Open pages drop renderings older than what they hold (chat.js `rank`, first by version):
    # shown again, each message must render newer than while hidden, or a hidden rendering
    # still on its way (read before the switch) removes it from open pages for good.
    assert len(hidden) == 4  # two, three and their replies
    revealed = dict(Message.objects.filter(pk__in=hidden).values_list("pk", "version"))
    assert {pk: revealed[pk] > version for pk, version in hidden.items()} == dict.fromkeys(
        hidden, True
    )
    version_show(message=two)  # a second click (or another tab): nothing more happens
    version_show(message=edited)
    assert shown_texts(chat) == [
        "one", "Reply to one", "deux", "Reply to deux", "four on the deux branch",
        "Reply to four on the deux branch",
    ]  # fmt: skip
    assert Message.objects.get(pk=four.pk).hidden_with_id is None


def test_nested_branches_come_back_as_they_were_left(chat):
    one = chat.messages.get(text="one")
    three = chat.messages.get(text="three")
    three_b = message_edit(message=three, text="three b", client_id=uuid.uuid4())
    store_reply(three_b, "Reply to three b")
    one_b = message_edit(message=one, text="one b", client_id=uuid.uuid4())
    store_reply(one_b, "Reply to one b")
    version_show(message=one)  # the original branch, as it was left: with "three b"
    assert shown_texts(chat) == [
        "one", "Reply to one", "two", "Reply to two", "three b", "Reply to three b",
    ]  # fmt: skip
    with pytest.raises(InvalidTransition):
        version_show(message=one_b.reply)  # not a version on the shown branch's switchers


def test_a_version_on_a_hidden_branch_cannot_be_edited_or_shown_directly(chat):
    one = chat.messages.get(text="one")
    three = chat.messages.get(text="three")
    message_edit(message=one, text="one b", client_id=uuid.uuid4())
    with pytest.raises(InvalidTransition, match="no longer shown"):
        message_edit(message=three, text="x", client_id=uuid.uuid4())
    with pytest.raises(InvalidTransition, match="not shown"):
        version_show(message=three)


def test_a_form_used_for_another_message_is_refused(chat):
    client_id = uuid.uuid4()
    store_reply(
        message_edit(message=chat.messages.get(text="three"), text="3", client_id=client_id), ""
    )
    version_show(message=chat.messages.get(text="three"))
    with pytest.raises(ClientIdReused):
        message_edit(message=chat.messages.get(text="one"), text="1", client_id=client_id)


def test_summaries_and_handoffs_of_a_hidden_branch_are_left_out(chat):
    one, two, three = (chat.messages.get(text=t) for t in ("one", "two", "three"))
    kept = summary_write(conversation_id=chat.pk, covers_through_id=one.pk, text="Said one.")
    summary_write(conversation_id=chat.pk, covers_through_id=two.pk, text="Said one and two.")
    on_branch = handoff_write(
        conversation_id=chat.pk,
        reason="staff_edit",
        sections={"critical_context": "Call back on Monday"},
    )
    run = Run.objects.create(
        conversation=chat,
        message=three,
        attempt=1,
        state="completed",
        heartbeat_at=three.created_at,
    )
    handoff_write(
        conversation_id=chat.pk,
        reason=Handoff.Reason.AFTER_REPLY,
        sections={"current_state": "Answered three"},
        run=run,
    )
    edited = message_edit(message=two, text="two b", client_id=uuid.uuid4())
    assert summary_latest(conversation_id=chat.pk) == kept
    # Staff's edit was written while "three" was shown: what it changed is carried over to the
    # branch shown now, "three"'s reply's notes are not.
    carried = handoff_latest(conversation_id=chat.pk)
    assert (carried.version, carried.reason, carried.at_message_id) == (3, "staff_edit", edited.pk)
    assert (carried.current_state, carried.critical_context) == ("", "Call back on Monday")
    refs = context_gather(message=edited)
    assert refs.summary_id == kept.pk and refs.handoff_id == carried.pk
    store_reply(edited, "Reply to two b")
    version_show(message=two)
    assert handoff_latest(conversation_id=chat.pk).current_state == "Answered three"
    version_show(message=edited)
    assert handoff_latest(conversation_id=chat.pk) == carried
    assert on_branch.at_message_id == three.pk
    # New versions keep counting up, whichever branch the newest was written on.
    assert summary_write(conversation_id=chat.pk, covers_through_id=one.pk, text="x").version == 3


def test_the_page_loads_the_newest_exchanges_and_older_ones_on_request():
    chat = ConversationFactory()
    questions = [answered(chat, f"question {n}") for n in range(75)]
    newest = exchanges_page(conversation=chat)
    assert [e.message.pk for e in newest.exchanges] == [q.pk for q in questions[45:]]
    assert newest.older_than == questions[45].pk
    older = exchanges_page(conversation=chat, before=newest.older_than)
    assert [e.message.pk for e in older.exchanges] == [q.pk for q in questions[15:45]]
    oldest = exchanges_page(conversation=chat, before=older.older_than)
    assert [e.message.pk for e in oldest.exchanges] == [q.pk for q in questions[:15]]
    assert oldest.older_than is None
    since = exchanges_page(conversation=chat, since=questions[10].pk)
    assert since.exchanges[0].message == questions[10] and since.older_than == questions[10].pk


def test_regenerating_after_a_burst_hides_only_that_question_and_its_reply():
    """Two questions sent together: the first one's reply is written after the second
    question, so its id is higher. Hiding follows questions and their replies, not ids."""
    chat = ConversationFactory()
    first = MessageFactory(conversation=chat, text="first", state=Message.State.DONE)
    second = MessageFactory(conversation=chat, text="second", state=Message.State.DONE)
    first_reply = Message.objects.create(
        conversation=chat, role="assistant", text="One.", state="done", reply_to=first
    )
    second_reply = Message.objects.create(
        conversation=chat, role="assistant", text="Two.", state="done", reply_to=second
    )

    reply_regenerate(message=second, client_id=uuid.uuid4())

    shown = Message.objects.filter(conversation=chat).shown()
    assert first_reply in shown and first in shown
    assert second not in shown and second_reply not in shown


def test_editing_a_message_that_could_not_be_processed_replaces_its_dead_letter(chat):
    from continuity.models import DeadLetter, StaffAction
    from tests.helpers.console import dead_letter_make

    dead_letter = dead_letter_make(chat, "Summarize [[broken]]")
    owner = chat.owner

    edit = message_edit(
        message=dead_letter.message, text="Summarize it", client_id=uuid.uuid4(), by=owner
    )

    dead_letter.refresh_from_db()
    assert (dead_letter.status, dead_letter.resolved_by) == ("replaced", owner)
    action = StaffAction.objects.get(dead_letter=dead_letter)
    assert (action.kind, action.actor, action.details["message_id"]) == (
        "replaced_by_edit",
        owner,
        edit.pk,
    )
    with pytest.raises(InvalidTransition, match="already replaced by the person's edit"):
        dead_letter_retry(dead_letter=dead_letter, by=UserFactory(is_staff=True))
    assert DeadLetter.objects.filter(status="pending").count() == 0


def test_staff_cannot_reask_a_message_left_on_a_hidden_branch(chat):
    from tests.helpers.console import dead_letter_make

    dead_letter = dead_letter_make(chat, "Summarize [[broken]]")
    earlier = chat.messages.get(text="two")
    message_edit(message=earlier, text="two, again", client_id=uuid.uuid4())

    with pytest.raises(InvalidTransition, match="on a branch its owner no longer shows"):
        dead_letter_retry(dead_letter=dead_letter, by=UserFactory(is_staff=True))
    assert not Message.objects.filter(reasked_from=dead_letter.message).exists()


@pytest.mark.parametrize(
    "text", ["The oven is preheating", "Where were we?", "My name is Ada", "What's my name?"]
)
def test_each_regenerated_reply_is_worded_differently(text):
    from continuity.delivery.inbox import message_accept
    from continuity.delivery.processing import drain_conversation

    chat = ConversationFactory()
    message_accept(conversation=chat, text="My goal is to bake bread", client_id=uuid.uuid4())
    asked = message_accept(conversation=chat, text=text, client_id=uuid.uuid4())
    drain_conversation(conversation_id=chat.pk)
    replies = [Message.objects.get(reply_to=asked).text]
    for _ in range(2):
        asked = reply_regenerate(message=asked, client_id=uuid.uuid4())
        drain_conversation(conversation_id=chat.pk)
        replies.append(Message.objects.get(reply_to=asked).text)

    assert len(set(replies)) == 3, replies


def answer_of(conversation: Conversation, text: str) -> str:
    message = send(conversation, text)
    drain_conversation(conversation_id=conversation.pk)
    return Message.objects.get(reply_to=message).text


def working_on(conversation: Conversation) -> str:
    return handoff_latest(conversation_id=conversation.pk).current_state.splitlines()[0]


@pytest.mark.parametrize("corrected", [True, False], ids=["with-correction", "without"])
def test_notes_written_outside_a_reply_follow_the_branch_they_were_written_on(corrected):
    chat = ConversationFactory()
    answer_of(chat, "My goal is to learn piano")
    answer_of(chat, "My goal is to learn chess")
    if corrected:
        handoff_correct(conversation_id=chat.pk, text="I practise at weekends", author=chat.owner)
    chess = chat.messages.get(text="My goal is to learn chess")

    edited = message_edit(
        message=chess, text="Which book should I start with?", client_id=uuid.uuid4()
    )
    drain_conversation(conversation_id=chat.pk)

    assert working_on(chat) == "Working on: learn piano"
    assert Message.objects.get(reply_to=edited).state == "done"
    kept = "Correction from the user: I practise at weekends"
    recap = answer_of(chat, "Where were we?")
    assert "**learn piano**" in recap and "chess" not in recap
    assert (kept in recap) == corrected
    assert (kept in handoff_latest(conversation_id=chat.pk).critical_context) == corrected

    # The chess branch, shown again, has its own goal, and the correction once.
    version_show(message=chess)
    assert working_on(chat) == "Working on: learn chess"
    critical = handoff_latest(conversation_id=chat.pk).critical_context
    assert critical.count(kept) == (1 if corrected else 0)
