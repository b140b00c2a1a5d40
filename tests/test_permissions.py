"""Who may open what: anonymous, owner, other user and staff, for every page and the websocket."""

from __future__ import annotations

import uuid

import pytest
from django.urls import reverse

from continuity.models import Message
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.sockets import connects, session_headers

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    owner, other, staff = UserFactory(), UserFactory(), UserFactory(is_staff=True)
    return {
        "anonymous": None,
        "owner": owner,
        "other user": other,
        "staff": staff,
        "conversation": ConversationFactory(owner=owner),
    }


def request(client, user, method, url, data=None):
    if user is not None:
        client.force_login(user)
    return getattr(client, method)(url, data or {})


def conversation_urls(pk):
    body = {"text": "hi", "client_id": str(uuid.uuid4())}
    return {
        "conversation page": ("get", reverse("chat:conversation", args=[pk]), None),
        "send message": ("post", reverse("chat:message_send", args=[pk]), body),
    }


@pytest.mark.parametrize("page", ["conversation page", "send message"])
@pytest.mark.parametrize(
    ("who", "expected"),
    [("anonymous", 302), ("owner", (200, 302)), ("other user", 404), ("staff", 404)],
)
def test_conversation_urls(client, world, page, who, expected):
    method, url, data = conversation_urls(world["conversation"].pk)[page]
    response = request(client, world[who], method, url, data)
    assert response.status_code in (expected if isinstance(expected, tuple) else (expected,))
    if who == "anonymous":
        assert response["Location"].startswith(reverse("login"))
    if who != "owner":
        assert not Message.objects.exists()


@pytest.mark.parametrize(
    ("who", "expected"), [("anonymous", 302), ("owner", 200), ("other user", 200)]
)
def test_home_needs_login(client, world, who, expected):
    assert request(client, world[who], "get", reverse("chat:home")).status_code == expected


@pytest.mark.parametrize(("who", "expected"), [("anonymous", 302), ("owner", 302)])
def test_starting_a_conversation_needs_login(client, world, who, expected):
    body = {"text": "hi", "client_id": str(uuid.uuid4())}
    response = request(client, world[who], "post", reverse("chat:conversation_new"), body)
    assert response.status_code == expected
    assert Message.objects.count() == (1 if who == "owner" else 0)


def test_unknown_conversation_is_404(client, world):
    client.force_login(world["owner"])
    assert client.get(reverse("chat:conversation", args=[999_999])).status_code == 404


@pytest.mark.parametrize(
    ("who", "expected"), [("anonymous", 302), ("owner", 403), ("other user", 403), ("staff", 200)]
)
def test_dashboard_is_for_staff(client, world, who, expected):
    assert request(client, world[who], "get", reverse("dashboard:index")).status_code == expected


@pytest.mark.parametrize(
    ("who", "allowed"),
    [("anonymous", False), ("owner", True), ("other user", False), ("staff", False)],
)
def test_websocket(world, who, allowed):
    assert connects(world["conversation"].pk, session_headers(world[who])) is allowed


@pytest.mark.parametrize("method", ["get", "put", "delete"])
def test_send_accepts_only_post(client, world, method):
    client.force_login(world["owner"])
    url = reverse("chat:message_send", args=[world["conversation"].pk])
    assert getattr(client, method)(url).status_code == 405
