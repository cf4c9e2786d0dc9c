"""The scripted human of the HIL benchmark and of ``human=scripted``: an oracle by default, or a person who reacts
late and drives with noisy hands."""

import numpy as np
import pytest

from robolearn.hardware.teleop import TeleopEvent
from robolearn.sim.intervention import ScriptedHuman, ScriptedHumanConfig
from robolearn.sim.reach import ReachEnv


def takeover_ticks(**kw) -> tuple[list[int], list[np.ndarray], np.ndarray]:
    """Drive a robot that always does the opposite of the expert; the ticks the human takes over at, what it drove
    with, and the expert's action."""
    env = ReachEnv()
    env.reset(seed=0)
    human = ScriptedHuman(env, ScriptedHumanConfig(drift_threshold=0.1, drift_window=2, takeover_ticks=4,
                                                   max_takeovers=2, **kw))
    human.reset()
    ons, driven = [], []
    for tick in range(30):
        reading = human.read()
        if TeleopEvent.INTERVENTION_ON in reading.events:
            ons.append(tick)
        if reading.intervening:
            driven.append(reading.action)
            human.observe(reading.action)
        else:
            human.observe(-np.asarray(env.expert_action()))  # the robot heads the wrong way
    expert = np.asarray(env.expert_action())
    env.close()
    return ons, driven, expert


def test_an_oracle_takes_over_when_the_window_fills_and_again_after_a_fresh_window():
    ons, driven, expert = takeover_ticks()
    # errors after ticks 0 and 1 fill the window: it takes over at tick 2 and drives 4 ticks (2..5); the robot's
    # own ticks 6 and 7 fill a fresh window (its driven ticks never count): again at 8
    assert ons == [2, 8]
    assert all(np.array_equal(a, expert) for a in driven)


def test_a_late_human_takes_over_reaction_ticks_after_noticing():
    ons, _, _ = takeover_ticks(reaction_ticks=3)
    assert ons == [5, 14]  # noticed at 2, took over at 5 (drove 5..8); noticed at 11, took over at 14


def test_a_noisy_human_drives_with_noise_from_its_own_seed():
    _, clean, expert = takeover_ticks()
    _, noisy, _ = takeover_ticks(action_noise=0.2, seed=4)
    _, again, _ = takeover_ticks(action_noise=0.2, seed=4)
    assert all(not np.allclose(a, expert) for a in noisy)
    assert all(np.array_equal(a, b) for a, b in zip(noisy, again))
    with pytest.raises(ValueError, match="reaction_ticks"):
        ScriptedHumanConfig(reaction_ticks=-1)
