"""Domain errors of the continuity engine."""

from __future__ import annotations

# How an attempt that lost the database ends its error text: delivery writes it, and the
# restart banner (context) reads it to tell a database outage from a planned shutdown.
DATABASE_LOST = "Database unavailable"
# How an attempt given back because its brain's model server could not answer ends its error.
MODEL_UNAVAILABLE = "Model server unavailable"
# How an attempt given back because every request slot of its model server stayed taken begins.
MODEL_BUSY = "Model server busy"
# How an attempt given back because a tool's server could not be reached begins its error.
TOOL_SERVER_DOWN = "Tool server unavailable"
# How an attempt given back because tool calls it met are in doubt begins its error: its owner
# decides, and the attempt after the decision is no recovery the page need announce.
CALLS_IN_DOUBT = "Tool call in doubt"
AWAITING_APPROVAL = "Waiting for approval"
# How an attempt given back because support took its conversation over begins its error: support
# answers the question now, and the page says why the attempt stopped.
TAKEN_OVER = "Taken over by support"


class InvalidMessage(ValueError):
    """The user's input was refused; the text is safe to show to the user."""


class ClientIdReused(InvalidMessage):
    """A resubmission carried a known client id with different text: storing it would discard
    one of the two texts silently, so it is refused."""


class PermanentError(Exception):
    """A brain's failure that no retry can fix: the message is dead-lettered at once."""


class BackendUnavailable(Exception):
    """A brain's model server could not answer: refused or dropped the connection, answered
    5xx or 429, or sent nothing before the first token. Infrastructure, not the message's
    fault: the attempt is given back. `backend` names the server (its failures and its backoff
    are shared by every conversation that uses it); `retry_after`: the seconds it asked for."""

    def __init__(self, message: str, *, backend: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.backend = backend
        self.retry_after = retry_after


# How an attempt given back because its prompt was longer than the model's window begins its
# error.
CONTEXT_TOO_LONG = "Context too long"


class ContextTooLong(Exception):
    """The model server refused the prompt as longer than its model's window. The brain has
    learned a smaller window from it: the attempt is given back, and the next one compacts to
    fit, instead of the message being dead-lettered."""


class EmptyReply(Exception):
    """The brain finished its reply without writing anything: never stored as an answer. The
    attempt fails and is tried again, and a message that keeps getting nothing is
    dead-lettered with this reason."""


class BackendBusy(Exception):
    """Every request slot of the model server was taken (CONTINUITY_OPENAI_CONCURRENCY), or the
    free ones were other conversations' turn: it is answering others, not failing. The attempt
    is given back uncounted, and tried again when its turn for one of the server's `limit`
    slots comes, or after `wait` seconds."""

    def __init__(self, message: str, *, backend: str, wait: float, limit: int) -> None:
        super().__init__(message)
        self.backend = backend
        self.wait = wait
        self.limit = limit


class AttemptStopped(Exception):
    """This attempt no longer owns its message (superseded, reaped or interrupted): stop quietly."""


class CallsInDoubt(Exception):
    """The attempt met tool calls that a crash cut off and that may not run again by
    themselves: it was given back uncharged, and its conversation waits for its owner's Run
    again or Skip."""


class CallsAwaitApproval(Exception):
    """The attempt met tool calls that wait for their owner's approval: it was given back
    uncharged, and the answer (or the deadline, or a new message) enqueues the next attempt."""


class WorkerStopping(Exception):
    """A planned shutdown of this worker began: it begins no further attempt (one that was
    about to is withdrawn first)."""


class NextAttemptFailed(Exception):
    """Beginning the next attempt inside the transaction of a reply failed (the cause is
    chained): that transaction rolled back, and the reply is to be stored on its own."""


class InvalidTransition(Exception):
    """A lifecycle change was asked for from a state that does not allow it."""


class ToolServerDown(Exception):
    """A tool's server could not be reached, and the call was never sent: infrastructure, not
    the message's fault, and nothing happened."""


class ToolCallLost(Exception):
    """A tool call was sent and no answer came (the connection broke, or, `timed_out`, its time
    limit passed): whether it acted is unknown, so it is not sent again by itself unless the
    tool is read-only or idempotent, and not even then once it timed out."""

    def __init__(self, said: str, *, timed_out: bool = False) -> None:
        super().__init__(said)
        self.timed_out = timed_out
