"""The Celery worker's runtime: what changes when Celery or kombu does, not when the message
pipeline does (`continuity.delivery`) or when what people do changes (`continuity.actions`).

- `tasks`: the Celery adapters (the drain task, named `continuity.drain_conversation` whatever
  module it lives in: drains queued by an earlier release are run by this one).
- `signals`: the worker's lifecycle (announce, the start-up scan, the planned-shutdown handoff).
- `pool`: a pool process's death acted on by its main process; `prefork`: the pool itself.
- `broker`: kombu's Redis transport with one client per channel; `consumer`: Celery's consumer,
  asking for a lost broker again every second.
- `control`: staff's controls over worker nodes (remote control), the console's entry points,
  exported here.

The pool, the consumer and the broker are named by settings and imported before Django is set
up, so this front door loads `control` (which reads models) only when one of its names is asked
for.
"""

from __future__ import annotations

__all__ = ["COMMANDS", "BrokerUnavailable", "CommandRefused", "Pool", "pools_of", "worker_command"]


def __getattr__(name: str):
    if name in __all__:
        from . import control

        return getattr(control, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
