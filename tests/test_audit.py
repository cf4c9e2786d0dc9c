"""``robolearn buffer audit``: the actor's ledger against the buffer's log, with the real episode loop,
recorder, ledger and buffer. A step the robot executed whose record was never written (a kill inside the
step) is counted apart from a recorded step the path to the buffer lost; the count of losses comes from the
ledger, and dropping one batch on the way to the buffer must show up as exactly its steps lost."""

import numpy as np
import pytest

from robolearn.actor.step_ledger import StepLedger, read_ledger
from robolearn.actor.transition_recorder import TransitionRecorder
from robolearn.buffer.replay_buffer import ReplayBuffer
from robolearn.rundir import RunDir
from robolearn.runtime.audit import audit_run
from robolearn.sim.reach import ReachConfig
from tests.test_episode_loop import CountingReach, _loop


class Killed(Exception):
    """Stands for a SIGKILL landing inside ``env.step``: nothing after it in the step runs."""


class DiesInStep(CountingReach):
    die_at: int | None = None  # the executed-step count at which the next step never returns

    def step(self, action):
        if self.die_at is not None and self.executed == self.die_at:
            raise Killed
        return super().step(action)


def _run(tmp_path, drop_batch: int | None = None):
    run = RunDir(tmp_path / "run")
    # every episode runs its 12 ticks: an untrained policy that reached a 2 cm target by chance would end one early
    env = DiesInStep(ReachConfig(episode_ticks=12, success_radius=1e-6))
    buf = ReplayBuffer(run.buffer, env.observation_spec, env.action_spec, capacity=10_000, fsync="off")
    batches, journal = [], []

    def deliver(arrays):
        journal.clear()  # as the spool's put of a batch removes its journal
        batches.append(arrays)
        if len(batches) - 1 != drop_batch:
            buf.add("reach-0", arrays)

    ledger = StepLedger(run.ledger("actor-0"), "reach-0")

    def recorded(step):  # as the actor does right after its journal write
        journal.append(step)
        ledger.recorded(int(step["episode_id"][0]), int(step["step"][0]))

    recorder = TransitionRecorder(env.observation_spec, deliver, send_every=5, stage=recorded)
    loop = _loop(env, [ledger, recorder])
    for episode in range(2):
        loop.run(seed=episode, episode_id=episode)
    env.die_at = env.executed + 5  # steps 0-4 of episode 2 are journaled; step 5 is cut inside the apply
    with pytest.raises(Killed):
        loop.run(seed=2, episode_id=2)
    # the restarted actor sends the journaled steps as a cut batch; the learner closes the episode there
    buf.add("reach-0", {k: np.concatenate([step[k] for step in journal]) for k in journal[0]})
    buf.close_episode("reach-0", 2)
    ledger.close()
    buf.close()
    return run, env


def test_a_step_cut_inside_the_apply_is_interrupted_not_lost(tmp_path):
    run, env = _run(tmp_path)
    ledger = read_ledger(run.ledger("actor-0"))
    assert len(ledger.recorded) == env.executed == 29 and len(ledger.begun) == 30
    report = audit_run(run.root)
    assert report["produced_steps"] == 29 and report["stored_steps"] == 29
    assert report["lost_steps"] == 0 and report["duplicate_steps"] == 0 and report["unledgered_steps"] == 0
    assert report["interrupted_steps"] == 1 and report["interrupted_examples"] == [(2, 5)]


def test_a_batch_lost_on_the_way_to_the_buffer_is_counted_lost(tmp_path):
    run, _ = _run(tmp_path, drop_batch=2)  # the last of episode 0: steps 10 and 11
    report = audit_run(run.root)
    assert report["lost_steps"] == 2 and report["lost_examples"] == [(0, 10), (0, 11)]
    assert report["interrupted_steps"] == 1


def test_only_a_processes_last_step_can_be_interrupted_and_a_torn_line_is_skipped(tmp_path):
    run, _ = _run(tmp_path)
    path = run.ledger("actor-0")
    later = StepLedger(path, "reach-0")  # the replacement process goes on
    later.on_apply(3, 0)                   # begun, never recorded, and the process went on: no kill explains it
    later.on_apply(3, 1)
    later.recorded(3, 1)
    later.close()
    with open(path, "ab") as f:
        f.write(b"reach-0 3 2")            # torn: its last token never got written
    ledger = read_ledger(path)
    assert ledger.last_begun == [(2, 5), (3, 1)] and (3, 2) not in ledger.recorded + ledger.begun
    report = audit_run(run.root)
    assert report["interrupted_examples"] == [(2, 5)]
    assert sorted(report["lost_examples"]) == [(3, 0), (3, 1)]  # (3, 1) was recorded, never stored
