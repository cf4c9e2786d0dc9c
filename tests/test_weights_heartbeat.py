"""A policy server or actor that subscribes late gets the learner's newest weights within a heartbeat, even while
every new version goes out as a sparse delta (which it cannot apply without the version before)."""

import threading

import zmq

from robolearn.builders import build_task
from robolearn.config import validate
from robolearn.learner.loop import Learner
from robolearn.logging.status import read_json
from robolearn.rundir import RunDir
from robolearn.transport.spool import Spool
from robolearn.transport.transitions import TransitionSender
from robolearn.transport.weights import WeightSubscriber
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


def test_a_late_subscriber_gets_a_full_snapshot_within_a_heartbeat_while_deltas_go_out(tmp_path):
    # a version every update, and only the state normaliser's statistics change between versions (the actor's
    # own layers wait 10^6 updates): sparse deltas, one after the other, faster than the heartbeat
    cfg = validate(_cfg(task="reach", run_name="hb", **{
        "policy.hidden_dims": "[16,16]", "algo.critic_hidden_dims": "[16,16]", "algo.actor_update_every": "1000000",
        "learner.batch_size": "16", "learner.learning_starts": "16", "learner.utd_ratio": "200",
        "learner.publish_every": "1", "learner.weights_full_every": "100000", "learner.weights_heartbeat_s": "0.5",
        "learner.prefetch_batches": "0"}))
    run = RunDir(tmp_path / "run")
    stop = _Stop()
    learner = Learner(run, cfg, stop)
    thread = threading.Thread(target=learner.run_forever, daemon=True)
    thread.start()
    env = build_task(cfg)
    ctx = zmq.Context()
    sender = sub = None
    try:
        endpoints = wait_for(lambda: read_json(run.endpoints), 30, "the learner's endpoints")
        sender = TransitionSender(ctx, endpoints["transitions"], "actor-0", Spool(tmp_path / "spool", 10**8))
        for b in _batches(env, episodes=4, steps=12, per_batch=4):
            sender.send("sim_so101-0", b)
        wait_for(lambda: (sender.poll(timeout_ms=20), learner.version > 20)[1], 60, "versions past 20")
        assert learner.publisher.bytes_ratio < 0.5, "the versions were meant to go out as deltas"
        sub = WeightSubscriber(ctx, endpoints["weights"], learner.policy, RejectCounter())
        joined_at = learner.version
        got = wait_for(lambda: (sub.poll(timeout_ms=50), sub.pending)[1], 5, "a version the late subscriber can hold")
        assert got[0] > joined_at and learner.algo.num_updates < learner._updates_due(), "updates still going on"
    finally:
        stop.set = True
        thread.join(timeout=30)
        for s in (sender, sub):
            if s is not None:
                s.close()
        ctx.term()
        env.close()
    assert not thread.is_alive()
