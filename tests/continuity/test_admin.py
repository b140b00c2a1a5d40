"""The Django admin for staff: history is shown and linked but never edited; changes go
through the services, confirmed and audited."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.urls import reverse

from continuity.actions import alert_acknowledge, conversation_pause
from continuity.context.handoffs import handoff_write
from continuity.delivery.attempts.failures import attempt_end
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.processing import drain_conversation
from continuity.models import (
    Alert,
    Checkpoint,
    Conversation,
    CrashRecord,
    DeadLetter,
    Message,
    Recovery,
    ReplyChunk,
    Run,
    RunContext,
    StaffAction,
)
from tests.helpers.console import dead_letter_make
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db

HISTORY = [Run, Checkpoint, ReplyChunk, CrashRecord, RunContext, Recovery, StaffAction]


def url(model, view: str, *args) -> str:
    return reverse(f"admin:continuity_{model._meta.model_name}_{view}", args=args)


@pytest.fixture
def chat():
    return ConversationFactory()


@pytest.fixture
def answered(chat) -> Message:
    """A message answered by the built-in brain: a run, its checkpoints, chunks and context."""
    message = send(chat, "My name is Ada")
    drain_conversation(conversation_id=chat.pk)
    return message


@pytest.fixture
def crashed(chat, answered) -> Run:
    send(chat, "Then it crashed")
    run = attempt_begin(conversation_id=chat.pk)
    attempt_end(run_id=run.pk, state="crashed", error="Heartbeat stopped", detected_by="watchdog")
    return run


def history_row(model, answered, crashed):
    if model is CrashRecord:
        return crashed.crash
    if model is RunContext:
        return RunContext.objects.get(run__message=answered)
    return model.objects.filter(message=answered).first()


@pytest.mark.parametrize("model", HISTORY, ids=lambda model: model.__name__)
def test_history_cannot_be_added_changed_or_deleted_even_by_a_superuser(model, rf, admin_user):
    request = rf.get("/")
    request.user = admin_user
    model_admin = admin.site._registry[model]
    assert model_admin.has_view_permission(request)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)
    assert "delete_selected" not in model_admin.get_actions(request)


@pytest.mark.parametrize(
    "model", [Run, Checkpoint, ReplyChunk, CrashRecord, RunContext], ids=lambda m: m.__name__
)
def test_history_pages_are_read_only(model, admin_client, answered, crashed):
    row = history_row(model, answered, crashed)
    assert admin_client.get(url(model, "add")).status_code == 403
    assert admin_client.post(url(model, "add"), {}).status_code == 403
    assert admin_client.get(url(model, "delete", row.pk)).status_code == 403
    assert admin_client.post(url(model, "delete", row.pk), {"post": "yes"}).status_code == 403

    change = admin_client.get(url(model, "change", row.pk))
    assert change.status_code == 200
    page = change.content.decode()
    for field in model._meta.concrete_fields:
        assert f'name="{field.name}"' not in page
        assert f'name="{field.attname}"' not in page
    assert "<textarea" not in page and 'name="_save"' not in page
    before = model.objects.filter(pk=row.pk).values().get()
    posted = admin_client.post(url(model, "change", row.pk), {"step": "x", "text": "x", "seq": 9})
    assert posted.status_code == 403
    assert model.objects.filter(pk=row.pk).values().get() == before

    changelist = admin_client.get(url(model, "changelist"))
    assert changelist.status_code == 200
    assert b"delete_selected" not in changelist.content
    assert model.objects.filter(pk=row.pk).exists()  # the refused delete left it


def test_staff_without_permission_are_refused_and_anonymous_sent_to_log_in(client, answered):
    run = answered.runs.get()
    anonymous = client.get(url(Run, "change", run.pk))
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous.url
    client.force_login(UserFactory())
    assert client.get(url(Run, "change", run.pk)).status_code == 302  # not staff: log in again
    client.force_login(UserFactory(is_staff=True))
    assert client.get(url(Run, "change", run.pk)).status_code == 403


def test_staff_with_the_view_permission_can_read_history(client, answered):
    staff = UserFactory(is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_run"))
    client.force_login(staff)
    run = answered.runs.get()
    assert client.get(url(Run, "change", run.pk)).status_code == 200
    assert client.get(url(Run, "changelist")).status_code == 200
    assert client.post(url(Run, "change", run.pk), {}).status_code == 403


def test_list_columns_link_to_the_related_records(admin_client, answered):
    run = answered.runs.get()
    page = admin_client.get(url(Run, "changelist")).content.decode()
    assert f'href="{url(Message, "change", answered.pk)}"' in page
    assert f'href="{url(Conversation, "change", run.conversation_id)}"' in page


def test_a_message_page_links_to_its_conversation_runs_and_reply(admin_client, answered):
    page = admin_client.get(url(Message, "change", answered.pk)).content.decode()
    runs = f"{url(Run, 'changelist')}?message__id__exact={answered.pk}"
    assert f'href="{runs}"' in page
    assert f'href="{url(Message, "change", answered.reply.pk)}"' in page
    assert f'href="{url(Conversation, "change", answered.conversation_id)}"' in page

    listed = admin_client.get(runs)
    assert listed.status_code == 200
    assert listed.context["cl"].result_count == 1


def test_a_run_page_links_to_its_checkpoints_chunks_and_crash(admin_client, answered, crashed):
    run = answered.runs.get()
    page = admin_client.get(url(Run, "change", run.pk)).content.decode()
    for model in (Checkpoint, ReplyChunk):
        assert f'href="{url(model, "changelist")}?run__id__exact={run.pk}"' in page
    chunks = admin_client.get(f"{url(ReplyChunk, 'changelist')}?run__id__exact={run.pk}")
    assert chunks.context["cl"].result_count == run.reply_chunks.count() > 0
    crashed_page = admin_client.get(url(Run, "change", crashed.pk)).content.decode()
    assert f'href="{url(CrashRecord, "change", crashed.crash.pk)}"' in crashed_page
    assert '<pre class="admin-text">Heartbeat stopped</pre>' in crashed_page


def test_a_checkpoint_shows_its_output_as_indented_json(admin_client, answered):
    checkpoint = Checkpoint.objects.filter(message=answered).first()
    page = admin_client.get(url(Checkpoint, "change", checkpoint.pk)).content.decode()
    assert '<pre class="admin-json">{\n  ' in page


def test_a_conversation_page_shows_its_messages_and_runs_read_only(admin_client, chat, answered):
    run = answered.runs.get()
    change = admin_client.get(url(Conversation, "change", chat.pk))
    page = change.content.decode()
    assert change.status_code == 200
    assert "Messages (the newest 50, newest first)" in page
    assert "Attempts (the newest 50, newest first)" in page
    assert "My name is Ada" in page
    assert f'href="{url(Message, "change", answered.reply.pk)}" class="inlineviewlink"' in page
    assert f'href="{url(Run, "change", run.pk)}" class="inlineviewlink"' in page
    assert 'name="messages-0-text"' not in page and 'name="runs-0-state"' not in page
    assert f'href="{url(Message, "changelist")}?conversation__id__exact={chat.pk}"' in page
    assert page.count('class="tabular inline-related') == 0  # every history is read-only

    # Saving the conversation leaves its history as it was.
    data = {
        "owner": chat.owner_id,
        "title": "Renamed",
        **management_form(change.context, "messages", "runs", "handoffs"),
    }
    assert admin_client.post(url(Conversation, "change", chat.pk), data).status_code == 302
    chat.refresh_from_db()
    assert chat.title == "Renamed"
    assert Message.objects.get(pk=answered.pk).text == "My name is Ada"


def management_form(context, *prefixes) -> dict:
    data = {}
    for formset in context["inline_admin_formsets"]:
        form = formset.formset.management_form
        data |= {f"{form.prefix}-{name}": value for name, value in form.initial.items()}
        for index, item in enumerate(formset.formset.forms):
            data[f"{formset.formset.prefix}-{index}-id"] = item.instance.pk
    assert {formset.formset.prefix for formset in context["inline_admin_formsets"]} == set(prefixes)
    return data


def test_a_long_conversation_shows_only_its_newest_messages(admin_client, chat):
    for number in range(1, 56):
        MessageFactory(conversation=chat, text=f"note-{number:03}")
    for _ in range(52):
        handoff_write(conversation_id=chat.pk, reason="end_of_turn", sections={})
    other = MessageFactory(text="in another conversation")
    page = admin_client.get(url(Conversation, "change", chat.pk)).content.decode()
    assert "note-055" in page and "note-006" in page
    assert "note-005" not in page and "note-001" not in page
    assert page.index("note-055") < page.index("note-054")
    assert other.text not in page
    assert "55 messages" in page
    shown = re.findall(r'<td class="field-version">(\d+)</td>', page)
    assert shown[0] == "52" and shown[-1] == "3" and len(shown) == 50


def dead(conversation, text: str) -> DeadLetter:
    return dead_letter_make(
        conversation,
        text,
        error="ValueError: no",
        traceback='Traceback (most recent call last):\n  File "brain.py"\nValueError: no',
    )


def test_a_dead_letter_page_shows_the_text_attempts_and_traceback_readably(admin_client, chat):
    dead_letter = dead(chat, "Is <b>this</b> escaped?")
    change = admin_client.get(url(DeadLetter, "change", dead_letter.pk))
    assert change.status_code == 200
    page = change.content.decode()
    assert '<pre class="admin-text">Is &lt;b&gt;this&lt;/b&gt; escaped?</pre>' in page
    assert '<pre class="admin-text">ValueError: no</pre>' in page
    assert '<details class="traceback"><summary>Traceback</summary>' in page
    assert "Traceback (most recent call last):\n  File &quot;brain.py&quot;" in page
    assert '<textarea name="attempts"' not in page and 'name="payload"' not in page
    assert "<textarea" not in page and 'name="_save"' not in page
    for field in ("message", "conversation", "owner", "retried_as"):
        assert f'name="{field}"' not in page
    assert f'href="{url(Message, "change", dead_letter.message_id)}"' in page
    assert f'href="{url(Conversation, "change", chat.pk)}"' in page
    assert admin_client.post(url(DeadLetter, "change", dead_letter.pk), {}).status_code == 403
    assert admin_client.get(url(DeadLetter, "add")).status_code == 403
    assert admin_client.get(url(DeadLetter, "delete", dead_letter.pk)).status_code == 403


def test_dead_letters_are_found_by_their_text_owner_or_reason(admin_client, chat):
    dead_letter = dead(chat, "Something about invoices")
    other = dead(ConversationFactory(), "Unrelated")

    def found(**query) -> set[int]:
        listed = admin_client.get(url(DeadLetter, "changelist"), query)
        return {row.pk for row in listed.context["cl"].result_list}

    assert found(q="INVOICES") == found(q=chat.owner.username) == {dead_letter.pk}
    assert (
        found(q="valueerror: no") == found(error_class="ValueError") == {dead_letter.pk, other.pk}
    )
    assert found(status="retried") == set()


def act(client, model, action: str, items, **data):
    return client.post(
        url(model, "changelist"),
        {"action": action, "index": 0, "_selected_action": [item.pk for item in items], **data},
    )


def messages_of(response) -> list[str]:
    return [str(message) for message in response.wsgi_request._messages]


def test_retry_asks_for_confirmation_then_re_asks_and_audits(admin_client, admin_user, chat):
    dead_letter = dead(chat, "My name is Ada")
    done = dead(chat, "Already discarded")
    DeadLetter.objects.filter(pk=done.pk).update(status="discarded")

    confirm = act(admin_client, DeadLetter, "retry", [dead_letter, done])
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert "1 dead letter will be asked again" in page
    assert "Left as they are: 1 already retried or discarded." in page
    assert 'name="reason"' in page and 'value="retry"' in page
    assert DeadLetter.objects.get(pk=dead_letter.pk).status == "pending"  # nothing done yet

    response = act(
        admin_client, DeadLetter, "retry", [dead_letter, done], confirmed="yes", reason="fixed"
    )
    assert response.status_code == 302
    dead_letter.refresh_from_db()
    reask = Message.objects.get(reasked_from=dead_letter.message)
    assert (dead_letter.status, dead_letter.retried_as, dead_letter.resolved_by) == (
        "retried",
        reask,
        admin_user,
    )
    assert reask.text == "My name is Ada" and reask.state == "queued"
    action = StaffAction.objects.get(dead_letter=dead_letter)
    assert (action.kind, action.actor, action.reason) == ("retry", admin_user, "fixed")
    shown = messages_of(response)
    assert "Retried 1 dead letter: each is asked again at the end of its conversation." in shown
    assert f"Dead letter {done.pk} was already discarded." in shown

    page = admin_client.get(url(DeadLetter, "change", dead_letter.pk)).content.decode()
    assert f'href="{url(Message, "change", reask.pk)}"' in page  # retried as
    assert f'href="{url(StaffAction, "change", action.pk)}"' in page


def test_discard_needs_a_reason_and_is_audited(admin_client, admin_user, chat):
    dead_letter = dead(chat, "Spam spam spam")
    assert (
        "1 dead letter will be closed"
        in act(admin_client, DeadLetter, "discard", [dead_letter]).content.decode()
    )

    refused = act(admin_client, DeadLetter, "discard", [dead_letter], confirmed="yes", reason=" ")
    assert refused.status_code == 200
    assert "This field is required." in refused.content.decode()
    dead_letter.refresh_from_db()
    assert dead_letter.status == "pending" and not StaffAction.objects.exists()

    response = act(
        admin_client, DeadLetter, "discard", [dead_letter], confirmed="yes", reason="Spam"
    )
    assert response.status_code == 302
    dead_letter.refresh_from_db()
    assert (dead_letter.status, dead_letter.resolved_by) == ("discarded", admin_user)
    action = StaffAction.objects.get(dead_letter=dead_letter)
    assert (action.kind, action.actor, action.reason) == ("discard", admin_user, "Spam")
    assert "Discarded 1 dead letter." in messages_of(response)


def test_staff_who_may_only_view_dead_letters_are_not_offered_the_actions(client, chat):
    dead_letter = dead(chat, "Hello")
    staff = UserFactory(is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_deadletter"))
    client.force_login(staff)
    assert client.get(url(DeadLetter, "change", dead_letter.pk)).status_code == 200
    listed = client.get(url(DeadLetter, "changelist"))
    assert b'value="retry"' not in listed.content
    act(client, DeadLetter, "retry", [dead_letter], confirmed="yes")
    dead_letter.refresh_from_db()
    assert dead_letter.status == "pending" and not StaffAction.objects.exists()


def test_acknowledging_alerts_is_audited_and_skips_acknowledged_ones(admin_client, admin_user):
    alert = conversation_pause(conversation=ConversationFactory(), reason="3 crashes")
    seen = conversation_pause(conversation=ConversationFactory(), reason="3 crashes")
    alert_acknowledge(alert=seen, by=UserFactory(is_staff=True))
    listed = admin_client.get(url(Alert, "changelist"), {"acknowledged_at__isempty": "1"})
    assert [row.pk for row in listed.context["cl"].result_list] == [alert.pk]

    response = act(admin_client, Alert, "acknowledge", [alert, seen])
    assert response.status_code == 302
    alert.refresh_from_db()
    assert alert.acknowledged_by == admin_user and alert.acknowledged_at is not None
    action = StaffAction.objects.get(alert=alert)
    assert (action.kind, action.actor) == ("acknowledge", admin_user)
    assert StaffAction.objects.filter(alert=seen).count() == 1  # only the first acknowledgement
    shown = messages_of(response)
    assert "Acknowledged 1 alert." in shown
    assert f"Alert {seen.pk} was already acknowledged." in shown

    page = admin_client.get(url(Alert, "change", alert.pk)).content.decode()
    assert f'href="{url(StaffAction, "change", action.pk)}"' in page
    assert admin_client.post(url(Alert, "change", alert.pk), {"text": "x"}).status_code == 403


def test_resume_asks_for_a_reason_then_resumes_and_audits(admin_client, admin_user):
    paused = ConversationFactory()
    alert = conversation_pause(conversation=paused, reason="3 crashes")
    active = ConversationFactory()

    confirm = act(admin_client, Conversation, "resume", [paused, active])
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert "1 conversation will be resumed" in page and "Left as they are: 1 not paused." in page
    refused = act(admin_client, Conversation, "resume", [paused], confirmed="yes", reason="")
    assert "This field is required." in refused.content.decode()
    paused.refresh_from_db()
    assert paused.state == "paused" and not StaffAction.objects.exists()

    response = act(
        admin_client,
        Conversation,
        "resume",
        [paused, active],
        confirmed="yes",
        reason="Brain fixed in 1.2.3",
    )
    assert response.status_code == 302
    paused.refresh_from_db()
    alert.refresh_from_db()
    assert paused.state == "active" and alert.acknowledged_by == admin_user
    action = StaffAction.objects.get(kind="resume")
    assert (action.conversation, action.actor, action.reason) == (
        paused,
        admin_user,
        "Brain fixed in 1.2.3",
    )
    shown = messages_of(response)
    assert "Resumed 1 conversation." in shown
    assert f"Conversation {active.pk} is not paused; cannot resume it." in shown


def test_messages_and_conversations_come_from_the_services_not_the_admin(admin_client, chat):
    message = send(chat, "What I really wrote")
    assert admin_client.get(reverse("admin:continuity_message_add")).status_code == 403
    assert admin_client.get(reverse("admin:continuity_conversation_add")).status_code == 403
    url = reverse("admin:continuity_message_change", args=[message.pk])
    assert 'name="text"' not in admin_client.get(url).content.decode()
    admin_client.post(url, {"text": "Something else", "role": "assistant"})
    message.refresh_from_db()
    assert (message.text, message.role) == ("What I really wrote", "user")
