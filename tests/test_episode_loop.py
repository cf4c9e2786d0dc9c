"""The one episode loop: subscribers see every executed step in order, the gate stops an episode between ticks,
and the transition recorder delivers every step, the last batch of a stopped episode marked truncated. Counts
are checked against the env's own count of the steps it executed, not the loop's."""

import numpy as np

from robolearn.actor.chunking import ChunkExecutor, ChunkingConfig
from robolearn.actor.episode import EpisodeLoop, StepRecord
from robolearn.actor.transition_recorder import TransitionRecorder
from robolearn.clock import SimClock
from robolearn.inference.client import SimulatedLatencyClient
from robolearn.inference.runner import ChunkPolicyRunner
from robolearn.policies.mlp import GaussianChunkPolicy, MLPPolicyConfig
from robolearn.sim.reach import ReachConfig, ReachEnv


class CountingReach(ReachEnv):
    """Counts the steps the simulator really executed."""

    executed = 0

    def step(self, action):
        self.executed += 1
        return super().step(action)


def _loop(env, subscribers=(), gate=None):
    policy = GaussianChunkPolicy(env.observation_spec, env.action_spec, MLPPolicyConfig(chunk_horizon=4,
                                                                                        hidden_dims=[16]))
    clock = SimClock()
    runner = ChunkPolicyRunner(policy, env.observation_spec, env.action_spec.dim)
    executor = ChunkExecutor(SimulatedLatencyClient(runner, clock), env.action_spec, 4,
                             ChunkingConfig(mode="sync", splice="replace", max_prefix=0))
    return EpisodeLoop(env, executor, clock, subscribers=subscribers, gate=gate)


class Seen:
    def __init__(self):
        self.starts, self.steps, self.ends = [], [], []

    def on_episode_start(self, episode_id, seed, obs):
        self.starts.append((episode_id, seed))

    def on_step(self, step: StepRecord):
        self.steps.append(step)

    def on_episode_end(self, result):
        self.ends.append(result)


def test_subscribers_see_every_step_of_whole_episodes_with_unique_ticks():
    env = CountingReach(ReachConfig(episode_ticks=12))
    seen, batches = Seen(), []
    recorder = TransitionRecorder(env.observation_spec, batches.append, send_every=5)
    loop = _loop(env, [seen, recorder])
    results = [loop.run(seed=s, episode_id=i) for i, s in enumerate((3, 4))]
    assert env.executed == 24 == len(seen.steps)
    assert [s.tick for s in seen.steps] == list(range(24))        # the tick counter runs on across episodes
    assert [s.step for s in seen.steps] == list(range(12)) * 2
    assert seen.starts == [(0, 3), (1, 4)] and [r.ticks for r in results] == [12, 12]
    assert all(s.done == (s.step == 11) for s in seen.steps)
    assert sum(len(b["action"]) for b in batches) == env.executed  # nothing lost
    ends = [b for b in batches if "final_obs.state" in b]
    assert len(ends) == 2 and all(b["truncated"][-1] for b in ends)  # reach ends by time limit
    np.testing.assert_array_equal(np.concatenate([b["action"] for b in batches]),
                                  np.stack([s.action for s in seen.steps]))


def test_the_gate_stops_between_ticks_and_the_last_batch_is_delivered_truncated():
    env = CountingReach(ReachConfig(episode_ticks=50))
    batches = []
    recorder = TransitionRecorder(env.observation_spec, batches.append, send_every=4)
    loop = _loop(env, [recorder], gate=lambda tick: tick < 7)
    result = loop.run(seed=0)
    assert result.stopped and not result.success and result.ticks == 7 == env.executed
    assert [len(b["action"]) for b in batches] == [4, 3]
    assert batches[-1]["truncated"][-1] and not batches[-1]["terminated"][-1]
    assert "final_obs.state" in batches[-1]


def test_a_stop_right_after_a_full_batch_still_closes_the_episode():
    """The gate stops the episode just after a batch of ``send_every`` steps would have gone out: the last
    delivered step must still be marked truncated, or the learner keeps the episode open for ever."""
    env = CountingReach(ReachConfig(episode_ticks=50))
    batches = []
    recorder = TransitionRecorder(env.observation_spec, batches.append, send_every=4)
    result = _loop(env, [recorder], gate=lambda tick: tick < 8).run(seed=0)
    assert result.stopped and result.ticks == 8 == env.executed
    assert sum(len(b["action"]) for b in batches) == env.executed
    assert batches[-1]["truncated"][-1] and "final_obs.state" in batches[-1]
    assert not any(b["truncated"][:-1].any() for b in batches)


def test_episode_ids_stay_each_actors_own_whatever_a_restarted_learner_offers():
    from robolearn.actor.loop import first_episode_id

    for at_least in range(0, 12):  # a restarted learner offers max id + 1: either parity
        ids = [first_episode_id(at_least, i, 2) for i in (0, 1)]
        assert [x % 2 for x in ids] == [0, 1] and all(at_least <= x < at_least + 2 for x in ids)
    assert first_episode_id(7, 2, 3) == 8 and first_episode_id(9, 0, 3) == 9
