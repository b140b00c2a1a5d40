"""PostgreSQL as Django's own backend has it, except for how a kept connection is checked."""

from __future__ import annotations

import select
import time

from django.db.backends.postgresql import base
from psycopg import pq

# A connection that passed no check for this long (it sat unused, or one long task held it) is
# checked by the server again (`SELECT 1`): a server that vanished without closing it (a
# crashed host, a failover that moved its address) answers with a reset, which only a round
# trip finds.
QUIET_SECONDS = 5.0


class DatabaseWrapper(base.DatabaseWrapper):
    checked_at = 0.0  # on the monotonic clock: when the connection last passed a check

    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        self.checked_at = time.monotonic()
        return connection

    def is_usable(self) -> bool:
        """Whether the connection still works. A connection in steady use is judged from this
        side alone: libpq is idle or in a transaction (not left in the middle of a command),
        and the server has sent nothing since its last answer. A connection that the server
        ended (a restart, a terminated backend) has the server's farewell or its end waiting
        on the socket; anything else unasked-for is taken as unusable too, which costs a
        reconnect at worst. Django's own check sends `SELECT 1`, a round trip before the first
        statement of each task (conn_health_checks): one such check on each side of a message
        cost a twentieth of its CPU in an in-process A/B. A connection that was quiet for
        QUIET_SECONDS gets Django's check."""
        connection = self.connection
        if connection is None or connection.closed:
            return False
        if time.monotonic() - self.checked_at > QUIET_SECONDS:
            usable = super().is_usable()
        else:
            usable = (
                connection.info.transaction_status
                in (pq.TransactionStatus.IDLE, pq.TransactionStatus.INTRANS)
                and connection.pgconn.pipeline_status == pq.PipelineStatus.OFF
                and not self._server_sent_something()
            )
        if usable:
            self.checked_at = time.monotonic()
        return usable

    def _server_sent_something(self) -> bool:
        waiting = select.poll()  # not select(): it fails past 1,024 open files
        waiting.register(self.connection.fileno(), select.POLLIN)
        return bool(waiting.poll(0))
