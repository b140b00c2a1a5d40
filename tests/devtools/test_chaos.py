"""The chaos audit must be able to fail: it is checked here against hand-made histories."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from continuity.models import Conversation, Message, Run
from devtools.chaos import chaos_audit
from tests.helpers.factories import ConversationFactory, MessageFactory

pytestmark = pytest.mark.django_db


def answer(message: Message, **extra) -> Message:
    message.state = "done"
    message.save()
    return Message.objects.create(
        conversation=message.conversation, role="assistant", text="ok", reply_to=message, **extra
    )


def test_a_clean_history_passes(conversation):
    for message in MessageFactory.create_batch(3, conversation=conversation):
        answer(message)
    audit = chaos_audit(conversation_ids=[conversation.pk], sent=3)
    assert audit | {"max_recovery_seconds": 0} == {
        "sent": 3, "done": 3, "dead": 0, "lost": 0, "duplicates": 0, "out_of_order": 0,
        "held_by_pause": 0, "paused": 0, "attempts": {}, "max_recovery_seconds": 0,
    }  # fmt: skip


def test_lost_and_dead_messages_are_counted(conversation):
    answer(MessageFactory(conversation=conversation))
    MessageFactory(conversation=conversation, state="dead")
    MessageFactory(conversation=conversation, state="queued")
    audit = chaos_audit(conversation_ids=[conversation.pk], sent=4)
    assert (audit["done"], audit["dead"], audit["lost"]) == (1, 1, 2)


def test_replies_in_the_wrong_order_are_counted(conversation):
    first, second = MessageFactory.create_batch(2, conversation=conversation)
    answer(second)
    answer(first)
    assert chaos_audit(conversation_ids=[conversation.pk], sent=2)["out_of_order"] == 1


def test_recovery_time_runs_from_the_last_heartbeat_to_the_next_attempt(conversation):
    message = MessageFactory(conversation=conversation)
    crashed = Run.objects.create(
        conversation=conversation, message=message, attempt=1, state="crashed",
        heartbeat_at=timezone.now() - timedelta(seconds=12),
    )  # fmt: skip
    Run.objects.create(
        conversation=conversation, message=message, attempt=2, state="completed",
        heartbeat_at=timezone.now(),
    )  # fmt: skip
    answer(message)
    audit = chaos_audit(conversation_ids=[conversation.pk], sent=1)
    assert audit["max_recovery_seconds"] == pytest.approx(12, abs=1)
    # The gap is measured from the crashed attempt's own last heartbeat.
    Run.objects.filter(pk=crashed.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=40))
    audit = chaos_audit(conversation_ids=[conversation.pk], sent=1)
    assert audit["max_recovery_seconds"] == pytest.approx(40, abs=1)


def test_other_conversations_are_not_audited():
    mine, theirs = ConversationFactory(), ConversationFactory()
    MessageFactory(conversation=theirs, state="queued")
    answer(MessageFactory(conversation=mine))
    assert chaos_audit(conversation_ids=[mine.pk], sent=1)["lost"] == 0


def test_a_message_answered_by_two_attempts_counts_as_a_duplicate(conversation):
    message = MessageFactory(conversation=conversation)
    for attempt in (1, 2):
        Run.objects.create(
            conversation=conversation, message=message, attempt=attempt, state="completed",
            heartbeat_at=timezone.now(),
        )  # fmt: skip
    answer(message)
    assert chaos_audit(conversation_ids=[conversation.pk], sent=1)["duplicates"] == 1


def test_messages_of_a_paused_conversation_are_held_not_lost(conversation):
    answer(MessageFactory(conversation=conversation))
    MessageFactory(conversation=conversation, state="queued")
    Conversation.objects.filter(pk=conversation.pk).update(state="paused")
    audit = chaos_audit(conversation_ids=[conversation.pk], sent=2)
    assert (audit["held_by_pause"], audit["lost"], audit["paused"]) == (1, 0, 1)


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("starts workers, which the suite runs on PostgreSQL")
def test_a_chaos_run_sends_over_http_to_its_own_workers_and_rides_out_a_model_outage():
    """Its workers listen on the run's private Redis: drains sent anywhere else would wait for
    the watchdog's re-send, which the markers claimed in the private Redis hold off until they
    expire (CONTINUITY_DRAIN_MARKER_SECONDS, 600 s), far beyond this run's timeout. Its messages
    go through its own web server, as a browser's do, and are answered by its own fake model
    server, which is away for two seconds in the middle of the sending."""
    import json
    import subprocess
    import sys

    from django.conf import settings

    from tests.helpers.processes import command_env

    env = command_env()
    result = subprocess.run(
        [sys.executable, "manage.py", "chaos", "--messages", "12", "--conversations", "3",
         "--workers", "1", "--kill-every", "0", "--model-outage", "2", "--send-rate", "4",
         "--timeout", "90"],
        cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    audit = json.loads(result.stdout[result.stdout.index("{") :])
    assert audit["finished_before_timeout"] and audit["done"] == audit["sent"] == 12
    assert (audit["model_outages"], audit["http_5xx"], audit["dead"]) == (1, 0, 0)
    assert audit["http_statuses"] == {"200": 12}
    assert audit["settings"]["CONTINUITY_BRAIN"] == "openai"


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("starts workers, which the suite runs on PostgreSQL")
def test_a_chaos_run_with_tools_counts_the_ledgers_runs_per_key():
    """Each reply's first round calls the three tools of the run's own MCP server; with kills,
    a call left in doubt is decided as a person would, and the report counts the runs per key
    of the tool that is neither read-only nor idempotent."""
    import json
    import subprocess
    import sys

    from django.conf import settings

    from tests.helpers.processes import command_env

    result = subprocess.run(
        [sys.executable, "manage.py", "chaos", "--tools", "--messages", "12",
         "--conversations", "3", "--workers", "1", "--kill-every", "2-3", "--send-rate", "4",
         "--fast-clocks", "--timeout", "120", "--seed", "7",
         # A kill every few seconds on one worker is a crash loop to the defaults: a paused
         # conversation's messages are held, and this run counts them all answered.
         "--max-attempts", "10", "--pause-after-crashes", "100"],
        cwd=settings.BASE_DIR, env=command_env(), capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    audit = json.loads(result.stdout[result.stdout.index("{") :])
    assert audit["finished_before_timeout"] and audit["done"] == audit["sent"] == 12
    tools = audit["tools"]
    assert tools["ledger_append_calls"] >= 12 and tools["calls"] >= 36
    assert tools["keys_run_more_than_chosen"] == 0 == tools["still_in_doubt"]
    # Each reply's ledger_append ran (a key in the ledger), or was skipped by its owner after a
    # kill: one cut off before it was sent never reached the ledger.
    ran = sum(tools["ledger_append_runs_per_key"].values())
    assert ran + tools["states"].get("skipped", 0) >= 12


def test_the_tools_audit_counts_a_key_run_more_often_than_a_person_chose(tmp_path, conversation):
    """The audit must be able to fail: a key run twice with no Run again posted, and one run
    three times with one. A call in doubt twice keeps only its last decision (here Skip, after
    a Run again), so the audit counts the Run again posted, not the decision kept."""
    import json
    from collections import Counter

    from continuity.models import ToolCall
    from devtools.chaos import tools_audit

    message = MessageFactory(conversation=conversation)
    decided_twice, silent, once_too_often = (
        ToolCall.objects.create(
            message=message, round=1, position=index, call_id=f"c{index}", tool="ledger_append",
            state="done", decision=decision,
        )
        for index, decision in enumerate(["skip", "", "run_again"])
    )  # fmt: skip
    ledger = tmp_path / "ledger.jsonl"
    runs = [decided_twice.key] * 2 + [silent.key] * 2 + [once_too_often.key] * 3
    ledger.write_text(
        "".join(json.dumps({"tool": "ledger_append", "key": str(k)}) + "\n" for k in runs)
    )
    posted = Counter({str(decided_twice.key): 1, str(once_too_often.key): 1})
    decided = Counter({str(decided_twice.key): 2, str(once_too_often.key): 1})

    audit = tools_audit([conversation.pk], ledger, run_again=posted, decided=decided)

    assert audit["keys_run_more_than_chosen"] == 2
    assert audit["ledger_append_runs_per_key"] == {2: 2, 3: 1}
    assert audit["run_again_chosen"] == 2 and audit["decided_twice"] == 1
