import gymnasium as gym
import numpy as np
import pytest

import robolearn.sim  # noqa: F401  (registers the gymnasium env)
from robolearn.hardware.robot import Robot, UnsafeActionError
from robolearn.sim.reach import ReachConfig, ReachEnv


def test_sim_robot_matches_lerobot_so101_follower_names_and_units():
    from lerobot.robots.so_follower import SOFollower
    from lerobot.robots.so_follower.config_so_follower import SOFollowerRobotConfig

    real = SOFollower(SOFollowerRobotConfig(port="/dev/null", id="spec-check"))
    env = ReachEnv()
    assert isinstance(env.robot, Robot)
    assert list(env.robot.action_spec.array.names) == list(real.action_features)
    assert real.config.use_degrees  # lerobot's arm joints are in degrees, as ours
    assert env.robot.action_spec.array.low[-1] == 0.0 and env.robot.action_spec.array.high[-1] == 100.0


def test_observation_matches_spec_and_target_is_randomised():
    env = ReachEnv()
    o1, _ = env.reset(seed=1)
    env.observation_spec.validate(o1)
    o2, _ = env.reset(seed=2)
    assert not np.allclose(o1["state"][15:], o2["state"][15:])
    o1b, _ = env.reset(seed=1)
    np.testing.assert_array_equal(o1["state"], o1b["state"])


def test_scripted_reach_succeeds_and_terminates_within_2cm():
    env = ReachEnv()
    successes = 0
    for seed in range(10):
        env.reset(seed=seed)
        for _ in range(100):
            _, reward, terminated, truncated, info = env.step(env.expert_action())
            if terminated or truncated:
                break
        successes += info["success"]
        if info["success"]:
            assert terminated and info["distance"] <= 0.02 and reward > 0
    assert successes == 10


def test_idle_episode_is_truncated_at_100_ticks_with_dense_negative_reward():
    env = ReachEnv(ReachConfig(target_low=[0.12, 0.14, 0.06], target_high=[0.13, 0.15, 0.07]))
    env.reset(seed=0)
    rewards = []
    for _ in range(100):
        _, r, terminated, truncated, _ = env.step(np.zeros(6, np.float32))
        rewards.append(r)
        assert not terminated
        if truncated:
            break
    assert truncated and len(rewards) == 100
    assert max(rewards) < 0


def test_robot_rejects_nan_and_clips_to_joint_limits():
    env = ReachEnv()
    env.reset(seed=0)
    with pytest.raises(UnsafeActionError):
        env.robot.send_action(np.full(6, np.nan, np.float32))
    sent = env.robot.send_action(np.full(6, 1000.0, np.float32))
    np.testing.assert_allclose(sent, env.robot.action_spec.array.high_array())


def test_registered_gymnasium_env_and_camera_frame():
    env = gym.make("robolearn/Reach-v0")
    obs, _ = env.reset(seed=0)
    assert obs["state"].shape == (18,)
    frame = env.unwrapped.render()
    assert frame.shape == (96, 96, 3) and frame.dtype == np.uint8 and frame.std() > 0
    env.close()


def test_optional_front_and_wrist_cameras_are_uint8_observations():
    env = ReachEnv(ReachConfig(cameras=["front", "wrist"], camera_size=64))
    obs, _ = env.reset(seed=0)
    env.observation_spec.validate(obs)
    assert obs["front"].shape == obs["wrist"].shape == (64, 64, 3)
    assert not np.array_equal(obs["front"], obs["wrist"]) and obs["wrist"].std() > 0
    with pytest.raises(ValueError, match="unknown camera"):
        ReachConfig(cameras=["top"])


def test_camera_shadows_false_renders_the_same_scene_without_its_shadows():
    """task.camera_shadows=false: the same scene and camera, only the shadow pass left out: some pixels are much
    darker with shadows (the shadows), and on average the images are close (everything is where it was)."""
    frames = {}
    for shadows in (True, False):
        env = ReachEnv(ReachConfig(cameras=["front"], camera_size=64, camera_shadows=shadows))
        obs, _ = env.reset(seed=0)
        frames[shadows] = obs["front"].astype(np.int16)
        env.close()
    diff = frames[True] - frames[False]
    assert (diff.min(axis=-1) < -20).mean() > 0.005 and np.abs(diff).mean() < 5
