"""Clients an actor's executor talks to; all share one interface:

    submit(request)        hand over a ChunkRequest (never blocks)
    poll(tick) -> [resp]   the responses that have arrived by control tick ``tick``
    close()

``SimulatedLatencyClient``: evaluates the policy at once and releases the answer ``clock.inference_ticks()``
ticks later (deterministic for a seed; runs faster than real time). ``ThreadedClient``: the policy runs
in a worker thread in this process; answers arrive when they are done. ``RemoteClient``: a DEALER
socket to a ``PolicyServer`` process.
"""

from __future__ import annotations

import queue
import threading

import torch
import zmq

from robolearn.clock import SimClock
from robolearn.inference.protocol import (
    REQUEST,
    RESPONSE,
    ChunkRequest,
    ChunkResponse,
    request_to_wire,
    response_from_wire,
)
from robolearn.inference.runner import ChunkPolicyRunner
from robolearn.transport.sockets import recv_valid, send
from robolearn.transport.wire import RejectCounter, WireError


class SimulatedLatencyClient:
    def __init__(self, runner: ChunkPolicyRunner, clock: SimClock) -> None:
        self.runner, self.clock = runner, clock
        self._pending: list[tuple[int, ChunkResponse]] = []

    def submit(self, request: ChunkRequest) -> None:
        resp = self.runner.run([request])[0]
        self._pending.append((request.tick + self.clock.inference_ticks(), resp))

    def poll(self, tick: int) -> list[ChunkResponse]:
        ready = [r for t, r in self._pending if t <= tick]
        self._pending = [(t, r) for t, r in self._pending if t > tick]
        return ready

    def close(self) -> None:
        self._pending.clear()


class ThreadedClient:
    def __init__(self, runner: ChunkPolicyRunner, threads: int = 1) -> None:
        self.runner = runner
        self._requests: queue.Queue[ChunkRequest | None] = queue.Queue()
        self._done: queue.Queue[ChunkResponse] = queue.Queue()
        self._threads = threads
        self._worker = threading.Thread(target=self._serve, name="policy-inference", daemon=True)
        self._worker.start()

    def _serve(self) -> None:
        torch.set_num_threads(self._threads)  # pinned: OpenMP threads must not oversubscribe the cores
        while (req := self._requests.get()) is not None:
            self._done.put(self.runner.run([req])[0])

    def submit(self, request: ChunkRequest) -> None:
        self._requests.put(request)

    def poll(self, tick: int) -> list[ChunkResponse]:
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        self._requests.put(None)
        self._worker.join(timeout=5)


class RemoteClient:
    """Talks to a ``PolicyServer`` at ``endpoint``. zmq reconnects by itself when the server restarts;
    a request lost with the old server is re-sent by the executor's timeout."""

    def __init__(self, endpoint: str, robot_id: str, ctx: zmq.Context | None = None) -> None:
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 16)
        self.sock.connect(endpoint)
        self.robot_id = robot_id
        self.rejects = RejectCounter()
        self._seq = 0

    def submit(self, request: ChunkRequest) -> None:
        meta, arrays = request_to_wire(request)
        try:
            send(self.sock, REQUEST, self.robot_id, self._seq, meta, arrays, flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # server unreachable and the queue full: the executor's timeout re-sends
        self._seq += 1

    def poll(self, tick: int, timeout_ms: int = 0) -> list[ChunkResponse]:
        out = []
        if timeout_ms and not self.sock.poll(timeout_ms):
            return out
        while (msg := recv_valid(self.sock, self.rejects, frozenset({RESPONSE}))) is not None:
            try:
                out.append(response_from_wire(msg))
            except WireError as exc:
                self.rejects.reject(str(exc))
        return out

    def close(self) -> None:
        self.sock.close(linger=0)
        if self._own_ctx:
            self.ctx.term()
