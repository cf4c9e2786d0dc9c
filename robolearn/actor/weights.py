"""The actor's side of weight sync: receive versioned weights, validate them, apply at chunk boundaries."""

from __future__ import annotations

import numpy as np
import torch
import zmq

from robolearn.transport.sockets import recv_valid
from robolearn.transport.weight_sync import DeltaSubscriber
from robolearn.transport.wire import RejectCounter

WEIGHTS = frozenset({"weights"})


class WeightSubscriber:
    """SUB socket for ``weights`` messages (full snapshots or sparse deltas, ``transport.weight_sync``).
    Every message is applied to the reconstruction in order; the newest valid version waits in
    ``pending`` until the actor loads it.

    A message is rejected (and counted) when it is not valid wire format, lacks an integer version, its
    arrays do not match the policy's parameters by name, shape and dtype, it is a delta on a version this
    receiver does not hold (it then waits for the next full snapshot), or the rebuilt weights fail the
    publisher's hash.
    """

    def __init__(self, ctx: zmq.Context, endpoint: str, policy: torch.nn.Module, rejects: RejectCounter) -> None:
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.setsockopt(zmq.RCVHWM, 64)  # deltas must not be dropped silently before they are read
        self.sock.connect(endpoint)
        self.policy = policy
        self.rejects = rejects
        self.decoder = DeltaSubscriber({k: (tuple(v.shape), str(v.dtype).removeprefix("torch."))
                                        for k, v in policy.state_dict().items()})
        self.pending: tuple[int, dict[str, np.ndarray]] | None = None
        self.version = 0
        self.versions_received: set[int] = set()
        self.learner_meta: dict = {}

    def poll(self, timeout_ms: int = 0) -> None:
        """Take every waiting message (waiting up to ``timeout_ms`` for the first)."""
        if timeout_ms and not self.sock.poll(timeout_ms):
            return
        while (msg := recv_valid(self.sock, self.rejects, WEIGHTS)) is not None:
            version = msg.meta.get("version")
            if isinstance(version, int) and version == self.decoder.version and msg.meta.get("kind") == "full":
                self.learner_meta = msg.meta  # a heartbeat of the version already held
                continue
            try:
                weights = self.decoder.apply(msg.meta, msg.arrays)
            except ValueError as exc:
                self.rejects.reject(str(exc))
                continue
            self.learner_meta = msg.meta
            newest = self.pending[0] if self.pending else self.version
            if version > newest:
                self.pending = (version, weights)

    def apply_pending(self) -> bool:
        """Load the newest received version into the policy (call at a chunk boundary)."""
        if self.pending is None:
            return False
        version, weights = self.pending
        self.policy.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        self.version = version
        self.versions_received.add(version)
        self.pending = None
        return True

    def close(self) -> None:
        self.sock.close(linger=0)
