"""The agent port's loading: a worker's processes import every brain when they start, not while
an attempt holds its conversation's lock."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from celery.signals import worker_process_init
from django.conf import settings

from continuity.brains import brains_import
from continuity.delivery import worker_signals

pytestmark = pytest.mark.django_db  # the session fixture that ends leftover sessions needs it

PROBE = """
import sys, django
django.setup()
from continuity.delivery.worker_signals import on_worker_process_init
on_worker_process_init()
print(sorted(name for name in sys.modules if name.startswith("chat.brains")))
"""


def test_a_pool_process_imports_every_brain_when_it_starts():
    receivers = [receiver() for _, receiver in worker_process_init.receivers]
    assert worker_signals.on_worker_process_init in receivers
    probe = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=settings.BASE_DIR,
    )
    assert "'chat.brains.openai'" in probe.stdout, probe.stderr[-2000:]


def test_a_brain_that_cannot_be_imported_does_not_stop_the_process(settings, caplog):
    settings.CONTINUITY_BRAINS = {**settings.CONTINUITY_BRAINS, "broken": "no.such.Brain"}
    brains_import()
    assert "Brain no.such.Brain cannot be imported" in caplog.text
