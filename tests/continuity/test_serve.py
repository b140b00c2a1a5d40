"""`manage.py serve`'s set-up: a checkout's own Redis database and queue on a shared Redis, and
a supervisord configuration that runs quietly and keeps its password to its owner."""

from __future__ import annotations

import os
import pwd
import stat

import pytest
import redis
from django.core.management.base import CommandError

from continuity.management.commands.serve import (
    CLAIM_KEY,
    redis_database_claim,
    site_url_default,
    supervisord_config,
    write_private,
)
from devtools.redis_server import RedisServer

# django_db: the session fixture that ends leftover sessions needs it.
pytestmark = [pytest.mark.django_db, pytest.mark.processes]


@pytest.fixture
def shared_redis():
    """A Redis of its own, standing for the machine's on 6379, whose databases start empty."""
    server = RedisServer().start()
    yield server.url.rsplit("/", 1)[0]
    server.stop()


def test_each_checkout_takes_a_database_of_its_own_and_finds_it_again(shared_redis):
    redis.Redis.from_url(f"{shared_redis}/1").set("another-app", "its data")

    first = redis_database_claim(shared_redis, checkout="/home/ada/continuity")
    second = redis_database_claim(shared_redis, checkout="/home/bob/continuity")

    assert (first, second) == (2, 3)  # 0 is every app's default; 1 holds someone's data
    assert redis_database_claim(shared_redis, checkout="/home/ada/continuity") == first
    claimed = redis.Redis.from_url(f"{shared_redis}/{first}").get(CLAIM_KEY)
    assert claimed == b"/home/ada/continuity"


def test_a_redis_with_no_database_free_is_refused_with_what_to_do(shared_redis):
    for database in range(1, 16):
        redis.Redis.from_url(f"{shared_redis}/{database}").set("someone", "else")

    with pytest.raises(CommandError, match="set REDIS_URL"):
        redis_database_claim(shared_redis, checkout="/home/ada/continuity")


def test_supervisord_runs_as_its_user_and_asks_supervisorctl_for_a_password(tmp_path):
    config = supervisord_config({"web": ("daphne app", 20)}, run_dir=tmp_path)
    path = tmp_path / "supervisord.conf"
    path.write_text("an older, world-readable configuration")
    path.chmod(0o644)

    write_private(path, config)

    assert f"\nuser={pwd.getpwuid(os.getuid()).pw_name}\n" in config
    passwords = [line for line in config.splitlines() if line.startswith("password=")]
    assert len(passwords) == 2 and passwords[0] == passwords[1] != "password="
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == config
    assert supervisord_config({}, run_dir=tmp_path) != supervisord_config({}, run_dir=tmp_path)


def test_links_in_mail_name_the_address_served_unless_site_url_is_set(monkeypatch):
    monkeypatch.delenv("SITE_URL", raising=False)
    assert site_url_default(host="127.0.0.1", port=8001) == {"SITE_URL": "http://127.0.0.1:8001"}
    assert site_url_default(host="0.0.0.0", port=8000) == {"SITE_URL": "http://127.0.0.1:8000"}
    assert site_url_default(host="::1", port=8000) == {"SITE_URL": "http://[::1]:8000"}
    monkeypatch.setenv("SITE_URL", "https://chat.example.org")
    assert site_url_default(host="127.0.0.1", port=8001) == {}
