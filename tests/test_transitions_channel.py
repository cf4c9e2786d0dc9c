"""The acknowledged transitions channel: a batch leaves the actor's spool only when the learner has it on disk,
what a learner that was not there missed is re-sent, and a batch the learner already stored (a re-send after a
lost ack, or after a restart) is acknowledged and dropped, once in the buffer. Counts come from the actor's own
sender and the buffer on disk, not from the learner's counters."""

import time

import numpy as np
import pytest
import zmq

from robolearn.builders import build_task
from robolearn.config import validate
from robolearn.learner.loop import Learner
from robolearn.logging.recording import Recording
from robolearn.rundir import RunDir
from robolearn.transition import TransitionWriter
from robolearn.transport.spool import Spool
from robolearn.transport.transitions import TransitionReceiver, TransitionSender
from robolearn.transport.wire import RejectCounter
from tests.helpers import free_port, read_buffer
from tests.test_cli_config import _cfg


def _batches(env, episodes=2, steps=6, per_batch=3) -> list[dict[str, np.ndarray]]:
    out = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=ep)
        w = TransitionWriter(env.observation_spec)
        for t in range(steps):
            a = np.zeros(env.action_spec.dim, np.float32)
            nxt, r, _, _, _ = env.step(a)
            w.add(obs, a, action_source=0, intervention=False, reward=r, terminated=False, truncated=t == steps - 1,
                  success=False, episode_id=ep, step=t, tick=t, t_obs=0.0, t_act=0.0, policy_version=1, chunk_id=0,
                  chunk_index=0, delay_ticks=0)
            obs = nxt
            if len(w) == per_batch:
                out.append(w.flush(final_obs=obs) if t == steps - 1 else w.flush())
    return out


def test_the_spool_keeps_batches_until_acknowledged_and_numbers_never_repeat(tmp_path):
    spool = Spool(tmp_path / "s", max_bytes=100)
    seqs = [spool.next_seq() for _ in range(3)]
    for seq in seqs:
        spool.put(seq, [b"header", b"x" * 40])
    assert spool.pending() == [0, 1, 2] and spool.full
    spool.remove(1)
    spool.reject(2, "wrong observation shape")
    assert spool.pending() == [0] and not spool.full
    assert (tmp_path / "s" / "rejected" / "000000000002.reason.txt").read_text().startswith("wrong observation")
    (tmp_path / "s" / "000000000007.msg.tmp").write_bytes(b"torn")  # a write a crash cut
    again = Spool(tmp_path / "s", max_bytes=100)  # the actor restarts
    assert again.pending() == [0] and again.read(0) == [b"header", b"x" * 40]
    assert again.next_seq() == 3  # after everything ever numbered, acknowledged or not
    (tmp_path / "s" / "000000000000.msg").write_bytes(b"\x02\x00\x00\x00garbage")
    assert again.read(0) == [] and again.pending() == [] and "checksum" in again.problems[0]


@pytest.fixture
def learner(tmp_path):
    cfg = validate(_cfg(task="reach", run_name="acks", **{"policy.hidden_dims": "[16,16]",
                                                        "algo.critic_hidden_dims": "[16,16]"}))
    made = []

    def make():
        lr = Learner(RunDir(tmp_path / "run"), cfg, stop=None)
        lr.recording = Recording(tmp_path / "run", "acks")  # what run_forever opens before it ingests
        made.append(lr)
        return lr

    yield make
    for lr in made:
        lr.buffer.close()


def test_batches_sent_while_no_learner_listens_arrive_once_it_does(tmp_path, learner):
    env = build_task(validate(_cfg()))
    batches = _batches(env)
    ctx = zmq.Context()
    port = free_port()
    spool = Spool(tmp_path / "spool", 10**8)
    sender = TransitionSender(ctx, f"tcp://127.0.0.1:{port}", "actor-0", spool, resend_after_s=1.0)
    for b in batches:
        sender.send("sim_so101-0", b)
    assert len(spool.pending()) == len(batches)  # nobody there: all kept on the actor's disk
    lr = learner()
    receiver = TransitionReceiver(ctx, "127.0.0.1", RejectCounter(), port=port)  # the port the actor was told
    try:
        deadline = time.monotonic() + 10
        while spool.pending() and time.monotonic() < deadline:
            lr._ingest(receiver, 100)
            sender.poll(timeout_ms=20)
        assert spool.pending() == [] and sender.acked == len(batches)
        assert sender.duplicates == 0  # each acknowledged once it was stored, none had to go twice
        stored = read_buffer(tmp_path / "run")
        assert sum(len(b["action"]) for b in stored) == sum(len(b["action"]) for b in batches)  # all, once
    finally:
        sender.close()
        receiver.close()
        ctx.term()
        env.close()


def test_a_resent_batch_is_stored_once_even_after_the_learner_restarts(tmp_path, learner):
    env = build_task(validate(_cfg()))
    batches = _batches(env, episodes=1)
    ctx = zmq.Context()
    lr = learner()
    receiver = TransitionReceiver(ctx, "127.0.0.1", RejectCounter())
    spool = Spool(tmp_path / "spool", 10**8)
    # the re-sends below are the test's own: the sender's timed one (an unanswered batch) must not add one on a
    # loaded machine, so it waits far longer than the test runs
    sender = TransitionSender(ctx, receiver.endpoint, "actor-0", spool, resend_after_s=60.0)

    def exchange():
        lr._ingest(receiver, 100)
        sender.poll(timeout_ms=10)

    def exchange_until(done, timeout_s=10.0):
        """Both sides take what came until ``done()`` holds (then a little more, for anything extra that comes)."""
        deadline = time.monotonic() + timeout_s
        while not done() and time.monotonic() < deadline:
            exchange()
        for _ in range(20):
            exchange()

    try:
        # a new connection re-sends whatever is unacknowledged (the first one too): the batch goes once it is up,
        # or on a loaded machine the handshake seen after the send would send it a second time
        exchange_until(lambda: sender.reconnects == 1)
        sender.send("sim_so101-0", batches[0])
        frames = spool.read(0)
        exchange_until(lambda: not spool.pending())
        assert spool.pending() == [] and lr.duplicates == 0
        sender.sock.send_multipart(frames)  # the same batch again, as from an actor whose ack was lost
        exchange_until(lambda: sender.duplicates == 1)
        assert lr.duplicates == 1 and sender.duplicates == 1
        lr.buffer.close()
        lr = learner()  # the learner restarts on the same buffer
        sender.sock.send_multipart(frames)  # and the batch comes once more
        exchange_until(lambda: sender.duplicates == 2)
        assert lr.duplicates == 1  # the new learner's own count: the re-send was known from the disk
        stored = read_buffer(tmp_path / "run")
        assert sum(len(b["action"]) for b in stored) == len(batches[0]["action"])
    finally:
        sender.close()
        receiver.close()
        ctx.term()
        env.close()


def _one_step_batches(batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """Each step of ``batches`` as a one-step batch, as ``TransitionRecorder`` stages them."""
    out = []
    for b in batches:
        n = len(b["action"])
        for i in range(n):
            one = {k: v[i:i + 1] for k, v in b.items() if not k.startswith("final_obs.")}
            if i == n - 1:
                one |= {k: v for k, v in b.items() if k.startswith("final_obs.")}
            out.append(one)
    return out


def test_steps_journaled_before_their_batch_was_complete_survive_a_kill_as_a_cut_batch(tmp_path, learner):
    env = build_task(validate(_cfg()))
    batches = _batches(env, episodes=1, steps=6, per_batch=3)
    steps = _one_step_batches(batches)
    ctx = zmq.Context()
    spool = Spool(tmp_path / "spool", 10**8)
    sender = TransitionSender(ctx, "tcp://127.0.0.1:1", "actor-0", spool)
    for s in steps[:3]:
        sender.stage("sim_so101-0", s)
    sender.send("sim_so101-0", batches[0])  # the batch is complete: its journal goes
    assert not list((tmp_path / "spool").glob("*.open"))
    for s in steps[3:5]:
        sender.stage("sim_so101-0", s)  # two steps of the next batch, then the actor is killed
    sender.close()
    journal = next((tmp_path / "spool").glob("*.open"))
    with open(journal, "ab") as f:
        f.write(b"\x05\x00\x00")  # the kill tore the write of a third step
    again = Spool(tmp_path / "spool", 10**8)
    sender = TransitionSender(ctx, "tcp://127.0.0.1:1", "actor-0", again)
    assert sender.recover_staged() == 2 and "torn" in again.problems[0]
    assert again.pending() == [0, 1] and not list((tmp_path / "spool").glob("*.open"))
    lr = learner()
    receiver = TransitionReceiver(ctx, "127.0.0.1", RejectCounter())
    sender.close()
    sender = TransitionSender(ctx, receiver.endpoint, "actor-0", again, resend_after_s=0.2)
    try:
        deadline = time.monotonic() + 10
        while again.pending() and time.monotonic() < deadline:
            lr._ingest(receiver, 100)
            sender.poll(timeout_ms=10)
        assert again.pending() == [] and lr.cut_episodes == 1
        ep = lr.buffer.episode("sim_so101-0", 0)
        assert ep.n_steps == 5 and ep.ended  # closed where the actor stopped, not left open
        stored = read_buffer(tmp_path / "run")
        assert [int(s) for b in stored for s in b["step"]] == [0, 1, 2, 3, 4]
    finally:
        sender.close()
        receiver.close()
        ctx.term()
        env.close()


def test_a_batch_ahead_of_a_missing_one_is_answered_later_and_the_missing_ones_go_first(tmp_path, learner):
    env = build_task(validate(_cfg()))
    batches = _batches(env, episodes=1, steps=9, per_batch=3)
    ctx = zmq.Context()
    port = free_port()
    spool = Spool(tmp_path / "spool", 10**8)
    # a long resend timer: only the learner's "later" can bring the first two back quickly
    sender = TransitionSender(ctx, f"tcp://127.0.0.1:{port}", "actor-0", spool, resend_after_s=60.0)
    for b in batches[:2]:
        sender.send("sim_so101-0", b)  # sent while the learner is down: lost on the wire, kept in the spool
    lr = learner()
    receiver = TransitionReceiver(ctx, "127.0.0.1", RejectCounter(), port=port)
    try:
        deadline = time.monotonic() + 5
        while not sender.sock.poll(0, zmq.POLLOUT) and time.monotonic() < deadline:
            time.sleep(0.02)  # connected again
        time.sleep(0.2)
        assert sender._connections.made()  # taken now, so the re-send on reconnection cannot bring 0-5 back below
        sender.send("sim_so101-0", batches[2])  # steps 6-8 arrive before 0-5
        t0 = time.monotonic()
        while spool.pending() and time.monotonic() - t0 < 10:
            lr._ingest(receiver, 100)
            sender.poll(timeout_ms=10)
        assert spool.pending() == [] and time.monotonic() - t0 < 10
        assert lr.out_of_order >= 1 and sender.later >= 1 and sender.rejected == 0 and lr.rejects.total == 0
        assert sender.reconnects == 1  # one connection all along: "later" alone brought the missing ones
        stored = read_buffer(tmp_path / "run")
        assert [int(s) for b in stored for s in b["step"]] == list(range(9))
        assert lr.buffer.episode("sim_so101-0", 0).ended
    finally:
        sender.close()
        receiver.close()
        ctx.term()
        env.close()
