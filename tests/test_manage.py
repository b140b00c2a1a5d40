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
