from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import ConversationFactory, MessageFactory

pytestmark = pytest.mark.django_db


def test_staff_see_real_counts(client, staff_user):
    first = ConversationFactory()
    ConversationFactory(state="paused")
    MessageFactory.create_batch(2, conversation=first, state="queued")
    MessageFactory(conversation=first, state="done")
    MessageFactory(conversation=first, state="dead")
    client.force_login(staff_user)
    html = client.get(reverse("dashboard:index")).content.decode()
    for stat, count in [
        ("conversations", 2),
        ("paused", 1),
        ("messages-queued", 2),
        ("messages-processing", 0),
        ("messages-done", 1),
        ("messages-dead", 1),
    ]:
        assert f'data-stat="{stat}"><div class="n">{count}</div>' in html
