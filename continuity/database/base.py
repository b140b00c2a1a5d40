"""PostgreSQL as Django's own backend has it, except for how a kept connection is checked."""

from __future__ import annotations

import select

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        """Whether the connection still works, as far as this side can tell: psycopg has not
        found it broken, and the server has sent nothing since its last answer. A connection
        that the server ended (a restart, a terminated backend) has the server's farewell or
        its end waiting on the socket; anything else unasked-for is taken as unusable too,
        which costs a reconnect at worst.

        Django's own check sends `SELECT 1`: a round trip before the first statement of each
        task and of each request without a pool (conn_health_checks); one such check on each
        side of a message cost a twentieth of its CPU in an in-process A/B. A server that
        vanished without closing (a cut network) passes this check and fails the first
        statement instead, as it would have failed the `SELECT 1` once the network's timeout
        expired."""
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        socket = select.poll()  # not select(): it fails past 1,024 open files
        socket.register(connection.fileno(), select.POLLIN)
        return not socket.poll(0)
