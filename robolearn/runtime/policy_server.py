"""The policy server process, in two forms.

- Standalone: ``python -m robolearn.runtime.policy_server --task T --policy P ...`` registers the built-ins,
  builds the policy for the task's specs (opening no hardware) and serves it with
  ``inference.server.PolicyServer`` until SIGINT/SIGTERM. ``spawn_server`` starts one and waits until it is bound.
- A run's (``runtime.policy_server=true``): ``serve_run``, the ``policy-server`` worker of the local runtime.
  It follows the learner's weights, answers this machine's actors, and is supervised like the learner:
  a replacement starts from the run's last checkpoint and binds the port its predecessor had, so the
  actors' sockets reconnect by themselves (each ``RemoteClient`` sends the request the old process took
  once more). It says it is serving in ``policy_server.json`` once it holds weights.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from robolearn.builders import build_policy, task_specs
from robolearn.checkpoint import load_checkpoint
from robolearn.inference.protocol import check_mid_timeout
from robolearn.inference.runner import ChunkPolicyRunner
from robolearn.inference.server import PolicyServer, build_runner
from robolearn.logging.status import read_json, write_json_atomic
from robolearn.rundir import RunDir
from robolearn.runtime.builtins import register_builtins
from robolearn.stop_flag import StopFlag
from robolearn.transport.security import load_keys
from robolearn.transport.sockets import endpoint_port

if TYPE_CHECKING:  # the config is built above this layer (robolearn.config); only its type is named here
    from robolearn.config import RunConfig


def spawn_server(task: str, policy: str, weights: str | None, endpoint_file: Path, port: int = 0,
                 policy_config: dict | None = None, extra_args: list[str] | None = None,
                 timeout_s: float = 120.0) -> tuple[subprocess.Popen, str]:
    """Start ``python -m robolearn.runtime.policy_server`` and wait until it is bound; returns (process, endpoint).
    Its output goes to ``endpoint_file`` with the suffix ``.log``."""
    endpoint_file = Path(endpoint_file)
    endpoint_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "robolearn.runtime.policy_server", "--task", task, "--policy", policy,
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


def serve_run(run: RunDir, cfg: RunConfig) -> int:
    """The run's policy server until SIGTERM (or the runtime is gone); returns the exit code."""
    stop = StopFlag()
    torch.set_num_threads(cfg.actor.threads)
    torch.manual_seed(cfg.seed)  # the exploration noise it samples for every actor
    deadline = time.monotonic() + cfg.runtime.startup_timeout_s
    while not (endpoints := read_json(run.endpoints)):
        if stop or time.monotonic() > deadline:
            print("[policy-server] no learner endpoints" + ("" if stop else " in time"), file=sys.stderr, flush=True)
            return 0 if stop else 2
        time.sleep(0.05)
    obs_spec, action_spec = task_specs(cfg)
    policy = build_policy(cfg, obs_spec, action_spec)
    runner = ChunkPolicyRunner(policy, obs_spec, action_spec.dim, explore=True)  # actors collect with it
    held = False
    if run.checkpoint.exists():  # a replacement: serve the last checkpoint's weights until newer ones come
        ckpt = load_checkpoint(run.checkpoint)
        policy.load_state_dict(ckpt.policy_weights)
        runner.version, held = ckpt.version, True
    earlier = read_json(run.policy_server) or {}  # the actors are connected to that port
    server = PolicyServer(runner, cfg.runtime.host, endpoint_port(earlier.get("endpoint")) or 0,
                          weights_endpoint=endpoints["weights"], keys=load_keys(cfg.runtime.keys_dir),
                          mid_timeout_s=cfg.runtime.mid_timeout_s)
    assert server.weights is not None
    while not held and not stop:  # a first start: nothing to answer with before the learner's first weights
        server.weights.poll(timeout_ms=50)
        if server.weights.apply_pending():
            runner.version, held = server.weights.version, True
        elif time.monotonic() > deadline:
            print("[policy-server] no weights from the learner in time", file=sys.stderr, flush=True)
            server.close()
            return 2
    if not held:  # stopped before the first weights came
        server.close()
        return 0
    write_json_atomic(run.policy_server, {"endpoint": server.endpoint, "pid": os.getpid()})
    print(f"[policy-server] serving v{runner.version} on {server.endpoint}", flush=True)
    t_status = t_print = 0.0
    while not stop:
        server.serve_once(50)
        now = time.monotonic()
        if now - t_status >= cfg.runtime.status_every_s:
            t_status = now
            write_json_atomic(run.status("policy-server"), {
                "pid": os.getpid(), "version": runner.version, "requests": server.requests,
                "batches": server.batches, "rejected_messages": server.rejects.total})
        if now - t_print >= 10.0:
            t_print = now
            print(f"[policy-server] served {server.requests} requests in {server.batches} batches, v{runner.version},"
                  f" rejected {server.rejects.total}", flush=True)
    server.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True)
    ap.add_argument("--policy", required=True)
    ap.add_argument("--weights", help="state dict file (torch.save) for the policy")
    ap.add_argument("--checkpoint", help="a run's checkpoint (runs/<name>/checkpoints/latest.pt) for the policy")
    ap.add_argument("--policy-config", default="{}", help="JSON of policy config fields, e.g. '{\"chunk_horizon\": 8}'")
    ap.add_argument("--task-config", default="{}",
                    help="JSON of task config fields, e.g. '{\"language\": true, \"cameras\": [\"front\"]}'")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--keys-dir", help="CurveZMQ keys (robolearn keys generate): the server folder; required "
                                       "for a non-loopback --host")
    ap.add_argument("--port", type=int, default=0, help="0 = a free port")
    ap.add_argument("--endpoint-file", help="write {\"endpoint\": ...} here once bound")
    ap.add_argument("--weights-endpoint", help="the learner's weight PUB endpoint to follow")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the forward pass")
    ap.add_argument("--extra-latency-ms", type=float, nargs=2, metavar=("LOW", "HIGH"),
                    help="answer each batch after a uniform draw in [LOW, HIGH] ms (emulates a heavier model)")
    ap.add_argument("--concurrent-latency", action="store_true",
                    help="with --extra-latency-ms: serve later batches while earlier answers wait out their latency "
                         "(a server that runs several requests at once), instead of one batch at a time")
    ap.add_argument("--mid-timeout-s", type=float, default=1.0,
                    help="a two-stage request whose mid observation has not come this long after is answered from "
                         "its first observation alone")
    args = ap.parse_args(argv)
    try:
        check_mid_timeout(args.mid_timeout_s, "--mid-timeout-s")
    except ValueError as exc:
        ap.error(str(exc))
    torch.set_num_threads(args.threads)
    register_builtins()
    runner = build_runner(args.task, args.policy, args.weights, json.loads(args.policy_config), args.checkpoint,
                          json.loads(args.task_config))
    server = PolicyServer(runner, args.host, args.port, args.max_batch, args.weights_endpoint,
                          tuple(args.extra_latency_ms) if args.extra_latency_ms else None,
                          keys=load_keys(args.keys_dir), concurrent_latency=args.concurrent_latency,
                          mid_timeout_s=args.mid_timeout_s)
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
