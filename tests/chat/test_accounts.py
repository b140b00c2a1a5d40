"""Account pages: signup shows its rules up front and its errors as errors; password change."""

from __future__ import annotations

import re
import threading

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.urls import reverse

from chat.account_views import RESET_MAIL_THREAD
from tests.helpers.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "a brand new passphrase"


def test_signup_shows_the_password_rules_before_any_submit(client):
    html = client.get(reverse("signup")).content.decode()
    assert "must contain at least 8 characters" in html
    assert "can’t be entirely numeric" in html
    assert 'id="id_password1_helptext"' in html
    assert 'aria-describedby="id_password1_helptext"' in html
    assert 'role="alert"' not in html


def test_an_invalid_signup_marks_its_errors_as_errors(client):
    response = client.post(
        reverse("signup"), {"username": "ada", "password1": "123", "password2": "123"}
    )
    html = response.content.decode()
    assert response.status_code == 422
    field = re.search(r'<input[^>]*name="password2"[^>]*>', html).group(0)
    assert 'aria-invalid="true"' in field and "id_password2_error" in field
    alert = html[html.index('<div class="errors" role="alert">') :]
    assert alert.index('id="id_password2_error"') < alert.index("</div>")
    assert "This password is too short" in alert
    assert not get_user_model().objects.filter(username="ada").exists()


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("\u0430lice", "letters of other alphabets"),  # a Cyrillic "а", which renders as "a"
        ("ALICE", "already exists"),  # as Django's form refuses: differs from "alice" in case
    ],
)
def test_signup_refuses_a_name_that_looks_like_another(client, name, why):
    UserFactory(username="alice")
    response = client.post(
        reverse("signup"), {"username": name, "password1": NEW_PASSWORD, "password2": NEW_PASSWORD}
    )
    assert response.status_code == 422
    assert why in response.content.decode()
    assert get_user_model().objects.count() == 1


def test_signup_says_which_names_it_takes_and_keeps_an_optional_address(client):
    assert "Letters a to z (either case), digits" in client.get(reverse("signup")).content.decode()
    for name, email in (("ada", "ada@example.org"), ("bo.b+1", "")):
        response = client.post(
            reverse("signup"),
            {"username": name, "email": email, "password1": NEW_PASSWORD,
             "password2": NEW_PASSWORD},
        )  # fmt: skip
        assert response.status_code == 302, response.content.decode()
        assert get_user_model().objects.get(username=name).email == email
        client.logout()


def test_the_top_bar_links_to_the_password_change_page(owner_client):
    html = owner_client.get(reverse("chat:home")).content.decode()
    assert f'href="{reverse("password_change")}"' in html


def test_password_change_needs_login(client):
    response = client.get(reverse("password_change"))
    assert response.status_code == 302 and reverse("login") in response["Location"]


def test_changing_the_password_keeps_this_session_and_retires_the_old_password(
    client, owner_client, user
):
    response = owner_client.post(
        reverse("password_change"),
        {"old_password": PASSWORD, "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("password_change_done")
    assert owner_client.get(reverse("chat:home")).status_code == 200  # still logged in
    user.refresh_from_db()
    assert user.check_password(NEW_PASSWORD) and not user.check_password(PASSWORD)

    owner_client.logout()
    login = reverse("login")
    refused = owner_client.post(login, {"username": user.username, "password": PASSWORD})
    assert refused.status_code == 200 and "_auth_user_id" not in owner_client.session
    accepted = owner_client.post(login, {"username": user.username, "password": NEW_PASSWORD})
    assert accepted.status_code == 302 and accepted["Location"] == reverse("chat:home")


def test_a_wrong_old_password_is_shown_as_an_error(owner_client):
    response = owner_client.post(
        reverse("password_change"),
        {"old_password": "nope", "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert 'role="alert"' in html and "Your old password was entered incorrectly" in html


def test_a_new_user_ends_no_session(django_capture_on_commit_callbacks):
    """A "session ended" event for a user made a moment ago would close the socket a test (or
    a page) opens for them as soon as the event's linger is over."""
    with django_capture_on_commit_callbacks() as callbacks:
        UserFactory()
        get_user_model().objects.create_user("ada", password="a password of hers")
    assert callbacks == []


# A forgotten password.


def mail_sent() -> list:
    """The mail outbox, once every reset mail under way is sent (they go in threads)."""
    for thread in threading.enumerate():
        if thread.name == RESET_MAIL_THREAD:
            thread.join(10)
    return mail.outbox


def test_a_reset_mails_a_link_on_the_site_address_whatever_the_host_header(client, settings):
    settings.SITE_URL = "https://chat.example.org"
    settings.ALLOWED_HOSTS = ["*"]
    user = UserFactory(email="ada@example.org")
    login_page = client.get(reverse("login")).content.decode()
    assert f'href="{reverse("password_reset")}"' in login_page
    assert "ask staff" in client.get(reverse("password_reset")).content.decode().lower()

    response = client.post(
        reverse("password_reset"), {"email": "ADA@example.org"}, HTTP_HOST="evil.example"
    )
    assert response.status_code == 302 and response["Location"] == reverse("password_reset_done")
    (sent,) = mail_sent()
    assert sent.to == ["ada@example.org"] and "evil.example" not in sent.body
    link = re.search(r"https://chat\.example\.org(/accounts/password/reset/\S+/)", sent.body)
    assert link and user.username in sent.body

    page = client.get(link.group(1), follow=True)
    assert b"Choose a new password" in page.content
    client.post(
        page.redirect_chain[-1][0],
        {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )
    user.refresh_from_db()
    assert user.check_password(NEW_PASSWORD)
    assert b"does not work" in client.get(link.group(1), follow=True).content  # once only


def test_a_reset_never_says_whether_an_address_has_an_account(client):
    UserFactory(email="ada@example.org")
    answers = [
        client.post(reverse("password_reset"), {"email": address})
        for address in ("ada@example.org", "nobody@example.org")
    ]
    assert [(a.status_code, a["Location"]) for a in answers] == [
        (302, reverse("password_reset_done"))
    ] * 2
    assert len(mail_sent()) == 1


def test_reset_requests_are_limited_per_client_address(client, settings):
    settings.CONTINUITY_PASSWORD_RESET_RATE = "2/hour"
    UserFactory(email="ada@example.org")
    codes = [
        client.post(
            reverse("password_reset"), {"email": "ada@example.org"}, REMOTE_ADDR="203.0.113.9"
        ).status_code
        for _ in range(3)
    ]
    assert codes == [302, 302, 429]
    elsewhere = client.post(
        reverse("password_reset"), {"email": "ada@example.org"}, REMOTE_ADDR="203.0.113.10"
    )
    assert elsewhere.status_code == 302


def test_a_person_adds_changes_and_removes_their_address_with_their_password(owner_client, user):
    assert b"add one" in owner_client.get(reverse("password_change")).content
    for address, said in (("ada@example.org", b"saved"), ("", b"removed")):
        response = owner_client.post(
            reverse("email_change"), {"email": address, "password": PASSWORD}, follow=True
        )
        assert said in response.content
        user.refresh_from_db()
        assert user.email == address
    for refused in (
        {"email": "not an address", "password": PASSWORD},
        {"email": "thief@example.org", "password": "a guess"},  # a borrowed session
        {"email": "thief@example.org"},
        {"email": "a" * 250 + "@example.org", "password": PASSWORD},  # past the column
    ):
        assert owner_client.post(reverse("email_change"), refused).status_code == 422
    user.refresh_from_db()
    assert user.email == ""


def test_one_address_gets_a_few_reset_mails_whoever_asks(client, settings):
    settings.CONTINUITY_PASSWORD_RESET_MAIL_RATE = "2/hour"
    UserFactory(email="ada@example.org")
    answers = [
        client.post(
            reverse("password_reset"), {"email": "Ada@example.org"}, REMOTE_ADDR=f"203.0.113.{n}"
        )
        for n in range(20, 24)
    ]
    assert {(a.status_code, a["Location"]) for a in answers} == {
        (302, reverse("password_reset_done"))
    }
    assert len(mail_sent()) == 2


def test_the_reset_page_answers_before_the_mail_is_sent(client, settings):
    """A send made within the request only for an address with an account (an SMTP round trip)
    would tell by the page's time which addresses have one."""
    from tests.helpers.mail import HeldBackend

    settings.EMAIL_BACKEND = "tests.helpers.mail.HeldBackend"
    HeldBackend.release.clear()
    HeldBackend.sent.clear()
    UserFactory(email="ada@example.org")

    response = client.post(reverse("password_reset"), {"email": "ada@example.org"})

    assert response.status_code == 302 and HeldBackend.sent == []  # answered, mail still held
    HeldBackend.release.set()
    mail_sent()
    assert [message.to for message in HeldBackend.sent] == [["ada@example.org"]]
