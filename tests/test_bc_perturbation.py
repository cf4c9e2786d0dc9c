"""Perturbation bursts in scripted demos: the arm is pushed off the expert's path, the labels stay the expert's, and
chunk positions reached through a pushed action leave the loss."""

import numpy as np
import pytest

from robolearn.learner.bc import Perturbation, chunk_pairs, expert_demos, mask_after_perturbed
from robolearn.sim.cube_tasks import PickCubeColorConfig, PickCubeConfig, PickCubeEnv
from robolearn.sim.reach import ReachEnv


def test_mask_clears_the_positions_reached_through_a_perturbed_action():
    _, _, valid = chunk_pairs([np.zeros(1)] * 6, [np.zeros(1, np.float32)] * 6, horizon=3)
    perturbed = np.array([False, False, True, True, False, False])
    masked = mask_after_perturbed(valid, perturbed)
    # independent of the vectorised form: position j of row t needs ticks t .. t+j-1 unperturbed
    expected = valid.copy()
    for t in range(6):
        for j in range(3):
            if perturbed[t:t + j].any():
                expected[t, j] = 0
    assert masked.tolist() == expected.tolist()
    assert masked.tolist() == [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 0, 0], [1, 1, 0], [1, 0, 0]]


def test_bursts_push_the_arm_off_the_expert_path_and_keep_the_expert_labels():
    env = PickCubeEnv(PickCubeConfig())
    burst = Perturbation(fraction=1.0, ticks=(6, 6), start=(10, 11))
    clean = expert_demos(env, 1, horizon=4, seed=5)
    pushed = expert_demos(env, 1, horizon=4, seed=5, perturb=burst)
    # the same episode up to the burst: states and labels identical, every position valid
    np.testing.assert_array_equal(pushed.states[:11], clean.states[:11])
    np.testing.assert_array_equal(pushed.chunks[:8], clean.chunks[:8])
    assert pushed.valid[:8].all()
    # the burst's six ticks (10..15) moved the arm elsewhere than the expert would have
    assert np.abs(pushed.states[16, :6] - clean.states[16, :6]).max() > 1.0  # degrees
    # row 8's chunk runs through tick 10 at its position 2: positions 3.. were reached through a pushed action
    assert pushed.valid[8].tolist() == [1, 1, 1, 0]
    assert pushed.valid[10:16, 1:].sum() == 0 and pushed.valid[10:16, 0].all()
    # the labels are the expert's action in each state reached, and the expert recovers: the episode still succeeds
    assert not np.allclose(pushed.chunks[16, 0], clean.chunks[16, 0])
    assert pushed.successes == 1 and len(pushed.states) > len(clean.states)


def test_a_zero_fraction_draws_nothing_and_bad_settings_are_refused():
    env = PickCubeEnv(PickCubeConfig())
    a = expert_demos(env, 2, horizon=4, seed=3, action_noise=0.1)
    b = expert_demos(env, 2, horizon=4, seed=3, action_noise=0.1, perturb=Perturbation(fraction=0.0))
    np.testing.assert_array_equal(a.states, b.states)
    for bad in ({"fraction": 1.5}, {"ticks": (0, 3)}, {"ticks": (4, 2)}, {"start": (5, 5)}, {"jitter": -1.0},
                {"decoy": -0.1}, {"decoy_ticks": (3, 1)}, {"decoy_start": (2, 2)}):
        with pytest.raises(ValueError, match="perturbation"):
            Perturbation(**bad)
    with pytest.raises(ValueError, match="no decoy goals"):
        expert_demos(ReachEnv(), 1, horizon=4, perturb=Perturbation(decoy=0.5))


def test_asking_the_expert_for_another_cube_leaves_the_asked_cubes_plan_alone():
    env = PickCubeEnv(PickCubeColorConfig())
    actions = {}
    for decoy in (False, True):
        env.reset(seed=4)
        asked = []
        for _ in range(40):  # approach, descend: phases change on the way
            asked.append(env.expert_action())
            if decoy:
                env.expert_action(env.decoy_goals()[0])  # computed, not executed
            env.step(asked[-1])
        actions[decoy] = np.array(asked)
    np.testing.assert_array_equal(actions[True], actions[False])
    assert env.target not in env.decoy_goals() and len(env.decoy_goals()) == 2
    with pytest.raises(ValueError, match="no cube 'purple'"):
        env.expert_action("purple")


def test_a_decoy_heads_for_another_cube_and_the_expert_turns_back():
    env = PickCubeEnv(PickCubeColorConfig())
    decoy = Perturbation(fraction=0.0, decoy=1.0, decoy_ticks=(15, 15), decoy_start=(0, 1))
    clean = expert_demos(env, 1, horizon=4, seed=7)
    env.reset(seed=7)
    target = env.target
    pushed = expert_demos(env, 1, horizon=4, seed=7, perturb=decoy)
    # the labels of the first tick are the asked cube's plan, from the same start; every later row of the decoy keeps
    # only its first position (reached by the decoy's actions)
    np.testing.assert_array_equal(pushed.chunks[0, 0], clean.chunks[0, 0])
    assert pushed.valid[:15, 1:].sum() == 0 and pushed.valid[:15, 0].all()
    # after 15 ticks of the decoy's plan the hand is nearer another cube than the asked one, which it is not in the
    # clean demo; the labels there still head for the asked cube, and the episode succeeds
    hand = slice(12, 15)   # the grasp point's position in the state (after 6 joints and 6 velocities)
    env.reset(seed=7)
    others = [env.cube_pos(c) for c in env.cubes if c != target]

    def nearest_is_other(state: np.ndarray) -> bool:
        far_from_target = np.linalg.norm(state[hand] - env.cube_pos(target))
        return min(np.linalg.norm(state[hand] - o) for o in others) < far_from_target
    assert nearest_is_other(pushed.states[15]) and not nearest_is_other(clean.states[15])
    assert not np.allclose(pushed.chunks[15, 0], clean.chunks[15, 0])
    assert pushed.successes == 1
