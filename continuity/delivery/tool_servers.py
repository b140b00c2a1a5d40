"""The watchdog's eye on the MCP servers a worker found unreachable (ToolServerStatus): it asks
each again, raises one alert once one has been down for CONTINUITY_TOOL_SERVER_ALERT_SECONDS
(not one per call, nor per worker), and clears the mark and the alert when it answers."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now

from ..database.clock import database_now
from ..errors import ToolServerDown
from ..models import Alert, ToolServerStatus
from ..tools import server_tools

logger = logging.getLogger(__name__)

# The watchdog asks a server that is down again at most this often, each time for at most
# ASK_TIMEOUT: its sweeps are not held up by a server that does not answer.
ASK_EVERY = timedelta(seconds=10)
ASK_TIMEOUT = 5.0


def tool_servers_check() -> int:
    """Ask again each server marked down (not asked within ASK_EVERY): the ones that answer
    are up, and their alert is cleared; one down for longer than the alert's threshold raises
    its alert, once. How many are down now."""
    now = database_now()
    due = ToolServerStatus.objects.filter(down_since__isnull=False).filter(
        Q(checked_at__isnull=True) | Q(checked_at__lte=now - ASK_EVERY)
    )
    for status in due:
        try:
            server_tools(status.location, timeout=ASK_TIMEOUT)
        except ToolServerDown as error:
            server_still_down(status, now=now, error=str(error))
        else:
            server_back(status)
    return ToolServerStatus.objects.filter(down_since__isnull=False).count()


def server_still_down(status: ToolServerStatus, *, now, error: str) -> None:
    down_for = now - status.down_since
    alert_after = timedelta(seconds=settings.CONTINUITY_TOOL_SERVER_ALERT_SECONDS)
    with transaction.atomic():
        marked = ToolServerStatus.objects.select_for_update().get(pk=status.pk)
        marked.checked_at, marked.last_error = now, error[:2000]
        if marked.down_since is not None and marked.alert_id is None and down_for >= alert_after:
            marked.alert = Alert.objects.create(
                kind=Alert.Kind.TOOL_SERVER_DOWN,
                text=f"The MCP server {status.name} ({status.location}) has not answered for "
                f"{int(down_for.total_seconds())} s: its tools are left out of replies (the "
                f"model is told), and calls made to it wait for it. Last error: {error}",
            )
            logger.error("MCP server %s unreachable for %s: alert raised", status.name, down_for)
        marked.save(update_fields=["checked_at", "last_error", "alert"])


def server_back(status: ToolServerStatus) -> None:
    with transaction.atomic():
        marked = ToolServerStatus.objects.select_for_update().get(pk=status.pk)
        if marked.alert_id is not None:
            Alert.objects.filter(pk=marked.alert_id, acknowledged_at__isnull=True).update(
                acknowledged_at=Now()
            )
        ToolServerStatus.objects.filter(pk=status.pk).update(
            down_since=None, checked_at=Now(), alert=None, last_error=""
        )
    logger.info("MCP server %s answers again", status.name)
