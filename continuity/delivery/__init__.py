"""The message pipeline: a message accepted (`inbox`), its drain sent, its attempts begun,
checkpointed and finished (`processing`, `attempts/`), its model server's health (`backends`),
the liveness of attempts and workers (`heartbeats`, `workers`), the watchdog's sweeps, the
engine's own give-ups (`dead_letters`, `pauses`), alert mail, history and retention.

What outer code (views, the consumer, the admin, the commands, the brains) may use is exported
here; the worker's runtime (`continuity.worker`) and what people do (`continuity.actions`) sit
above the pipeline and reach into it.
"""

from __future__ import annotations

from .alerts import alerts_reach_someone
from .backends import model_learn, model_learned
from .heartbeats import heartbeat_ttl, stale_before
from .history import (
    BUCKET,
    REPLY_BOUNDS_SECONDS,
    TOOL_BOUNDS_SECONDS,
    Counts,
    History,
    bucket_start,
    counts_ever,
    history_record,
    history_spans,
)
from .inbox import conversation_start, message_accept, message_clean_text
from .redis_connection import redis_client
from .retention import retention_prune, working_state_prune
from .tool_servers import tool_servers_check
from .watchdog import watchdog_tick
from .workers import crash_burst_check, waiting_messages, workers_check

__all__ = [
    "BUCKET",
    "REPLY_BOUNDS_SECONDS",
    "TOOL_BOUNDS_SECONDS",
    "Counts",
    "History",
    "alerts_reach_someone",
    "bucket_start",
    "conversation_start",
    "counts_ever",
    "heartbeat_ttl",
    "history_record",
    "history_spans",
    "message_accept",
    "message_clean_text",
    "model_learn",
    "model_learned",
    "redis_client",
    "retention_prune",
    "stale_before",
    "tool_servers_check",
    "crash_burst_check",
    "waiting_messages",
    "workers_check",
    "watchdog_tick",
    "working_state_prune",
]
