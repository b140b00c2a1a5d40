"""Alerts: their mail to ADMINS, delivered off the caller's path. (Staff acknowledge them:
`actions.alerts`.)

Alerts are raised by the watchdog's sweep and by workers, and neither may wait on a mail server:
one SMTP server that accepts the connection and never answers once froze the watchdog, and with
it every reap, re-enqueue and prune. So the mail goes through a bounded queue to a daemon thread
of this process, which sends with `EMAIL_TIMEOUT`. A thread rather than a Celery task: the
watchdog must go on sweeping when the broker is down too, and a mail task would take a worker
slot from replies. Mail is best-effort: the `Alert` row and the ERROR log line are the record, so
a mail still queued when the process dies is lost, and a full queue drops new mail with a log
line.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading

from django.conf import settings
from django.core.mail import mail_admins

logger = logging.getLogger(__name__)

QUEUE_SIZE = 100
_lock = threading.Lock()
_outbox: tuple[int, queue.Queue] | None = None
_warned_no_admins = False


UNDELIVERED_BACKENDS = {
    "django.core.mail.backends.console.EmailBackend",
    "django.core.mail.backends.dummy.EmailBackend",
}


def alerts_reach_someone() -> bool:
    """Whether alert mail goes to a person: someone in ADMINS and a backend that delivers. Only
    then may a page say that staff were notified."""
    return bool(settings.ADMINS) and settings.EMAIL_BACKEND not in UNDELIVERED_BACKENDS


def alert_mail(*, subject: str, text: str) -> None:
    """Queue a mail to ADMINS and return at once; never raises, never blocks."""
    if not settings.ADMINS:
        no_admins_warn()
        return
    try:
        outbox().put_nowait((subject, text))
    except queue.Full:
        logger.error("Alert mail %r dropped: %s mails are waiting already", subject, QUEUE_SIZE)


def no_admins_warn() -> None:
    global _warned_no_admins
    if not _warned_no_admins:
        _warned_no_admins = True
        logger.warning("ADMINS is empty: alert mails are not sent (alerts are still stored)")


def outbox() -> queue.Queue:
    """This process's queue and its sender thread. Keyed by pid: a prefork child inherits the
    parent's queue but not its thread, and must start its own."""
    global _outbox
    with _lock:
        if _outbox is None or _outbox[0] != os.getpid():
            mails: queue.Queue = queue.Queue(maxsize=QUEUE_SIZE)
            threading.Thread(
                target=sender, args=(mails,), name="continuity-alert-mail", daemon=True
            ).start()
            _outbox = (os.getpid(), mails)
        return _outbox[1]


def sender(mails: queue.Queue) -> None:
    while True:
        subject, text = mails.get()
        try:
            mail_admins(subject, text)
        except Exception:
            # Includes the timeout of a silent server: log and go on with the next mail.
            logger.warning("Alert mail %r not sent", subject, exc_info=True)
        finally:
            mails.task_done()


def alerts_flush(timeout: float) -> bool:
    """Wait up to `timeout` seconds for queued mail to go out; True if none is left."""
    with _lock:
        current = _outbox if _outbox and _outbox[0] == os.getpid() else None
    if current is None:
        return True
    done = threading.Event()

    def wait() -> None:
        current[1].join()
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    return done.wait(timeout)


# A process that ends normally (e.g. `watchdog --once`, or a SIGTERM from its supervisor) gives
# its last alerts a short chance; a stop must not hang on a silent mail server either.
EXIT_FLUSH_SECONDS = 5
atexit.register(lambda: alerts_flush(EXIT_FLUSH_SECONDS))
