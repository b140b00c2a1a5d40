"""Test-only fault hooks cannot be switched on in production settings, whatever the env says."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import django
django.setup()
from django.conf import settings
from continuity.ops.faults import fault_point
from continuity.brains import brain_load
fault_point("after_reply_committed")  # would SIGKILL this process if armed
print("fault injection:", settings.CONTINUITY_FAULT_INJECTION)
try:
    brain_load()
except Exception as error:
    print("brain:", type(error).__name__)
"""


@pytest.mark.processes
def test_production_settings_ignore_every_fault_switch():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "continuity.settings",
        "SECRET_KEY": "x",
        "CONTINUITY_FAULT_INJECTION": "1",
        "CONTINUITY_FAULT_KILL_AT": "after_reply_committed",
        "CONTINUITY_BRAIN": "faulty",
    }
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "fault injection: False" in result.stdout
    assert "brain: ImproperlyConfigured" in result.stdout
