"""The load balancer in front of the web hosts, as nginx or HAProxy would be: each new
connection goes to the first web host on its list that accepts it, so a page whose host died
reconnects to the next one."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import Counter
from collections.abc import Iterator

from tests.helpers.relay import accepted, pipe


class Front:
    def __init__(self, address: str, upstreams: list[tuple[str, int]]) -> None:
        self.upstreams = upstreams
        self.listener = socket.create_server((address, 0), backlog=1024)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://{address}:{self.port}"
        self.connections: Counter[tuple[str, int]] = Counter()  # by the upstream taken
        self.sockets: list[socket.socket] = []
        self.out_of_service = threading.Event()

    def start(self) -> Front:
        threading.Thread(target=self.accept_loop, name="front", daemon=True).start()
        return self

    def accept_loop(self) -> None:
        for client in accepted(self.listener):
            threading.Thread(target=self.relay, args=(client,), daemon=True).start()

    @contextlib.contextmanager
    def refusing(self) -> Iterator[None]:
        """No web host in service for the block: each connection is closed at once, as a load
        balancer that has no healthy host left answers."""
        self.out_of_service.set()
        try:
            yield
        finally:
            self.out_of_service.clear()

    def relay(self, client: socket.socket) -> None:
        if self.out_of_service.is_set():
            client.close()
            return
        for upstream in self.upstreams:
            try:
                server = socket.create_connection(upstream, timeout=1)
            except OSError:  # refused (the host's server is down) or unreachable
                continue
            server.settimeout(None)
            self.connections[upstream] += 1
            self.sockets += [client, server]
            threading.Thread(target=pipe, args=(server, client), daemon=True).start()
            pipe(client, server)
            return
        client.close()

    def stop(self) -> None:
        # Shut down first: a close alone does not wake the thread blocked in accept(), which
        # would relay one more connection to the next test's web hosts.
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for each in self.sockets:
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)
            each.close()
