"""The actor's side of weight sync: receive versioned weights, validate them, apply at chunk boundaries."""

from __future__ import annotations

import numpy as np
import torch
import zmq

from robolearn.transport.sockets import recv_valid
from robolearn.transport.wire import Message, RejectCounter

WEIGHTS = frozenset({"weights"})


class WeightSubscriber:
    """SUB socket for ``weights`` messages. Keeps only the newest valid version until it is applied.

    A message is rejected (and counted) when it is not valid wire format, lacks an integer version, or
    its arrays do not match the policy's parameters by name, shape and dtype.
    """

    def __init__(self, ctx: zmq.Context, endpoint: str, policy: torch.nn.Module, rejects: RejectCounter) -> None:
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.setsockopt(zmq.RCVHWM, 4)
        self.sock.connect(endpoint)
        self.policy = policy
        self.rejects = rejects
        self._expected = {k: (tuple(v.shape), str(v.dtype).removeprefix("torch."))
                          for k, v in policy.state_dict().items()}
        self.pending: Message | None = None
        self.version = 0
        self.versions_received: set[int] = set()
        self.learner_meta: dict = {}

    def poll(self, timeout_ms: int = 0) -> None:
        """Take every waiting message (waiting up to ``timeout_ms`` for the first)."""
        if timeout_ms and not self.sock.poll(timeout_ms):
            return
        while (msg := recv_valid(self.sock, self.rejects, WEIGHTS)) is not None:
            reason = self._check(msg)
            if reason:
                self.rejects.reject(reason)
                continue
            self.learner_meta = msg.meta
            newest = self.pending.meta["version"] if self.pending else self.version
            if msg.meta["version"] > newest:
                self.pending = msg

    def _check(self, msg: Message) -> str:
        version = msg.meta.get("version")
        if not isinstance(version, int) or version < 1:
            return f"weights without a valid version: {version!r}"
        if set(msg.arrays) != set(self._expected):
            return f"weights do not match the policy's parameters: {sorted(set(msg.arrays) ^ set(self._expected))}"
        for name, arr in msg.arrays.items():
            shape, dtype = self._expected[name]
            if tuple(arr.shape) != shape or arr.dtype != np.dtype(dtype):
                return f"weights '{name}': {arr.dtype}{tuple(arr.shape)} != {dtype}{shape}"
        return ""

    def apply_pending(self) -> bool:
        """Load the newest received version into the policy (call at a chunk boundary)."""
        if self.pending is None:
            return False
        state = {k: torch.from_numpy(np.array(v)) for k, v in self.pending.arrays.items()}
        self.policy.load_state_dict(state)
        self.version = self.pending.meta["version"]
        self.versions_received.add(self.version)
        self.pending = None
        return True

    def close(self) -> None:
        self.sock.close(linger=0)
