"""Every command to a robot passes ``hardware.safety.GuardedRobot``: tested on the MuJoCo SO-101 (the same
``Robot`` interface as lerobot's driver), each behaviour against the sim's own record of what its servos were
told (``commanded_positions``), not the guard's account of itself."""

import time

import numpy as np
import pytest

from robolearn.hardware.safety import EStop, GuardedRobot, SafetyConfig
from robolearn.hardware.teleop import TeleopReading
from robolearn.sim.so101 import SimSO101, SimSO101Config

HZ = 50.0


@pytest.fixture
def arm():
    robot = SimSO101(SimSO101Config(control_hz=HZ))
    robot.reset_to(np.array([0.0, -30.0, 30.0, 0.0, 0.0, 20.0], np.float32))
    yield robot
    robot.disconnect()


def guard(arm, tmp_path, watch_time=False, **cfg):
    return GuardedRobot(arm, SafetyConfig(**cfg), EStop(tmp_path / "estop" / "sim_so101.json"), HZ, watch_time)


def test_commands_are_clipped_to_the_joint_limits_and_to_one_ticks_speed(arm, tmp_path):
    g = guard(arm, tmp_path, max_speed=100.0)  # 2 per tick at 50 Hz
    start = arm.get_observation()["state"][0]  # the first command moves from where the arm is
    for i in range(1, 4):
        g.send_action(np.array([start + 50.0, -30, 30, 0, 0, 20], np.float32))
        assert arm.commanded_positions()[0] == pytest.approx(start + 2.0 * i, abs=1e-3)
    assert g.counts.clipped_speed == 3
    high = arm.action_spec.array.high_array()
    for _ in range(400):  # far past the joint's upper limit
        g.send_action(high + 1000.0)
    np.testing.assert_allclose(arm.commanded_positions(), high, atol=1e-3)
    assert g.counts.clipped_to_limits == 400


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_command_holds_the_robot_and_is_counted(arm, tmp_path, bad):
    g = guard(arm, tmp_path)
    target = arm.commanded_positions() + 1.0
    g.send_action(target)
    command = target + 1.0
    command[2] = bad
    sent = g.send_action(command)  # no exception: the loop goes on, the robot holds
    np.testing.assert_allclose(arm.commanded_positions(), target, atol=1e-3)
    assert np.all(np.isfinite(sent)) and g.counts.rejected_non_finite == 1


def test_the_watchdog_holds_a_late_loop_and_lets_go_once_it_is_on_time(arm, tmp_path):
    g = guard(arm, tmp_path, watch_time=True, watchdog_late_ticks=3, watchdog_recover_ticks=5)
    base = arm.commanded_positions()
    for i in range(4):  # each command 3 periods after the one before
        g.send_action(base + 0.5 * i)
        time.sleep(3 / HZ)
    assert g.watchdog_tripped and g.counts.watchdog_trips == 1
    held = arm.commanded_positions().copy()
    g.send_action(base + 5.0)  # still late: held
    after_late = arm.commanded_positions().copy()
    for _ in range(5):  # on time again (nothing slow between them: a check's first call can take a period)
        g.send_action(base + 5.0)
    assert not g.watchdog_tripped
    np.testing.assert_allclose(after_late, held, atol=1e-3)
    g.send_action(base + 5.0)
    assert not np.allclose(arm.commanded_positions(), held, atol=1e-3)
    assert g.counts.held_for_watchdog >= 5


def test_a_paced_move_is_never_held_for_lateness_and_keeps_every_other_check(arm, tmp_path):
    g = guard(arm, tmp_path, watch_time=True, watchdog_late_ticks=3, watchdog_recover_ticks=5, max_speed=100.0)
    base = arm.commanded_positions()
    for _ in range(4):  # a late loop trips the watchdog
        g.send_action(base)
        time.sleep(3 / HZ)
    assert g.watchdog_tripped
    arm_joints = np.array([1, 1, 1, 1, 1, 0], np.float32)  # the gripper has its own speed limit
    for i in range(1, 4):  # a reset's beats, as late: each one moves (at most one tick's speed, 2 at 50 Hz)
        g.send_paced(base + 10.0 * arm_joints)
        np.testing.assert_allclose(arm.commanded_positions(), base + 2.0 * i * arm_joints, atol=1e-3)
        time.sleep(3 / HZ)
    assert g.counts.held_for_watchdog == 1 and g.counts.watchdog_trips == 1 and g.counts.clipped_speed == 3  # the
    # one held is the late loop's command that tripped it
    assert g.watchdog_tripped  # late paced beats never let it go
    for _ in range(5):  # on-time ones do, as the loop's would (the first comes late, after the sleep above)
        g.send_paced(arm.commanded_positions())
    assert g.watchdog_tripped
    g.send_paced(arm.commanded_positions())  # the fifth on time: watchdog_recover_ticks
    assert not g.watchdog_tripped
    g.estop.press("test")
    g.send_paced(base)
    np.testing.assert_allclose(arm.commanded_positions(), base + 6.0 * arm_joints, atol=1e-3)  # the e-stop holds
    assert g.counts.held_for_estop == 1

    fresh = guard(arm, tmp_path / "fresh", watch_time=True, watchdog_late_ticks=3)
    for _ in range(4):  # the loop's first command after a paced one is not judged late against it
        fresh.send_paced(arm.commanded_positions())
        time.sleep(3 / HZ)
        fresh.send_action(arm.commanded_positions())
    assert not fresh.watchdog_tripped and fresh.counts.watchdog_trips == 0


def test_the_watchdog_trips_when_the_policy_stops_answering_and_lets_go_when_it_answers(arm, tmp_path):
    g = guard(arm, tmp_path, watchdog_stall_ticks=4)
    for _ in range(3):
        g.note_stalled(True)
    assert not g.watchdog_tripped
    g.note_stalled(True)
    assert g.watchdog_tripped and g.counts.watchdog_trips == 1
    g.note_stalled(False)  # the first tick with an action again: nothing of the policy's is dropped
    assert not g.watchdog_tripped
    before = arm.commanded_positions().copy()
    g.send_action(before + 1.0)
    np.testing.assert_allclose(arm.commanded_positions(), before + 1.0, atol=1e-3)


def test_the_estop_latches_across_restarts_and_only_a_rearm_releases_it(arm, tmp_path):
    g = guard(arm, tmp_path)
    base = arm.commanded_positions().copy()
    g.send_action(base)
    g.estop.press("keyboard", "person pressed space")
    for _ in range(200):  # ~4 s of ticks: it never lets go by itself
        g.send_action(base + 10.0)
    np.testing.assert_allclose(arm.commanded_positions(), base, atol=1e-3)
    assert g.counts.held_for_estop == 200
    replacement = guard(arm, tmp_path)  # a restarted actor: a new guard, the same latch on disk
    replacement.send_action(base + 10.0)  # held where the arm is (it sags a little under gravity)
    np.testing.assert_allclose(arm.commanded_positions(), base, atol=1.0)
    state = replacement.estop.rearm()
    assert state.latched and state.by == "keyboard" and state.reason == "person pressed space"
    before = arm.commanded_positions().copy()
    replacement.send_action(before + 1.0)
    np.testing.assert_allclose(arm.commanded_positions(), before + 1.0, atol=1e-3)


def test_a_simulators_reset_moves_the_reference_the_speed_is_measured_from(arm, tmp_path):
    g = guard(arm, tmp_path, max_speed=100.0)
    g.send_action(arm.commanded_positions())
    far = np.array([60.0, 20.0, -20.0, 30.0, 40.0, 50.0], np.float32)
    g.reset_to(far)  # what the sim task's env.reset does between episodes
    g.send_action(far + 1.0)
    np.testing.assert_allclose(arm.commanded_positions(), far + 1.0, atol=1e-3)
    assert g.counts.clipped_speed == 0


def test_a_press_during_a_rearm_is_a_new_latch_and_the_runs_latch_holds_every_robot(arm, tmp_path):
    own, every = tmp_path / "estop" / "sim_so101.json", tmp_path / "estop" / "all.json"
    g = GuardedRobot(arm, SafetyConfig(), EStop(own, also=(every,)), HZ, False)
    EStop(every).press("operator", "everyone back")
    assert g.estop.latched and g.estop.state().reason == "everyone back"
    assert not g.estop.rearm().latched  # its own latch was not pressed: the run's still holds
    assert g.estop.latched
    EStop(every).rearm()
    assert not g.estop.latched
    g.estop.press("gui")
    assert g.estop.rearm().by == "gui"
    assert not list((tmp_path / "estop").glob("*rearmed*"))  # nothing left behind


def test_what_the_robot_executed_is_what_the_episode_loop_records(tmp_path):
    """At a joint limit (the robot clips) and under the guard's speed limit, the sim task reports the change
    its servo targets really made, and the episode loop records that instead of the policy's action."""
    from robolearn.actor.episode import StepRecord
    from robolearn.sim.reach import ReachConfig, ReachEnv
    from tests.test_episode_loop import _loop

    env = ReachEnv(ReachConfig(episode_ticks=5))
    env.robot = GuardedRobot(env.robot, SafetyConfig(max_speed=50.0, max_gripper_speed=50.0),
                             EStop(tmp_path / "estop.json"), 25.0, False)
    env.reset(seed=0)
    high = env.robot.action_spec.array.high_array()
    env.robot.reset_to(np.minimum(env.robot.commanded_positions() + 100.0, high - 1.0))
    asked = np.full(6, 6.0, np.float32)
    _, _, _, _, info = env.step(asked)
    executed = info["executed_action"]
    assert np.all(executed <= 2.0 + 1e-3) and np.all(executed < asked)  # 50 deg/s at 25 Hz; 1 left to the limit

    class Record:
        steps: list[StepRecord] = []

        def on_step(self, step):
            self.steps.append(step)

    class PushesHard:  # a teleop that drives every tick, asking the most the task allows
        def reset(self):
            pass

        def read(self):
            return TeleopReading(asked, intervening=True)

        def observe(self, executed):
            self.executed = executed

    record, human = Record(), PushesHard()
    loop = _loop(env, [record])
    loop.driver.human = human
    loop.run(seed=1)
    for step in record.steps:  # what was recorded is what the guard let through, not the +6 asked
        assert np.all(np.abs(step.action) <= 2.0 + 1e-3) and step.fields["intervention"], step.action
    np.testing.assert_allclose(human.executed, record.steps[-1].action)  # the teleop is told the same
    env.close()


def test_the_guard_counts_the_commands_its_driver_clamped(tmp_path):
    """robot.max_relative_target: the driver sends less than the guard asked; the guard counts it and goes on from
    what was sent."""
    arm = SimSO101(SimSO101Config(control_hz=HZ, max_relative_target=1.0))
    arm.reset_to(np.array([0.0, -30.0, 30.0, 0.0, 0.0, 20.0], np.float32))
    g = guard(arm, tmp_path, max_speed=500.0)  # 10 deg per tick at 50 Hz: more than the driver lets through
    g.send_action(np.array([5.0, -30, 30, 0, 0, 20], np.float32))
    assert g.counts.clamped_by_driver == 1 and arm.commanded_positions()[0] == pytest.approx(1.0, abs=0.05)
    g.send_action(np.array([0.5, -30, 30, 0, 0, 20], np.float32))  # within reach: not clamped
    assert g.counts.clamped_by_driver == 1
    arm.disconnect()
