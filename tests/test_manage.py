"""manage.py runs the developer tools' commands with their settings, and the product's settings
never install them."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.conf import settings

from tests.helpers.processes import command_env

pytestmark = pytest.mark.processes


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in command_env(**env).items() if k != "DJANGO_SETTINGS_MODULE"}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR, env=environment, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("chosen", [{}, {"DJANGO_SETTINGS_MODULE": "continuity.settings"}])
@pytest.mark.parametrize("command", ["bench", "chaos"])
def test_a_developer_tool_runs_whether_or_not_the_product_settings_are_chosen(command, chosen):
    ran = manage(command, "--help", **chosen)
    assert ran.returncode == 0, ran.stderr
    assert f"manage.py {command}" in ran.stdout


def test_the_product_settings_install_no_developer_tool():
    ran = manage("help", "--commands", DJANGO_SETTINGS_MODULE="continuity.settings")
    assert ran.returncode == 0, ran.stderr
    commands = ran.stdout.split()
    assert "serve" in commands and "watchdog" in commands
    assert "bench" not in commands and "chaos" not in commands


@pytest.mark.parametrize(
    ("env", "seconds"),
    [
        ({}, "0.5"),
        ({"CONTINUITY_DRAIN_SLICE_SECONDS": "2"}, "2.0"),
        # A deployment configured before the drain's turn was called its slice keeps its value.
        ({"CONTINUITY_DRAIN_TURN_SECONDS": "3"}, "3.0"),
        ({"CONTINUITY_DRAIN_SLICE_SECONDS": "2", "CONTINUITY_DRAIN_TURN_SECONDS": "3"}, "2.0"),
    ],
)
def test_the_drain_slice_is_read_under_its_name_or_its_earlier_one(env, seconds):
    ran = manage(
        "shell", "-c", "from django.conf import settings; "
        "print(settings.CONTINUITY_DRAIN_SLICE_SECONDS)",
        DJANGO_SETTINGS_MODULE="continuity.settings", **env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split()[-1] == seconds
