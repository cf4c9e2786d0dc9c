"""A userspace TCP proxy that injects network faults between an actor and a learner (any zmq TCP channel).

Every chunk read on either side is forwarded after its own delay, ``latency_ms`` +- ``jitter_ms`` (uniform),
kept in order as TCP would; every ``reset_every_s`` (+- a third) each open connection is torn down with a
reset on both sides (SO_LINGER 0), so bytes in flight are lost and the peers must reconnect, as on a flaky
link. One thread per connection pumps both directions; one more makes the resets.
"""

from __future__ import annotations

import collections
import random
import select
import socket
import struct
import threading
import time


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets a reset (RST), and what was in flight is gone."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass  # the peer reset it first
    sock.close()


class _Link:
    """One proxied connection, pumped by one thread: whatever either side sends is held until its due time."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy, self.socks = proxy, (client, server)
        self.pending = (collections.deque(), collections.deque())  # per direction: (due, bytes), oldest first
        self.dead = threading.Event()
        for sock in self.socks:
            sock.setblocking(False)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        due = [0.0, 0.0]
        while not self.dead.is_set():
            readable, _, _ = select.select(self.socks, [], [], 0.005)
            for side, sock in enumerate(self.socks):
                if sock in readable:
                    try:
                        data = sock.recv(65536)
                    except BlockingIOError:
                        continue  # woken without data after all
                    except OSError:
                        data = b""
                    if not data:  # that side closed or reset: so does the link
                        self.dead.set()
                        break
                    due[side] = max(due[side], time.monotonic() + self.proxy.delay_s())  # in order, as TCP
                    self.pending[side].append((due[side], data))
            now = time.monotonic()
            for side in (0, 1):
                queue_, dst = self.pending[side], self.socks[1 - side]
                while queue_ and queue_[0][0] <= now and not self.dead.is_set():
                    t, data = queue_.popleft()
                    try:
                        sent = dst.send(data)
                    except BlockingIOError:
                        sent = 0
                    except OSError:
                        self.dead.set()
                        break
                    self.proxy.bytes_forwarded += sent
                    if sent < len(data):
                        queue_.appendleft((t, data[sent:]))
                        break
        for sock in self.socks:
            _reset(sock)


class FaultProxy:
    def __init__(self, target: tuple[str, int], latency_ms: float = 100.0, jitter_ms: float = 50.0,
                 reset_every_s: float | None = 3.0, seed: int = 0) -> None:
        self.target, self.latency_ms, self.jitter_ms, self.reset_every_s = target, latency_ms, jitter_ms, reset_every_s
        self.rng = random.Random(seed)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.resets = 0
        self.connections = 0
        self.bytes_forwarded = 0
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()
        if reset_every_s:
            threading.Thread(target=self._resetter, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def delay_s(self) -> float:
        with self._lock:
            return max(0.0, self.latency_ms + self.rng.uniform(-self.jitter_ms, self.jitter_ms)) / 1000

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=2)
            except OSError:  # the learner is not there (restarting): the actor will reconnect
                _reset(client)
                continue
            with self._lock:
                self._links = [link for link in self._links if not link.dead.is_set()]
                self._links.append(_Link(self, client, server))
                self.connections += 1

    def _resetter(self) -> None:
        while not self._stop.wait(self.reset_every_s * self.rng.uniform(2 / 3, 4 / 3)):
            with self._lock:
                victims, self._links = self._links, []
            for link in victims:
                link.dead.set()
            self.resets += bool(victims)

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        with self._lock:
            for link in self._links:
                link.dead.set()
