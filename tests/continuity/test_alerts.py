"""Alert mail never holds up the watchdog, even when the mail server never answers."""

from __future__ import annotations

import logging
import socket
import time
import uuid

import pytest

from continuity.delivery.alerts import alert_mail, alerts_flush
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.inbox import message_accept
from continuity.models import Alert, Conversation, DeadLetter, Run
from tests.helpers.processes import WatchdogProcess
from tests.helpers.waiting import wait_for


@pytest.fixture
def silent_smtp():
    """A mail server that accepts connections (the kernel completes them) and never greets."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


def stale_run(conversation: Conversation) -> Run:
    message_accept(conversation=conversation, text="hello", client_id=uuid.uuid4())
    run = attempt_begin(conversation_id=conversation.pk)
    # Already older than two heartbeats (and no heartbeat key): the next sweep reaps it.
    Run.objects.filter(pk=run.pk).update(heartbeat_at=run.heartbeat_at.replace(year=2000))
    return run


def test_a_silent_mail_server_does_not_stop_the_watchdog(
    silent_smtp, transactional_db, user, processes
):
    watchdog = processes.add(
        WatchdogProcess(
            EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
            EMAIL_HOST="127.0.0.1",
            EMAIL_PORT=str(silent_smtp),
            # Far longer than the deadlines below: only mail sent off the sweep passes.
            EMAIL_TIMEOUT="120",
            ADMINS="Ops:ops@example.org",
            CONTINUITY_MAX_ATTEMPTS="1",
        )
    )
    first = Conversation.objects.create(owner=user)
    stale_run(first)
    wait_for(
        lambda: DeadLetter.objects.filter(conversation=first).exists(),
        timeout=15,
        what=f"the watchdog to dead-letter the first message\n{watchdog.log()[-3000:]}",
    )
    second = Conversation.objects.create(owner=user)
    run = stale_run(second)
    wait_for(
        lambda: Run.objects.get(pk=run.pk).state == "crashed",
        timeout=10,
        what=f"the watchdog to go on reaping after the mail\n{watchdog.log()[-3000:]}",
    )
    assert watchdog.alive


@pytest.mark.django_db
def test_mail_to_a_silent_server_gives_up_after_email_timeout(silent_smtp, settings, caplog):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", silent_smtp
    settings.EMAIL_TIMEOUT = 0.5
    settings.ADMINS = [("Ops", "ops@example.org")]
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="continuity.delivery.alerts"):
        alert_mail(subject="Test alert", text="body")
        assert time.monotonic() - started < 0.2  # queued, not sent inline
        assert alerts_flush(5)
    assert "Alert mail 'Test alert' not sent" in caplog.text


@pytest.mark.django_db
def test_without_admins_nothing_is_sent_and_that_is_said_once(settings, caplog, mailoutbox):
    from continuity.delivery import alerts

    settings.ADMINS = []
    alerts._warned_no_admins = False
    with caplog.at_level(logging.WARNING, logger="continuity.delivery.alerts"):
        alert_mail(subject="One", text="body")
        alert_mail(subject="Two", text="body")
    assert caplog.text.count("ADMINS is empty") == 1
    assert mailoutbox == []


@pytest.mark.django_db
def test_an_alert_reaches_admins(settings, mailoutbox):
    settings.ADMINS = [("Ops", "ops@example.org")]
    alert_mail(subject="Conversation paused", text="details")
    assert alerts_flush(5)
    assert [(m.subject, m.to) for m in mailoutbox] == [
        ("[Django] Conversation paused", ["ops@example.org"])
    ]
    assert not Alert.objects.exists()  # the caller stores the Alert; this only mails
