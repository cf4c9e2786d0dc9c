"""The policy server: one process answering chunk requests from many robots.

    ROUTER socket (loopback by default)  <-  DEALER per actor (``inference.client.RemoteClient``)
    loop:  wait for requests -> take every request waiting (up to ``max_batch``) -> one batched
           forward pass -> reply to each robot with its chunk and the weight version
           between batches: take the newest weights the learner published (SUB), if subscribed

Malformed or mismatching requests are rejected with a counted reason, never fatal. Run it as

    python -m robolearn.inference.server --task push_cube --policy flow_chunk --weights policy.pt \
        [--port 0] [--endpoint-file server.json] [--weights-endpoint tcp://127.0.0.1:P]

(``--weights`` is a state dict this project wrote with ``torch.save``; it is loaded with
``weights_only=True``. Nothing a peer sends is ever unpickled.)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch
import zmq

from robolearn.actor.weights import WeightSubscriber
from robolearn.inference.protocol import REQUEST, RESPONSE, request_from_wire, response_to_wire
from robolearn.inference.runner import ChunkPolicyRunner
from robolearn.specs import SpecError
from robolearn.transport.sockets import bind_random_port
from robolearn.transport.wire import RejectCounter, WireError, decode, encode


class PolicyServer:
    def __init__(self, runner: ChunkPolicyRunner, host: str = "127.0.0.1", port: int = 0, max_batch: int = 32,
                 weights_endpoint: str | None = None, extra_latency_ms: tuple[float, float] | None = None,
                 seed: int = 0) -> None:
        self.runner = runner
        self.extra_latency_ms = extra_latency_ms
        self._rng = np.random.default_rng(seed)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # a vanished robot's reply is dropped, not an error
        self.endpoint = bind_random_port(self.sock, host, port=port)
        self.max_batch = max_batch
        self.rejects = RejectCounter()
        self.weights = (WeightSubscriber(self.ctx, weights_endpoint, runner.policy, self.rejects)
                        if weights_endpoint else None)
        self.batches = 0
        self.requests = 0
        self.batch_sizes: deque[int] = deque(maxlen=1000)  # the most recent batches, for monitoring

    def _drain(self) -> list[tuple[bytes, object]]:
        got = []
        while len(got) < self.max_batch:
            try:
                frames = self.sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            identity, body = frames[0], frames[1:]
            try:
                req = request_from_wire(decode(body, frozenset({REQUEST})))
                self.runner.check(req)
            except (WireError, SpecError) as exc:
                self.rejects.reject(str(exc))
                continue
            got.append((identity, req))
        return got

    def serve_once(self, timeout_ms: int = 100) -> int:
        """Answer every request waiting (waiting up to ``timeout_ms`` for one); returns how many."""
        if self.weights is not None:
            self.weights.poll()
            if self.weights.apply_pending():
                self.runner.version = self.weights.version
        if not self.sock.poll(timeout_ms):
            return 0
        batch = self._drain()
        if not batch:
            return 0
        t0 = time.perf_counter()
        responses = self.runner.run([req for _, req in batch])
        if self.extra_latency_ms is not None:  # emulate a heavier model: the answer takes this long in all
            total_s = self._rng.uniform(*self.extra_latency_ms) / 1e3
            time.sleep(max(0.0, total_s - (time.perf_counter() - t0)))
        for (identity, _), resp in zip(batch, responses):
            meta, arrays = response_to_wire(resp)
            self.sock.send_multipart([identity, *encode(RESPONSE, "policy-server", resp.request_id, meta, arrays)],
                                     copy=False)
        self.batches += 1
        self.requests += len(batch)
        self.batch_sizes.append(len(batch))
        return len(batch)

    def close(self) -> None:
        if self.weights is not None:
            self.weights.close()
        self.sock.close(linger=0)
        self.ctx.term()


def build_runner(task: str, policy: str, weights: str | None, overrides: dict | None = None) -> ChunkPolicyRunner:
    """The task's specs and the named policy (registry names), with weights from a state-dict file."""
    from robolearn.registry import load_builtins, lookup

    load_builtins()
    t, p = lookup("task", task), lookup("policy", policy)
    env = t.factory(t.config_cls(), None)
    model = p.factory(env.observation_spec, env.action_spec, p.config_cls(**(overrides or {})))
    if weights:
        model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    runner = ChunkPolicyRunner(model, env.observation_spec, env.action_spec.dim)
    env.close()
    return runner


def spawn_server(task: str, policy: str, weights: str | None, endpoint_file: Path, port: int = 0,
                 policy_config: dict | None = None, extra_args: list[str] | None = None,
                 timeout_s: float = 120.0) -> tuple[subprocess.Popen, str]:
    """Start ``python -m robolearn.inference.server`` and wait until it is bound; returns (process, endpoint).
    Its output goes to ``endpoint_file`` with the suffix ``.log``."""
    endpoint_file = Path(endpoint_file)
    endpoint_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "robolearn.inference.server", "--task", task, "--policy", policy,
           "--policy-config", json.dumps(policy_config or {}), "--port", str(port),
           "--endpoint-file", str(endpoint_file), *(["--weights", str(weights)] if weights else []),
           *(extra_args or [])]
    log = open(endpoint_file.with_suffix(".log"), "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    while not endpoint_file.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"policy server exited with {proc.returncode}: "
                               f"{endpoint_file.with_suffix('.log').read_text()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError(f"policy server not bound after {timeout_s:.0f} s")
        time.sleep(0.05)
    return proc, json.loads(endpoint_file.read_text())["endpoint"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True)
    ap.add_argument("--policy", required=True)
    ap.add_argument("--weights", help="state dict file (torch.save) for the policy")
    ap.add_argument("--policy-config", default="{}", help="JSON of policy config fields, e.g. '{\"chunk_horizon\": 8}'")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = a free port")
    ap.add_argument("--endpoint-file", help="write {\"endpoint\": ...} here once bound")
    ap.add_argument("--weights-endpoint", help="the learner's weight PUB endpoint to follow")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the forward pass")
    ap.add_argument("--extra-latency-ms", type=float, nargs=2, metavar=("LOW", "HIGH"),
                    help="answer each batch after a uniform draw in [LOW, HIGH] ms (emulates a heavier model)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    runner = build_runner(args.task, args.policy, args.weights, json.loads(args.policy_config))
    server = PolicyServer(runner, args.host, args.port, args.max_batch, args.weights_endpoint,
                          tuple(args.extra_latency_ms) if args.extra_latency_ms else None)
    if args.endpoint_file:
        tmp = Path(args.endpoint_file + ".tmp")
        tmp.write_text(json.dumps({"endpoint": server.endpoint, "pid": os.getpid()}))
        tmp.replace(args.endpoint_file)
    print(f"policy server on {server.endpoint} ({args.task}, {args.policy})", flush=True)
    stopping = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.append(1))
    t_last = time.monotonic()
    while not stopping:
        server.serve_once(100)
        if time.monotonic() - t_last > 10:
            t_last = time.monotonic()
            print(f"served {server.requests} requests in {server.batches} batches, v{runner.version}, "
                  f"rejected {server.rejects.total}", flush=True)
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
