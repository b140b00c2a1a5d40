"""Pages in the browser for the multi-host tests: signed in without a login form, watching a
conversation through a front, counting the sockets they held and the reply chunks they heard."""

from __future__ import annotations

import json
import re
import time

from django.conf import settings
from django.test import Client
from playwright.sync_api import Browser, BrowserContext, Page, expect

from continuity.models import Conversation, Message
from tests.helpers.waiting import wait_for
from tests.hosts.front import Front
from tests.hosts.network import BRIDGE_ADDRESS


def signed_in_context(browser: Browser, user) -> BrowserContext:
    client = Client()
    client.force_login(user)
    context = browser.new_context()
    context.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                "domain": BRIDGE_ADDRESS,
                "path": "/",
            }
        ]
    )
    return context


COUNT_OPENED_SOCKETS = """
window.__socketsOpened = 0;
window.WebSocket = class extends window.WebSocket {
  constructor(...args) {
    super(...args);
    this.addEventListener("open", () => { window.__socketsOpened += 1; });
  }
};
"""


class WatchingPage:
    """A page of the conversation through `front`, counting the sockets it held and the reply
    chunks they brought."""

    def __init__(self, context: BrowserContext, front: Front, conversation: Conversation):
        self.page: Page = context.new_page()
        self.page.add_init_script(COUNT_OPENED_SOCKETS)
        self.chunks: dict[int, list[int]] = {}  # seqs by run id, as they came
        self.page.on("websocket", self.opened)
        self.page.goto(f"{front.url}/c/{conversation.pk}/")
        expect(self.page.locator("[data-live-indicator]")).to_have_text("live")
        self.page.evaluate("window.__sameDocument = true")

    def opened(self, socket) -> None:
        socket.on("framereceived", self.received)

    @property
    def sockets(self) -> int:
        """How many sockets the page opened: attempts the front refused are not counted."""
        return self.page.evaluate("window.__socketsOpened")

    def received(self, payload) -> None:
        frame = json.loads(payload) if isinstance(payload, str) else {}
        if frame.get("type") == "chunk":
            self.chunks.setdefault(frame["run_id"], []).append(frame["seq"])

    def send(self, text: str) -> Message:
        composer = self.page.get_by_label("Message")
        composer.fill(text)
        composer.press("Enter")
        return wait_for(
            lambda: Message.objects.filter(role=Message.Role.USER, text=text).first(),
            timeout=30,
            what="the message to be accepted",
        )

    def reply(self, message: Message):
        return self.page.locator(f"#exchange-{message.pk} .bubble.assistant")

    def shows_answered(self, message: Message, timeout: float) -> None:
        exchange = self.page.locator(f"#exchange-{message.pk}")
        expect(exchange.locator(".state")).to_have_text(re.compile("Done"), timeout=timeout)

    def until(self, condition, *, timeout: float, what: str) -> None:
        """Wait with the page's events delivered meanwhile (Playwright's sync API delivers them
        only while it is called)."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.page.wait_for_timeout(50)

    def same_document(self) -> bool:
        return self.page.evaluate("window.__sameDocument") is True


def servers_rendering(context: BrowserContext, front: Front, message: Message) -> str:
    """The reply as the server renders it to a page opened now."""
    fresh = context.new_page()
    fresh.goto(f"{front.url}/c/{message.conversation_id}/")
    html = fresh.locator(f"#exchange-{message.pk} .bubble.assistant").inner_html()
    fresh.close()
    return html
