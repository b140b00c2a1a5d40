"""A TCP relay on an address of its own, and a black hole for that address: a connection whose
packets are silently dropped, as a network partition or a vanished host drops them (no reset,
no refusal), while everything else on the machine goes on."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import struct
import subprocess
import threading
from collections.abc import Iterator
from functools import partial

# An address of the loopback network that nothing else uses: a black-hole route for it leaves
# 127.0.0.1 (the database, Redis, the tests' own connections) alone. One per pytest-xdist
# worker (gw0 → 127.77.0.1), so that one worker's black hole swallows no other's relay.
_xdist_worker = re.sub(r"\D", "", os.environ.get("PYTEST_XDIST_WORKER", "")) or "0"
RELAY_HOST = f"127.77.0.{int(_xdist_worker) + 1}"


# PostgreSQL's CommandComplete message for a COMMIT: type "C", its length, the tag.
COMMIT_COMPLETE = b"C\x00\x00\x00\x0bCOMMIT\x00"


class TcpRelay:
    """Accepts on RELAY_HOST and pipes each connection to `upstream`, both ways, a thread for
    each way: a way that blocks (its peer black-holed) holds up no other."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server((RELAY_HOST, 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.thread = threading.Thread(target=self.accept_loop, name="tcp-relay", daemon=True)
        self.losing_commit_ack = threading.Event()
        self.commit_acks_lost = 0

    def lose_next_commit_ack(self) -> None:
        """The next PostgreSQL COMMIT that passes is made (the server gets it), but its answer
        never reaches the client: the relay resets the client's connection instead, as a
        network that failed at that moment would leave it."""
        self.losing_commit_ack.set()

    def answer(self, data: bytes, client: socket.socket) -> bool:
        """Whether the server's `data` may go on to the client; a COMMIT's answer that is to be
        lost resets the client's connection."""
        if not (self.losing_commit_ack.is_set() and COMMIT_COMPLETE in data):
            return True
        self.losing_commit_ack.clear()
        self.commit_acks_lost += 1
        # Shut down first: the thread reading the client's side is woken (a close alone would
        # leave it, and the connection, as they are); then closed with linger 0: a reset.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_RDWR)
        client.close()
        return False

    def start(self) -> TcpRelay:
        self.thread.start()
        return self

    def cut(self) -> None:
        """Reset every connection open now, as a primary that dies and a standby promoted in
        its place leave them: the next connections go through."""
        cut, self.sockets = self.sockets, []
        for each in cut:
            each.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)
            each.close()

    def accept_loop(self) -> None:
        for client in accepted(self.listener):
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            self.sockets += [client, server]
            ways = ((client, server, None), (server, client, partial(self.answer, client=client)))
            for source, target, passes in ways:
                threading.Thread(target=pipe, args=(source, target, passes), daemon=True).start()

    def stop(self) -> None:
        self.listener.close()
        for each in self.sockets:
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)
            each.close()


def accepted(listener: socket.socket) -> Iterator[socket.socket]:
    """Each connection `listener` accepts, until it is closed (the relay stopped)."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        yield client


def pipe(source: socket.socket, target: socket.socket, passes=None) -> None:
    """Copy `source` to `target` until either ends; `passes(data)` may stop data (and end)."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            if passes is not None and not passes(data):
                break
            target.sendall(data)
    for each in (source, target):
        with contextlib.suppress(OSError):
            each.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def black_hole(host: str = RELAY_HOST) -> Iterator[None]:
    """Packets sent to `host` vanish until the block ends: a blackhole route in the local
    routing table (root only). A sender gets no answer and no error: its unacknowledged data
    and its keepalives go unanswered until its own timeouts say so."""
    route = ["blackhole", f"{host}/32", "table", "local"]
    subprocess.run(["ip", "route", "add", *route], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["ip", "route", "del", *route], check=True, capture_output=True)
