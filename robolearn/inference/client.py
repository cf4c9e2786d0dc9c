"""Clients an actor's executor talks to; all share one interface:

    submit(request)        hand over a ChunkRequest (never blocks)
    poll(tick) -> [resp]   the responses that have arrived by control tick ``tick``
    close()

Every client takes two-stage requests (``request.mid_ticks > 0``, ARLI late binding): the
policy's trunk runs on the request as it is submitted, ``submit_mid(request_id, tick, observation)`` hands over
the mid-inference observation and the policy's head alone finishes the chunk with it
(``ChunkPolicyRunner.run_trunk`` / ``run_head``); they say so with ``takes_mid_observation = True``.

``SimulatedLatencyClient``: evaluates the policy at once and releases the answer ``clock.inference_ticks()``
ticks later (deterministic for a seed; runs faster than real time). ``ThreadedClient``: the policy runs
in a worker thread in this process; answers arrive when they are done. ``RemoteClient``: a DEALER
socket to a ``PolicyServer`` process; with ``wait_s`` its polls wait that long after a request for the
answer (inference inside the tick, over the wire: a one-action chunk is usable only in the tick it was
asked in), else never. It takes two-stage requests too: the server runs the trunk when the request arrives,
``submit_mid`` sends the mid observation (``chunk_mid``) and the server's head answers from it.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from typing import Protocol

import numpy as np
import torch
import zmq

from robolearn.clock import SimClock
from robolearn.inference.protocol import (
    MID,
    REQUEST,
    RESPONSE,
    ChunkRequest,
    ChunkResponse,
    MidObservation,
    check_mid_timeout,
    mid_to_wire,
    request_to_wire,
    response_from_wire,
)
from robolearn.inference.runner import ChunkPolicyRunner, TrunkResult
from robolearn.transport.security import CurveKeys
from robolearn.transport.sockets import RESPONSE_LIMITS, ConnectionWatch, connect, limit_receive, recv_valid
from robolearn.transport.wire import RejectCounter, WireError, encode


class ChunkClient(Protocol):
    """What a ``ChunkExecutor`` talks to (the interface above)."""

    def submit(self, request: ChunkRequest) -> None: ...

    def poll(self, tick: int) -> list[ChunkResponse]: ...

    def close(self) -> None: ...


class SimulatedLatencyClient:
    """Latency as a number of ticks drawn from the clock. A two-stage request's trunk runs when it is submitted,
    its head when the mid observation arrives; the chunk is ready at ``max(tick + drawn delay, mid tick +
    mid_ticks)``: the light head is charged ``mid_ticks`` after the mid observation."""

    takes_mid_observation = True

    def __init__(self, runner: ChunkPolicyRunner, clock: SimClock) -> None:
        self.runner, self.clock = runner, clock
        self._pending: list[tuple[int, ChunkResponse]] = []
        # request id -> (request, due tick, its trunk's result)
        self._awaiting: dict[int, tuple[ChunkRequest, int, TrunkResult]] = {}

    def submit(self, request: ChunkRequest) -> None:
        due = request.tick + self.clock.inference_ticks()
        if request.mid_ticks > 0:
            self._awaiting[request.request_id] = (request, due, self.runner.run_trunk([request]))
            return
        self._pending.append((due, self.runner.run([request])[0]))

    def submit_mid(self, request_id: int, tick: int, observation: dict[str, np.ndarray]) -> None:
        if request_id not in self._awaiting:
            return  # given up on
        request, due, trunk = self._awaiting.pop(request_id)
        for stale in [i for i in self._awaiting if i < request_id]:
            del self._awaiting[stale]  # given up on by the executor before their mid observation was due
        request.mid_observation, request.mid_tick = observation, tick
        resp = self.runner.run_head([request], trunk)[0]
        resp.waited_for_mid = tick + request.mid_ticks > due
        self._pending.append((max(due, tick + request.mid_ticks), resp))

    def poll(self, tick: int) -> list[ChunkResponse]:
        ready = [r for t, r in self._pending if t <= tick]
        self._pending = [(t, r) for t, r in self._pending if t > tick]
        return ready

    def close(self) -> None:
        self._pending.clear()
        self._awaiting.clear()


class ThreadedClient:
    """A worker thread runs the policy. A two-stage request waits there for its mid-inference observation
    (at most ``mid_timeout_s``; then it is finished with the first observation alone)."""

    takes_mid_observation = True

    def __init__(self, runner: ChunkPolicyRunner, threads: int = 1, mid_timeout_s: float = 1.0) -> None:
        self.runner = runner
        self.mid_timeout_s = check_mid_timeout(mid_timeout_s)
        self._requests: queue.Queue[ChunkRequest | None] = queue.Queue()
        self._done: queue.Queue[ChunkResponse] = queue.Queue()
        self._mids: dict[int, tuple[int, dict[str, np.ndarray]]] = {}
        self._mid_arrived = threading.Condition()
        self._threads = threads
        self._worker = threading.Thread(target=self._serve, name="policy-inference", daemon=True)
        self._worker.start()

    def _serve(self) -> None:
        torch.set_num_threads(self._threads)  # pinned: OpenMP threads must not oversubscribe the cores
        while (req := self._requests.get()) is not None:
            waited, trunk = False, None
            if req.mid_ticks > 0:
                trunk = self.runner.run_trunk([req])  # before the mid observation: only the head waits for it
                with self._mid_arrived:
                    waited = req.request_id not in self._mids
                    self._mid_arrived.wait_for(lambda: req.request_id in self._mids, self.mid_timeout_s)
                    mid = self._mids.pop(req.request_id, None)
                    for stale in [i for i in self._mids if i < req.request_id]:
                        del self._mids[stale]  # arrived after its request had given up waiting
                if mid is not None:
                    req.mid_tick, req.mid_observation = mid
            if trunk is not None and req.mid_observation is not None:
                resp = self.runner.run_head([req], trunk)[0]
            else:  # one-stage, or no mid observation came in time: the whole policy on the first one
                resp = self.runner.run([req])[0]
            resp.waited_for_mid = waited
            self._done.put(resp)

    def submit(self, request: ChunkRequest) -> None:
        self._requests.put(request)

    def submit_mid(self, request_id: int, tick: int, observation: dict[str, np.ndarray]) -> None:
        with self._mid_arrived:
            self._mids[request_id] = (tick, observation)
            self._mid_arrived.notify_all()

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
    """Talks to a ``PolicyServer`` at ``endpoint``. zmq reconnects by itself when the server restarts, and
    delivers what was sent while no server was connected once one is; the newest request, while unanswered,
    goes again on a new connection when it went out on an earlier one (the old server took it with it).
    Every answer is checked against the chunk this robot
    expects, (``horizon``, ``action_dim``), before the executor sees it.

    ``wait_s``: inference inside the tick. After a submit, ``poll`` waits up to ``wait_s`` for that request's
    answer (answers to older requests do not end the wait); the caller's tick then goes on either way.

    Two-stage: ``submit_mid`` sends the newest request's mid observation; when that request goes again on a new
    connection, its mid observation follows it."""

    takes_mid_observation = True

    def __init__(self, endpoint: str, robot_id: str, horizon: int, action_dim: int,
                 ctx: zmq.Context | None = None, keys: CurveKeys | None = None, wait_s: float = 0.0) -> None:
        self.wait_s = wait_s
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        self.horizon, self.action_dim = horizon, action_dim
        self.sock = limit_receive(self.ctx.socket(zmq.DEALER), RESPONSE_LIMITS)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 16)
        self._connections = ConnectionWatch(self.sock)
        connect(self.sock, endpoint, keys)
        self.robot_id = robot_id
        self.rejects = RejectCounter()
        self.resent = 0  # requests sent again on a new connection
        self._seq = 0
        self._unanswered: tuple[int, list[bytes]] | None = None  # (request id, wire frames) of the newest request
        self._mid: tuple[int, list[bytes]] | None = None  # (request id, wire frames) of its mid observation
        self._sent_on = 0  # the number of the connection it went out on (or will: the next one)
        self._wait_until: float | None = None  # inside the tick: until when to wait for its answer
        self._poller = zmq.Poller()  # answers, and connections made
        self._poller.register(self.sock, zmq.POLLIN)
        self._poller.register(self._connections.events, zmq.POLLIN)

    def submit(self, request: ChunkRequest) -> None:
        meta, arrays = request_to_wire(request)
        # copied: the frames are kept for a re-send, and must not follow later changes to the observation arrays
        frames = [bytes(f) for f in encode(REQUEST, self.robot_id, self._seq, meta, arrays)]
        self._seq += 1
        self._unanswered, self._mid = (request.request_id, frames), None
        self._transmit()
        self._wait_until = time.perf_counter() + self.wait_s if self.wait_s else None

    def submit_mid(self, request_id: int, tick: int, observation: dict[str, np.ndarray]) -> None:
        """The mid observation of two-stage request ``request_id``, taken at ``tick``."""
        meta, arrays = mid_to_wire(MidObservation(request_id, tick, observation))
        frames = [bytes(f) for f in encode(MID, self.robot_id, self._seq, meta, arrays)]
        self._seq += 1
        if self._unanswered is None or self._unanswered[0] != request_id:
            return  # answered already (the server gave up waiting for it), or superseded
        self._mid = (request_id, frames)
        try:
            self.sock.send_multipart(frames, flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # the queue is full: it goes with its request on the next connection

    def _transmit(self) -> None:
        assert self._unanswered is not None
        watch = self._connections
        watch.made()  # up to date: is a server connected now?
        try:
            self.sock.send_multipart(self._unanswered[1], flags=zmq.NOBLOCK)
            self._sent_on = watch.connections if watch.connected else watch.connections + 1  # queued till then
        except zmq.Again:
            self._sent_on = 0  # the queue is full: it goes again on the next connection

    def poll(self, tick: int, timeout_ms: int = 0) -> list[ChunkResponse]:
        """The answers that are in, waiting up to ``timeout_ms`` for one, and inside the tick for the newest
        request's (a connection made meanwhile sends it again at once)."""
        out = self._receive()
        self._send_on_new_connection()
        give_up = time.perf_counter() + timeout_ms / 1e3
        while True:
            until = max(give_up if not out else 0.0, self._wait_until if self._waiting() else 0.0)
            left_ms = math.ceil(1e3 * (until - time.perf_counter()))
            if left_ms <= 0 or not self._poller.poll(left_ms):
                break
            out += self._receive()
            self._send_on_new_connection()
        self._wait_until = None  # not this tick: it is spliced whenever it comes
        return out

    def _send_on_new_connection(self) -> None:
        if self._connections.made() and self._unanswered is not None and \
                self._connections.connections > self._sent_on:  # a connection it did not go out on
            self._transmit()
            self.resent += 1
            if self._mid is not None and self._mid[0] == self._unanswered[0]:
                try:  # after its request: the new server runs the trunk, then the head on this
                    self.sock.send_multipart(self._mid[1], flags=zmq.NOBLOCK)
                except zmq.Again:
                    pass  # the request is answered with the first observation alone after the server's wait

    def _waiting(self) -> bool:
        return self._wait_until is not None and self._unanswered is not None

    def _receive(self) -> list[ChunkResponse]:
        out = []
        while (msg := recv_valid(self.sock, self.rejects, frozenset({RESPONSE}))) is not None:
            try:
                resp = response_from_wire(msg, self.horizon, self.action_dim)
            except WireError as exc:
                self.rejects.reject(str(exc))
                continue
            if self._unanswered is not None and resp.request_id == self._unanswered[0]:
                self._unanswered = self._mid = None
            out.append(resp)
        return out

    def close(self) -> None:
        self._connections.close()
        self.sock.close(linger=0)
        if self._own_ctx:
            self.ctx.term()
