"""The transitions channel, acknowledged end to end: each actor's DEALER to the learner's ROUTER.

    actor -> learner   ``transitions``      meta ``BatchId`` {actor, batch}; arrays: one transition batch
    learner -> actor   ``transitions_ack``  meta ``Ack`` {actor, batch, status, reason}, sent only after the
                                            batch is on the buffer's disk (stored), or when it already was
                                            (duplicate), or will never be (rejected: invalid), or when an
                                            earlier batch of its episode has not arrived yet (later: the
                                            actor re-sends the earlier ones at once, this one after them)

The actor side (``TransitionSender``) writes every batch to its ``Spool`` on its own disk before sending it
and deletes it only on an ack, re-sends what stays unacknowledged for ``resend_after_s`` (a lost message),
everything unacknowledged at once whenever the connection is made again (a reset link, a restarted
learner), and, at start, whatever a previous run of the same actor left. Batch numbers
count up per actor across restarts, so the learner drops a re-sent batch it already stored by
``(actor, batch)``: at least once on the wire, exactly once in the buffer. A rejected batch is moved to
the spool's ``rejected/`` folder, never deleted.

Every step is journaled in the spool as it is taken (``stage``), before its batch is complete; a restarted
actor turns what its predecessor journaled into one batch marked ``cut`` (``recover_staged``): the learner
stores it and closes that episode, truncated at its last step.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import zmq

from robolearn.transition import FINAL_OBS_PREFIX
from robolearn.transport.security import CurveKeys
from robolearn.transport.sockets import (
    TRANSITIONS_LIMITS,
    ConnectionWatch,
    bind_random_port,
    connect,
    limit_receive,
)
from robolearn.transport.spool import Spool
from robolearn.transport.wire import Message, RejectCounter, WireError, decode, encode

TRANSITIONS, ACK = "transitions", "transitions_ack"
STATUSES = ("stored", "duplicate", "rejected", "later")
ACK_LIMITS = (64 * 1024, 100_000)


@dataclass(frozen=True)
class BatchId:
    actor: str   # the actor's stable name (actor-0, ...), not the robot it leased this time
    seq: int     # counts up per actor, across its restarts
    cut: bool = False  # the actor crashed after these steps: the episode ends here (truncated)

    def to_meta(self) -> dict:
        return {"actor": self.actor, "batch": self.seq, **({"cut": True} if self.cut else {})}

    @classmethod
    def from_meta(cls, meta: dict) -> BatchId | None:
        """None for a batch without one (it is stored, never de-duplicated); ``WireError`` if malformed."""
        if "batch" not in meta and "actor" not in meta:
            return None
        actor, seq, cut = meta.get("actor"), meta.get("batch"), meta.get("cut", False)
        if not isinstance(actor, str) or not actor or type(seq) is not int or seq < 0 or type(cut) is not bool:
            raise WireError(f"transitions: bad batch id actor={actor!r} batch={seq!r} cut={cut!r}")
        return cls(actor, seq, cut)


@dataclass(frozen=True)
class Ack:
    actor: str
    batch: int
    status: str           # stored | duplicate | rejected | later
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
        # told of every (re)connection: what is unacknowledged then may have been lost with the old one
        self._connections = ConnectionWatch(self.sock)
        connect(self.sock, endpoint, keys)
        self.rejects = RejectCounter()
        self.sent = self.acked = self.duplicates = self.rejected = self.later = 0
        self._sent_at: dict[int, float] = {}  # batch -> last send; spooled batches of an earlier run: due now
        self._next_check = 0.0
        self._filling: int | None = None  # the batch number the staged steps will go out as
        self._later_tries: dict[int, int] = {}  # batch -> times the learner answered "later"

    def _frames(self, robot_id: str, seq: int, arrays: dict[str, np.ndarray], cut: bool = False) -> list[bytes]:
        return [bytes(f) for f in encode(TRANSITIONS, robot_id, seq, BatchId(self.actor, seq, cut).to_meta(), arrays)]

    def stage(self, robot_id: str, step: dict[str, np.ndarray]) -> None:
        """Journal one step (a one-step batch) of the batch being filled, before the batch is complete."""
        if self._filling is None:
            self._filling = self.spool.next_seq()
        self.spool.stage(self._filling, self._frames(robot_id, self._filling, step))

    def send(self, robot_id: str, arrays: dict[str, np.ndarray]) -> None:
        """Spool, then transmit, one batch (the steps staged since the last one, when they were staged)."""
        seq = self._filling if self._filling is not None else self.spool.next_seq()
        self._filling = None
        frames = self._frames(robot_id, seq, arrays)
        self.spool.put(seq, frames)  # on this actor's disk before it leaves
        self.sent += 1
        self._transmit(seq, frames)

    def recover_staged(self) -> int:
        """Turn the steps a crashed predecessor journaled into batches marked ``cut`` (spooled, sent with the
        other pending batches). Returns how many steps were recovered."""
        steps = 0
        for seq, records in self.spool.staged().items():
            try:
                msgs = [decode(r, frozenset({TRANSITIONS})) for r in records]
            except WireError as exc:  # whole but not ours: kept aside, not a reason to crash every restart
                self.spool.set_aside_staged(seq, f"undecodable journal: {exc}")
                continue
            if not msgs:  # not one whole step was journaled
                self.spool.drop_staged(seq)
                continue
            arrays = {k: np.concatenate([m.arrays[k] for m in msgs]) for k in msgs[0].arrays
                      if not k.startswith(FINAL_OBS_PREFIX)}
            arrays |= {k: v for k, v in msgs[-1].arrays.items() if k.startswith(FINAL_OBS_PREFIX)}
            ended = bool(arrays["terminated"][-1] or arrays["truncated"][-1])  # killed as it sealed the batch
            self.spool.put(seq, self._frames(msgs[0].sender, seq, arrays, cut=not ended))
            steps += len(msgs)
        return steps

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
            if ack.status == "later":  # an earlier batch of its episode is missing there: those go first
                self.later += 1
                earlier = [seq for seq in self.spool.pending() if seq < ack.batch]
                if not earlier:  # nothing here can fill the gap (that batch was rejected, or corrupt): never
                    self.rejected += self.spool.reject(ack.batch, f"{ack.reason}; no earlier batch left to send")
                    continue
                for seq in earlier:
                    self._sent_at.pop(seq, None)
                # this one again soon after them, backing off should the gap persist (a batch lost for good)
                tries = self._later_tries[ack.batch] = self._later_tries.get(ack.batch, 0) + 1
                wait = min(self.resend_after_s, 0.25 * 2 ** (tries - 1))
                self._sent_at[ack.batch] = time.monotonic() - self.resend_after_s + wait
                self._next_check = 0.0
                continue
            self._sent_at.pop(ack.batch, None)
            self._later_tries.pop(ack.batch, None)
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
        if self._connections.made():
            self._sent_at.clear()  # a new connection: everything unacknowledged goes again, in order
        for seq in self.spool.pending():
            if now - self._sent_at.get(seq, -1e9) >= self.resend_after_s:
                frames = self.spool.read(seq)
                if frames:  # empty: it failed its checksum and was moved aside (spool.problems says so)
                    self._transmit(seq, frames)

    @property
    def reconnects(self) -> int:
        """Connections made to the learner (the first one too)."""
        return self._connections.connections

    def drain(self, timeout_s: float) -> bool:
        """Wait (bounded) until the learner acknowledged every spooled batch; True when none is left. What is
        left stays in the spool for the next start of this actor."""
        deadline = time.monotonic() + timeout_s
        while self.spool.pending() and time.monotonic() < deadline:
            self.poll(timeout_ms=50)
        return not self.spool.pending()

    def close(self) -> None:
        self._connections.close()
        self.sock.close()
        self.spool.close()
