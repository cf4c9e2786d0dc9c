"""``robolearn run task=real robot=so101 teleop=so101_leader`` end to end, without hardware: lerobot's real
SO-101 follower and leader drivers talk to fake Feetech servos behind pseudo-terminals
(``tests.fake_bus_pty``), and a scripted person moves the fake leader and presses keys on a third one. The
episodes start on the person's Enter, the reset moves the follower to its pose, the person's takeover is
flagged in the buffer and moves the follower toward the leader without a jump, labels become rewards, the
e-stop holds the motors, and only the actor process opens the ports."""

from __future__ import annotations

import os
import pty
import signal
import termios
import time
from pathlib import Path

import numpy as np
import pytest

from robolearn.logging.status import read_json
from robolearn.tasks.real import ResetConfig
from tests.fake_bus_pty import PtyServos
from tests.fake_feetech import ADDR_GOAL, ADDR_PRESENT, FakeServos
from tests.helpers import fast_run_overrides, read_buffer, start_robolearn, wait_for

pytestmark = pytest.mark.e2e

TUCKED = ResetConfig().poses["tucked"]


def _calibrate(calibration_dir: Path) -> None:
    """Write the calibration files lerobot reads at connect (full encoder range, no offset) for both arms."""
    from lerobot.motors import MotorCalibration

    from robolearn.hardware.lerobot_robot import LerobotRobotConfig, make_lerobot_robot
    from robolearn.hardware.teleop import LerobotTeleop, LerobotTeleopConfig
    from robolearn.sim.so101 import JOINTS

    follower = make_lerobot_robot(LerobotRobotConfig(port="/dev/null", calibration_dir=str(calibration_dir)))
    leader = LerobotTeleop(LerobotTeleopConfig(port="/dev/null", calibration_dir=str(calibration_dir)),
                           list(JOINTS)).device
    for device in (follower, leader):
        device.calibration = {n: MotorCalibration(id=m.id, drive_mode=0, homing_offset=0, range_min=0,
                                                  range_max=4095) for n, m in device.bus.motors.items()}
        device._save_calibration()


def _deg(raw: int) -> float:
    return (raw - 2047.5) * 360.0 / 4096


def _goal(servos: PtyServos, motor: int) -> int:
    with servos.lock:
        return int.from_bytes(servos.servos.mem[motor][ADDR_GOAL:ADDR_GOAL + 2], "little")


def _openers(path: str) -> set[int]:
    """The processes (other than this test) with ``path`` open."""
    pids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                    pids.add(int(pid))
        except OSError:  # gone, or not ours to read
            continue
    return pids


def test_a_real_robot_run_on_fake_buses_with_a_scripted_person(tmp_path):
    follower = PtyServos(FakeServos(list(range(1, 7))))
    leader = PtyServos(FakeServos(list(range(1, 7))))
    keys_master, keys_slave = pty.openpty()
    keys_path = os.ttyname(keys_slave)
    mode_before = termios.tcgetattr(keys_slave)[3]
    calibration = tmp_path / "calibration"
    _calibrate(calibration)
    name = "real-e2e"
    run_dir = tmp_path / "runs" / name
    proc = start_robolearn([
        "run", "task=real", "robot=so101", f"robot.port={follower.path}", f"robot.calibration_dir={calibration}",
        "teleop=so101_leader", f"teleop.port={leader.path}", f"teleop.calibration_dir={calibration}",
        f"teleop.tty={keys_path}", "teleop.max_speed=60", "actor.realtime=true", "runtime.num_actors=1",
        "task.episode_s=20", "task.reset.pose=tucked", "task.reset.ready_timeout_s=0", "runs_dir=runs",
        *fast_run_overrides(name, 3.0)], cwd=tmp_path)

    def press(keys: bytes) -> None:
        os.write(keys_master, keys)

    def actor() -> dict:
        return read_json(run_dir / "status" / "actor-0.json") or {}

    def waiting_for_ready() -> bool:
        return "press Enter" in actor().get("operator_prompt", "")

    try:
        # episode 1: the reset moves the follower to the tucked pose and waits for the person's Enter
        wait_for(waiting_for_ready, 120, "the actor to wait for the person's ready")
        assert abs(_deg(_goal(follower, 2)) - TUCKED[1]) < 1.0  # shoulder_lift moved there (from 0)
        openers = {path: _openers(path) for path in (follower.path, leader.path, keys_path)}
        assert openers[follower.path] == openers[leader.path] == openers[keys_path] == {actor()["pid"]}, openers
        press(b"\r")
        wait_for(lambda: actor().get("env_steps", 0) >= 20, 30, "the policy to act")
        # the person holds the leader's shoulder_pan 40 deg off, and takes over
        with leader.lock:
            leader.servos.mem[1][ADDR_PRESENT:ADDR_PRESENT + 2] = (2048 + 455).to_bytes(2, "little")
        pan_before = _deg(_goal(follower, 1))
        press(b" ")
        took_over = time.monotonic()
        time.sleep(0.2)
        pan_soon = _deg(_goal(follower, 1))
        wait_for(lambda: abs(_deg(_goal(follower, 1)) - 40.0) < 1.0, 10, "the follower to reach the leader")
        assert abs(pan_soon - pan_before) < 25, (pan_before, pan_soon)  # 60 deg/s, not a jump to 40
        # the person drives at least 1 s (25 ticks) whatever the exploring policy did to the pan before
        time.sleep(max(0.0, took_over + 1.0 - time.monotonic()))
        press(b" ")   # hand back
        time.sleep(0.5)
        press(b"y")   # success
        # episode 2: a failure
        wait_for(waiting_for_ready, 30, "the second reset")
        press(b"\r")
        wait_for(lambda: actor().get("episodes", 0) >= 1 and actor().get("operator_prompt", "") == "", 30,
                 "the second episode")
        time.sleep(1.0)
        press(b"n")
        # episode 3: the e-stop holds the motors until re-armed
        wait_for(waiting_for_ready, 30, "the third reset")
        press(b"\r")
        time.sleep(1.0)
        press(b"e")
        wait_for(lambda: actor().get("estop_latched"), 10, "the e-stop to latch")
        held = [_goal(follower, m) for m in range(1, 7)]
        time.sleep(1.5)
        assert [_goal(follower, m) for m in range(1, 7)] == held and actor()["estop_latched"]
        status = actor()
    finally:
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=90)[0]
        mode_after = termios.tcgetattr(keys_slave)[3]
        for servos in (follower, leader):
            servos.close()
        os.close(keys_master)
        os.close(keys_slave)
    assert mode_after == mode_before  # the person's terminal edits lines and echoes again
    assert proc.returncode == 0, out[-3000:]
    assert status["task"]["labels"] == {"success": 1, "failure": 1}, status["task"]

    batches = read_buffer(run_dir)
    steps = {k: np.concatenate([b[k] for b in batches]) for k in ("episode_id", "reward", "terminated",
                                                                 "truncated", "intervention", "success")}
    assert len(steps["reward"]) == status["env_steps"]  # the actor's own count: nothing lost
    episodes = sorted(set(steps["episode_id"].tolist()))
    first, second = episodes[0], episodes[1]
    ep1 = steps["episode_id"] == first
    assert steps["intervention"][ep1].sum() >= 10  # the person's ticks are flagged
    assert steps["reward"][ep1][-1] == 1.0 and steps["terminated"][ep1][-1] and steps["success"][ep1][-1]
    assert steps["reward"][ep1][:-1].sum() == 0.0
    ep2 = steps["episode_id"] == second
    assert steps["truncated"][ep2][-1] and not steps["terminated"][ep2].any() and steps["reward"][ep2].sum() == 0
    assert status["task"]["resets_short_of_the_pose"] == 0, status  # a late actor's reset still gets there
    assert isinstance(status["robot_failed_reads"], int)  # the driver's re-reads (robot.read_retries) are reported
    assert status["robot_frame_age_ms"] == {}  # no cameras on this arm
    state = np.concatenate([b["obs.state"] for b in batches])
    starts = [np.flatnonzero(steps["episode_id"] == e)[0] for e in episodes]
    np.testing.assert_allclose(state[starts][:, :5], np.tile(TUCKED[:5], (len(starts), 1)), atol=1.0)
