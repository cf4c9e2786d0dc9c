"""The policy server: one process answering chunk requests from many robots.

    ROUTER socket (loopback by default)  <-  DEALER per actor (``inference.client.RemoteClient``)
    loop:  wait for requests -> take every request waiting (up to ``max_batch``) -> one batched
           forward pass -> reply to each robot with its chunk and the weight version
           between batches: take the newest weights the learner published (SUB), if subscribed

Two-stage requests (ARLI late binding over the wire, ``mid_ticks`` > 0; a two-stage policy): the trunk runs on
the request's batch as soon as it arrives, and the request waits for its ``chunk_mid`` message (the mid
observation); the heads of the requests whose mid observations came in together run as one batch, and only they
see those observations. A request whose mid observation does not come within ``mid_timeout_s`` (it was lost, or
the robot gave up on the request) is answered with the whole policy on its first observation; a newer request
from the same robot ends the wait of its older ones (the robot gave up on those). New weights are taken only while
no two-stage request waits (its trunk and head are one version). ``batches`` counts forward passes of every kind
(whole batches, trunks, heads). The emulated latency (``extra_latency_ms``) applies to one-stage batches only.

Malformed or mismatching requests are rejected with a counted reason, never fatal. Run it as

    python -m robolearn.runtime.policy_server --task push_cube --policy flow_chunk --weights policy.pt \
        [--port 0] [--endpoint-file server.json] [--weights-endpoint tcp://127.0.0.1:P]

(``--weights`` is a state dict this project wrote with ``torch.save``; it is loaded with
``weights_only=True``. Nothing a peer sends is ever unpickled.)
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import zmq

from robolearn.builders import task_specs
from robolearn.checkpoint import load_checkpoint
from robolearn.inference.protocol import (
    MID,
    REQUEST,
    RESPONSE,
    ChunkRequest,
    ChunkResponse,
    MidObservation,
    check_mid_timeout,
    mid_from_wire,
    request_from_wire,
    response_to_wire,
)
from robolearn.inference.runner import ChunkPolicyRunner, TrunkResult
from robolearn.registry import lookup
from robolearn.specs import SpecError
from robolearn.transport.security import Authenticator, CurveKeys
from robolearn.transport.sockets import REQUEST_LIMITS, bind_random_port, limit_receive
from robolearn.transport.weights import WeightSubscriber
from robolearn.transport.wire import RejectCounter, WireError, decode, encode


@dataclass
class AwaitingMid:
    """A two-stage request whose trunk ran, waiting for its mid observation."""

    request: ChunkRequest
    trunk: TrunkResult
    since: float                    # perf_counter when the trunk finished
    identity: bytes                 # the connection it came on (the answer goes to the newest one the robot used)


class PolicyServer:
    def __init__(self, runner: ChunkPolicyRunner, host: str = "127.0.0.1", port: int = 0, max_batch: int = 32,
                 weights_endpoint: str | None = None, extra_latency_ms: tuple[float, float] | None = None,
                 seed: int = 0, keys: CurveKeys | None = None, concurrent_latency: bool = False,
                 mid_timeout_s: float = 1.0) -> None:
        self.runner = runner
        self.mid_timeout_s = check_mid_timeout(mid_timeout_s)
        self._awaiting: dict[tuple[str, int], AwaitingMid] = {}  # (robot id, request id) -> its trunk's result
        # emulate a heavier model: each batch's answers take a uniform draw in this range (ms) in all. Serially
        # (the server waits it out before the next batch: one model, one batch at a time), or with
        # ``concurrent_latency`` held back while later batches are served (a server that runs several at once)
        self.extra_latency_ms = extra_latency_ms
        self.concurrent_latency = concurrent_latency
        if concurrent_latency and extra_latency_ms is None:
            raise ValueError("concurrent_latency emulates a server that answers several requests at once, and "
                             "needs extra_latency_ms (--extra-latency-ms) to emulate")
        self._held: list[tuple[float, bytes, ChunkResponse]] = []  # (due, robot, answer), concurrent only
        self._rng = np.random.default_rng(seed)
        self.ctx = zmq.Context()
        self.auth = Authenticator(self.ctx, keys) if keys else None  # CURVE: authorized robots only
        self.sock = limit_receive(self.ctx.socket(zmq.ROUTER), REQUEST_LIMITS)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # a vanished robot's reply is dropped, not an error
        self.endpoint = bind_random_port(self.sock, host, keys, port=port)
        self.max_batch = max_batch
        self.rejects = RejectCounter()
        self.weights = (WeightSubscriber(self.ctx, weights_endpoint, runner.policy, self.rejects, keys)
                        if weights_endpoint else None)
        self.batches = 0
        self.requests = 0
        self.batch_sizes: deque[int] = deque(maxlen=1000)  # the most recent batches, for monitoring

    def _drain(self) -> tuple[list[tuple[bytes, ChunkRequest]], list[tuple[bytes, MidObservation]]]:
        """The requests and the mid observations waiting (at most ``max_batch`` messages), each checked."""
        got, mids = [], []
        while len(got) + len(mids) < self.max_batch:
            try:
                frames = self.sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            identity, body = frames[0], frames[1:]
            try:
                msg = decode(body, frozenset({REQUEST, MID}))
                if msg.type == MID:
                    mid = mid_from_wire(msg)
                    self.runner.check_mid(mid.observation)
                    mids.append((identity, mid))
                    continue
                req = request_from_wire(msg)
                self.runner.check(req)
            except (WireError, SpecError) as exc:
                self.rejects.reject(str(exc))
                continue
            got.append((identity, req))
        return got, mids

    def _forget_older(self, requests: list[ChunkRequest]) -> None:
        """A robot that asks anew (one-stage or two-stage) gave up on its older requests: stop waiting for them."""
        newest: dict[str, int] = {}
        for req in requests:
            newest[req.robot_id] = max(newest.get(req.robot_id, -1), req.request_id)
        for key in [k for k in self._awaiting if k[1] < newest.get(k[0], -1)]:
            del self._awaiting[key]

    def _start_two_stage(self, batch: list[tuple[bytes, ChunkRequest]]) -> None:
        """The trunk on the two-stage requests now; each waits for its mid observation. Keyed by the robot's id,
        not its connection: a request sent again after a reconnect replaces its earlier self."""
        trunk = self.runner.run_trunk([req for _, req in batch])
        self._count_pass(len(batch))
        now = time.perf_counter()
        for row, (identity, req) in enumerate(batch):
            self._awaiting[(req.robot_id, req.request_id)] = AwaitingMid(req, trunk.row(row), now, identity)

    def _finish_two_stage(self, mids: list[tuple[bytes, MidObservation]]) -> list[tuple[bytes, ChunkResponse]]:
        """The heads of the requests whose mid observations came in, as one batch; each answer goes to the
        connection its mid observation came on."""
        ready: list[tuple[bytes, AwaitingMid]] = []
        for identity, mid in mids:
            key = (mid.robot_id, mid.request_id)
            waiting = self._awaiting.get(key)
            if waiting is None:
                self.rejects.reject("chunk_mid for no request waiting for one (answered, given up, or never asked)")
                continue
            if not 0 <= mid.tick - waiting.request.tick <= waiting.request.prefix_len:
                self.rejects.reject("chunk_mid taken outside its request's committed prefix")
                continue  # the request waits on; a good mid observation or the timeout finishes it
            del self._awaiting[key]
            waiting.request.mid_observation, waiting.request.mid_tick = mid.observation, mid.tick
            ready.append((identity, waiting))
        if not ready:
            return []
        responses = self.runner.run_head([w.request for _, w in ready], TrunkResult.stack([w.trunk for _, w in ready]))
        self._count_pass(len(ready))
        for resp in responses:
            resp.waited_for_mid = True  # held back for the robot's own mid observation
        return [(identity, resp) for (identity, _), resp in zip(ready, responses)]

    def _expire_two_stage(self) -> list[tuple[bytes, ChunkResponse]]:
        """Requests whose mid observation did not come in time: the whole policy on their first observation."""
        now = time.perf_counter()
        late = [k for k, w in self._awaiting.items() if now - w.since > self.mid_timeout_s]
        if not late:
            return []
        waiting = [self._awaiting.pop(k) for k in late]
        responses = self.runner.run([w.request for w in waiting])
        self._count_pass(len(waiting))
        return [(w.identity, resp) for w, resp in zip(waiting, responses)]

    def _count_pass(self, size: int) -> None:
        """One forward pass (a whole batch, a trunk, a head) of ``size`` requests."""
        self.batches += 1
        self.batch_sizes.append(size)

    def _send(self, identity: bytes, resp: ChunkResponse) -> None:
        meta, arrays = response_to_wire(resp)
        self.sock.send_multipart([identity, *encode(RESPONSE, "policy-server", resp.request_id, meta, arrays)],
                                 copy=False)

    def _send_due(self) -> None:
        now = time.perf_counter()
        due = [h for h in self._held if h[0] <= now]
        self._held = [h for h in self._held if h[0] > now]
        for _, identity, resp in sorted(due, key=lambda h: h[0]):
            self._send(identity, resp)

    def serve_once(self, timeout_ms: int = 100) -> int:
        """Answer every request waiting (waiting up to ``timeout_ms`` for one); returns how many requests and mid
        observations it took (a two-stage request's answer goes out when its mid observation is in). With
        ``concurrent_latency`` their answers are held until due (sent by this or a later call; those still held at
        ``close`` are dropped, as a stopping server's would be)."""
        if self.weights is not None:
            self.weights.poll()
            # never between a two-stage request's trunk and its head: both must be one weight version
            if not self._awaiting and self.weights.apply_pending():
                self.runner.version = self.weights.version
        self._send_due()
        if self._held:  # wake for the next held answer
            timeout_ms = min(timeout_ms, max(0, math.ceil((min(h[0] for h in self._held) - time.perf_counter()) * 1e3)))
        if self._awaiting:  # wake when the oldest two-stage request's wait runs out
            oldest = min(w.since for w in self._awaiting.values()) + self.mid_timeout_s
            timeout_ms = min(timeout_ms, max(0, math.ceil((oldest - time.perf_counter()) * 1e3)))
        if not self.sock.poll(timeout_ms):
            self._send_due()
            for identity, resp in self._expire_two_stage():
                self._send(identity, resp)
            return 0
        everything, mids = self._drain()
        self._forget_older([req for _, req in everything])
        batch = [(identity, req) for identity, req in everything if not req.mid_ticks]
        two_stage = [(identity, req) for identity, req in everything if req.mid_ticks]
        if two_stage:
            self._start_two_stage(two_stage)
        for identity, resp in self._finish_two_stage(mids) + self._expire_two_stage():
            self._send(identity, resp)
        self.requests += len(two_stage)
        if not batch:
            return len(two_stage) + len(mids)
        t0 = time.perf_counter()
        responses = self.runner.run([req for _, req in batch])
        if self.extra_latency_ms is not None and self.concurrent_latency:
            due = t0 + self._rng.uniform(*self.extra_latency_ms) / 1e3
            self._held += [(due, identity, resp) for (identity, _), resp in zip(batch, responses)]
            responses = []
        elif self.extra_latency_ms is not None:
            total_s = self._rng.uniform(*self.extra_latency_ms) / 1e3
            time.sleep(max(0.0, total_s - (time.perf_counter() - t0)))
        for (identity, _), resp in zip(batch, responses):
            self._send(identity, resp)
        self.requests += len(batch)
        self._count_pass(len(batch))
        return len(everything) + len(mids)

    def close(self) -> None:
        if self.weights is not None:
            self.weights.close()
        self.sock.close(linger=0)
        if self.auth:
            self.auth.stop()
        self.ctx.term()


def build_runner(task: str, policy: str, weights: str | None, overrides: dict | None = None,
                 checkpoint: str | None = None, task_overrides: dict | None = None) -> ChunkPolicyRunner:
    """The task's specs (its robot is never connected; ``task_overrides``: its config's fields) and the named
    policy (registry names), with weights from a state-dict file (``weights``) or a run's checkpoint
    (``checkpoint``, which also sets the version)."""
    t, p = lookup("task", task), lookup("policy", policy)
    obs_spec, action_spec = task_specs(SimpleNamespace(task=t.config_cls(**(task_overrides or {})), robot=None))
    model = p.factory(obs_spec, action_spec, p.config_cls(**(overrides or {})))
    version = 0
    if weights:
        model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    if checkpoint:
        ckpt = load_checkpoint(Path(checkpoint))
        model.load_state_dict(ckpt.policy_weights)
        version = ckpt.version
    return ChunkPolicyRunner(model, obs_spec, action_spec.dim, version=version)
