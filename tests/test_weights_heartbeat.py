"""Heartbeats on the weights channel: a policy server or actor that subscribes late gets the learner's newest weights
within a heartbeat, even while every new version goes out as a sparse delta (which it cannot apply without the
version before). A version names one set of weights: a heartbeat repeats a version as it was published, however much
the learner trained since (a subscriber that holds the version skips the repeat, and its next delta must still
apply), or publishes what was trained as a new version when versions are slower than heartbeats; a restarted learner
publishes its restored weights past the checkpoint's version."""

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import zmq

from robolearn.builders import build_task
from robolearn.config import validate
from robolearn.learner.loop import Learner
from robolearn.logging.status import read_json
from robolearn.rundir import RunDir
from robolearn.transport.sockets import recv_valid
from robolearn.transport.spool import Spool
from robolearn.transport.transitions import TransitionSender
from robolearn.transport.weights import WEIGHTS, WeightSubscriber
from robolearn.transport.wire import RejectCounter
from tests.helpers import wait_for
from tests.test_cli_config import _cfg
from tests.test_transitions_channel import _batches


class _Stop:
    """The learner's stop flag (a ``StopFlag`` would take the test's signals)."""

    def __init__(self) -> None:
        self.set = False

    def __bool__(self) -> bool:
        return self.set


@dataclass
class _Rig:
    learner: Learner
    endpoints: dict
    ctx: zmq.Context
    sender: TransitionSender

    def subscribe(self, rejects: RejectCounter) -> WeightSubscriber:
        return WeightSubscriber(self.ctx, self.endpoints["weights"], self.learner.policy, rejects)


@contextlib.contextmanager
def _learner(tmp_path, **overrides: str) -> Iterator[_Rig]:
    """A learner on reach in a thread, sent 4 episodes of transitions. Only the state normaliser's statistics change
    between versions (the actor's own layers wait 10^6 updates), so versions go out as sparse deltas. Stopped and
    joined on exit."""
    cfg = validate(_cfg(task="reach", run_name="hb", **{
        "policy.hidden_dims": "[16,16]", "algo.critic_hidden_dims": "[16,16]", "algo.actor_update_every": "1000000",
        "learner.batch_size": "16", "learner.learning_starts": "16", "learner.utd_ratio": "200",
        "learner.weights_full_every": "100000", "learner.prefetch_batches": "0", **overrides}))
    run = RunDir(tmp_path / "run")
    stop = _Stop()
    learner = Learner(run, cfg, stop)
    thread = threading.Thread(target=learner.run_forever, daemon=True)
    thread.start()
    env = build_task(cfg)
    ctx = zmq.Context()
    sender = None
    try:
        endpoints = wait_for(lambda: read_json(run.endpoints), 30, "the learner's endpoints")
        sender = TransitionSender(ctx, endpoints["transitions"], "actor-0", Spool(tmp_path / "spool", 10**8))
        rig = _Rig(learner, endpoints, ctx, sender)
        for b in _batches(env, episodes=4, steps=12, per_batch=4):
            sender.send("sim_so101-0", b)
        yield rig
    finally:
        stop.set = True
        thread.join(timeout=30)
        if sender is not None:
            sender.close()
        ctx.term()
        env.close()
    assert not thread.is_alive()


def test_a_late_subscriber_gets_a_full_snapshot_within_a_heartbeat_while_deltas_go_out(tmp_path):
    # a version every update, sparse deltas one after the other, faster than the heartbeat
    with _learner(tmp_path, **{"learner.publish_every": "1", "learner.weights_heartbeat_s": "0.5"}) as rig:
        learner = rig.learner
        wait_for(lambda: (rig.sender.poll(timeout_ms=20), learner.version > 20)[1], 60, "versions past 20")
        assert learner.publisher.bytes_ratio < 0.5, "the versions were meant to go out as deltas"
        sub = rig.subscribe(RejectCounter())
        try:
            joined_at = learner.version
            got = wait_for(lambda: (sub.poll(timeout_ms=50), sub.pending)[1], 5,
                           "a version the late subscriber can hold")
            assert got[0] > joined_at and learner.algo.num_updates < learner._updates_due(), "updates still going on"
        finally:
            sub.close()


def test_a_version_names_one_set_of_weights_and_a_heartbeat_publishes_what_was_trained_since(tmp_path):
    # 50 updates between versions, the actor's layers trained at each, and a heartbeat every 20 ms: the learner trains
    # across heartbeats. A heartbeat must not send the weights trained since under the version already out (a
    # subscriber holding it skips the repeat, and the next delta then patches a copy it never had); it makes them a
    # new version, so they reach actors within a heartbeat however slow the updates
    overrides = {"learner.publish_every": "50", "learner.weights_heartbeat_s": "0.02",
                 "algo.actor_update_every": "1"}
    digests: dict[int, set[str]] = {}
    with _learner(tmp_path, **overrides) as rig:
        sock = rig.ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(rig.endpoints["weights"])
        try:
            def take() -> bool:
                rig.sender.poll(timeout_ms=2)
                while (msg := recv_valid(sock, RejectCounter(), frozenset({WEIGHTS}))) is not None:
                    version = msg.meta["version"]
                    digests.setdefault(version, set()).add(msg.meta["sha256"])
                return len(digests) >= 30
            wait_for(take, 60, "30 versions")
        finally:
            sock.close(linger=0)
    renamed = {v: d for v, d in digests.items() if len(d) > 1}
    assert not renamed, f"versions sent with other weights under the same number: {sorted(renamed)}"
    versions_by_count = 1 + rig.learner.algo.num_updates // 50  # the first version, then one per publish_every
    assert rig.learner.version > versions_by_count, "no heartbeat published the updates since the last version"


def test_heartbeats_add_no_version_while_versions_go_out_faster_than_them(tmp_path):
    # a version every 5 updates (milliseconds apart) and a heartbeat every 0.2 s: the heartbeats repeat the last
    # version, so the versions stay one per publish_every updates (what policy-lag figures count)
    overrides = {"learner.publish_every": "5", "learner.weights_heartbeat_s": "0.2"}
    with _learner(tmp_path, **overrides) as rig:
        wait_for(lambda: (rig.sender.poll(timeout_ms=20), rig.learner.algo.num_updates >= 1500)[1], 60,
                 "1,500 updates (several heartbeats)")
    learner = rig.learner
    assert learner.version == 1 + learner.algo.num_updates // 5


def test_a_restarted_learner_publishes_its_restored_weights_past_the_checkpoints_version(tmp_path):
    # the checkpoint at the stop holds the weights after every update, newer than those its version went out with
    # (publish_every 1000: no version after the first); the restart must not send them under that number
    overrides = {"learner.publish_every": "1000", "learner.weights_heartbeat_s": "60"}
    with _learner(tmp_path, **overrides) as rig:
        wait_for(lambda: (rig.sender.poll(timeout_ms=20), rig.learner.algo.num_updates >= 50)[1], 60, "50 updates")
    first = rig.learner
    assert first.version == 1 and first.algo.num_updates >= 50  # the checkpoint: version 1, the trained weights
    with _learner(tmp_path, **overrides) as rig:
        assert rig.learner.algo.num_updates >= first.algo.num_updates  # restored from the checkpoint
        assert rig.learner.version == 2
