"""Rename, archive, delete, search and export: for the owner, another user and anonymous."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from continuity.actions import message_edit
from continuity.delivery.inbox import message_accept
from continuity.delivery.processing import drain_conversation
from continuity.models import Conversation, Message
from tests.helpers.factories import ConversationFactory, UserFactory

pytestmark = pytest.mark.django_db

ACTIONS = {
    "rename": ("post", "chat:rename", {"title": "Renamed"}),
    "archive": ("post", "chat:archive", {"archived": "1"}),
    "delete page": ("get", "chat:delete", None),
    "delete": ("post", "chat:delete", None),
    "export md": ("get", "chat:export_md", None),
    "export json": ("get", "chat:export_json", None),
}


@pytest.fixture
def chat():
    conversation = ConversationFactory(title="Compiler plans")
    message_accept(
        conversation=conversation, text="Let us ship the compiler", client_id=uuid.uuid4()
    )
    return conversation


def client_for(who, chat) -> Client:
    client = Client()
    if who == "owner":
        client.force_login(chat.owner)
    elif who in ("other user", "staff"):
        client.force_login(UserFactory(is_staff=who == "staff"))
    return client


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("who", ["anonymous", "other user", "staff"])
def test_only_the_owner_may(chat, action, who):
    method, name, data = ACTIONS[action]
    response = getattr(client_for(who, chat), method)(reverse(name, args=[chat.pk]), data or {})
    if who == "anonymous":
        assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    else:
        assert response.status_code == 404
    chat.refresh_from_db()  # still there, unchanged
    assert (chat.title, chat.archived_at) == ("Compiler plans", None)


def test_anonymous_htmx_gets_401(chat):
    response = Client().post(
        reverse("chat:rename", args=[chat.pk]), {"title": "x"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 401


@pytest.mark.parametrize("action", ["rename", "archive", "delete"])
def test_changes_are_post_only(chat, action):
    _, name, _ = ACTIONS[action]
    client = client_for("owner", chat)
    if action == "delete":
        assert client.put(reverse(name, args=[chat.pk])).status_code == 405
    else:
        assert client.get(reverse(name, args=[chat.pk])).status_code == 405
    assert Conversation.objects.filter(pk=chat.pk, title="Compiler plans").exists()


def test_rename(chat):
    client = client_for("owner", chat)
    client.post(reverse("chat:rename", args=[chat.pk]), {"title": "  The   compiler  "})
    chat.refresh_from_db()
    assert chat.title == "The compiler"
    html = client.post(
        reverse("chat:rename", args=[chat.pk]), {"title": " "}, follow=True
    ).content.decode()
    assert "Not renamed" in html
    client.post(reverse("chat:rename", args=[chat.pk]), {"title": "x" * 201})
    chat.refresh_from_db()
    assert chat.title == "The compiler"


def test_rename_by_htmx_returns_the_title(chat):
    client = client_for("owner", chat)
    response = client.post(
        reverse("chat:rename", args=[chat.pk]), {"title": "Plans"}, headers={"HX-Request": "true"}
    )
    assert response.content.decode().startswith('<h1 id="conversation-title">Plans')


def test_archive_leaves_the_sidebar_and_unarchive_brings_it_back(chat):
    client = client_for("owner", chat)
    client.post(reverse("chat:archive", args=[chat.pk]), {"archived": "1"})
    home = client.get(reverse("chat:home")).content.decode()
    assert f'data-conversation="{chat.pk}"' not in home  # not in the sidebar
    assert "“Compiler plans” archived" in home  # the notice says where it went
    archived = client.get(reverse("chat:conversations"), {"archived": "1"}).content.decode()
    assert f'data-conversation="{chat.pk}"' in archived
    assert client.get(reverse("chat:conversation", args=[chat.pk])).status_code == 200
    client.post(reverse("chat:archive", args=[chat.pk]), {"archived": "0"})
    assert "Compiler plans" in client.get(reverse("chat:home")).content.decode()


def test_delete_asks_first_then_removes_everything(chat):
    client = client_for("owner", chat)
    # A version the person left behind is not among the messages they are told of.
    hidden = Message.objects.create(conversation=chat, role="user", text="Old version")
    Message.objects.filter(pk=hidden.pk).update(hidden_with=hidden)
    page = client.get(reverse("chat:delete", args=[chat.pk])).content.decode()
    assert "Delete “Compiler plans”?" in page and "1 message," in page
    assert Conversation.objects.filter(pk=chat.pk).exists()
    response = client.post(reverse("chat:delete", args=[chat.pk]))
    assert response.status_code == 302 and response["Location"] == reverse("chat:home")
    home = client.get(response["Location"]).content.decode()
    assert (
        '<p class="notice" tabindex="-1" data-focus-on-load>“Compiler plans” deleted.</p>' in home
    )
    assert not Conversation.objects.filter(pk=chat.pk).exists()
    assert not Message.objects.filter(conversation_id=chat.pk).exists()
    assert client.get(reverse("chat:conversation", args=[chat.pk])).status_code == 404


@pytest.mark.postgresql("full-text search finds other forms of a word; SQLite's finds the text")
def test_search_finds_words_in_any_form_in_ones_own_conversations_only(chat):
    other = ConversationFactory(title="Someone else")
    message_accept(conversation=other, text="I ship compilers too", client_id=uuid.uuid4())
    client = client_for("owner", chat)
    html = client.get(reverse("chat:search"), {"q": "shipping"}).content.decode()
    assert f'data-hit="{chat.pk}"' in html and f'data-hit="{other.pk}"' not in html
    assert "<mark>ship</mark>" in html
    assert (
        f'data-hit="{chat.pk}"'
        in client.get(reverse("chat:search"), {"q": "plans"}).content.decode()
    )
    assert (
        "0 conversations found"
        in client.get(reverse("chat:search"), {"q": "zebra"}).content.decode()
    )
    assert client.get(reverse("chat:search")).status_code == 200


def test_search_finds_ones_own_conversations_and_says_truly_how_it_matches(chat):
    """On both databases: PostgreSQL's full-text search, SQLite's search for the text as
    typed. The hint under the box describes the one that answers."""
    other = ConversationFactory(title="Someone else")
    message_accept(conversation=other, text="We ship compilers", client_id=uuid.uuid4())
    client = client_for("owner", chat)

    html = client.get(reverse("chat:search"), {"q": "SHIP the"}).content.decode()

    assert f'data-hit="{chat.pk}"' in html and f'data-hit="{other.pk}"' not in html
    assert "1 conversation found" in html
    word_forms = connection.vendor == "postgresql"
    assert ('data-search-hint="word-forms"' in html) is word_forms
    assert ('data-search-hint="as-typed"' in html) is not word_forms
    shipping = client.get(reverse("chat:search"), {"q": "shipping"}).content.decode()
    assert (f'data-hit="{chat.pk}"' in shipping) is word_forms


def test_search_escapes_what_it_shows(chat):
    message_accept(
        conversation=chat, text="<script>alert(1)</script> compiler", client_id=uuid.uuid4()
    )
    html = client_for("owner", chat).get(reverse("chat:search"), {"q": "compiler"}).content.decode()
    assert "<script>alert(1)" not in html


def test_search_needs_login():
    response = Client().get(reverse("chat:search"), {"q": "x"})
    assert response.status_code == 302


def test_export_markdown_and_json(chat):
    client = client_for("owner", chat)
    markdown = client.get(reverse("chat:export_md", args=[chat.pk]))
    assert markdown["Content-Disposition"] == f'attachment; filename="compiler-plans-{chat.pk}.md"'
    assert markdown.content.decode().startswith("# Compiler plans")
    assert "Let us ship the compiler" in markdown.content.decode()
    exported = json.loads(client.get(reverse("chat:export_json", args=[chat.pk])).content)
    assert exported["title"] == "Compiler plans"
    assert [(m["role"], m["text"]) for m in exported["messages"]] == [
        ("user", "Let us ship the compiler")
    ]


def test_export_writes_times_in_the_readers_zone_with_the_offset(chat):
    Message.objects.filter(conversation=chat).update(
        created_at=datetime(2026, 7, 1, 17, 30, 5, tzinfo=UTC)
    )
    client = client_for("owner", chat)
    url = reverse("chat:export_md", args=[chat.pk])
    markdown = client.get(url, {"tz": "America/New_York"}).content.decode()
    assert "## You · 2026-07-01 13:30:05 -04:00" in markdown
    assert "Times are in America/New_York, with their offset from UTC." in markdown
    exported = json.loads(
        client.get(reverse("chat:export_json", args=[chat.pk]), {"tz": "Asia/Kolkata"}).content
    )
    assert exported["time_zone"] == "Asia/Kolkata"
    assert exported["messages"][0]["created_at"] == "2026-07-01T23:00:05+05:30"
    # Without a zone, or with one that does not exist: UTC, still with its offset.
    for zone in (
        {},
        {"tz": "Mars/Olympus"},
        {"tz": "America"},
        {"tz": "../etc/passwd"},
        {"tz": "x" * 5000},
    ):
        assert "## You · 2026-07-01 17:30:05 +00:00" in client.get(url, zone).content.decode()


def test_the_sidebar_shows_the_newest_fifty_and_links_to_the_rest(chat):
    for n in range(55):
        ConversationFactory(owner=chat.owner, title=f"Topic {n}")
    client = client_for("owner", chat)
    home = client.get(reverse("chat:home")).content.decode()
    assert "6 older conversations" in home
    second = client.get(reverse("chat:conversations"), {"page": 2}).content.decode()
    assert second.count("data-conversation=") == 6


def test_a_person_picks_the_assistant_of_a_conversation(chat, settings):
    settings.CONTINUITY_BRAIN_CHOICES = ["builtin", "openai"]
    client = client_for("owner", chat)
    page = client.get(reverse("chat:conversation", args=[chat.pk])).content.decode()
    assert "Assistant for the next messages" in page and "(model server)" in page
    client.post(reverse("chat:brain", args=[chat.pk]), {"brain": "openai"})
    chat.refresh_from_db()
    assert chat.brain == "openai"
    client.post(reverse("chat:brain", args=[chat.pk]), {"brain": "faulty"})  # not offered
    chat.refresh_from_db()
    assert chat.brain == "openai"
    assert (
        client_for("other user", chat)
        .post(reverse("chat:brain", args=[chat.pk]), {"brain": "builtin"})
        .status_code
        == 404
    )


def test_a_new_conversation_starts_with_the_picked_assistant(chat, settings):
    settings.CONTINUITY_BRAIN_CHOICES = ["builtin", "openai"]
    client = client_for("owner", chat)
    assert 'name="brain"' in client.get(reverse("chat:home")).content.decode()
    client.post(
        reverse("chat:conversation_new"),
        {"text": "hello", "client_id": str(uuid.uuid4()), "brain": "openai"},
    )
    assert Conversation.objects.get(title="hello").brain == "openai"


def test_with_one_assistant_there_is_nothing_to_pick(chat, settings):
    settings.CONTINUITY_BRAIN_CHOICES = ["builtin"]
    client = client_for("owner", chat)
    assert 'name="brain"' not in client.get(reverse("chat:home")).content.decode()
    assert (
        'name="brain"'
        not in client.get(reverse("chat:conversation", args=[chat.pk])).content.decode()
    )


def test_a_stopped_reply_is_closed_as_markdown_and_marked_in_export(chat):
    question = Message.objects.get(conversation=chat, role="user")
    Message.objects.filter(pk=question.pk).update(state="done")
    Message.objects.create(
        conversation=chat,
        role="assistant",
        text="First, **ship the",
        state="done",
        reply_to=question,
        stopped=True,
    )
    client = client_for("owner", chat)

    page = client.get(reverse("chat:conversation", args=[chat.pk])).content.decode()
    assert "<strong>ship the</strong>" in page and "**ship" not in page
    markdown = client.get(reverse("chat:export_md", args=[chat.pk])).content.decode()
    assert "First, **ship the**\n\n*(Stopped: this reply was cut short at your request.)*" in (
        markdown
    )
    exported = json.loads(client.get(reverse("chat:export_json", args=[chat.pk])).content)
    assert [(m["role"], m["stopped"]) for m in exported["messages"]] == [
        ("user", False),
        ("assistant", True),
    ]


def test_a_search_result_shows_the_words_around_the_match_as_text():
    from continuity.selectors import MARK_END, MARK_START, snippet_around

    text = ("Before that, " * 12) + "we **ship the compiler** on Friday, " + ("then rest. " * 20)
    snippet = snippet_around(text=text, query="COMPILER")
    assert snippet.startswith("…that,") and snippet.endswith("…")  # cut between words
    assert f"{MARK_START}compiler{MARK_END}" in snippet
    assert snippet_around(text="Ship it", query="ship") == f"{MARK_START}Ship{MARK_END} it"

    chat = ConversationFactory(title="Plans")
    message_accept(conversation=chat, text=text, client_id=uuid.uuid4())
    html = client_for("owner", chat).get(reverse("chat:search"), {"q": "compiler"}).content
    html = html.decode()
    assert "<mark>compiler</mark>" in html.lower() or "<mark>compiler" in html.lower()
    assert "**" not in html.split("data-hit=")[1].split("</li>")[0]


def test_search_says_what_it_found_on_earlier_versions(chat):
    """A message an edit replaced is not on the branch shown: the page lists its conversation
    apart, saying why, rather than skip it without a word."""
    asked = message_accept(conversation=chat, text="Plan the zebra trip", client_id=uuid.uuid4())
    drain_conversation(conversation_id=chat.pk)
    message_edit(message=asked, text="Plan the giraffe trip", client_id=uuid.uuid4())
    client = client_for("owner", chat)

    html = client.get(reverse("chat:search"), {"q": "zebra"}).content.decode()

    assert "0 conversations found" in html
    assert f'data-earlier-hit="{chat.pk}"' in html and "Also on earlier versions" in html
    assert "<mark>zebra</mark>" in html
    shown = client.get(reverse("chat:search"), {"q": "giraffe"}).content.decode()
    assert f'data-hit="{chat.pk}"' in shown and "data-earlier-hit" not in shown
    both = client.get(reverse("chat:search"), {"q": "trip"}).content.decode()
    assert f'data-hit="{chat.pk}"' in both and "data-earlier-hit" not in both  # listed once
