"""(5) Recovery: SIGKILL of a worker mid-reply, until the reply is committed by the worker that
replaces it.

The whole worker is killed at once (its main process and its pool processes, as when a host
or a container dies): killing only the main process leaves the pool process that is writing
the reply running for a moment, and it sometimes finishes the reply itself, which measures
nothing. As under supervisord (`make run`), the replacement is started at once under the same
node name, and the watchdog runs; the attempt is found dead by the replacement's start-up scan
or by the watchdog once its heartbeat lapses, whichever comes first. The clocks are the
configured ones (the defaults, unless the environment sets others), reported with the figures:
recovery is made of them.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from django.conf import settings

from continuity.models import CrashRecord, Message, ReplyChunk, Run

from .plan import Plan
from .rig import Rig, wait_for
from .stats import Figure, Section
from .traffic import conversations_new, message_send

# The killed worker writes slowly (50 ms a word), so that it is killed mid-reply; its
# replacement thinks at full speed, so that the figure is the engine's recovery, not the time a
# brain takes to write a reply again.
SLOW = {"CONTINUITY_BUILTIN_TOKEN_DELAY": "0.05"}
LONG_REPLY = "Hi, my name is Ada, my goal is to finish the migration, and I like tea."


def recovery_run(rig: Rig, plan: Plan) -> Section:
    rig.shared_worker_stop()
    watchdog = rig.watchdog()
    node = rig.node("bench-recovery")
    trials = [recovery_trial(rig, node) for _ in range(plan.recovery_trials)]
    watchdog.stop()
    return Section(
        "recovery",
        "Recovery from a SIGKILL mid-reply",
        figures=[
            trial_figure("SIGKILL → reply committed", trials, "reply"),
            trial_figure("SIGKILL → replacement worker ready", trials, "worker_ready"),
            trial_figure("SIGKILL → crash detected", trials, "detected"),
            trial_figure("SIGKILL → next attempt started", trials, "restarted"),
            Figure("configured heartbeat", "s", [settings.CONTINUITY_HEARTBEAT_SECONDS]),
            Figure("first backoff", "s", [settings.CONTINUITY_CRASH_BACKOFF_SECONDS[0]]),
            Figure("watchdog sweep interval", "s", [settings.CONTINUITY_WATCHDOG_SECONDS]),
        ],
        notes=recovery_notes(trials),
    )


def recovery_trial(rig: Rig, node: str) -> dict:
    """One kill and its recovery, in a new conversation (crashes of one would pause it)."""
    worker = rig.worker(node=node, **SLOW)
    (conversation,) = conversations_new(1)
    message = message_send(conversation, LONG_REPLY)
    wait_for(
        lambda: ReplyChunk.objects.filter(message=message, run__state=Run.State.RUNNING).exists(),
        timeout=60,
        what=f"message {message.pk} to be mid-reply",
    )
    killed_at, started = datetime.now(UTC), time.perf_counter()
    worker.kill_all()
    replacement = rig.worker(node=node)
    ready = time.perf_counter() - started
    wait_for(
        lambda: Message.objects.filter(reply_to_id=message.pk).exists(),
        timeout=120,
        what=f"message {message.pk} to be answered after the kill",
        every=0.01,
    )
    reply = time.perf_counter() - started
    replacement.kill_all()  # idle once the reply is committed
    crash = CrashRecord.objects.get(message=message)
    answered_by = message.runs.get(state=Run.State.COMPLETED)
    return {
        "reply": reply,
        "worker_ready": ready,
        "detected": (crash.detected_at - killed_at).total_seconds(),
        "detected_by": crash.detected_by,
        "restarted": (answered_by.started_at - killed_at).total_seconds(),
    }


def trial_figure(name: str, trials: list[dict], key: str) -> Figure:
    """The median of the trials is their p50."""
    return Figure(f"{name} p50", "s", [trial[key] for trial in trials])


def recovery_notes(trials: list[dict]) -> list[str]:
    detectors = ", ".join(sorted({trial["detected_by"] for trial in trials}))
    return [
        f"{len(trials)} trials, each in a new conversation: a message whose reply takes about "
        "2 s to write, SIGKILL of the worker (main and pool processes) once part of the reply is "
        "stored, and a replacement worker started at once under the same node name.",
        f"Found dead by: {detectors} (`worker_start`: the replacement's start-up scan; "
        "`watchdog`: the heartbeat lapsed, after twice the heartbeat interval).",
        "Then the first backoff passes, the watchdog re-enqueues the conversation, and the new "
        "attempt redoes the reply from its last checkpoint; the replacement's brain writes at "
        "full speed (the killed one at 50 ms a word), so the reply is the engine's time.",
        f"Clocks as configured: heartbeat {settings.CONTINUITY_HEARTBEAT_SECONDS:g} s (a run "
        f"is dead after two missed beats), first backoff "
        f"{settings.CONTINUITY_CRASH_BACKOFF_SECONDS[0]:g} s, watchdog sweeps every "
        f"{settings.CONTINUITY_WATCHDOG_SECONDS:g} s.",
    ]
