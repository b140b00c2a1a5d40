"""The agent port's loading: a worker imports the brains conversations may use before it forks
its pool, not while an attempt holds its conversation's lock; and makes each once per process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from celery.signals import worker_init
from django.conf import settings

from continuity.brains import brains_import
from continuity.worker import signals as worker_signals

pytestmark = pytest.mark.django_db  # the session fixture that ends leftover sessions needs it

PROBE = """
import sys, django
django.setup()
from continuity.worker.signals import on_worker_init
on_worker_init(sender=None)
print(sorted(name for name in sys.modules if name.startswith("chat.brains")))
"""


def worker_probe(script: str) -> subprocess.CompletedProcess:
    """`script` run in a process of its own, configured as a worker whose conversations may
    use the built-in brain and the openai one."""
    return subprocess.run(
        [sys.executable, "-c", script],
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "CONTINUITY_BRAIN_CHOICES": "builtin,openai",
        },
        capture_output=True,
        text=True,
        timeout=60,
        cwd=settings.BASE_DIR,
    )


@pytest.mark.processes
def test_a_worker_imports_the_brains_it_may_use_before_it_forks():
    receivers = [receiver() for _, receiver in worker_init.receivers]
    assert worker_signals.on_worker_init in receivers
    probe = worker_probe(PROBE)
    assert "'chat.brains.openai'" in probe.stdout, probe.stderr[-2000:]


def test_a_brain_that_cannot_be_imported_does_not_stop_the_process(settings, caplog):
    settings.CONTINUITY_BRAINS = {**settings.CONTINUITY_BRAINS, "broken": "no.such.Brain"}
    settings.CONTINUITY_BRAIN_CHOICES = ["builtin", "broken"]
    brains_import()
    assert "Brain no.such.Brain cannot be imported" in caplog.text


def test_a_process_makes_each_brain_once_and_again_after_its_settings_change(settings):
    from continuity.brains import brain_load

    settings.CONTINUITY_OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    first = brain_load("openai")
    assert brain_load("openai") is first  # its client (87 ms of CPU to make) is kept
    settings.CONTINUITY_OPENAI_BASE_URL = "http://127.0.0.1:10/v1"
    again = brain_load("openai")
    assert again is not first and again.base_url == "http://127.0.0.1:10/v1"


WARMED_PROBE = """
import os, sys, django
django.setup()
from continuity.worker.signals import on_worker_init
from devtools.fake_model import FakeOpenAI
on_worker_init(sender=None)
fake = FakeOpenAI(delay=0).start()
os.environ.update(CONTINUITY_OPENAI_BASE_URL=fake.url, CONTINUITY_OPENAI_API_KEY=fake.api_key)
import openai
before = set(sys.modules)
client = openai.OpenAI(base_url=fake.url, api_key=fake.api_key)
asked = [{"role": "user", "content": "hello"}]
with client.chat.completions.create(model=fake.model, messages=asked, stream=True) as stream:
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
print("answer:", text)
print("imported:", sorted(name for name in set(sys.modules) - before if name.startswith("openai")))
"""


@pytest.mark.processes
def test_a_worker_warms_the_model_client_before_it_forks():
    """The openai package imports about 530 modules at a client's first request (1.9 s of CPU
    with building its response models): taken in the worker before its fork, a new pool
    process's first answer does not wait for them."""
    probe = worker_probe(WARMED_PROBE)
    assert "answer: You said: hello" in probe.stdout, probe.stderr[-2000:]
    assert "imported: []" in probe.stdout, probe.stdout[-2000:]
