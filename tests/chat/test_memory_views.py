"""The "What I remember" page: who sees and changes which facts, and that forgetting sticks."""

from __future__ import annotations

import re
import uuid

import pytest
from django.test import Client
from django.urls import reverse

from continuity.delivery.inbox import message_accept
from continuity.delivery.processing import drain_conversation
from continuity.models import MemoryFact, Message
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


@pytest.fixture
def world():
    owner, other, staff = UserFactory(), UserFactory(), UserFactory(is_staff=True)
    source = MessageFactory(
        conversation=ConversationFactory(owner=owner), text="remember that my knee hurts"
    )
    fact = MemoryFact.objects.create(
        owner=owner, key="note", value="your knee hurts", source_message=source
    )
    return {"anonymous": None, "owner": owner, "other user": other, "staff": staff, "fact": fact}


def as_user(client, user):
    if user is not None:
        client.force_login(user)
    return client


def fact_urls(pk: int) -> dict[str, tuple[str, str, dict | None]]:
    return {
        "forget page": ("get", reverse("chat:memory_forget", args=[pk]), None),
        "edit": ("post", reverse("chat:memory_edit", args=[pk]), {"value": "changed"}),
        "delete": ("post", reverse("chat:memory_delete", args=[pk]), {}),
    }


@pytest.mark.parametrize(
    ("who", "status", "sees_fact"),
    [
        ("anonymous", 302, False),
        ("owner", 200, True),
        ("other user", 200, False),
        ("staff", 200, False),
    ],
)
def test_memory_page_shows_only_the_owners_facts(client, world, who, status, sees_fact):
    response = as_user(client, world[who]).get(reverse("chat:memory"))
    assert response.status_code == status
    if who == "anonymous":
        assert response["Location"].startswith(reverse("login"))
        return
    assert ("your knee hurts" in response.content.decode()) is sees_fact
    assert (
        response["Cache-Control"].startswith("max-age=0")
        or "no-cache" in (response["Cache-Control"])
    )


@pytest.mark.parametrize("action", ["forget page", "edit", "delete"])
@pytest.mark.parametrize(
    ("who", "expected"),
    [("anonymous", 302), ("owner", (200, 302)), ("other user", 404), ("staff", 404)],
)
def test_fact_actions_are_for_the_owner_only(client, world, action, who, expected):
    fact = world["fact"]
    method, url, data = fact_urls(fact.pk)[action]
    response = getattr(as_user(client, world[who]), method)(url, data or {})
    assert response.status_code in (expected if isinstance(expected, tuple) else (expected,))
    if who == "anonymous":
        assert response["Location"].startswith(reverse("login"))
    if who != "owner" or action == "forget page":
        fact.refresh_from_db()  # still there, unchanged
        assert fact.value == "your knee hurts"


@pytest.mark.parametrize("action", ["edit", "delete"])
@pytest.mark.parametrize("who", ["anonymous", "owner"])
def test_get_on_edit_and_delete_is_refused(client, world, action, who):
    _, url, _ = fact_urls(world["fact"].pk)[action]
    assert as_user(client, world[who]).get(url, {"value": "changed"}).status_code == 405
    world["fact"].refresh_from_db()
    assert world["fact"].value == "your knee hurts"


def csrf_token_from(response) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', response.content.decode())[1]


def test_edit_and_delete_need_the_csrf_token_and_work_with_it(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world["owner"])
    fact = world["fact"]
    edit = reverse("chat:memory_edit", args=[fact.pk])
    delete = reverse("chat:memory_delete", args=[fact.pk])

    assert client.post(edit, {"value": "your left knee hurts"}).status_code == 403
    assert client.post(delete).status_code == 403
    fact.refresh_from_db()
    assert fact.value == "your knee hurts"

    token = csrf_token_from(client.get(reverse("chat:memory")))
    response = client.post(edit, {"value": "your left knee hurts", "csrfmiddlewaretoken": token})
    assert (response.status_code, response["Location"]) == (302, reverse("chat:memory"))
    # An edit is a new version of the fact; the old one is kept for the runs that saw it.
    fact = MemoryFact.objects.current().get(owner=world["owner"], key=fact.key)
    assert fact.value == "your left knee hurts"
    page = client.get(reverse("chat:memory")).content.decode()
    assert "your left knee hurts" in page and "Saved." in page

    delete = reverse("chat:memory_delete", args=[fact.pk])
    confirm = client.get(reverse("chat:memory_forget", args=[fact.pk])).content.decode()
    assert "Forget this?" in confirm and f'action="{delete}"' in confirm
    response = client.post(delete, {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert not MemoryFact.objects.filter(pk=fact.pk).exists()
    assert "your left knee hurts" not in client.get(reverse("chat:memory")).content.decode()


def test_htmx_edit_and_delete_return_the_page_body_only(world):
    client = as_user(Client(), world["owner"])
    fact = world["fact"]
    response = client.post(
        reverse("chat:memory_edit", args=[fact.pk]), {"value": "better"}, headers=HTMX
    )
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html and "better" in html
    assert response["HX-Push-Url"] == reverse("chat:memory")
    fact = MemoryFact.objects.current().get(owner=world["owner"], key=fact.key)  # the new version
    assert f'action="{reverse("chat:memory_edit", args=[fact.pk])}"' in html
    response = client.post(reverse("chat:memory_delete", args=[fact.pk]), headers=HTMX)
    assert response.status_code == 200 and "better" not in response.content.decode()


def test_an_empty_value_is_refused_and_nothing_changes(owner_client, user):
    fact = MemoryFact.objects.create(owner=user, key="name", value="Ada")
    response = owner_client.post(reverse("chat:memory_edit", args=[fact.pk]), {"value": "  "})
    assert response.status_code == 422
    assert "Type what I should remember" in response.content.decode()
    fact.refresh_from_db()
    assert fact.value == "Ada"


def test_each_fact_links_to_the_message_it_came_from(client, world):
    fact = world["fact"]
    message = fact.source_message
    html = as_user(client, world["owner"]).get(reverse("chat:memory")).content.decode()
    link = f'href="/c/{message.conversation_id}/#exchange-{message.pk}"'
    assert link in html
    assert "Your name" not in html and "What you asked me to remember" in html

    page = client.get(f"/c/{message.conversation_id}/").content.decode()
    assert f'id="exchange-{message.pk}"' in page  # the anchor exists


def test_a_deleted_source_says_so(client, world):
    world["fact"].source_message.conversation.delete()
    html = as_user(client, world["owner"]).get(reverse("chat:memory")).content.decode()
    assert "Source no longer available" in html
    assert "your knee hurts" in html


def test_the_page_says_facts_are_per_user_across_conversations(owner_client):
    html = owner_client.get(reverse("chat:memory")).content.decode()
    assert "every conversation you have with me" in html
    assert "anything about you yet" in html
    assert f'href="{reverse("chat:memory")}"' in html  # the account nav links here


# Real commits: the attempt's heartbeat runs on a connection of its own, which must see its run.
@pytest.mark.django_db(transaction=True)
def test_a_deleted_fact_is_not_in_the_next_runs_context(owner_client, conversation):
    def ask(text: str) -> str:
        message = message_accept(conversation=conversation, text=text, client_id=uuid.uuid4())
        drain_conversation(conversation_id=conversation.pk)
        return Message.objects.get(reply_to=message).text

    assert ask("Remember that my knee hurts") == "I'll remember that your knee hurts."
    assert "your knee hurts" in ask("What do you remember?")
    fact = MemoryFact.objects.get(owner=conversation.owner, key="note")

    owner_client.post(reverse("chat:memory_delete", args=[fact.pk]))

    answer = ask("What do you remember?")
    assert "knee" not in answer
    assert answer == "I don't know anything about you yet. Tell me your name or a goal."
