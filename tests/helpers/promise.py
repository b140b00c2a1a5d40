"""The promise, checked: each accepted message is done or dead, no message has two replies, and
replies come in order within each conversation."""

from __future__ import annotations

from itertools import pairwise

from continuity.models import Message
from tests.helpers.waiting import wait_for

LONG_REPLY = "Hi, my name is Ada, my goal is to finish the migration, and I like tea."


def wait_finished(messages: list[Message], timeout: float = 60) -> None:
    ids = [m.pk for m in messages]
    wait_for(
        lambda: not Message.objects.filter(pk__in=ids, state__in=Message.WAITING_STATES).exists(),
        timeout=timeout,
        what=f"messages {ids} to be done or dead",
        every=0.1,
    )


def assert_promise_kept(messages: list[Message]) -> None:
    ids = [m.pk for m in messages]
    states = set(Message.objects.filter(pk__in=ids).values_list("state", flat=True))
    assert states <= {"done", "dead"}, states
    for message in Message.objects.filter(pk__in=ids, state="done"):
        assert Message.objects.filter(reply_to=message).count() == 1
    for message in Message.objects.filter(pk__in=ids, state="dead"):
        assert not Message.objects.filter(reply_to=message).exists()
    for conversation_id in {m.conversation_id for m in messages}:
        answered = list(
            Message.objects.filter(conversation_id=conversation_id, role="assistant")
            .order_by("id")
            .values_list("reply_to_id", flat=True)
        )
        assert all(before < after for before, after in pairwise(answered)), answered


def run_states(message: Message) -> list[str]:
    return list(message.runs.order_by("id").values_list("state", flat=True))


def steps_by_run(message: Message) -> dict[str, int | str]:
    """Which attempt stored each step's checkpoint ("retry" for the final attempt)."""
    final = message.runs.order_by("id").last().pk
    return {
        step: "retry" if run_id == final else run_id
        for step, run_id in message.checkpoints.values_list("step", "run_id")
    }
