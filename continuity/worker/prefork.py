"""The worker's pool of processes: Celery's prefork pool, checking on its processes every
MAINTAIN_SECONDS instead of every 5 s, so that a pool process's death is acted on within a
fraction of a second (see `pool.py`). Named by the worker_pool setting, and so imported before
Django is set up: nothing here may import a model."""

from __future__ import annotations

from celery.concurrency import asynpool, prefork

# Each check looks at a handful of processes and jobs in the main process's memory.
MAINTAIN_SECONDS = 0.25


class AsynPool(asynpool.AsynPool):
    @property
    def timers(self):
        return {self.maintain_pool: MAINTAIN_SECONDS}


class TaskPool(prefork.TaskPool):
    Pool = AsynPool
