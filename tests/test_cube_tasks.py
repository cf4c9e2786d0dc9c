"""push_cube, pick_cube, pick_cube_color: specs, randomisation, physics, scripted experts (fewer episodes
than benchmarks/experts.py's 100)."""

import numpy as np
import pytest

from robolearn.sim.cube_tasks import (
    PickCubeColorConfig,
    PickCubeConfig,
    PickCubeEnv,
    PushCubeConfig,
    PushCubeEnv,
)
from robolearn.sim.so101 import SimSO101Config
from robolearn.sim.view import mujoco_camera


def run_expert(env, seed: int) -> tuple[dict, int]:
    env.reset(seed=seed)
    done, info, steps = False, {}, 0
    while not done:
        _, _, terminated, truncated, info = env.step(env.expert_action())
        done = terminated or truncated
        steps += 1
    return info, steps


@pytest.mark.parametrize("make", [PushCubeEnv, PickCubeEnv, lambda: PickCubeEnv(PickCubeColorConfig())],
                         ids=["push_cube", "pick_cube", "pick_cube_color"])
def test_scripted_expert_succeeds(make):
    env = make()
    results = [run_expert(env, seed) for seed in range(10)]
    assert sum(info["success"] for info, _ in results) >= 9
    # it ends the episode on success, well before the time limit
    assert all(steps < env.task.episode_ticks for info, steps in results if info["success"])
    env.close()


def test_idle_arm_does_not_succeed_and_is_truncated():
    for env in (PushCubeEnv(), PickCubeEnv()):
        env.reset(seed=0)
        for _ in range(env.task.episode_ticks):
            _, reward, terminated, truncated, info = env.step(np.zeros(6, np.float32))
            assert not terminated and not info["success"] and reward < 10
        assert truncated
        env.close()


def test_pick_reward_costs_every_tick_until_the_cube_is_lifted():
    """Before success no tick pays (a policy must not prefer holding the cube half-lifted to lifting it); the value
    is the distance and lift terms computed here from the sim's own positions."""
    env = PickCubeEnv()
    env.reset(seed=3)
    rewards, lifts, done, info = [], [], False, {}
    while not done:
        _, reward, terminated, truncated, info = env.step(env.expert_action())
        dist = np.linalg.norm(env.grasp_pos() - env.cube_pos("red"))
        fraction = min(max(env.lift("red"), 0.0) / env.task.lift_height, 1.0)
        bonus = env.task.success_bonus if info["success"] else 0.0
        assert reward == pytest.approx(-dist / 0.1 - 2.0 * (1.0 - fraction) + bonus)
        rewards.append(reward)
        lifts.append(info["lift"])
        done = terminated or truncated
    assert info["success"] and terminated
    assert max(rewards[:-1]) <= 0 < rewards[-1]
    assert sum(lift > 0.02 for lift in lifts[:-1]) >= 3  # the expert held the cube part-way up along the way
    env.close()


@pytest.mark.parametrize("make", [lambda: PickCubeEnv(PickCubeConfig(shaped_reward=False)),
                                  lambda: PushCubeEnv(PushCubeConfig(shaped_reward=False))], ids=["pick", "push"])
def test_without_shaping_only_success_pays_as_a_real_robots_labels_do(make):
    """task.shaped_reward=false: 0 every tick before success and the success bonus on it, the expert's episode
    otherwise the same (its states and ending do not depend on the reward)."""
    env = make()
    env.reset(seed=3)
    rewards, done, info = [], False, {}
    while not done:
        _, reward, terminated, truncated, info = env.step(env.expert_action())
        rewards.append(reward)
        done = terminated or truncated
    assert info["success"] and terminated
    assert rewards[:-1] == [0.0] * (len(rewards) - 1) and rewards[-1] == env.task.success_bonus
    env.close()


def test_cube_moves_only_through_contact():
    """The cube is a real physics body: pushing it moves it, an arm hovering above does not."""
    env = PushCubeEnv()
    env.reset(seed=4)  # a long push (seed 3 pushes under 4 cm since the twin's joint convention)
    start = env.cube_pos("red")
    for _ in range(15):  # the expert's approach phase stays above the cube
        env.step(env.expert_action())
    np.testing.assert_allclose(env.cube_pos("red"), start, atol=1e-3)
    info, _ = run_expert(env, 4)
    assert info["success"] and np.linalg.norm(env.cube_pos("red")[:2] - start[:2]) > 0.04


def test_observation_layout_and_specs():
    env = PickCubeEnv(PickCubeColorConfig())
    obs, info = env.reset(seed=5)
    env.observation_spec.validate(obs)
    names = env.observation_spec.arrays["state"].names
    assert obs["state"].shape == (12 + 3 + 3 * (5 + 3) + 3,)
    assert names[-3:] == ("asked.red", "asked.green", "asked.blue")
    onehot = obs["state"][-3:]
    assert onehot.sum() == 1 and env.instruction == f"pick up the {env.cubes[int(onehot.argmax())]} cube"
    assert info["instruction"] == env.instruction
    i = names.index(f"cube_{env.target}.x")
    np.testing.assert_allclose(obs["state"][i:i + 3], env.cube_pos(env.target), atol=1e-6)
    # each cube's offset from the grasp point, computed here from the sim's own positions
    for colour in env.cubes:
        j = names.index(f"grasp_to_cube_{colour}.x")
        np.testing.assert_allclose(obs["state"][j:j + 3], env.cube_pos(colour) - env.grasp_pos(), atol=1e-6)
    push = PushCubeEnv()
    obs, _ = push.reset(seed=5)
    push.step(np.full(6, 3.0))  # off the home pose, so the offsets below are not those of the reset
    obs, *_ = push.step(np.full(6, 3.0))
    names = push.observation_spec.arrays["state"].names
    assert names[-4:] == ("goal.x", "goal.y", "cube_to_goal.x", "cube_to_goal.y")
    np.testing.assert_allclose(obs["state"][-4:-2], push.goal, atol=1e-6)
    np.testing.assert_allclose(obs["state"][-2:], push.goal - push.cube_pos("red")[:2], atol=1e-6)
    j = names.index("tip_to_cube_red.x")  # the pushing fingertips' offset, not the grasp point's
    tip = push.robot.data.site_xpos[push.robot.model.site("tip").id]
    np.testing.assert_allclose(obs["state"][j:j + 3], push.cube_pos("red") - tip, atol=1e-6)
    # scene through the cameras: nothing in the state says where the cube is, an offset to it neither
    blind = PushCubeEnv(PushCubeConfig(scene_state=False)).observation_spec.arrays["state"].names
    assert blind[12:] == ("grasp.x", "grasp.y", "grasp.z", "goal.x", "goal.y")


def test_every_colour_is_asked_for_across_seeds_and_wrong_cube_fails():
    env = PickCubeEnv(PickCubeColorConfig())
    asked = set()
    for seed in range(12):
        env.reset(seed=seed)
        asked.add(env.target)
    assert asked == {"red", "green", "blue"}
    # lift a cube that was not asked for: the episode ends as a failure, before the time limit, truncated (a terminal
    # state would end the per-tick costs, so lifting any cube would pay)
    env.reset(seed=0)
    wrong = next(c for c in env.cubes if c != env.target)
    env.target, asked_colour = wrong, env.target
    done, steps = False, 0
    while not done:
        action = env.expert_action()
        env.target = asked_colour  # the env judges against the asked cube
        _, _, terminated, truncated, info = env.step(action)
        env.target = wrong         # while the expert keeps going for the wrong one
        done, steps = terminated or truncated, steps + 1
    assert truncated and not terminated and not info["success"]
    assert env.lift(wrong) >= env.task.lift_height and steps < env.task.episode_ticks


def test_domain_randomisation_is_seeded_and_varies():
    env = PushCubeEnv()
    m = env.robot.model
    cube, floor = env._cube_geom["red"], env._floor

    def draw(seed):
        obs, _ = env.reset(seed=seed)
        return (obs["state"].copy(), m.geom_rgba[[cube, floor]].copy(), m.geom_friction[[cube, floor], 0].copy(),
                m.light_diffuse.copy(), m.light_dir.copy(), env.cube_yaw("red"))

    a, b, a2 = draw(1), draw(2), draw(1)
    for x, y in zip(a, a2):
        np.testing.assert_array_equal(x, y)  # same seed, same scene
    for x, y in zip(a, b):
        assert not np.allclose(x, y)           # another seed changes every knob
    lo, hi = env.task.friction_range
    assert lo <= a[2].min() and a[2].max() <= hi


def test_knobs_off_give_a_fixed_appearance():
    cfg = PickCubeConfig(colour_noise=0.0, light_noise=0.0, friction_range=[1.0, 1.0], randomize_yaw=False)
    env = PickCubeEnv(cfg)
    env.reset(seed=1)
    rgba, light = env.robot.model.geom_rgba.copy(), env.robot.model.light_diffuse.copy()
    env.reset(seed=2)
    np.testing.assert_array_equal(rgba, env.robot.model.geom_rgba)
    np.testing.assert_array_equal(light, env.robot.model.light_diffuse)
    assert abs(env.cube_yaw("red")) < 1e-6


def test_cameras_render_the_scene():
    env = PickCubeEnv(PickCubeConfig(cameras=["front", "wrist"], camera_size=64))
    obs, _ = env.reset(seed=0)
    assert obs["front"].shape == (64, 64, 3) and obs["front"].dtype == np.uint8
    assert obs["wrist"].std() > 5  # not a blank frame
    env.close()


def test_cameras_show_no_site_markers():
    """A camera frame is what a real camera would see: MuJoCo's sites (the fingertip's orange ball, which sat
    between the jaws in the wrist camera) are not drawn. Painting every site a large magenta ball changes no pixel."""
    env = PickCubeEnv(PickCubeConfig(cameras=["front", "wrist"], camera_size=64, camera_shadows=False))
    env.reset(seed=0)
    for _ in range(15):  # the hand above the cube: the tip site in both frames
        env.step(env.expert_action())
    before = {cam: env.render(cam) for cam in ("front", "wrist")}
    model = env.robot.model
    model.site_rgba[:] = (1.0, 0.0, 1.0, 1.0)
    model.site_size[:, 0] = 0.02
    after = {cam: env.render(cam) for cam in ("front", "wrist")}
    for cam in before:
        assert np.array_equal(before[cam], after[cam]), f"{cam}: a site marker is drawn"
    env.close()


def test_front_camera_frames_the_cubes_and_no_reach_marker():
    """Every corner of the region cubes are placed in projects inside the 64 px front frame, a cube is at least
    6 px wide there, and each cube's own colour dominates the pixels around where it projects (the arm's overview
    camera of reach showed a cube as about 4 px, next to reach's green target marker)."""
    config = PickCubeColorConfig(cameras=["front"], camera_size=64, camera_shadows=False, colour_noise=0.0)
    env = PickCubeEnv(config)
    obs, _ = env.reset(seed=3)
    model, data = env.robot.model, env.robot.data
    assert "target" not in {model.body(i).name for i in range(model.nbody)}
    camera = mujoco_camera(model, data, "front", 64, 64)
    (x0, y0), (x1, y1) = config.cube_low, config.cube_high
    corners = camera.project(np.array([[x, y, env.half] for x in (x0, x1) for y in (y0, y1)]))
    assert np.all((corners > 2) & (corners < 62)), corners
    for colour in config.colours:
        centre = env.cube_pos(colour)
        ends = camera.project(np.array([centre - [0, env.half, 0], centre + [0, env.half, 0]]))
        assert abs(ends[1, 0] - ends[0, 0]) >= 6
        u, v = np.round(camera.project(centre[None])[0]).astype(int)
        patch = obs["front"][v - 1:v + 2, u - 1:u + 2].reshape(-1, 3).astype(float)
        channel = {"red": 0, "green": 1, "blue": 2}[colour]
        assert np.median(patch.argmax(axis=1)) == channel, (colour, patch)
    env.close()


@pytest.mark.parametrize("bad, key", [({"cube_low": [0.1]}, "cube_low"), ({"cube_size": 0.2}, "cube_size"),
                                      ({"friction_range": [1.0, 0.5]}, "friction_range"),
                                      ({"cameras": ["top"]}, "cameras"), ({"colours": ["red", "pink"]}, "colours")])
def test_bad_config_names_the_key(bad, key):
    with pytest.raises(ValueError, match=key):
        PickCubeColorConfig(**bad)


def test_refuses_a_real_robot():
    from robolearn.hardware.lerobot_robot import LerobotRobotConfig

    with pytest.raises(ValueError, match="sim_so101"):
        PushCubeEnv(robot=LerobotRobotConfig())
    PushCubeEnv(robot=SimSO101Config()).close()


def test_push_reward_pulls_the_fingertips_to_the_push_point_behind_the_cube():
    env = PushCubeEnv()
    env.reset(seed=5)
    cube, point = env.cube_pos("red"), env.push_point()
    to_goal = (env.goal - cube[:2]) / np.linalg.norm(env.goal - cube[:2])
    # on the far side from the goal, just off the cube's face, at the height the expert pushes at
    np.testing.assert_allclose(cube[:2] - point[:2], to_goal * (env.half + 0.008), atol=1e-9)
    assert point[2] == pytest.approx(env.half + 0.008)
    _, reward, *_ = env.step(np.zeros(6))
    tip = env.robot.data.site_xpos[env.robot.model.site("tip").id]
    assert reward == pytest.approx(-(env.goal_distance() + 0.5 * np.linalg.norm(tip - env.push_point())) / 0.1)
    # hand_target=cube: the same scene, the hand term measured to the cube's centre
    plain = PushCubeEnv(PushCubeConfig(hand_target="cube"))
    plain.reset(seed=5)
    _, plain_reward, *_ = plain.step(np.zeros(6))
    tip = plain.robot.data.site_xpos[plain.robot.model.site("tip").id]
    assert plain_reward == pytest.approx(-(plain.goal_distance() + 0.5 * np.linalg.norm(tip - plain.cube_pos("red")))
                                         / 0.1)
    assert plain_reward != pytest.approx(reward)
    with pytest.raises(ValueError, match="hand_target"):
        PushCubeConfig(hand_target="side")
