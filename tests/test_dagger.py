"""DAgger's oracle: the scripted expert's next actions from whatever state the arm is in
(``PickCubeEnv.expert_chunk``), the scene left as it was, and ``OracleLabels`` pairing them with the observations of
the ticks a policy drove (docs/algorithms.md, "DAgger")."""

import numpy as np
import pytest

from robolearn.actor.chunking import ChunkExecutor, ChunkingConfig
from robolearn.actor.episode import EpisodeLoop, StepRecord
from robolearn.clock import SimClock
from robolearn.inference.client import SimulatedLatencyClient
from robolearn.inference.runner import ChunkPolicyRunner
from robolearn.learner.bc import ChunkDataset, OracleLabels, expert_demos, joined
from robolearn.policies.mlp import GaussianChunkPolicy, MLPPolicyConfig
from robolearn.sim.cube_tasks import PickCubeColorConfig, PickCubeConfig, PickCubeEnv
from robolearn.sim.reach import ReachEnv

H = 10


def expert_episode(env: PickCubeEnv, seed: int, look_ahead: bool) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The expert's executed actions over one episode, and (``look_ahead``) the oracle's chunk before each tick."""
    env.reset(seed=seed)
    actions, chunks, done = [], [], False
    while not done:
        if look_ahead:
            chunks.append(env.expert_chunk(H))
        actions.append(env.expert_action())
        _, _, terminated, truncated, _ = env.step(actions[-1])
        done = terminated or truncated
    assert terminated, f"the expert did not lift the cube (seed {seed})"
    return actions, chunks


def agreement(actions: list[np.ndarray], chunks: list[np.ndarray]) -> float:
    """The share of ticks whose oracle chunk is exactly the expert's next actions in the episode (as many as it had
    left: the chunk stops at the lifting action)."""
    return float(np.mean([len(c) == len(actions[t:t + H]) and np.allclose(c, actions[t:t + H], atol=1e-6)
                          for t, c in enumerate(chunks)]))


def test_the_oracle_is_the_experts_own_plan_on_its_path_and_leaves_the_episode_as_it_was(monkeypatch):
    env = PickCubeEnv(PickCubeColorConfig())
    shares = []
    for seed in (0, 1, 2):
        watched, chunks = expert_episode(env, seed, look_ahead=True)
        alone, _ = expert_episode(env, seed, look_ahead=False)
        # the look-aheads changed nothing: the same episode, action for action
        assert len(watched) == len(alone) and all(np.array_equal(a, b) for a, b in zip(watched, alone, strict=True))
        assert len(chunks[-1]) == 1 and all(len(c) == H for c in chunks[:-H])  # the chunk ends with the lift
        shares.append(agreement(watched, chunks))
    # the phase read off the scene is the plan's except a tick early at a phase change (three a pick): 10 of 12 ticks
    # of a phase change differ, and every other tick's chunk is the expert's exactly
    assert min(shares) >= 0.8, shares
    # the check can fail: a plan always started from its first phase is another plan
    monkeypatch.setattr(env, "expert_phase", lambda cube: "approach")
    watched, chunks = expert_episode(env, 0, look_ahead=True)
    assert agreement(watched, chunks) < 0.6
    env.close()


def test_the_oracle_starts_the_plan_from_the_state_not_from_the_ticks_before():
    """A state the expert never reached by itself: the arm pushed off its path before the grasp. The oracle's plan
    from there is what the expert does when it takes over from there: the oracle's label is what the expert
    would do next, whoever drove the arm there."""
    env = PickCubeEnv(PickCubeConfig())
    env.reset(seed=4)
    for _ in range(20):
        env.step(env.expert_action())
    for _ in range(6):  # pushed off its path
        env.step(np.array([4.0, -4.0, 3.0, 0.0, 0.0, -5.0], np.float32))
    phase = env.expert_phase(env.target)
    chunk = env.expert_chunk(H)
    env._phases = {env.target: phase}  # the expert takes over in the phase read off the scene
    taken = []
    for _ in range(H):
        taken.append(env.expert_action())
        env.step(taken[-1])
    assert np.allclose(chunk, taken[:len(chunk)], atol=1e-6) and len(chunk) == H
    with pytest.raises(ValueError, match="horizon must be >= 1"):
        env.expert_chunk(0)
    env.close()


class Seen:
    """What the loop executed, as a subscriber beside the labels sees it."""

    def __init__(self) -> None:
        self.steps: list[StepRecord] = []

    def on_step(self, step: StepRecord) -> None:
        self.steps.append(step)


def test_oracle_labels_pair_every_tick_a_policy_drove_with_the_experts_chunk_from_there():
    env = PickCubeEnv(PickCubeConfig(episode_ticks=30))
    policy = GaussianChunkPolicy(env.observation_spec, env.action_spec, MLPPolicyConfig(chunk_horizon=4,
                                                                                        hidden_dims=[16]))
    clock = SimClock()
    executor = ChunkExecutor(SimulatedLatencyClient(ChunkPolicyRunner(policy, env.observation_spec,
                                                                      env.action_spec.dim), clock),
                             env.action_spec, 4, ChunkingConfig(mode="sync", splice="replace", max_prefix=0))
    labels, seen = OracleLabels(env, H), Seen()
    looked: list[np.ndarray] = []
    chunk_from_here = env.expert_chunk

    def noted(horizon: int) -> np.ndarray:
        looked.append(chunk_from_here(horizon))
        return looked[-1]
    env.expert_chunk = noted
    loop = EpisodeLoop(env, executor, clock, subscribers=[labels, seen])
    results = [loop.run(seed=s, episode_id=i) for i, s in enumerate((7, 8))]
    data = labels.dataset()
    assert len(data.states) == len(seen.steps) == sum(r.ticks for r in results) == 60  # a row per executed tick
    assert (data.episodes, data.successes) == (2, sum(r.success for r in results))
    assert np.array_equal(data.states, np.stack([s.obs["state"] for s in seen.steps]))  # the state it acted on
    for row, chunk in enumerate(looked):
        n = len(chunk)
        assert np.array_equal(data.valid[row], np.arange(H) < n)
        assert np.allclose(data.chunks[row, :n], env.action_spec.to_normalised(chunk))
        assert not data.chunks[row, n:].any()  # padded with the hold action, masked
    assert np.abs(data.chunks).max() <= 1.0
    env.close()


def test_oracle_labels_and_joined_refuse_what_they_cannot_use():
    reach = ReachEnv()
    with pytest.raises(ValueError, match="ReachEnv has no oracle"):
        OracleLabels(reach, H)
    reach.close()
    env = PickCubeEnv(PickCubeColorConfig(cameras=["wrist"], camera_size=16))
    labels = OracleLabels(env, H, keys=("wrist",))
    with pytest.raises(ValueError, match="no tick labelled yet"):
        labels.dataset()
    with pytest.raises(RuntimeError, match="before on_apply"):
        labels.on_step(None)
    demos = expert_demos(env, 1, H, keys=("wrist",))
    both = joined(demos, demos)
    assert len(both.states) == 2 * len(demos.states) and both.observations["wrist"].shape[0] == len(both.states)
    stateless = ChunkDataset(demos.states, demos.chunks, demos.valid, 1, 1)
    with pytest.raises(ValueError, match="same observations"):
        joined(demos, stateless)
    env.close()
