"""Traffic for the multi-host tests: people sending through a front as the composer sends,
and the verdict on what became of their messages."""

from __future__ import annotations

import threading
import time

from continuity.models import Message
from devtools.chaos import Browsers, chaos_audit
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.waiting import wait_for
from tests.hosts.front import Front

USERS = 5
MESSAGES_EACH = 12


class Load:
    """USERS conversations (by default each of a person of its own), each sent MESSAGES_EACH
    messages through a front, as the composer sends them (resent with the same client id after a 5xx
    or a lost connection)."""

    def __init__(self, front: Front, owners: list | None = None) -> None:
        self.browsers = Browsers(front.url)
        owners = owners or [UserFactory() for _ in range(USERS)]
        self.conversations = [ConversationFactory(owner=owner) for owner in owners]
        for conversation in self.conversations:
            self.browsers.sign_in(conversation)
        self.ids = [conversation.pk for conversation in self.conversations]
        self.acknowledged = 0
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self.send_all, args=(pk,), daemon=True) for pk in self.ids
        ]

    def start(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def send_all(self, conversation_id: int) -> None:
        for n in range(1, MESSAGES_EACH + 1):
            self.browsers.send(conversation_id, f"Message {n} of {MESSAGES_EACH}: on step {n}.")
            with self.lock:
                self.acknowledged += 1
            time.sleep(0.25)

    def user_messages(self):
        return Message.objects.filter(conversation_id__in=self.ids, role=Message.Role.USER)

    def verdict(self, timeout: float = 120) -> dict:
        """Once every acknowledged message has an outcome: the audit, and the HTTP answers."""
        for thread in self.threads:
            thread.join(timeout)
        assert not any(thread.is_alive() for thread in self.threads), "sends did not end"
        wait_for(
            lambda: not self.user_messages().filter(state__in=Message.WAITING_STATES).exists(),
            timeout=timeout,
            what="every acknowledged message to be answered",
        )
        audit = chaos_audit(conversation_ids=self.ids, sent=self.acknowledged)
        return {**audit, "http": dict(self.browsers.statuses)}


def promise_kept(verdict: dict, *, unavailable: bool = False) -> None:
    """Every acknowledged message answered once, in order, none charged to death or paused.
    `unavailable`: 503s were allowed (a database failover), never another 5xx."""
    assert verdict["sent"] == USERS * MESSAGES_EACH
    kept = {"lost": 0, "duplicates": 0, "out_of_order": 0, "dead": 0, "paused": 0}
    assert {key: verdict[key] for key in kept} == kept, verdict
    assert verdict["done"] == verdict["sent"]
    allowed = {"503"} if unavailable else set()
    errors = [status for status in verdict["http"] if status.startswith("5")]
    assert set(errors) <= allowed, verdict
