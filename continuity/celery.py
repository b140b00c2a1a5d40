from __future__ import annotations

import os

from celery import Celery
from kombu.transport import TRANSPORT_ALIASES

# kombu's Redis transport with one client per channel (worker/broker.py), under a name of its
# own, which logs show as the broker's scheme: `continuity-redis://:**@127.0.0.1:6379/0`.
TRANSPORT_ALIASES["continuity-redis"] = "continuity.worker.broker:Transport"

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "continuity.settings")

app = Celery("continuity")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["continuity.worker"])
