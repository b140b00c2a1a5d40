"""The staff console's pages show what the database holds, and its actions do what they say."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from continuity.actions import dead_letter_discard, dead_letter_retry
from continuity.models import Alert, Conversation, CrashRecord, DeadLetter, Message, Run, Worker
from tests.helpers.console import dead_letter_make
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client):
    client.force_login(UserFactory(is_staff=True, username="opal"))
    return client


def tile(html: str, name: str) -> str:
    match = re.search(rf'data-tile="{name}"(?: href="[^"]*")?><span class="n">([^<]*)</span>', html)
    assert match, f"no tile {name}"
    return match.group(1)


def worker(name, *, seen_ago=0, stopped=False):
    now = timezone.now()
    return Worker.objects.create(
        name=name,
        hostname="host",
        pid=100,
        started_at=now - timedelta(hours=1),
        last_seen_at=now - timedelta(seconds=seen_ago),
        stopped_at=now if stopped else None,
    )


def test_the_overview_shows_workers_queue_replies_and_what_is_open(staff, settings):
    settings.ADMINS = []
    worker("live@host")
    worker("stale@host", seen_ago=600)
    worker("stopped@host", stopped=True)
    chat = ConversationFactory(state="paused")
    asked = MessageFactory(conversation=chat, state="done")
    reply = MessageFactory(conversation=chat, role="assistant", state="done", reply_to=asked)
    Message.objects.filter(pk=reply.pk).update(created_at=asked.created_at + timedelta(seconds=2))
    MessageFactory(conversation=chat, state="queued")
    Message.objects.filter(state="queued").update(
        created_at=timezone.now() - timedelta(seconds=330)
    )
    dead_letter_make(ConversationFactory())
    Alert.objects.create(kind="conversation_paused", conversation=chat, text="paused")

    html = staff.get(reverse("dashboard:index")).content.decode()
    assert re.search(r'data-worker="live@host">.*status-live', html)
    assert re.search(r'data-worker="stale@host">.*status-stale', html)
    assert re.search(r'data-worker="stopped@host">.*status-stopped', html)
    assert tile(html, "dead-letters") == "1"
    assert tile(html, "paused") == "1"
    assert tile(html, "alerts") == "2"  # the pause's, and the dead letter's
    assert tile(html, "waiting") == "1"
    assert tile(html, "oldest").startswith("5 min")
    assert tile(html, "answered") == "1"
    assert tile(html, "reply-time") == "2.0 s"
    assert "data-no-alert-destination" in html

    settings.ADMINS = [("Ops", "ops@example.com")]
    assert "data-no-alert-destination" not in staff.get(reverse("dashboard:index")).content.decode()


def test_every_tile_links_to_a_page_that_opens(client):
    staff = client
    staff.force_login(UserFactory(is_staff=True, is_superuser=True))
    html = staff.get(reverse("dashboard:index")).content.decode()
    links = re.findall(r'data-tile="[^"]+" href="([^"]*)"', html)
    assert len(links) == 11
    for link in links:
        response = staff.get(link.replace("&amp;", "&"))
        assert response.status_code == 200, link
        assert "?e=1" not in response.get("Location", ""), link


def test_htmx_polls_get_only_the_overview(staff):
    part = staff.get(reverse("dashboard:index"), headers={"HX-Request": "true"}).content.decode()
    assert part.lstrip().startswith('<section id="overview" hx-get=')
    assert "<html" not in part


def test_running_attempts_and_the_crash_chart(staff):
    chat = ConversationFactory()
    message = MessageFactory(conversation=chat, state="processing")
    run = Run.objects.create(
        conversation=chat, message=message, attempt=2, heartbeat_at=timezone.now(), worker="h:1"
    )
    crashed = Run.objects.create(
        conversation=chat, message=message, attempt=1, state="crashed", heartbeat_at=timezone.now()
    )
    CrashRecord.objects.create(
        conversation=chat, message=message, run=crashed, detected_by="watchdog"
    )
    html = staff.get(reverse("dashboard:index")).content.decode()
    assert reverse("admin:continuity_run_change", args=[run.pk]) in html
    assert tile(html, "crashes") == "1"
    assert tile(html, "retried") == "1"
    assert html.count('class="bar"') == 1
    crashes = staff.get(reverse("dashboard:crashes")).content.decode()
    assert "1 crash in the last 24 hours" in crashes


def test_dead_letters_are_searched_and_filtered(staff):
    ada, bob = UserFactory(username="ada"), UserFactory(username="bob")
    first = dead_letter_make(
        ConversationFactory(owner=ada, title="Legal"), "Translate the contract"
    )
    second = dead_letter_make(ConversationFactory(owner=bob), "Write a poem")
    DeadLetter.objects.filter(pk=second.pk).update(error_class="Worker crash")

    def listed(**query):
        html = staff.get(reverse("dashboard:dead_letters"), query).content.decode()
        return {int(pk) for pk in re.findall(r'data-dead-letter="(\d+)"', html)}

    assert listed() == {first.pk, second.pk}
    assert listed(q="ada") == {first.pk}
    assert listed(q="poem") == {second.pk}
    assert listed(q="tripped over") == {first.pk, second.pk}  # error text
    assert listed(q="legal") == {first.pk}  # the conversation's title
    assert listed(error_class="Worker crash") == {second.pk}
    assert listed(status="retried") == set()
    today = timezone.now().date()
    assert listed(since=today.isoformat()) == {first.pk, second.pk}
    assert listed(until=(today - timedelta(days=1)).isoformat()) == set()
    assert listed(since="not a date") == set()


def test_the_list_is_paginated_newest_first(staff):
    chat = ConversationFactory()
    letters = [dead_letter_make(chat, f"message {n}") for n in range(27)]
    html = staff.get(reverse("dashboard:dead_letters")).content.decode()
    shown = [int(pk) for pk in re.findall(r'data-dead-letter="(\d+)"', html)]
    assert shown == [dl.pk for dl in reversed(letters)][:25]
    assert "Page 1 of 2 (27 in all)" in html
    second = staff.get(reverse("dashboard:dead_letters"), {"page": 2}).content.decode()
    assert len(re.findall(r'data-dead-letter="(\d+)"', second)) == 2


def test_the_detail_shows_the_message_every_attempt_and_the_exchanges_around(staff):
    chat = ConversationFactory()
    before = MessageFactory(conversation=chat, state="done", text="Earlier question")
    dead_letter = dead_letter_make(chat)
    html = staff.get(reverse("dashboard:dead_letter", args=[dead_letter.pk])).content.decode()
    assert "Please summarize [[broken]]" in html
    assert 'data-attempt="1"' in html
    assert "ValueError: the brain tripped over this message" in html
    assert '<details><summary>Traceback</summary><pre class="traceback">Traceback' in html
    assert "No context stored: the attempt ended before assembling it." in html
    assert before.text in html
    assert "No staff action yet." in html


def test_edit_and_retry_then_the_audit_shows_it(staff):
    dead_letter = dead_letter_make(ConversationFactory())
    url = reverse("dashboard:dead_letter_edit", args=[dead_letter.pk])
    refused = staff.post(url, {"text": "   ", "reason": ""})
    assert (
        refused.status_code == 422 and "Type a message before sending." in refused.content.decode()
    )
    response = staff.post(url, {"text": "Please summarize", "reason": "typo"}, follow=True)
    html = response.content.decode()
    assert "Asked again as message" in html
    assert 'data-audit="edit_and_retry"' in html and ">opal<" in html and ">typo<" in html
    assert Message.objects.get(reasked_from=dead_letter.message_id).text == "Please summarize"


def test_an_oversized_edit_keeps_the_text_and_says_why(staff, settings):
    settings.CONTINUITY_MAX_MESSAGE_CHARS = 20
    dead_letter = dead_letter_make(ConversationFactory(), "short")
    text = "x" * 25
    response = staff.post(
        reverse("dashboard:dead_letter_edit", args=[dead_letter.pk]), {"text": text}
    )
    html = response.content.decode()
    assert response.status_code == 422 and "the limit is 20" in html and text in html
    assert DeadLetter.objects.get().status == "pending"


def test_discard_needs_a_reason(staff):
    dead_letter = dead_letter_make(ConversationFactory())
    url = reverse("dashboard:dead_letter_discard", args=[dead_letter.pk])
    assert staff.post(url, {"reason": ""}).status_code == 422
    staff.post(url, {"reason": "duplicate"})
    assert DeadLetter.objects.get().status == "discarded"


def test_acting_twice_says_it_was_done_already(staff):
    dead_letter = dead_letter_make(ConversationFactory())
    url = reverse("dashboard:dead_letter_retry", args=[dead_letter.pk])
    staff.post(url)
    html = staff.post(url, follow=True).content.decode()
    assert f"Dead letter {dead_letter.pk} was already retried." in html
    assert Message.objects.filter(reasked_from__isnull=False).count() == 1


def test_bulk_confirmation_names_the_count_then_acts_on_exactly_those(staff):
    chat = ConversationFactory()
    letters = [dead_letter_make(chat, f"message {n}") for n in range(5)]
    handled = letters[4]  # ticked on a page loaded before someone else discarded it
    dead_letter_discard(dead_letter=handled, by=UserFactory(is_staff=True), reason="spam")
    url = reverse("dashboard:dead_letters_bulk")
    ids = [dl.pk for dl in letters[:3]]
    page = staff.post(url, {"action": "retry", "ids": [*ids, handled.pk]}).content.decode()
    assert 'data-bulk-count="3"' in page and "Retry 3 dead letters?" in page
    assert f'name="ids" value="{handled.pk}"' not in page  # only pending ones are listed
    assert DeadLetter.objects.filter(status="pending").count() == 4  # nothing done yet
    done = staff.post(
        url,
        {"action": "retry", "scope": "ticked", "ids": [*ids, handled.pk], "confirmed": "on"},
        follow=True,
    ).content.decode()
    assert "3 dead letters retried" in done and "was already" not in done
    assert set(DeadLetter.objects.filter(status="retried").values_list("pk", flat=True)) == set(ids)


def test_bulk_on_a_filter_lists_what_it_matches(staff):
    chat = ConversationFactory()
    dead_letter_make(chat, "alpha one")
    dead_letter_make(chat, "alpha two")
    dead_letter_make(chat, "beta")
    retried = dead_letter_make(chat, "alpha three")
    dead_letter_retry(dead_letter=retried, by=UserFactory(is_staff=True))
    page = staff.post(
        reverse("dashboard:dead_letters_bulk"),
        {"action": "discard", "scope": "matching", "query": "q=alpha"},  # any status
    ).content.decode()
    assert 'data-bulk-count="2"' in page and "Discard 2 dead letters?" in page  # pending ones


def test_bulk_discard_without_a_reason_asks_for_one(staff):
    dead_letter = dead_letter_make(ConversationFactory())
    response = staff.post(
        reverse("dashboard:dead_letters_bulk"),
        {"action": "discard", "ids": [dead_letter.pk], "confirmed": "on", "reason": " "},
    )
    assert (
        response.status_code == 422
        and "Say why these messages are discarded" in response.content.decode()
    )
    assert DeadLetter.objects.get().status == "pending"


def test_paused_conversations_resume_with_a_reason(staff):
    chat = ConversationFactory(state="paused", paused_reason="3 crashes in 1 hour")
    listing = staff.get(reverse("dashboard:paused")).content.decode()
    assert f'data-conversation="{chat.pk}"' in listing and "3 crashes in 1 hour" in listing
    url = reverse("dashboard:conversation_resume", args=[chat.pk])
    assert staff.post(url, {"reason": ""}).status_code == 422
    staff.post(url, {"reason": "worker fixed"})
    assert Conversation.objects.get().state == "active"
    html = staff.get(reverse("dashboard:conversation", args=[chat.pk])).content.decode()
    assert 'data-audit="resume"' in html and "worker fixed" in html


def test_alerts_are_acknowledged_and_the_missing_destination_is_said(staff, settings):
    settings.ADMINS = []
    alert = Alert.objects.create(kind="conversation_paused", text="Conversation 1 paused")
    html = staff.get(reverse("dashboard:alerts")).content.decode()
    assert f'data-alert="{alert.pk}"' in html and "data-no-alert-destination" in html
    staff.post(reverse("dashboard:alert_acknowledge", args=[alert.pk]), {"reason": "on it"})
    assert f'data-alert="{alert.pk}"' not in staff.get(reverse("dashboard:alerts")).content.decode()
    acknowledged = staff.get(reverse("dashboard:alerts"), {"show": "acknowledged"}).content.decode()
    assert f'data-alert="{alert.pk}"' in acknowledged and "by opal" in acknowledged


@pytest.mark.django_db(transaction=True)
def test_the_detail_shows_the_context_each_attempt_was_given(staff, monkeypatch):
    from django.core.exceptions import ValidationError

    from chat.brains.builtin import BuiltinBrain
    from continuity.delivery.inbox import message_accept
    from continuity.delivery.processing import drain_conversation

    def refuse(self, context):
        raise ValidationError("This request is not valid.")

    chat = ConversationFactory()
    monkeypatch.setattr(BuiltinBrain, "plan", refuse)
    message_accept(conversation=chat, text="My name is Ada", client_id=uuid.uuid4())
    drain_conversation(conversation_id=chat.pk)
    dead_letter = DeadLetter.objects.get()
    html = staff.get(reverse("dashboard:dead_letter", args=[dead_letter.pk])).content.decode()
    assert (
        '<details><summary>Context this attempt was given</summary><pre class="context-given">'
        in html
    )
    assert "My name is Ada" in html.split("Context this attempt was given")[1]


def test_attempts_pruned_by_retention_are_shown_from_the_snapshot(staff):
    dead_letter = dead_letter_make(ConversationFactory())
    Run.objects.all().delete()
    html = staff.get(reverse("dashboard:dead_letter", args=[dead_letter.pk])).content.decode()
    assert 'data-attempt="1"' in html and "ValueError: the brain tripped" in html
    assert re.search(
        r"<dt>Started</dt><dd><time [^>]+>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d</time></dd>", html
    )


def test_a_poll_after_the_session_ended_reloads_the_page(client):
    response = client.get(reverse("dashboard:index"), headers={"HX-Request": "true"})
    assert response.status_code == 200 and response["HX-Refresh"] == "true"


def test_a_crashed_attempt_lasts_until_its_last_sign_of_life_not_until_it_was_noticed(staff):
    dead_letter = dead_letter_make(ConversationFactory())
    started = timezone.now() - timedelta(seconds=30)
    # The process died 0.1 s in; the watchdog noticed 11.8 s after the start.
    Run.objects.filter(message=dead_letter.message).update(
        state=Run.State.CRASHED,
        started_at=started,
        heartbeat_at=started + timedelta(milliseconds=100),
        ended_at=started + timedelta(seconds=11.8),
    )
    html = staff.get(reverse("dashboard:dead_letter", args=[dead_letter.pk])).content.decode()
    facts = html.split('data-attempt="1"')[1].split("</dl>")[0]
    assert "<dt>Duration</dt><dd>100 ms" in facts
    assert "Last sign of life" in facts and "Noticed" in facts and "11.8 s" not in facts


def test_a_pruned_crashed_attempt_still_ends_at_its_last_sign_of_life(staff):
    dead_letter = dead_letter_make(ConversationFactory())
    started = timezone.now() - timedelta(seconds=30)
    Run.objects.filter(message=dead_letter.message).update(
        state=Run.State.CRASHED,
        started_at=started,
        heartbeat_at=started + timedelta(milliseconds=100),
        ended_at=started + timedelta(seconds=11.8),
    )
    from continuity.delivery.dead_letters import attempts_snapshot

    DeadLetter.objects.filter(pk=dead_letter.pk).update(
        attempts=attempts_snapshot(dead_letter.message)
    )
    Run.objects.all().delete()  # retention
    html = staff.get(reverse("dashboard:dead_letter", args=[dead_letter.pk])).content.decode()
    facts = html.split('data-attempt="1"')[1].split("</dl>")[0]
    assert "Last sign of life" in facts and "Noticed" in facts
