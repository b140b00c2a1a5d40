from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection as db_connection
from django.db import transaction
from django.test import Client
from django.urls import reverse

from continuity.models import Conversation, Message
from tests.helpers.factories import ConversationFactory, MessageFactory
from tests.helpers.waiting import lock_waiters, wait_for

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def send(client, conversation, text, client_id=None, **extra):
    return client.post(
        reverse("chat:message_send", args=[conversation.pk]),
        {"text": text, "client_id": str(client_id or uuid.uuid4())},
        **extra,
    )


def test_conversation_page_shows_its_messages_and_the_sidebar(owner_client, conversation):
    MessageFactory(conversation=conversation, text="Hello <b>world</b>")
    older = ConversationFactory(owner=conversation.owner, title="Older one")
    response = owner_client.get(reverse("chat:conversation", args=[conversation.pk]))
    html = response.content.decode()
    assert response.status_code == 200
    assert "Hello &lt;b&gt;world&lt;/b&gt;" in html
    assert older.title in html
    assert f'data-ws-path="/ws/c/{conversation.pk}/"' in html


def test_sidebar_lists_conversations_newest_first(owner_client, user):
    first = ConversationFactory(owner=user, title="First")
    second = ConversationFactory(owner=user, title="Second")
    Conversation.objects.filter(pk=first.pk).update(updated_at=second.updated_at)
    Conversation.objects.filter(pk=second.pk).update(
        updated_at=second.updated_at.replace(year=second.updated_at.year + 1)
    )
    html = owner_client.get(reverse("chat:home")).content.decode()
    assert html.index("Second") < html.index("First")


def test_htmx_send_returns_the_queued_exchange_and_a_fresh_composer(owner_client, conversation):
    client_id = uuid.uuid4()
    response = send(owner_client, conversation, "Hi there", client_id, headers=HTMX)
    html = response.content.decode()
    message = Message.objects.get()
    assert response.status_code == 200
    assert f'id="exchange-{message.pk}"' in html and 'data-state="queued"' in html
    assert 'hx-swap-oob="true"' in html and str(client_id) not in html


def test_plain_form_send_redirects_back_to_the_conversation(owner_client, conversation):
    response = send(owner_client, conversation, "no javascript here")
    assert response.status_code == 302
    assert response["Location"] == reverse("chat:conversation", args=[conversation.pk])
    assert Message.objects.filter(text="no javascript here").exists()


@pytest.mark.parametrize(
    ("text", "error"),
    [("   ", "Type a message before sending."), ("x" * 16_001, "the limit is 16,000")],
)
def test_invalid_text_gets_an_inline_error_keeps_the_text_and_stores_nothing(
    owner_client, conversation, text, error
):
    response = send(owner_client, conversation, text, headers=HTMX)
    html = response.content.decode()
    assert response.status_code == 422
    assert error in html
    assert text.strip()[:50] in html  # the user's input comes back in the composer
    assert Message.objects.count() == 0


def test_a_post_without_client_id_is_refused_clearly(owner_client, conversation):
    response = owner_client.post(
        reverse("chat:message_send", args=[conversation.pk]), {"text": "hi"}, headers=HTMX
    )
    assert response.status_code == 422
    assert "reload the page" in response.content.decode()
    assert Message.objects.count() == 0


def test_new_conversation_is_created_once_and_redirects_to_it(owner_client, user):
    client_id = str(uuid.uuid4())
    url = reverse("chat:conversation_new")
    first = owner_client.post(url, {"text": "Plan a garden", "client_id": client_id}, headers=HTMX)
    again = owner_client.post(url, {"text": "Plan a garden", "client_id": client_id}, headers=HTMX)
    conversation = Conversation.objects.get(owner=user)
    target = reverse("chat:conversation", args=[conversation.pk])
    assert first["HX-Redirect"] == again["HX-Redirect"] == target
    assert conversation.title == "Plan a garden"
    assert conversation.messages.count() == 1


def test_new_conversation_with_empty_text_keeps_the_user_on_the_page(owner_client):
    response = owner_client.post(
        reverse("chat:conversation_new"), {"text": "", "client_id": str(uuid.uuid4())}
    )
    assert response.status_code == 422
    assert "Type a message before sending." in response.content.decode()
    assert Conversation.objects.count() == 0


def test_missing_csrf_token_is_refused(conversation):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(conversation.owner)
    response = send(client, conversation, "hello")
    assert response.status_code == 403
    assert Message.objects.count() == 0


def test_signup_logs_the_new_user_in(client):
    response = client.post(
        reverse("signup"),
        {
            "username": "newcomer",
            "password1": "a-long-passphrase-42",
            "password2": "a-long-passphrase-42",
        },
    )
    assert response.status_code == 302
    assert client.get(reverse("chat:home")).status_code == 200


def test_login_and_logout(client, user):
    from tests.helpers.factories import PASSWORD

    response = client.post(reverse("login"), {"username": user.username, "password": PASSWORD})
    assert response.status_code == 302
    assert client.get(reverse("chat:home")).status_code == 200
    client.post(reverse("logout"))
    assert client.get(reverse("chat:home")).status_code == 302


def test_a_user_over_the_send_limit_gets_the_wait_and_keeps_the_text(
    owner_client, conversation, settings
):
    settings.CONTINUITY_SEND_RATE = "3/minute"
    for number in range(3):
        assert send(owner_client, conversation, f"m{number}", headers=HTMX).status_code == 200
    client_id = uuid.uuid4()
    response = send(owner_client, conversation, "one too many", client_id, headers=HTMX)
    html = response.content.decode()
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 60
    assert f"Wait {response['Retry-After']} s, then send again" in html
    assert "one too many</textarea>" in html and str(client_id) in html  # same id on resend
    assert Message.objects.count() == 3


def test_the_send_limit_is_per_user(client, settings):
    settings.CONTINUITY_SEND_RATE = "2/minute"
    first, second = ConversationFactory(), ConversationFactory()
    for conversation in (first, second):
        client.force_login(conversation.owner)
        statuses = [send(client, conversation, f"m{n}", headers=HTMX).status_code for n in range(3)]
        assert statuses == [200, 200, 429]


def test_starting_conversations_is_limited_too(owner_client, settings):
    settings.CONTINUITY_NEW_CONVERSATION_RATE = "2/minute"
    statuses = [
        owner_client.post(
            reverse("chat:conversation_new"),
            {"text": f"topic {n}", "client_id": str(uuid.uuid4())},
            headers=HTMX,
        ).status_code
        for n in range(3)
    ]
    assert statuses == [200, 200, 429]
    assert Conversation.objects.count() == 2


def test_without_redis_the_limit_lets_messages_through(owner_client, conversation, settings):
    from devtools.redis_server import free_port

    settings.CONTINUITY_SEND_RATE = "1/minute"
    settings.RATE_LIMIT_STORAGE_URI = f"redis://127.0.0.1:{free_port()}/0"
    for number in range(2):
        assert send(owner_client, conversation, f"m{number}", headers=HTMX).status_code == 200
    assert Message.objects.count() == 2


def test_a_signed_out_htmx_send_gets_401_and_a_page_send_goes_to_login(client, conversation):
    assert send(client, conversation, "hello?", headers=HTMX).status_code == 401
    response = send(client, conversation, "hello?")
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert not Message.objects.exists()


def test_an_edited_resend_under_a_known_client_id_gets_409_and_keeps_the_text(
    owner_client, conversation
):
    client_id = uuid.uuid4()
    send(owner_client, conversation, "Meet at 10", client_id, headers=HTMX)
    response = send(owner_client, conversation, "Meet at 11, not 10", client_id, headers=HTMX)
    html = response.content.decode()
    assert response.status_code == 409
    assert "already sent with different text" in html
    assert "Meet at 11, not 10" in html  # the edit stays in the composer
    assert str(client_id) not in html  # under a new id: Enter now sends it as a new message
    assert list(Message.objects.values_list("text", flat=True)) == ["Meet at 10"]


def test_an_edited_resend_of_a_new_conversation_gets_409_and_keeps_the_text(owner_client, user):
    client_id = str(uuid.uuid4())
    url = reverse("chat:conversation_new")
    owner_client.post(url, {"text": "Plan a garden", "client_id": client_id}, headers=HTMX)
    response = owner_client.post(
        url, {"text": "Plan a herb garden", "client_id": client_id}, headers=HTMX
    )
    assert response.status_code == 409
    assert "Plan a herb garden" in response.content.decode()
    assert Conversation.objects.get().messages.get().text == "Plan a garden"


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("concurrent transactions: SQLite lets one writer at a time in")
def test_concurrent_posts_of_one_client_id_store_one_message(user, conversation):
    """Every post passes the "already stored?" check before any of them commits: the database
    constraint and the IntegrityError handler must turn them into one message."""
    posts, client_id = 6, str(uuid.uuid4())
    outcomes: list = []

    def post() -> None:
        client = Client()
        client.force_login(user)
        try:
            outcomes.append(send(client, conversation, "only once", client_id, headers=HTMX))
        except Exception as exc:  # the test thread reports it below
            outcomes.append(exc)
        finally:
            db_connection.close()

    threads = [threading.Thread(target=post) for _ in range(posts)]
    # Holding the conversation's lock parks every post inside message_accept, past its check.
    with transaction.atomic():
        Conversation.objects.select_for_update().get(pk=conversation.pk)
        for thread in threads:
            thread.start()
        wait_for(lambda: lock_waiters() == posts, timeout=20, what=f"{posts} posts to wait")
    for thread in threads:
        thread.join(timeout=30)
    assert [getattr(outcome, "status_code", outcome) for outcome in outcomes] == [200] * posts
    message = Message.objects.get(conversation=conversation)
    assert message.client_id == uuid.UUID(client_id)
    assert all(f'id="exchange-{message.pk}"' in o.content.decode() for o in outcomes)


@pytest.mark.django_db
def test_the_favicon_is_found_where_browsers_ask_for_it(client):
    answer = client.get("/favicon.ico")
    assert answer.status_code == 302 and answer["Location"].endswith("continuity/favicon.svg")
