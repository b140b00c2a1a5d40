"""Edit, regenerate, versions and older exchanges over HTTP and the websocket: for the owner,
another user and anonymous; refusals say why and change nothing."""

from __future__ import annotations

import uuid

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import Client
from django.urls import reverse

from continuity.actions import message_edit
from continuity.models import Message
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory
from tests.helpers.messages import answered, store_reply
from tests.helpers.sockets import communicator, session_headers

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat():
    conversation = ConversationFactory()
    for text in ("one", "two"):
        answered(conversation, text)
    return conversation


def last_question(chat) -> Message:
    return chat.messages.filter(text="two").order_by("id").first()


def actions(chat) -> dict[str, tuple[str, str, dict]]:
    two = last_question(chat)
    args = [chat.pk, two.pk]
    client_id = str(uuid.uuid4())
    return {
        "edit": ("post", reverse("chat:edit", args=args), {"text": "2", "client_id": client_id}),
        "regenerate": ("post", reverse("chat:regenerate", args=args), {"client_id": client_id}),
        "show": ("post", reverse("chat:version_show", args=args), {}),
        "older": ("get", reverse("chat:exchanges_older", args=[chat.pk]) + f"?before={two.pk}", {}),
    }


def client_for(who: str, chat) -> Client:
    client = Client()
    if who == "owner":
        client.force_login(chat.owner)
    elif who == "other user":
        client.force_login(UserFactory())
    return client


@pytest.mark.parametrize("action", ["edit", "regenerate", "show", "older"])
@pytest.mark.parametrize("who", ["anonymous", "other user"])
def test_only_the_owner_may(chat, action, who):
    method, url, data = actions(chat)[action]
    response = getattr(client_for(who, chat), method)(url, data)
    if who == "anonymous":
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    else:
        assert response.status_code == 404
    assert chat.messages.count() == 4 and not chat.messages.filter(hidden_with__isnull=False)


def test_anonymous_htmx_gets_401(chat):
    _, url, data = actions(chat)["regenerate"]
    assert Client().post(url, data, headers={"HX-Request": "true"}).status_code == 401


def test_owner_regenerates_with_htmx_and_a_resubmit_adds_nothing(chat):
    client = client_for("owner", chat)
    _, url, data = actions(chat)["regenerate"]
    for _ in range(2):
        response = client.post(url, data, headers={"HX-Request": "true"})
        assert response.status_code == 204
    again = Message.objects.get(version_of=last_question(chat))
    assert again.state == "queued" and again.text == "two"


def test_owner_edits_without_script_and_lands_on_the_new_version(chat):
    client = client_for("owner", chat)
    one = chat.messages.get(text="one")
    response = client.post(
        reverse("chat:edit", args=[chat.pk, one.pk]),
        {"text": "one, better", "client_id": str(uuid.uuid4())},
    )
    edited = Message.objects.get(version_of=one)
    assert response.status_code == 302
    assert response["Location"] == reverse("chat:conversation", args=[chat.pk]) + (
        f"#exchange-{edited.pk}"
    )
    page = client.get(response["Location"]).content.decode()
    assert "one, better" in page and "Reply to two" not in page
    assert "Version 2 of 2" in page and 'aria-label="Previous version"' in page


@pytest.mark.parametrize(
    ("data", "status", "said"),
    [
        ({"text": " ", "client_id": "x"}, 422, "form is out of date"),
        ({"text": " ", "client_id": str(uuid.uuid4())}, 422, "Type a message"),
        ({"text": "x" * 40_000, "client_id": str(uuid.uuid4())}, 422, "the limit is"),
    ],
)
def test_a_bad_edit_is_refused_with_the_reason(chat, data, status, said):
    response = client_for("owner", chat).post(
        reverse("chat:edit", args=[chat.pk, last_question(chat).pk]),
        data,
        headers={"HX-Request": "true"},
    )
    assert response.status_code == status and said in response.content.decode()
    assert not Message.objects.filter(version_of__isnull=False).exists()


def test_changes_wait_for_the_reply_being_written(chat):
    MessageFactory(conversation=chat, text="three")  # queued
    client = client_for("owner", chat)
    for action in ("edit", "regenerate"):
        _, url, data = actions(chat)[action]
        response = client.post(url, data, headers={"HX-Request": "true"})
        assert response.status_code == 409
        assert "Wait until the reply is finished" in response.content.decode()
    # Without script, the reason is shown on the conversation page.
    _, url, data = actions(chat)["regenerate"]
    page = client.post(url, data, follow=True).content.decode()
    assert "Wait until the reply is finished" in page


def test_regenerate_is_offered_only_on_the_last_reply_and_refused_on_others(chat):
    client = client_for("owner", chat)
    one = chat.messages.get(text="one")
    response = client.post(
        reverse("chat:regenerate", args=[chat.pk, one.pk]),
        {"client_id": str(uuid.uuid4())},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 409 and "Only the last reply" in response.content.decode()


def test_the_page_shows_the_newest_exchanges_and_loads_older_ones(chat):
    for n in range(40):
        answered(chat, f"later {n}")
    client = client_for("owner", chat)
    page = client.get(reverse("chat:conversation", args=[chat.pk])).content.decode()
    assert page.count('class="exchange"') == 30 and "later 39" in page and "later 9" not in page
    oldest_shown = chat.messages.get(text="later 10").pk
    assert f'data-load-older="{oldest_shown}"' in page
    older = client.get(
        reverse("chat:exchanges_older", args=[chat.pk]) + f"?before={oldest_shown}",
        headers={"HX-Request": "true"},
    ).content.decode()
    assert older.count('class="exchange"') == 12 and "data-load-older" not in older
    assert "Reply to one" in older and "later 10" not in older
    # Without script the link opens the older part as a page, with a way back to the newest.
    page = client.get(reverse("chat:conversation", args=[chat.pk]) + f"?before={oldest_shown}")
    assert "Show the newest messages" in page.content.decode()
    bad = client.get(reverse("chat:exchanges_older", args=[chat.pk]) + "?before=x")
    assert bad.status_code == 400


@pytest.mark.django_db(transaction=True)
def test_open_pages_are_told_which_exchanges_to_hide_and_show(chat):
    owner = chat.owner
    headers = session_headers(owner)
    two = last_question(chat)

    async def scenario():
        socket = communicator(chat.pk, headers)
        await socket.connect()
        edited = await sync_to_async(message_edit)(message=two, text="2", client_id=uuid.uuid4())
        frames = [await socket.receive_json_from(timeout=5)]
        # The branch change, and the rendering owed to the new version's event, in either
        # order (a status-only frame may come between).
        while len([f for f in frames if f["type"] == "exchanges"]) < 2:
            frames.append(await socket.receive_json_from(timeout=5))
        await socket.disconnect()
        return edited, frames

    edited, frames = async_to_sync(scenario)()
    branch = next(f for f in frames if "branch" in f)
    assert branch["branch"] == 1 and 'id="conversation-status"' in branch["status"]
    assert f'id="exchange-{two.pk}"' in branch["html"] and "data-hidden" in branch["html"]
    changed = next(f for f in frames if f["type"] == "exchanges" and "branch" not in f)
    assert f'id="exchange-{edited.pk}"' in changed["html"]


@pytest.mark.django_db
def test_a_sync_reports_how_often_the_branch_changed(chat):
    store_reply(message_edit(message=last_question(chat), text="2", client_id=uuid.uuid4()), "ok")
    headers = session_headers(chat.owner)

    async def scenario():
        socket = communicator(chat.pk, headers)
        await socket.connect()
        await socket.send_json_to({"type": "sync", "after": 0, "waiting": []})
        # The sync's answer; a rendering owed to an event of an earlier test on the same
        # conversation id (the SQLite lane reuses ids) may come first.
        frame = await socket.receive_json_from(timeout=5)
        while "up_to" not in frame:
            frame = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return frame

    assert async_to_sync(scenario)()["branch"] == 1
