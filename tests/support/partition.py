"""A network partition between a fleet and its broker: a TCP proxy on loopback that the
test cuts and heals.

Cut, it forwards nothing and accepts nothing: a command in flight gets no answer
and a new connection hangs after its handshake (the kernel's backlog takes it),
as across a partition, where packets vanish rather than bounce. Healed, it first
drops every connection it was forwarding, as a router or NAT that lost their
state does (each client sees its connection reset at its next read or write, a
reply held meanwhile included), then forwards again: the connections that waited
in the backlog go through. The test's own client talks to the server directly and
sees it all along.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading

from tests.support.fleet import free_port

_CHUNK = 65536


class Partition:
    """A proxy from 127.0.0.1:`port` to 127.0.0.1:`target`, forwarding until `cut`."""

    def __init__(self, target: int):
        self.target = target
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port), backlog=128)
        self._peers: dict[socket.socket, socket.socket] = {}
        self._open = threading.Event()  # set: forwarding
        self._open.set()
        self._closing = False
        self._lock = threading.Lock()  # the loop holds it while it forwards
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._loop, name="partition", daemon=True)
        self._thread.start()

    def url(self, password: str) -> str:
        return f"redis://:{password}@127.0.0.1:{self.port}/0"

    def cut(self) -> None:
        self._open.clear()
        self._wake_w.send(b"x")
        with self._lock:  # returns once the loop has stopped forwarding
            pass

    def heal(self) -> None:
        with self._lock:
            for sock in list(self._peers):
                sock.close()
            self._peers.clear()
        self._open.set()

    def close(self) -> None:
        self._closing = True
        self._open.set()
        self._wake_w.send(b"x")
        self._thread.join(timeout=10)
        self.heal()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    def _loop(self) -> None:
        while not self._closing:
            self._open.wait()
            with self._lock:
                self._forward_while_open()

    def _forward_while_open(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            for peer in self._peers:
                selector.register(peer, selectors.EVENT_READ)
            while self._open.is_set() and not self._closing:
                for key, _ in selector.select(timeout=1.0):
                    sock = key.fileobj
                    if not isinstance(sock, socket.socket):  # every one registered is
                        continue
                    if sock is self._wake_r:
                        sock.recv(64)
                    elif sock is self._listener:
                        self._accept(selector)
                    elif sock in self._peers:
                        self._relay(selector, sock)

    def _accept(self, selector: selectors.BaseSelector) -> None:
        client, _ = self._listener.accept()
        try:
            server = socket.create_connection(("127.0.0.1", self.target), timeout=5)
        except OSError:  # the server is down: the client sees its connection closed
            client.close()
            return
        # A peer that reads nothing (a frozen process) must not hold up every other one.
        for end in (client, server):
            end.settimeout(10)
        self._peers[client], self._peers[server] = server, client
        selector.register(client, selectors.EVENT_READ)
        selector.register(server, selectors.EVENT_READ)

    def _relay(self, selector: selectors.BaseSelector, sock: socket.socket) -> None:
        peer = self._peers[sock]
        try:
            data = sock.recv(_CHUNK)
            if data:
                peer.sendall(data)
                return
        except OSError:
            pass
        for end in (sock, peer):  # one side closed: the other is closed too
            with contextlib.suppress(KeyError, ValueError):
                selector.unregister(end)
            self._peers.pop(end, None)
            end.close()
