"""The agent port: the engine runs a brain's steps, checkpoints them and streams the reply."""

from __future__ import annotations

import logging
import os
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Turn:
    role: str
    text: str


@dataclass(frozen=True)
class HandoffNote:
    """The newest handoff, as working memory (not chat history)."""

    version: int
    reason: str
    written_at: datetime
    current_state: str = ""
    critical_context: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)

    @property
    def plan_steps(self) -> list[str]:
        """The next steps of the task, without those the engine wrote for the agent alone
        (ENGINE_STEPS): what a recap may tell the person."""
        return [step for step in self.next_steps if not step.startswith(ENGINE_STEPS)]


# Next steps the engine writes into a handoff for the agent, not for the person: after an
# interruption, and after support handed the conversation back.
ANSWER_INTERRUPTED = "Answer the interrupted message:"
GO_ON_FROM_SUPPORT = "Go on from support's note, without asking again what they settled"
ENGINE_STEPS = (ANSWER_INTERRUPTED, GO_ON_FROM_SUPPORT)


@dataclass(frozen=True)
class RecoveryNote:
    """This attempt resumes work an earlier one left unfinished: the page says so, above the
    reply."""

    kind: str  # a Recovery.Kind value
    label: str  # "a crash", "a planned restart", ...
    interrupted_at: datetime
    down_seconds: float


@dataclass(frozen=True)
class Context:
    """What a brain may know when answering one user message, in the startup order: identity
    and rules, long-term facts, task state (handoff, last plan), summary + recent turns, then
    messages still waiting."""

    owner_id: int
    conversation_id: int
    message_id: int
    attempt: int
    text: str
    history: list[Turn] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)
    identity: str = ""
    handoff: HandoffNote | None = None
    task_checkpoint: dict = field(default_factory=dict)
    summary: str = ""
    waiting: list[Turn] = field(default_factory=list)
    recovery: RecoveryNote | None = None
    # How many times this text was asked before at this point of the conversation (each
    # Regenerate asks it once more): a brain that can word its reply differently does so.
    retelling: int = 0


# What `Brain.respond` returns when the model stopped at its length limit (`max_tokens`): the
# reply is kept as written, marked as cut off, and the person may ask it to go on.
CUT_OFF = "cut_off"


@dataclass(frozen=True)
class ToolSpec:
    """A tool the agent may call, with what its annotations say about running it. Left unsaid,
    a hint takes MCP's default: not read-only, not idempotent, destructive, open world. So a
    tool that says nothing is treated as the riskiest kind."""

    name: str
    description: str
    input_schema: dict
    read_only: bool = False
    idempotent: bool = False
    destructive: bool = True
    open_world: bool = True

    @property
    def runs_again_safely(self) -> bool:
        """Whether a second run, after one whose effect is unknown, changes nothing more."""
        return self.read_only or self.idempotent


@dataclass(frozen=True)
class ToolUse:
    """A call the model asked for in a round: its id (the model's), the tool and the arguments.
    `problem` says why the arguments cannot be used (not JSON, not what the tool's schema asks):
    the call is not run, and the problem is its result."""

    call_id: str
    name: str
    arguments: dict
    problem: str = ""


@dataclass(frozen=True)
class ToolRound:
    """An earlier round of the reply being written: the model's text, the calls it asked for,
    and each call's result as the model reads it, by call id (one for every call)."""

    text: str
    calls: list[ToolUse]
    results: dict[str, str]


@dataclass(frozen=True)
class Work:
    """What a round of the reply may use: the tools offered now (none on the last round), the
    rounds before it, and what the model is told of its tools (a server down, no rounds left)."""

    tools: list[ToolSpec] = field(default_factory=list)
    rounds: list[ToolRound] = field(default_factory=list)
    note: str = ""


class Brain(Protocol):
    def plan(self, context: Context) -> dict:
        """Decide what to do; the result must be JSON-serialisable (it is checkpointed)."""

    def respond(
        self, context: Context, plan: dict, work: Work
    ) -> Generator[str, None, str | list[ToolUse] | None]:
        """One round of the reply: yield its text piece by piece as it is produced; return the
        tool calls the model asked for (`work` says which tools it may use, and the earlier
        rounds), or CUT_OFF when the model stopped at its length limit. A reply the model did
        not finish otherwise (its stream ended early) is an error, raised: never returned as
        if it were the answer."""

    def remember(self, context: Context, plan: dict, reply: str) -> dict[str, str]:
        """Durable facts about the user learned from this exchange."""

    def task_state(self, context: Context, plan: dict, reply: str) -> dict[str, str] | None:
        """The handoff sections after this exchange (current_state, critical_context, next_steps,
        decisions; lists one item per line), or None when the task state did not change."""

    def title(self, context: Context, reply: str) -> str:
        """A short title for a conversation that begins with this exchange."""

    def summarize(self, turns: list[Turn], previous_summary: str) -> str:
        """A summary of `turns` that extends `previous_summary`; it must keep every fact the
        user stated, since the turns leave the prompt."""


def brain_choices() -> list[tuple[str, str]]:
    """The brains a person may pick, as (name, label): the label names the model when the
    brain says which (a `label()` class method), else the brain's name."""
    choices = []
    for name in settings.CONTINUITY_BRAIN_CHOICES:
        brain = import_string(settings.CONTINUITY_BRAINS[name])
        choices.append((name, brain.label() if hasattr(brain, "label") else name))
    return choices


def brains_import() -> None:
    """Import the brains that conversations may use (the default and the choices) now, and
    warm those that say how: a worker does before it forks its pool, so every pool process,
    also one started after a crash, has them ready. The openai package's import takes 2 s of
    CPU and its client's first request another 1.9 s; paid in each new pool process, they
    delayed its first answer by seconds."""
    for name in {settings.CONTINUITY_BRAIN, *settings.CONTINUITY_BRAIN_CHOICES}:
        path = settings.CONTINUITY_BRAINS.get(name, "")
        try:
            brain = import_string(path)
        except ImportError:
            # Said where it matters: each attempt that needs it fails to load it, untouched.
            logger.exception("Brain %s cannot be imported", path or name)
            continue
        if hasattr(brain, "warm"):  # first-use costs of its own, taken before the fork too
            try:
                brain.warm()
            except Exception:
                logger.warning("Brain %s not warmed", path, exc_info=True)


# This process's brains, by name: made once. A model brain's client took 87 ms of CPU to make
# (its TLS context), and an attempt, its title and its summary each loaded one. Keyed by pid: a
# forked process must not share the parent's connections.
_brains: dict[tuple[int, str], Brain] = {}


def brain_class(name: str = "") -> type[Brain]:
    """The named brain's class (the configured default for an empty name), imported, not made:
    what it says of itself without a server (its model's window, its reply's room) is read
    from it inside the transaction that begins an attempt."""
    name = name or settings.CONTINUITY_BRAIN
    try:
        path = settings.CONTINUITY_BRAINS[name]
    except KeyError:
        known = ", ".join(sorted(settings.CONTINUITY_BRAINS))
        raise ImproperlyConfigured(f"Unknown CONTINUITY_BRAIN {name!r}; known: {known}.") from None
    return import_string(path)


def brain_load(name: str = "") -> Brain:
    """The named brain, or the configured default for an empty name."""
    name = name or settings.CONTINUITY_BRAIN
    if (brain := _brains.get((os.getpid(), name))) is not None:
        return brain
    brain = _brains[(os.getpid(), name)] = brain_class(name)()
    return brain


@receiver(setting_changed)
def brains_forget(**kwargs) -> None:
    """A brain reads its settings when it is made: after a change (tests), they are made again."""
    _brains.clear()
