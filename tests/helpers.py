"""Helpers for tests that run the real CLI and worker processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from robolearn.buffer.log import SegmentLog

BIN = Path(sys.executable).parent


def robolearn(args: list[str], cwd: Path, timeout: float = 240, **popen) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(BIN / "robolearn"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env, **popen)


def start_robolearn(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([str(BIN / "robolearn"), *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


# the browser tests and bench-gui drive Debian's chromium headless (never a downloaded browser); without the
# background-networking flags it keeps trying hosts this machine cannot reach
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def free_port() -> int:
    """A TCP port nothing listens on now (for a server a test starts on a port it must know first)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def read_buffer(run_dir: Path) -> list[dict[str, np.ndarray]]:
    """Every transition batch the run's buffer holds, in order (read with robolearn's own reader, read-only: the
    run may still be writing, and a writable open would repair a tail it is in the middle of appending)."""
    log = SegmentLog(run_dir / "buffer", read_only=True)
    try:
        return [dict(m.arrays, _sender=m.sender) for _, m in log.read_messages(frozenset({"transitions"}))]
    finally:
        log.close()


def fast_run_overrides(name: str, minutes: float) -> list[str]:
    """A tiny network and frequent publishing, so a short run shows many weight versions."""
    return [f"run_name={name}", f"budget.minutes={minutes}", "policy.hidden_dims=[32,32]",
            "algo.critic_hidden_dims=[32,32]", "learner.batch_size=32", "learner.learning_starts=100",
            "learner.publish_every=10", "learner.checkpoint_every_s=2", "runtime.live_console=false"]


def serve_in_one_batch(policy, obs_spec, observations: list[dict[str, np.ndarray]],
                       version: int = 0) -> tuple[list[np.ndarray], list[int]]:
    """Each observation from its own robot (a ``RemoteClient``) to one ``PolicyServer`` of ``policy``, all asked
    before the server looks, so one forward pass can serve them: the robots' chunks (each as its client checked
    it: (policy.horizon, A)) and the server's batch sizes."""
    from robolearn.inference.client import RemoteClient
    from robolearn.inference.protocol import ChunkRequest
    from robolearn.inference.runner import ChunkPolicyRunner
    from robolearn.inference.server import PolicyServer

    dim = policy.action_dim if hasattr(policy, "action_dim") else policy.action_spec.dim
    server = PolicyServer(ChunkPolicyRunner(policy, obs_spec, dim, version=version))
    clients = [RemoteClient(server.endpoint, f"robot-{i}", policy.horizon, dim) for i in range(len(observations))]
    try:
        for i, (c, obs) in enumerate(zip(clients, observations)):
            c.submit(ChunkRequest(i, 10, obs, np.zeros((0, dim), np.float32), planned_delay=0, robot_id=f"robot-{i}"))
        time.sleep(0.2)  # all are waiting: one forward pass serves them
        served = 0
        while served < len(observations):
            served += server.serve_once(1000)
        chunks = [c.poll(0, timeout_ms=5000)[0].actions for c in clients]
    finally:
        for c in clients:
            c.close()
        server.close()
    return chunks, list(server.batch_sizes)
