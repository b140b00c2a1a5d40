"""Hardening found by an outside probe: login lockout, CSP, HTTPS settings, caching."""

from __future__ import annotations

import os
import re
import secrets
import stat
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from continuity.settings.security import local_secret_key
from tests.helpers.factories import PASSWORD, ConversationFactory, UserFactory

BASE_DIR = Path(__file__).resolve().parent.parent
LIMIT = settings.AXES_FAILURE_LIMIT
LOGINS = ["/accounts/login/", "/admin/login/"]


def log_in(client, url, username, password, address="203.0.113.7"):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


def logged_in(response) -> bool:
    return response.status_code == 302 and "/login/" not in response["Location"]


# Login brute force (django-axes).


@pytest.mark.django_db
@pytest.mark.parametrize("url", LOGINS)
def test_failed_logins_lock_the_username_and_the_right_password_is_then_refused(client, url):
    user = UserFactory(is_staff=True)
    for _ in range(LIMIT - 1):
        assert log_in(client, url, user.username, "wrong").status_code == 200
    response = log_in(client, url, user.username, "wrong")
    assert response.status_code == 429
    response = log_in(client, url, user.username, PASSWORD)
    html = response.content.decode()
    assert response.status_code == 429 and not logged_in(response)
    assert "Too many failed logins" in html and "Try again in 15 minutes" in html
    assert response["Retry-After"] == "900"
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_one_persons_failures_lock_neither_others_at_the_address_nor_them_elsewhere(
    client, settings
):
    # Past the address's own limit too: one username counts up to its limit, not beyond.
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 12
    alice, bob = UserFactory(), UserFactory()
    office = "203.0.113.7"
    for _ in range(30):
        log_in(client, LOGINS[0], alice.username, "wrong", office)
    # Brute force on one account is still refused, even with the right password...
    assert log_in(client, LOGINS[0], alice.username, PASSWORD, office).status_code == 429
    # ...but a colleague behind the same address signs in,
    assert logged_in(log_in(client, LOGINS[0], bob.username, PASSWORD, office))
    client.logout()
    # and the person locked out signs in from another address.
    assert logged_in(log_in(client, LOGINS[0], alice.username, PASSWORD, "192.0.2.99"))


@pytest.mark.django_db
def test_an_address_guessing_many_usernames_is_locked_out(client, settings):
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 12  # the default is 100; the rule is the same
    victim = UserFactory()
    for attempt in range(settings.LOGIN_ADDRESS_FAILURE_LIMIT):
        username = f"guess{attempt // 3}"  # a few tries each: no one username reaches its limit
        assert log_in(client, LOGINS[0], username, "wrong").status_code == 200
    response = log_in(client, LOGINS[0], victim.username, PASSWORD)
    assert response.status_code == 429 and "_auth_user_id" not in client.session
    assert "locked for every account" in response.content.decode()
    # Another address may still log the victim in: the lock was on the address.
    assert logged_in(log_in(client, LOGINS[0], victim.username, PASSWORD, "192.0.2.1"))


@pytest.mark.django_db
def test_staff_lift_an_address_lock_with_axes_reset_ip(client, settings):
    from django.core.management import call_command

    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 6
    user = UserFactory()
    for attempt in range(6):
        log_in(client, LOGINS[0], f"guess{attempt}", "wrong")
    assert log_in(client, LOGINS[0], user.username, PASSWORD).status_code == 429
    call_command("axes_reset_ip", "203.0.113.7")
    assert logged_in(log_in(client, LOGINS[0], user.username, PASSWORD))


@pytest.mark.django_db
def test_the_lockout_lifts_after_the_cool_off(client):
    from axes.models import AccessAttempt

    user = UserFactory()
    for _ in range(LIMIT):
        log_in(client, LOGINS[0], user.username, "wrong")
    assert log_in(client, LOGINS[0], user.username, PASSWORD).status_code == 429
    cool_off = timedelta(minutes=15)
    AccessAttempt.objects.update(attempt_time=timezone.now() - cool_off - timedelta(seconds=1))
    assert logged_in(log_in(client, LOGINS[0], user.username, PASSWORD))


@pytest.mark.django_db
def test_a_successful_login_resets_the_count(client):
    user = UserFactory()
    for _ in range(LIMIT - 1):
        log_in(client, LOGINS[0], user.username, "wrong")
    assert logged_in(log_in(client, LOGINS[0], user.username, PASSWORD))
    client.logout()
    for _ in range(LIMIT - 1):
        log_in(client, LOGINS[0], user.username, "wrong")
    assert logged_in(log_in(client, LOGINS[0], user.username, PASSWORD))


def test_behind_proxies_the_client_is_the_address_the_nearest_proxy_saw(rf, settings):
    from chat.lockout import client_ip

    request = rf.get("/", HTTP_X_FORWARDED_FOR="6.6.6.6, 198.51.100.4", REMOTE_ADDR="10.0.0.2")
    assert client_ip(request) == "10.0.0.2"  # no trusted proxy: the header is the client's
    settings.TRUSTED_PROXY_COUNT = 1
    assert client_ip(request) == "198.51.100.4"


# Content Security Policy.


def page_html_of_every_kind(client, user, staff_user):
    conversation = ConversationFactory(owner=user)
    pages = {url: client.get(url) for url in ["/accounts/login/", "/accounts/signup/"]}
    client.force_login(user)
    for url in ["/", f"/c/{conversation.pk}/", "/accounts/password/"]:
        pages[url] = client.get(url)
    client.force_login(staff_user)
    pages["/dashboard/"] = client.get("/dashboard/")
    return pages


STRICT_CSP = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


@pytest.mark.django_db
def test_every_page_has_a_strict_csp_and_no_inline_script_or_style(client, user, staff_user):
    for url, response in page_html_of_every_kind(client, user, staff_user).items():
        assert response.status_code == 200, url
        policy = dict(
            part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";")
        )
        # Every directive, exactly: a loosened one (say, connect-src open to any host's
        # websockets with `ws: wss:`) or an added one fails here. The page's own websocket
        # needs no more than 'self', which covers ws: and wss: to its own host.
        assert policy == STRICT_CSP, url
        html = response.content.decode()
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), url
        assert "<style" not in html and " style=" not in html, url
        assert '"includeIndicatorStyles": false' in html, url


# HTTPS settings.


@pytest.mark.processes
def test_check_deploy_passes_with_a_production_environment(tmp_path):
    env = {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "continuity.settings",
        "CONTINUITY_VAR_DIR": str(tmp_path),
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/continuity",
        "ALLOWED_HOSTS": "chat.example.org",
        "CSRF_TRUSTED_ORIGINS": "https://chat.example.org",
        "SECURE_COOKIES": "1",  # and nothing else of HTTPS: the one setting is enough
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.processes
def test_one_setting_turns_https_on_and_each_part_can_be_set_apart(tmp_path):
    def https_settings(**extra):
        code = (
            "from django.conf import settings as s; print(s.SESSION_COOKIE_SECURE, "
            "s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS, s.SECURE_HSTS_PRELOAD, "
            "s.SECURE_SSL_REDIRECT)"
        )
        env = {
            "PATH": os.environ["PATH"],
            "DJANGO_SETTINGS_MODULE": "continuity.settings",
            "CONTINUITY_VAR_DIR": str(tmp_path),
            "SECURE_COOKIES": "1",
            **extra,
        }
        result = subprocess.run(
            [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
            cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return result.stdout.split()

    assert https_settings() == ["True", "31536000", "False", "False", "True"]
    assert https_settings(SECURE_HSTS_SECONDS="3600", SECURE_SSL_REDIRECT="0") == [
        "True", "3600", "False", "False", "False",
    ]  # fmt: skip


def test_https_settings_are_off_by_default_so_local_http_works():
    assert settings.SECURE_HSTS_SECONDS == 0
    assert settings.SECURE_SSL_REDIRECT is False
    assert settings.SECURE_PROXY_SSL_HEADER is None


# The local secret key file.


def test_secret_key_file_is_created_owner_only(tmp_path):
    key = local_secret_key(tmp_path)
    path = tmp_path / "secret_key"
    assert len(key) >= 50 and path.read_text() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_existing_secret_key_is_kept_and_made_owner_only(tmp_path):
    path = tmp_path / "secret_key"
    path.write_text("an-older-key\n")
    path.chmod(0o644)
    assert local_secret_key(tmp_path) == "an-older-key"
    assert local_secret_key(tmp_path) == "an-older-key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# Private pages are never cached.


@pytest.mark.django_db
def test_private_pages_forbid_caching(client, user, staff_user):
    responses = list(page_html_of_every_kind(client, user, staff_user).values())
    client.force_login(user)
    conversation = ConversationFactory(owner=user)
    for url in [
        reverse("chat:message_send", args=[conversation.pk]),
        reverse("chat:conversation_new"),
    ]:
        data = {"text": "hello", "client_id": str(uuid.uuid4())}
        responses.append(client.post(url, data, headers={"HX-Request": "true"}))
    for response in responses:
        cache_control = response["Cache-Control"]
        assert "no-store" in cache_control and "private" in cache_control, response.request
