"""The transitions channel, acknowledged end to end: each actor's DEALER to the learner's ROUTER.

    actor -> learner   ``transitions``      meta ``BatchId`` {actor, batch}; arrays: one transition batch
    learner -> actor   ``transitions_ack``  meta ``Ack`` {actor, batch, status, reason}, sent only after the
                                            batch is on the buffer's disk (stored), or when it already was
                                            (duplicate), or will never be (rejected: invalid)

The actor side (``TransitionSender``) writes every batch to its ``Spool`` on its own disk before sending it
and deletes it only on an ack, re-sends what stays unacknowledged for ``resend_after_s`` (a learner that
restarted, a lost message) and, at start, whatever a previous run of the same actor left. Batch numbers
count up per actor across restarts, so the learner drops a re-sent batch it already stored by
``(actor, batch)``: at least once on the wire, exactly once in the buffer. A rejected batch is moved to
the spool's ``rejected/`` folder, never deleted.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import zmq

from robolearn.transport.security import CurveKeys
from robolearn.transport.sockets import TRANSITIONS_LIMITS, bind_random_port, connect, limit_receive
from robolearn.transport.spool import Spool
from robolearn.transport.wire import Message, RejectCounter, WireError, decode, encode

TRANSITIONS, ACK = "transitions", "transitions_ack"
STATUSES = ("stored", "duplicate", "rejected")
ACK_LIMITS = (64 * 1024, 100_000)


@dataclass(frozen=True)
class BatchId:
    actor: str   # the actor's stable name (actor-0, ...), not the robot it leased this time
    seq: int     # counts up per actor, across its restarts

    def to_meta(self) -> dict:
        return {"actor": self.actor, "batch": self.seq}

    @classmethod
    def from_meta(cls, meta: dict) -> BatchId | None:
        """None for a batch without one (it is stored, never de-duplicated); ``WireError`` if malformed."""
        if "batch" not in meta and "actor" not in meta:
            return None
        actor, seq = meta.get("actor"), meta.get("batch")
        if not isinstance(actor, str) or not actor or type(seq) is not int or seq < 0:
            raise WireError(f"transitions: bad batch id actor={actor!r} batch={seq!r}")
        return cls(actor, seq)


@dataclass(frozen=True)
class Ack:
    actor: str
    batch: int
    status: str           # stored | duplicate | rejected
    reason: str = ""      # why it was rejected

    @classmethod
    def from_meta(cls, meta: dict) -> Ack:
        try:
            ack = cls(meta["actor"], meta["batch"], meta["status"], meta.get("reason", ""))
        except KeyError as exc:
            raise WireError(f"transitions_ack: missing {exc.args[0]!r}") from None
        if type(ack.batch) is not int or ack.status not in STATUSES or not isinstance(ack.reason, str):
            raise WireError(f"transitions_ack: malformed {meta!r}")
        return ack


class TransitionReceiver:
    """The learner's ROUTER: ``recv`` gives (peer, message) of each well-formed transitions message,
    ``ack`` answers that peer."""

    def __init__(self, ctx: zmq.Context, host: str, rejects: RejectCounter, keys: CurveKeys | None = None,
                 port: int = 0) -> None:
        self.sock = limit_receive(ctx.socket(zmq.ROUTER), TRANSITIONS_LIMITS)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # an ack to a vanished actor is dropped: it re-sends
        self.endpoint = bind_random_port(self.sock, host, keys, port)
        self.rejects = rejects

    def recv(self) -> tuple[bytes, Message] | None:
        """The next waiting message (None when none is); a malformed one raises ``WireError``."""
        try:
            frames = self.sock.recv_multipart(flags=zmq.NOBLOCK)
        except zmq.Again:
            return None
        return frames[0], decode(frames[1:], frozenset({TRANSITIONS}))

    def ack(self, peer: bytes, batch: BatchId, status: str, reason: str = "") -> None:
        meta = asdict(Ack(batch.actor, batch.seq, status, reason[:500]))
        self.sock.send_multipart([peer, *encode(ACK, "learner", batch.seq, meta)], copy=False)

    def close(self) -> None:
        self.sock.close(linger=0)


class TransitionSender:
    """An actor's DEALER with its spool (see the module docstring). ``send`` never blocks and never drops."""

    def __init__(self, ctx: zmq.Context, endpoint: str, actor: str, spool: Spool, keys: CurveKeys | None = None,
                 resend_after_s: float = 5.0) -> None:
        self.actor, self.spool, self.resend_after_s = actor, spool, resend_after_s
        self.sock = limit_receive(ctx.socket(zmq.DEALER), ACK_LIMITS)
        self.sock.setsockopt(zmq.SNDHWM, 100_000)
        self.sock.setsockopt(zmq.LINGER, 0)  # what is unacknowledged stays in the spool, not in zmq's queue
        self.sock.setsockopt(zmq.IMMEDIATE, 1)  # no learner connected: refuse (it is spooled) rather than queue
        connect(self.sock, endpoint, keys)
        self.rejects = RejectCounter()
        self.sent = self.acked = self.duplicates = self.rejected = 0
        self._sent_at: dict[int, float] = {}  # batch -> last send; spooled batches of an earlier run: due now
        self._next_check = 0.0

    def send(self, robot_id: str, arrays: dict[str, np.ndarray]) -> None:
        seq = self.spool.next_seq()
        frames = [bytes(f) for f in encode(TRANSITIONS, robot_id, seq, BatchId(self.actor, seq).to_meta(), arrays)]
        self.spool.put(seq, frames)  # on this actor's disk before it leaves
        self.sent += 1
        self._transmit(seq, frames)

    def _transmit(self, seq: int, frames: list[bytes]) -> None:
        try:
            self.sock.send_multipart(frames, flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # no learner connected, or its queue full: still spooled, re-sent later
        self._sent_at[seq] = time.monotonic()

    def poll(self, timeout_ms: int = 0) -> int:
        """Take every waiting ack; re-send what is due. Returns the number of acks taken."""
        got = 0
        if timeout_ms and not self.sock.poll(timeout_ms):
            self.resend_due()
            return 0
        while True:
            try:
                frames = self.sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                ack = Ack.from_meta(decode(frames, frozenset({ACK})).meta)
            except WireError as exc:
                self.rejects.reject(str(exc))
                continue
            if ack.actor != self.actor:
                self.rejects.reject(f"an ack for {ack.actor}, this is {self.actor}")
                continue
            got += 1
            self._sent_at.pop(ack.batch, None)
            self.duplicates += ack.status == "duplicate"
            if ack.status == "rejected":
                self.rejected += self.spool.reject(ack.batch, ack.reason)
            else:
                self.acked += self.spool.remove(ack.batch)  # a second ack of one batch counts once
        self.resend_due()
        return got

    def resend_due(self) -> None:
        now = time.monotonic()
        if now < self._next_check:  # looked at most every 0.2 s: a control loop calls poll every tick
            return
        self._next_check = now + 0.2
        for seq in self.spool.pending():
            if now - self._sent_at.get(seq, -1e9) >= self.resend_after_s:
                frames = self.spool.read(seq)
                if frames:  # empty: it failed its checksum and was moved aside (spool.problems says so)
                    self._transmit(seq, frames)

    def drain(self, timeout_s: float) -> bool:
        """Wait (bounded) until the learner acknowledged every spooled batch; True when none is left. What is
        left stays in the spool for the next start of this actor."""
        deadline = time.monotonic() + timeout_s
        while self.spool.pending() and time.monotonic() < deadline:
            self.poll(timeout_ms=50)
        return not self.spool.pending()

    def close(self) -> None:
        self.sock.close()
