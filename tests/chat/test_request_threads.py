"""Under ASGI, a request's middleware runs in the request's thread (`SyncChainMiddleware`)."""

from __future__ import annotations

import pytest
from asgiref import sync
from asgiref.sync import async_to_sync
from django.test import AsyncClient

pytestmark = pytest.mark.django_db


def test_a_request_crosses_between_the_event_loop_and_its_thread_a_few_times(monkeypatch):
    """Each hop costs a thread handover under a crowd. Six: into the request's thread for the
    whole middleware chain, Django's request signals, the CSRF check before the view, and the
    view. Without a sync middleware innermost, every async-capable middleware hops for each of
    its hooks: sixteen for this page."""
    hops = []
    hop = sync.SyncToAsync.__call__

    def counted(self, *args, **kwargs):
        hops.append(self.func)
        return hop(self, *args, **kwargs)

    async def login_page(client: AsyncClient) -> int:
        return (await client.get("/accounts/login/")).status_code

    client = AsyncClient()
    assert async_to_sync(login_page)(client) == 200  # warms up what loads once
    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted)
    assert async_to_sync(login_page)(client) == 200
    assert len(hops) <= 6, hops
