"""What the person whose message could not be processed sees, at each step staff take."""

from __future__ import annotations

import pytest
from django.urls import reverse

from continuity.actions import dead_letter_discard, dead_letter_retry
from tests.helpers.console import dead_letter_make
from tests.helpers.factories import UserFactory

pytestmark = pytest.mark.django_db


def page(owner_client, conversation) -> str:
    return owner_client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()


def test_nobody_is_said_to_be_notified_when_no_one_is_mailed(owner_client, conversation, settings):
    dead_letter_make(conversation)
    settings.ADMINS = []
    html = page(owner_client, conversation)
    assert "It is set aside for staff to review" in html and "notified" not in html
    settings.ADMINS = [("Ops", "ops@example.com")]
    assert "Staff have been notified and will review it" in page(owner_client, conversation)


def test_a_paused_conversation_says_alerted_only_when_someone_is(
    owner_client, conversation, settings
):
    conversation.state = "paused"
    conversation.save()
    settings.ADMINS = []
    html = page(owner_client, conversation)
    assert "It is flagged for staff to review" in html and "alerted" not in html
    settings.ADMINS = [("Ops", "ops@example.com")]
    assert "They have been alerted" in page(owner_client, conversation)


def test_an_edited_retry_shows_both_the_original_and_the_corrected_message(
    owner_client, conversation
):
    dead_letter = dead_letter_make(conversation, "Summarise the contract [[x]]")
    reask = dead_letter_retry(
        dead_letter=dead_letter, by=UserFactory(is_staff=True), text="Summarise the contract"
    )
    html = page(owner_client, conversation)
    assert 'data-outcome="retried"' in html and "Staff sent this message again, corrected" in html
    assert f'href="#exchange-{reask.pk}"' in html
    assert f'data-reasked-from="{dead_letter.message_id}"' in html
    assert "Edited by staff and sent again" in html and "Summarise the contract [[x]]" in html


def test_a_plain_retry_says_sent_again(owner_client, conversation):
    dead_letter_retry(dead_letter=dead_letter_make(conversation), by=UserFactory(is_staff=True))
    html = page(owner_client, conversation)
    assert "Sent again by staff" in html and "corrected" not in html


def test_a_discard_is_said(owner_client, conversation):
    dead_letter = dead_letter_make(conversation)
    dead_letter_discard(dead_letter=dead_letter, by=UserFactory(is_staff=True), reason="spam")
    html = page(owner_client, conversation)
    assert 'data-outcome="discarded"' in html and "discarded it: it will not be answered" in html
    assert "spam" not in html  # the reason is for staff


def test_mail_printed_to_the_console_notifies_nobody(owner_client, conversation, settings):
    dead_letter_make(conversation)
    settings.ADMINS = [("Ops", "ops@example.com")]
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
    assert "It is set aside for staff to review" in page(owner_client, conversation)


def test_the_owner_retries_their_failed_message(owner_client, conversation):
    from continuity.models import Message, StaffAction

    dead_letter = dead_letter_make(conversation)
    url = reverse("chat:retry", args=[conversation.pk, dead_letter.message_id])
    assert "data-retry-message" in page(owner_client, conversation)
    assert owner_client.post(url, headers={"HX-Request": "true"}).status_code == 204
    reask = Message.objects.get(reasked_from=dead_letter.message_id)
    assert reask.text == dead_letter.message.text
    action = StaffAction.objects.get()
    assert (action.actor, action.reason) == (conversation.owner, "Retried by its owner.")
    assert owner_client.post(url, headers={"HX-Request": "true"}).status_code == 409
    assert "data-retry-message" not in page(owner_client, conversation)


def test_only_the_owner_retries(client, conversation, other_user):
    dead_letter = dead_letter_make(conversation)
    url = reverse("chat:retry", args=[conversation.pk, dead_letter.message_id])
    assert client.post(url, headers={"HX-Request": "true"}).status_code == 401
    client.force_login(other_user)
    assert client.post(url, headers={"HX-Request": "true"}).status_code == 404


def test_a_retry_says_who_sent_it_again(owner_client, conversation):
    mine = dead_letter_make(conversation, "My own [[broken]] one")
    dead_letter_retry(dead_letter=mine, by=conversation.owner, reason="Retried by its owner.")
    html = page(owner_client, conversation)
    assert "You sent this message again" in html and "Sent again by you" in html
    assert "by staff" not in html.lower()


def test_a_message_that_fails_again_after_its_owners_retry_is_left_for_staff(
    owner_client, conversation
):
    from continuity.models import DeadLetter, Message

    first = dead_letter_make(conversation)
    url = reverse("chat:retry", args=[conversation.pk, first.message_id])
    assert owner_client.post(url, headers={"HX-Request": "true"}).status_code == 204
    reask = Message.objects.get(reasked_from=first.message_id)
    # The re-ask crashes workers too, and is dead-lettered again.
    again = dead_letter_make_for(reask)

    html = page(owner_client, conversation)
    assert "data-left-for-staff" in html and "it is left for staff" in html
    refused = owner_client.post(
        reverse("chat:retry", args=[conversation.pk, reask.pk]), headers={"HX-Request": "true"}
    )
    assert refused.status_code == 409
    assert refused.content.decode().startswith("This message failed again after its owner")
    assert not Message.objects.filter(reasked_from=reask).exists()
    # Staff still can.
    dead_letter_retry(dead_letter=again, by=UserFactory(is_staff=True))
    assert DeadLetter.objects.get(pk=again.pk).status == "retried"


def dead_letter_make_for(message):
    """`message`, queued, dead-lettered as `dead_letter_make` does."""
    from continuity.delivery.attempts.failures import attempt_end
    from continuity.delivery.attempts.lease import attempt_begin
    from continuity.models import DeadLetter

    run = attempt_begin(conversation_id=message.conversation_id)
    assert run.message_id == message.pk
    attempt_end(run_id=run.pk, state="failed", error="ValueError: again", permanent=True)
    return DeadLetter.objects.get(message=message)
