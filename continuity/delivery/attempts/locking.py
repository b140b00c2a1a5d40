"""An attempt's locks and fence: the conversation's row lock, and the running run that every
write of the attempt is fenced on (its id is the fencing token: an attempt that was reaped or
interrupted cannot write)."""

from __future__ import annotations

import os
import socket

from ... import store
from ...errors import AttemptStopped
from ...models import Conversation, Run
from ...store import conversations, runs


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def conversation_lock(conversation_id: int) -> Conversation | None:
    """Lock the conversation's row (see `store.conversations.conversation_lock`)."""
    return store.execute(conversations.conversation_lock(conversation_id))


def fence_held(run: Run, *stored: bool) -> None:
    """Each of these writes of the attempt stored its row, or the attempt was fenced off."""
    if not all(stored):
        raise AttemptStopped(f"Attempt {run.pk} no longer owns message {run.message_id}.")


def run_lock_owned(run: Run) -> None:
    """Inside a transaction: hold the run's row and make sure this attempt still owns it."""
    fence_held(run, store.execute(runs.run_lock_owned(run)))
