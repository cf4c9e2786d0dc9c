"""The weights channel, both ends: the learner's ``WeightPublisher`` (PUB) and the ``WeightSubscriber``
(SUB) of every actor and policy server.

A ``weights`` message (``transport.wire``) carries a full snapshot or a sparse delta of the policy's
state dict (``transport.weight_sync``), and the learner's ``LearnerStatus`` (``transport.learner_status``).
The subscriber applies every message to its reconstruction in order; the newest valid version waits in
``pending`` until its owner loads it at a chunk boundary.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
import zmq

from robolearn.transport.learner_status import LearnerStatus
from robolearn.transport.security import CurveKeys
from robolearn.transport.sockets import WEIGHTS_LIMITS, bind_random_port, connect, limit_receive, recv_valid, send
from robolearn.transport.weight_sync import DeltaPublisher, DeltaSubscriber
from robolearn.transport.wire import RejectCounter, WireError

WEIGHTS = "weights"


def weights_arrays(policy: torch.nn.Module) -> dict[str, np.ndarray]:
    """A policy's state dict as numpy arrays (what goes on the wire)."""
    return {k: v.detach().cpu().numpy() for k, v in policy.state_dict().items()}


class WeightPublisher:
    """PUB socket bound on ``host`` (at ``port``, 0: any free one): ``publish`` sends a new version, a sparse
    delta from the previous one when that is smaller, a full snapshot when ``full`` and every ``full_every``
    versions; ``heartbeat`` re-sends the last version in full, as it was published (weights changed since then
    go out as the next version, never under an old number).

    With ``version_file`` each published version is also written there (8 bytes in place: survives a kill of
    this process), and ``published_before`` reads what an earlier publisher of the run got to: a learner
    restarted from an older checkpoint publishes past it, since subscribers ignore versions not newer than
    the one they hold."""

    def __init__(self, ctx: zmq.Context, host: str, full_every: int, keys: CurveKeys | None = None, port: int = 0,
                 version_file: Path | None = None) -> None:
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.SNDHWM, 4)
        self.endpoint = bind_random_port(self.sock, host, keys, port)
        self._codec = DeltaPublisher(full_every)
        self._version_fd: int | None = None
        self.published_before = 0
        if version_file is not None:
            self._version_fd = os.open(version_file, os.O_RDWR | os.O_CREAT, 0o644)
            data = os.pread(self._version_fd, 8, 0)
            self.published_before = int.from_bytes(data, "little") if len(data) == 8 else 0

    def publish(self, version: int, policy: torch.nn.Module, status: LearnerStatus, full: bool = False) -> bool:
        """Sends ``version``; whether it went out as a full snapshot."""
        sync_meta, arrays = self._codec.encode(version, weights_arrays(policy), force_full=full)
        if self._version_fd is not None:  # before it leaves: no subscriber can hold a version not recorded
            os.pwrite(self._version_fd, version.to_bytes(8, "little"), 0)
        send(self.sock, WEIGHTS, "learner", version, {**status.to_meta(), **sync_meta}, arrays)
        return sync_meta["kind"] == "full"

    def heartbeat(self, status: LearnerStatus) -> None:
        """The last published version again, in full, with the learner's current ``status``."""
        sync_meta, arrays = self._codec.repeat()
        send(self.sock, WEIGHTS, "learner", sync_meta["version"], {**status.to_meta(), **sync_meta}, arrays)

    @property
    def bytes_ratio(self) -> float:
        """Bytes published / bytes had every version gone out in full (sparse deltas make it < 1)."""
        return self._codec.bytes_sent / max(1, self._codec.bytes_full)

    def close(self) -> None:
        self.sock.close(linger=0)
        if self._version_fd is not None:
            os.close(self._version_fd)


class WeightSubscriber:
    """SUB socket for ``weights`` messages.

    A message is rejected (and counted) when it is not valid wire format, lacks an integer version, its
    learner status is malformed, its arrays do not match the policy's parameters by name, shape and dtype,
    it is a delta on a version this receiver does not hold (it then waits for the next full snapshot), or
    the rebuilt weights fail the publisher's hash.
    """

    def __init__(self, ctx: zmq.Context, endpoint: str, policy: torch.nn.Module, rejects: RejectCounter,
                 keys: CurveKeys | None = None) -> None:
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        connect(limit_receive(self.sock, WEIGHTS_LIMITS), endpoint, keys)
        self.policy = policy
        self.rejects = rejects
        self.decoder = DeltaSubscriber({k: (tuple(v.shape), str(v.dtype).removeprefix("torch."))
                                        for k, v in policy.state_dict().items()})
        self.pending: tuple[int, dict[str, np.ndarray]] | None = None
        self.version = 0
        self.versions_received: set[int] = set()
        self.learner_status: LearnerStatus | None = None  # from the newest valid message

    def poll(self, timeout_ms: int = 0) -> None:
        """Take every waiting message (waiting up to ``timeout_ms`` for the first)."""
        if timeout_ms and not self.sock.poll(timeout_ms):
            return
        while (msg := recv_valid(self.sock, self.rejects, frozenset({WEIGHTS}))) is not None:
            try:
                status = LearnerStatus.from_meta(msg.meta)
            except WireError as exc:
                self.rejects.reject(str(exc))
                continue
            # the status holds whether or not the weights apply (a delta whose base a reconnect lost still
            # tells how far the learner is): an actor pacing itself on it must not stall for a full snapshot
            self.learner_status = status or self.learner_status
            version = msg.meta.get("version")
            if isinstance(version, int) and version == self.decoder.version and msg.meta.get("kind") == "full":
                continue  # a heartbeat of the version already held
            try:
                weights = self.decoder.apply(msg.meta, msg.arrays)
            except ValueError as exc:
                self.rejects.reject(str(exc))
                continue
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
