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
    ("env", "read"),
    [
        ({}, "0.5 20"),
        ({"CONTINUITY_DRAIN_SLICE_SECONDS": "2", "CONTINUITY_HISTORY_EXCHANGES": "7"}, "2.0 7"),
        # A deployment configured before the drain's turn was called its slice, and before the
        # history's turns were called exchanges (which they counted), keeps its values.
        ({"CONTINUITY_DRAIN_TURN_SECONDS": "3", "CONTINUITY_HISTORY_TURNS": "9"}, "3.0 9"),
        (
            {
                "CONTINUITY_DRAIN_SLICE_SECONDS": "2",
                "CONTINUITY_DRAIN_TURN_SECONDS": "3",
                "CONTINUITY_HISTORY_EXCHANGES": "7",
                "CONTINUITY_HISTORY_TURNS": "9",
            },
            "2.0 7",
        ),
    ],
)
def test_renamed_settings_are_read_under_their_name_or_their_earlier_one(env, read):
    ran = manage(
        "shell", "-c", "from django.conf import settings as s; "
        "print(s.CONTINUITY_DRAIN_SLICE_SECONDS, s.CONTINUITY_HISTORY_EXCHANGES)",
        DJANGO_SETTINGS_MODULE="continuity.settings", **env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[-1] == read
