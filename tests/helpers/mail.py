"""A mail backend that holds each send until the test lets it go."""

from __future__ import annotations

import threading

from django.core.mail.backends.base import BaseEmailBackend


class HeldBackend(BaseEmailBackend):
    release = threading.Event()
    sent: list = []

    def send_messages(self, email_messages) -> int:
        self.release.wait(10)  # a send the test never releases goes through after 10 s
        self.sent.extend(email_messages)
        return len(email_messages)
