"""task=real without hardware: the sim twin (its success hidden), the person's keys through a pseudo-terminal,
the reset procedure, bumpless takeover and hand-back, the workspace, and the config's refusals."""

from __future__ import annotations

import os
import pty
import termios
import time
from pathlib import Path

import numpy as np
import pytest

from robolearn.config import ConfigError, compose, validate
from robolearn.hardware.operator import KeyboardDriver, KeyboardTeleopConfig, Operator, PersonConfig, make_operator
from robolearn.hardware.safety import EStop, GuardedRobot, SafetyConfig
from robolearn.hardware.teleop import TeleopEvent
from robolearn.hardware.terminal_keys import TerminalKeys, parse_keys
from robolearn.tasks.real import RealTaskConfig, RealTaskEnv, ResetConfig
from tests.scripted_keys import ScriptedKeys


class Recorder:
    """Wraps the robot: every command sent, in order."""

    def __init__(self, robot) -> None:
        self.robot, self.sent = robot, []

    def __getattr__(self, name):
        return getattr(self.robot, name)

    def send_action(self, action):
        out = self.robot.send_action(action)
        self.sent.append(np.asarray(out, np.float32).copy())
        return out


def twin(tmp_path: Path, operator=None, **task_kwargs) -> tuple[RealTaskEnv, Recorder, Operator, ScriptedKeys]:
    env = RealTaskEnv(RealTaskConfig(**task_kwargs))
    env.robot.connect()
    recorder = Recorder(env.robot)
    env.robot = GuardedRobot(recorder, SafetyConfig(), EStop(tmp_path / "estop" / "arm.json"), env.control_hz,
                             watch_time=False)
    keys = operator._keys_reader if operator is not None else ScriptedKeys(auto_ready=True)
    keys.env = env
    operator = operator or Operator(PersonConfig(name="test"), None, keys=keys)
    operator.estop = env.robot.estop
    env.attach_operator(operator)
    return env, recorder, operator, keys


def per_tick_change(sent: list[np.ndarray]) -> np.ndarray:
    return np.abs(np.diff(np.stack(sent), axis=0))


def test_keys_are_read_from_a_pseudo_terminal_in_cbreak_mode_and_it_is_restored():
    master, slave = pty.openpty()
    path = os.ttyname(slave)
    before = termios.tcgetattr(slave)
    keys = TerminalKeys(path)
    try:
        assert not termios.tcgetattr(slave)[3] & termios.ICANON  # each key at once, not after Enter
        assert keys.read() == []
        os.write(master, b"y \x1b[An\r\x1b[1;5Pr")  # y, space, up, n, Enter, an unnamed F-key, r
        time.sleep(0.05)
        assert keys.read() == ["y", "space", "up", "n", "enter", "r"]
        os.write(master, b"\x1b")
        time.sleep(0.05)
        assert keys.read() == ["esc"]
    finally:
        keys.close()
    assert termios.tcgetattr(slave)[3] == before[3]
    os.close(master)
    os.close(slave)


def test_parse_keys_names_arrows_and_drops_unknown_sequences():
    assert parse_keys(b"\x1b[D\x1bOC\x1b[15~w") == ["left", "right", "w"]
    with pytest.raises(OSError, match="not a terminal"):
        TerminalKeys("/dev/null")


def test_reset_moves_to_the_pose_at_the_bounded_speed_then_waits_for_ready(tmp_path):
    env, rec, operator, keys = twin(tmp_path, reset=ResetConfig(pose="tucked", max_speed=40.0))
    assert env.task.reset.ready_timeout_s == 0  # by default it waits for the person, however long
    keys.press_on_prompt("press Enter", "enter")
    t0 = time.monotonic()
    env.reset(seed=1)
    assert time.monotonic() - t0 < 10  # the move and the wait end once the person's Enter comes
    pose = np.array(env.task.reset.poses["tucked"], np.float32)
    np.testing.assert_allclose(env.commanded(), pose, atol=1e-3)
    moves = per_tick_change(rec.sent)
    assert moves.max() <= 40.0 / env.control_hz + 1e-4  # never faster than task.reset.max_speed
    assert len(rec.sent) >= 60 / (40.0 / env.control_hz)  # a line of many ticks, not a jump (60 deg away)
    assert np.abs(env._measured()[:5] - pose[:5]).max() <= env.task.reset.tolerance  # the arm is there, too
    assert env.counts.ready_timeouts == 0 and env.counts.resets_short_of_the_pose == 0


def test_a_reset_whose_arm_is_blocked_short_of_the_pose_is_counted_short(tmp_path, monkeypatch, capsys):
    env, rec, operator, keys = twin(tmp_path, reset=ResetConfig(pose="tucked", max_speed=120.0))
    keys.press_on_prompt("press Enter", "enter")
    measured = env._measured
    blocked = np.array([0.0, 20.0, 0.0, 0.0, 0.0, 0.0], np.float32)  # something holds shoulder_lift 20 deg back
    monkeypatch.setattr(env, "_measured", lambda: measured() + blocked)
    env.reset(seed=1)
    pose = np.array(env.task.reset.poses["tucked"], np.float32)
    np.testing.assert_allclose(env.commanded(), pose, atol=1e-3)  # the command got there; the arm did not
    assert env.counts.resets_short_of_the_pose == 1
    assert "did not reach the reset pose 'tucked'" in capsys.readouterr().err


def test_a_reset_whose_gripper_is_held_closed_on_something_is_not_counted_short(tmp_path, monkeypatch):
    env, rec, operator, keys = twin(tmp_path, reset=ResetConfig(pose="tucked", max_speed=120.0))
    keys.press_on_prompt("press Enter", "enter")
    send = env._send

    def jaw_held(target: np.ndarray, paced: bool = False) -> np.ndarray:  # the driver keeps the jaw at 14 units,
        return send(np.concatenate([target[:5], [max(float(target[5]), 14.0)]]).astype(np.float32), paced)
    monkeypatch.setattr(env, "_send", jaw_held)  # as max_relative_target does for a jaw closed on a cube
    env.reset(seed=1)
    pose = np.array(env.task.reset.poses["tucked"], np.float32)
    assert env.commanded()[5] == pytest.approx(14.0) and pose[5] == 0.0
    np.testing.assert_allclose(env.commanded()[:5], pose[:5], atol=1e-3)
    assert env.counts.resets_short_of_the_pose == 0


def test_a_reset_whose_beats_run_late_still_reaches_the_pose(tmp_path, monkeypatch):
    env, rec, operator, keys = twin(tmp_path, reset=ResetConfig(pose="tucked", max_speed=120.0))
    env.robot.watch_time = True  # the guard in wall time, as with a real robot
    monkeypatch.setattr(env, "_beat", lambda t0: time.sleep(2.5 / env.control_hz))  # a starved actor process
    env.reset(seed=1)
    pose = np.array(env.task.reset.poses["tucked"], np.float32)
    np.testing.assert_allclose(env.commanded(), pose, atol=1e-3)
    np.testing.assert_allclose(rec.sent[-1], pose, atol=1e-3)  # what the robot was really told
    assert env.counts.resets_short_of_the_pose == 0 and env.robot.counts.held_for_watchdog == 0
    assert per_tick_change(rec.sent).max() <= 120.0 / env.control_hz + 1e-4  # still at the reset's speed


def test_only_a_ready_after_the_move_counts_and_the_wait_has_a_timeout(tmp_path):
    env, rec, operator, keys = twin(tmp_path, reset=ResetConfig(pose="tucked", ready_timeout_s=0.3))
    keys.auto_ready = False
    operator.poll()
    keys.press("enter")  # pressed during the last episode: stale
    for _ in range(5):
        keys.press()
    keys.press("enter")  # pressed while the arm still moves: not "the scene is set up"
    t0 = time.monotonic()
    env.reset(seed=0)
    assert 0.3 <= time.monotonic() - t0 < 3.0 and env.counts.ready_timeouts == 1  # both ignored: it timed out
    env.task.reset.ready_timeout_s = 0.0  # wait until it comes
    keys.press_on_prompt("press Enter", "enter")
    env.reset(seed=1)
    assert env.counts.ready_timeouts == 1  # ready came, no second timeout
    env.keep_waiting = lambda: False  # the run stops (or the e-stop latches): the wait ends at once
    t0 = time.monotonic()
    env.reset(seed=2)
    assert time.monotonic() - t0 < 1.0 and env.counts.ready_timeouts == 1


def test_a_reset_by_teleop_starts_from_where_the_arm_is(tmp_path):
    """The person drove the tip 5 cm in an earlier takeover; a reset by teleop must not head back there."""
    keys = ScriptedKeys()
    operator = Operator(KeyboardTeleopConfig(), KeyboardDriver(KeyboardTeleopConfig(step_m=0.01)), keys=keys)
    env, rec, _, _ = twin(tmp_path, operator=operator, reset=ResetConfig(by_teleop=True))
    keys.press_on_prompt("by teleop", "enter")
    keys.press_on_prompt("press Enter (ready)", "enter")
    env.reset(seed=0)
    keys.press("space")
    for key in ["s"] * 5:
        keys.press(key)
        env.step(operator.read().action)
    keys.press("space")
    operator.read()  # hands back: the policy's episode goes on
    keys.press("w", "w", "w")  # keys while the policy drives move nothing, now or later
    operator.read()
    before = len(rec.sent)
    keys.press_on_prompt("press Enter (ready)", "enter")

    def person_stops_after(n: int):
        calls = {"n": 0}

        def keep() -> bool:
            calls["n"] += 1
            if calls["n"] == n:  # after n beats of the reset by teleop, the person presses Enter
                keys.press("enter")
            return True
        return keep
    env.keep_waiting = person_stops_after(20)
    start = env.commanded()
    env.reset(seed=1)
    during = np.stack(rec.sent[before:before + 18])
    np.testing.assert_allclose(during, np.tile(start, (len(during), 1)), atol=1e-4)  # held still by teleop


def test_labels_end_the_episode_and_only_the_label_rewards(tmp_path):
    env, rec, operator, keys = twin(tmp_path)
    keys.press("enter")
    obs, _ = env.reset(seed=3)
    assert obs["state"].shape == (15,)  # joints, velocities, tip: the target of the twin's scene is not in it
    for _ in range(3):
        keys.press()
    keys.press("y")
    rewards, done = [], False
    while not done:
        obs, r, term, trunc, info = env.step(np.zeros(6, np.float32))
        rewards.append(r)
        done = term or trunc
    assert term and info["success"] and info["label"] == TeleopEvent.SUCCESS and rewards == [0.0] * 3 + [1.0]
    assert "sim_success" in info and not info["sim_success"]  # the scene did not succeed: the person's word counts
    keys.press("enter")
    env.reset(seed=4)
    keys.press("r")
    _, r, term, trunc, info = env.step(np.zeros(6, np.float32))
    assert trunc and not term and info["rerecord"] and r == 0.0
    assert env.counts.labels == {"success": 1, "rerecord": 1}


def test_the_time_limit_truncates(tmp_path):
    env, rec, operator, keys = twin(tmp_path, episode_s=0.2)
    keys.press("enter")
    env.reset(seed=0)
    steps = [env.step(np.zeros(6, np.float32)) for _ in range(env.episode_ticks)]
    assert env.episode_ticks == 5 and steps[-1][3] and not any(s[3] for s in steps[:-1])


class FixedLeader:
    """A leader arm the person holds still at ``pose``."""

    def __init__(self, pose) -> None:
        self.pose = np.asarray(pose, np.float32)

    def start(self, arm) -> None:
        pass

    def key(self, key) -> None:
        pass

    def target(self, arm):
        return self.pose.copy(), set()


def test_takeover_and_hand_back_are_bumpless(tmp_path):
    """The leader is held 60 deg away from the follower: taking over moves the command there at the teleop's
    speed bound, never in one jump; the policy then takes over from where the person left it."""
    from robolearn.actor.chunking import ChunkExecutor, ChunkingConfig
    from robolearn.actor.episode import EpisodeLoop, StepRecord
    from robolearn.clock import SimClock
    from robolearn.inference.client import SimulatedLatencyClient
    from robolearn.inference.runner import ChunkPolicyRunner
    from robolearn.policies.mlp import MLPPolicyConfig, make_policy

    leader = FixedLeader([60.0, -40.0, 30.0, 20.0, -70.0, 90.0])
    keys = ScriptedKeys(auto_ready=True)
    config = PersonConfig(name="test", max_speed=45.0, max_gripper_speed=100.0)
    operator = Operator(config, leader, keys=keys)
    env, rec, _, _ = twin(tmp_path, operator=operator, episode_s=4.0)
    policy = make_policy(env.observation_spec, env.action_spec, MLPPolicyConfig())
    runner = ChunkPolicyRunner(policy, env.observation_spec, env.action_spec.dim, explore=True)
    clock = SimClock()
    executor = ChunkExecutor(SimulatedLatencyClient(runner, clock), env.action_spec, 1, ChunkingConfig(), "arm")
    steps: list[StepRecord] = []

    class Keep:
        def on_step(self, step):
            steps.append(step)

    keys.press("enter")
    loop = EpisodeLoop(env, executor, clock, operator, subscribers=[Keep()])
    keys.press_at(10, "space")  # 10 policy ticks, the person drives for 50, then hands back
    keys.press_at(60, "space")
    n_reset = None

    def mark(*_):
        nonlocal n_reset
        n_reset = len(rec.sent)
    loop.subscribers.insert(0, type("M", (), {"on_episode_start": staticmethod(mark)})())
    loop.run(seed=0)
    ticks = rec.sent[n_reset - 1:]  # the command before the first tick, then one per tick
    human = [s.fields["intervention"] for s in steps]
    assert sum(human) >= 45 and human[0] is False and human[-1] is False
    change = per_tick_change(ticks)
    bound = np.array([45.0] * 5 + [100.0]) / env.control_hz
    policy_bound = np.array([6.0] * 6)
    for i, step in enumerate(steps):
        limit = bound if step.fields["intervention"] else policy_bound
        assert np.all(change[i] <= limit + 1e-4), (i, change[i], step.fields["intervention"])
    start = steps[[s.fields["intervention"] for s in steps].index(True)]
    assert np.abs(leader.pose - ticks[start.step]).max() > 30  # the leader was far away when the person took over
    held = ticks[[i for i, s in enumerate(steps) if s.fields["intervention"]][-1] + 1]
    np.testing.assert_allclose(held, leader.pose, atol=1e-3)  # and the follower reached it, by small steps


def test_the_keyboard_moves_the_tip_through_inverse_kinematics(tmp_path):
    keys = ScriptedKeys(auto_ready=True)
    operator = Operator(KeyboardTeleopConfig(), KeyboardDriver(KeyboardTeleopConfig(step_m=0.01)), keys=keys)
    env, rec, _, _ = twin(tmp_path, operator=operator)
    keys.press("enter")
    env.reset(seed=0)
    tip0 = env.tip_position(env.commanded())
    keys.press("space")
    operator.poll()
    for key in ["s"] * 5 + ["z"] * 3:
        keys.press(key)
        reading = operator.read()
        env.step(reading.action)
    for _ in range(20):
        env.step(operator.read().action)
    moved = env.tip_position(env.commanded()) - tip0
    np.testing.assert_allclose(moved, [-0.05, 0.0, -0.03], atol=0.004)


def test_a_command_that_leaves_the_workspace_is_held(tmp_path):
    env, rec, operator, keys = twin(tmp_path, workspace_low=[-0.1, -0.35, 0.15])
    keys.press("enter")
    env.reset(seed=0)  # home: tip at z 0.226
    before = env.commanded()
    for _ in range(30):  # lower the tip: shoulder and elbow forward
        env.step(np.array([0, 6, 6, 0, 0, 0], np.float32))
    assert env.counts.held_at_workspace > 0
    assert env.tip_position(env.commanded())[2] >= 0.15 - 1e-6 and not np.allclose(env.commanded(), before)


def test_the_estop_key_latches_and_the_robot_holds_until_rearmed(tmp_path):
    env, rec, operator, keys = twin(tmp_path)
    keys.press("enter")
    env.reset(seed=0)
    keys.press("e")
    env.step(np.full(6, 3.0, np.float32))  # the key is read in this tick; the command after it holds
    held = env.commanded()
    for _ in range(10):
        env.step(np.full(6, 3.0, np.float32))
    assert env.robot.estop.latched and env.robot.counts.held_for_estop >= 10
    np.testing.assert_array_equal(env.commanded(), held)
    time.sleep(0.05)
    assert env.robot.estop.latched  # nothing re-arms it by itself
    env.robot.estop.rearm()
    env.step(np.full(6, 3.0, np.float32))
    assert not np.array_equal(env.commanded(), held)


def test_the_scripted_person_labels_the_hidden_success(tmp_path):
    cfg = validate(compose(overrides=["task=real", "teleop=scripted", "teleop.reaction_ticks=2"]))
    env = RealTaskEnv(cfg.task, cfg.robot)
    env.robot.connect()
    env.robot = GuardedRobot(env.robot, SafetyConfig(), EStop(tmp_path / "e.json"), 25.0, watch_time=False)
    env.attach_operator(make_operator(cfg.teleop, env))
    env.reset(seed=7)
    seen = []
    for _ in range(env.episode_ticks):
        _, r, term, trunc, info = env.step(env.scene.expert_action())
        seen.append(info["sim_success"])
        if term or trunc:
            break
    assert term and info["success"] and seen[-3:] == [True] * 3 and r == 1.0


@pytest.mark.parametrize("overrides, match", [
    (["task=real"], "teleop=keyboard"),
    (["teleop=keyboard"], "teleop=keyboard is the person of task=real"),
    (["task=real", "teleop=keyboard", "robot=so101"], "actor.realtime=true"),
    (["task=real", "teleop=scripted", "task.reward=classifier"], "needs task.classifier=FOLDER"),
    (["task=real", "teleop=scripted", "task.reset.pose=nowhere"], "nowhere"),
    (["task=real", "teleop=scripted", "actor.human=scripted"], "actor.human=none"),
    (["task=real", "teleop=keyboard"], "actor.realtime=true"),  # a person acts in wall time, on the twin too
    (["task=real", "teleop=keyboard", "actor.realtime=true", "runtime.num_actors=2"], "one person"),
    (["task=real", "teleop=scripted", "task.reset.pose=tucked", "task.workspace_low=[-0.1,-0.35,0.1]"],
     "outside the workspace"),
])
def test_config_refusals_name_the_key(overrides, match):
    from robolearn.config import check_buildable

    with pytest.raises(ConfigError, match=match):
        check_buildable(validate(compose(overrides=overrides)))


def test_a_classifier_reward_refuses_a_scripted_person_who_labels(tmp_path):
    from tests.test_reward_classifier import tiny_classifier

    folder = tiny_classifier(tmp_path)
    base = ["task=real", "teleop=scripted", "task.reward=classifier", f"task.classifier={folder}",
            "task.cameras=[wrist]", "task.camera_size=32"]
    with pytest.raises(ConfigError, match="teleop.labels=false"):
        validate(compose(overrides=base))
    assert validate(compose(overrides=[*base, "teleop.labels=false"])).teleop.labels is False
