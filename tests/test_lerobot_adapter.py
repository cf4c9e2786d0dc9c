"""lerobot's real SO-101 follower class, over a fake serial port with Feetech servos, as a HAL robot."""

import logging
import threading
import time

import numpy as np
import pytest
import scservo_sdk.port_handler

from robolearn.hardware.frame_age import check_frame_timestamps
from robolearn.hardware.lerobot_robot import LerobotRobot, LerobotRobotConfig
from robolearn.hardware.robot import Robot, UnsafeActionError
from robolearn.sim.so101 import SimSO101, SimSO101Config
from tests.camera_feed import CameraFeed
from tests.fake_feetech import ADDR_GOAL, FakeSerial, FakeServos


@pytest.fixture
def servos(monkeypatch):
    servos = FakeServos(ids=[1, 2, 3, 4, 5, 6])
    # only the serial port is fake: the Feetech SDK and lerobot's bus and robot code run for real
    monkeypatch.setattr(scservo_sdk.port_handler.serial, "Serial", lambda **kw: FakeSerial(servos, **kw))
    return servos


def _calibrated_robot(tmp_path, **config) -> LerobotRobot:
    from lerobot.motors import MotorCalibration

    robot = LerobotRobot(LerobotRobotConfig(port="/dev/fake-ttyACM0", calibration_dir=str(tmp_path)))
    calibration = {name: MotorCalibration(id=m.id, drive_mode=0, homing_offset=0, range_min=0, range_max=4095)
                   for name, m in robot.robot.bus.motors.items()}
    robot.robot.calibration = calibration
    robot.robot.bus.calibration = calibration
    robot.robot._save_calibration()
    return LerobotRobot(LerobotRobotConfig(port="/dev/fake-ttyACM0", calibration_dir=str(tmp_path), **config))


def test_so101_follower_reads_and_moves_through_the_fake_bus(servos, tmp_path):
    robot = _calibrated_robot(tmp_path)
    assert isinstance(robot, Robot)
    robot.connect()
    try:
        obs = robot.get_observation()
        robot.observation_spec.validate(obs)
        np.testing.assert_allclose(obs["state"][:5], 0.0, atol=0.1)  # raw 2048: the middle of the range
        target = np.array([30.0, -20.0, 45.0, 10.0, -90.0, 60.0], np.float32)
        sent = robot.send_action(target)
        np.testing.assert_allclose(sent, target, atol=1e-4)
        obs = robot.get_observation()
        np.testing.assert_allclose(obs["state"][:6], target, atol=0.2)  # read back through the real decoder
        assert abs(servos.position(1) - (2047.5 + 30.0 / 360 * 4096)) <= 1
        with pytest.raises(UnsafeActionError):
            robot.send_action(np.full(6, np.nan, np.float32))
        clipped = robot.send_action(np.array([500.0, 0, 0, 0, 0, 150.0], np.float32))
        assert clipped[0] <= robot.action_spec.array.high[0] + 1e-3 and clipped[5] <= 100.0 + 1e-3
        assert int.from_bytes(servos.mem[6][ADDR_GOAL:ADDR_GOAL + 2], "little") <= 4095
    finally:
        robot.disconnect()
    assert servos.packets > 20


def test_a_late_reply_never_answers_a_later_read(servos, tmp_path):
    """A sync read whose replies arrive after it timed out: lerobot's retry decodes them (values of that moment),
    and the replies to the retry, left on the port, must not answer the next read: after a move, the state read
    is the new pose, not the one before it."""
    robot = _calibrated_robot(tmp_path)
    robot.connect()
    try:
        before = np.array([30.0, -20.0, 45.0, 10.0, -90.0, 60.0], np.float32)
        robot.send_action(before)
        port = robot.robot.bus.port_handler.ser
        port.late_replies = 1  # the answer to the next read (every servo's status packet) comes late
        np.testing.assert_allclose(robot.get_observation()["state"][:6], before, atol=0.2)  # the retry's
        assert port.late_replies == 0 and port.in_waiting > 0  # the retry's own replies wait on the port
        servos.mem[2][56:58] = (2048 + 512).to_bytes(2, "little")  # the arm is pushed: shoulder_lift to 45 deg
        np.testing.assert_allclose(robot.get_observation()["state"][1], 45.0, atol=0.2)
        np.testing.assert_allclose(robot.get_observation()["state"][1], 45.0, atol=0.2)
    finally:
        robot.disconnect()


def test_a_late_reply_never_answers_the_drivers_read_before_a_command(servos, tmp_path):
    """With max_relative_target lerobot reads the present position before each command and holds the goal near
    it: a late reply left on the port must not be that reading (the goal would be held near where the arm was)."""
    robot = _calibrated_robot(tmp_path, max_relative_target=10.0)
    robot.connect()
    try:
        robot.robot.bus.port_handler.ser.late_replies = 1
        np.testing.assert_allclose(robot.get_observation()["state"][1], 0.0, atol=0.2)  # the retry's
        servos.mem[2][56:58] = (2048 + 512).to_bytes(2, "little")  # the arm is pushed: shoulder_lift to 45 deg
        target = np.array([0.0, 50.0, 0.0, 0.0, 0.0, 50.0], np.float32)
        assert robot.send_action(target)[1] == pytest.approx(50.0, abs=0.2)  # within 10 of 45, not held near 0
    finally:
        robot.disconnect()


def test_a_failed_read_is_read_again_then_its_error_stops_the_read(servos, tmp_path, capsys):
    """A read whose replies are lost through lerobot's own tries is read again (robot.read_retries), counted and
    said; once every attempt fails, lerobot's ConnectionError goes on."""
    robot = _calibrated_robot(tmp_path)
    robot.connect()
    try:
        port = robot.robot.bus.port_handler.ser
        port.lost_replies = 3  # lerobot's three tries (its num_read_retries=2) all go unanswered
        np.testing.assert_allclose(robot.get_observation()["state"][:5], 0.0, atol=0.1)
        assert robot.failed_reads == 1 and "reading again (1 of robot.read_retries=2)" in capsys.readouterr().err
        port.lost_replies = 9  # every try of every attempt
        with pytest.raises(ConnectionError, match="Present_Position"):
            robot.get_observation()
        assert robot.failed_reads == 3 and port.lost_replies == 0
        np.testing.assert_allclose(robot.get_observation()["state"][:5], 0.0, atol=0.1)  # the bus answers again
    finally:
        robot.disconnect()
    with pytest.raises(ValueError, match="robot.read_retries"):
        LerobotRobotConfig(read_retries=-1)


def _camera_robot(tmp_path, feed: CameraFeed, **config) -> LerobotRobot:
    robot = _calibrated_robot(tmp_path, cameras={"wrist": {"index_or_path": str(feed.path), "width": feed.width,
                                                           "height": feed.height, "fps": feed.fps}}, **config)
    cam = robot.robot.cameras["wrist"]
    cam.width = cam.height = cam.fps = None  # OpenCV sets no capture size on a pipe: it reads the stream's own
    return robot


def test_a_stalled_camera_is_a_failed_read_not_a_stale_image(servos, tmp_path, capsys):
    """lerobot's camera thread keeps serving its last frame for 500 ms after the camera stalls; with
    robot.max_frame_age_ms the frame's age (from the capture thread's own timestamps) bounds it: too old is a failed
    read, read again a control period later, and a camera that comes back within the retries is read fresh."""
    feed = CameraFeed(tmp_path / "wrist.y4m")
    robot = _camera_robot(tmp_path, feed, max_frame_age_ms=150, read_retries=1)
    robot.connect()
    try:
        for _ in range(5):
            obs = robot.get_observation()
            time.sleep(0.04)
        assert obs["wrist"].shape == (48, 64, 3) and robot.failed_reads == 0
        assert robot.frame_ages.summary()["wrist"]["max"] < 150
        feed.paused.set()
        time.sleep(0.4)
        with pytest.raises(TimeoutError, match=r"camera wrist: frame \d+ ms old, over robot.max_frame_age_ms=150"):
            robot.get_observation()
        assert robot.failed_reads == 1 and robot.frame_ages.too_old == 2
        assert "reading again (1 of robot.read_retries=1)" in capsys.readouterr().err
        robot.config.read_retries = 10  # now the camera comes back during the retries
        threading.Timer(0.1, feed.paused.clear).start()
        last_before = feed.frames - 1
        obs = robot.get_observation()
        assert robot.failed_reads > 1 and CameraFeed.number(obs["wrist"]) != last_before % 200  # a new frame
    finally:
        feed.paused.clear()  # lerobot releases the capture under a read still waiting for a frame: a segfault
        robot.disconnect()
        feed.close()


def test_without_max_frame_age_a_stalled_cameras_last_frame_passes_as_fresh(servos, tmp_path):
    """What the bound adds: lerobot's own read_latest serves a 300 ms old frame, the feed's last, silently."""
    feed = CameraFeed(tmp_path / "wrist.y4m")
    robot = _camera_robot(tmp_path, feed, max_frame_age_ms=None)
    robot.connect()
    try:
        robot.get_observation()
        feed.paused.set()
        time.sleep(0.3)
        last = feed.frames - 1
        assert CameraFeed.number(robot.get_observation()["wrist"]) == last % 200 and robot.failed_reads == 0
        assert robot.frame_ages is None
    finally:
        feed.paused.clear()  # lerobot releases the capture under a read still waiting for a frame: a segfault
        robot.disconnect()
        feed.close()


def test_max_frame_age_needs_cameras_that_stamp_their_frames():
    with pytest.raises(ValueError, match="robot.cameras.wrist: lerobot's object does not stamp its frames"):
        check_frame_timestamps({"wrist": object()})
    with pytest.raises(ValueError, match="robot.max_frame_age_ms must be > 0"):
        LerobotRobotConfig(max_frame_age_ms=0)


def test_the_twins_velocities_are_its_positions_rate_of_change_in_the_same_units():
    """The real adapter differentiates its positions; the twin reports MuJoCo's joint speeds, in the same units
    (degrees a second; the gripper's 0..100 units a second, as its position maps the jaw's range)."""
    sim = SimSO101(SimSO101Config())
    sim.connect()
    try:
        prev = sim.get_observation()["state"]
        target = prev[:6].copy()
        target[0] += 20.0
        target[5] = 90.0 if prev[5] < 50.0 else 10.0
        speeds, rates = [], []
        for _ in range(4):
            sim.send_action(target)
            state = sim.get_observation()["state"]
            speeds.append(state[6:])
            rates.append((state[:6] - prev[:6]) * sim.config.control_hz)
            prev = state
        for tick in (1, 2):  # moving: the mean of the speeds at a tick's ends against its average rate
            for joint in (0, 5):
                mean = (speeds[tick - 1][joint] + speeds[tick][joint]) / 2
                assert abs(rates[tick][joint]) > 5.0 and 0.7 < mean / rates[tick][joint] < 1.4, (tick, joint, mean,
                                                                                                  rates[tick][joint])
    finally:
        sim.disconnect()


def test_sim_twin_and_real_robot_expose_identical_names_shapes_and_units(servos, tmp_path):
    real, sim = _calibrated_robot(tmp_path), SimSO101(SimSO101Config())
    for a, b in ((real.action_spec.array, sim.action_spec.array),
                 (real.observation_spec.arrays["state"], sim.observation_spec.arrays["state"])):
        assert (a.names, a.shape, a.dtype, a.unit) == (b.names, b.shape, b.dtype, b.unit)
    assert set(real.observation_spec.arrays) == set(sim.observation_spec.arrays) == {"state"}


def _twin_frames(joints: list[float]) -> dict[str, np.ndarray]:
    """The twin's link directions, tip and moving-jaw side (unit vector off the roll axis) at ``joints`` (units;
    ``reset_to`` runs the forward kinematics)."""
    arm = SimSO101(SimSO101Config())
    arm.reset_to(np.array(joints, np.float64))
    m, d = arm.model, arm.data
    at = {j: d.xanchor[m.joint(j).id].copy() for j in ("shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")}
    axis = d.xaxis[m.joint("wrist_roll").id].copy()
    jaw = d.xipos[m.body("moving_jaw").id] - at["wrist_roll"]
    jaw -= (jaw @ axis) * axis
    return {"upper": at["elbow_flex"] - at["shoulder_lift"], "fore": at["wrist_flex"] - at["elbow_flex"],
            "hand": at["wrist_roll"] - at["wrist_flex"], "jaw": jaw / np.linalg.norm(jaw),
            "tip": d.site_xpos[m.site("tip").id].copy(), "elbow": at["elbow_flex"]}


def test_the_twins_joint_zero_and_directions_are_a_calibrated_arms():
    """A pose in robot units is the same pose on the twin and on a calibrated SO-101: lerobot's zero is the middle of
    each joint's calibrated range, which the official SO-101 model (TheRobotStudio SO-ARM100, so101_new_calib, the
    frames lerobot's kinematics use) puts at the upper arm 13.97 deg forward of vertical, the forearm 2.2 deg above
    level, the hand level and its moving jaw on top; there, +10 deg of shoulder_pan swings the tip to -y, of
    shoulder_lift moves the elbow forward, of wrist_roll turns the jaw towards +y (figures from that model's own
    forward kinematics, not from the twin's constants)."""
    zero = _twin_frames([0, 0, 0, 0, 0, 50])
    elevation = lambda v: np.degrees(np.arctan2(v[2], np.hypot(v[0], v[1])))  # noqa: E731
    assert abs(np.degrees(np.arctan2(zero["upper"][0], zero["upper"][2])) - 13.97) < 0.1
    assert abs(elevation(zero["fore"]) - 2.2) < 0.1 and abs(elevation(zero["hand"])) < 0.1
    assert zero["hand"][0] > 0 and zero["jaw"][2] > 0.99  # the hand forward, the moving jaw on top
    assert _twin_frames([10, 0, 0, 0, 0, 50])["tip"][1] < -0.02
    assert _twin_frames([0, 10, 0, 0, 0, 50])["elbow"][0] > zero["elbow"][0] + 0.01
    assert _twin_frames([0, 0, 0, 0, 10, 50])["jaw"][1] > zero["jaw"][1] + 0.15  # official: -0.07 -> 0.10


def test_unknown_lerobot_robot_type_is_named():
    with pytest.raises(ValueError, match="so999_follower"):
        LerobotRobot(LerobotRobotConfig(type="so999_follower"))


def test_sim_task_refuses_a_real_robot_config():
    from robolearn.sim.reach import ReachEnv

    with pytest.raises(ValueError, match="robot=sim_so101"):
        ReachEnv(robot=LerobotRobotConfig())


def test_so101_leader_arm_is_a_hal_teleop_over_the_fake_bus(servos, tmp_path):
    from lerobot.motors import MotorCalibration

    from robolearn.hardware.teleop import LerobotTeleop, LerobotTeleopConfig, Teleop, TeleopEvent
    from robolearn.sim.so101 import JOINTS

    cfg = LerobotTeleopConfig(type="so101_leader", port="/dev/fake-ttyACM1", calibration_dir=str(tmp_path))
    teleop = LerobotTeleop(cfg, list(JOINTS))
    assert isinstance(teleop, Teleop)
    calibration = {name: MotorCalibration(id=m.id, drive_mode=0, homing_offset=0, range_min=0, range_max=4095)
                   for name, m in teleop.device.bus.motors.items()}
    teleop.device.calibration = teleop.device.bus.calibration = calibration
    servos.mem[2][56:58] = (2048 + 512).to_bytes(2, "little")  # a human moves the leader's shoulder_lift
    teleop.connect()
    try:
        first = teleop.read()
        assert first.intervening and first.events == {TeleopEvent.INTERVENTION_ON}
        assert first.action.shape == (6,) and first.action[1] == pytest.approx(45.0, abs=0.2)
        assert teleop.read().events == set()  # on/off are edges, not levels
        teleop.device.bus.port_handler.ser.late_replies = 1  # the next read's answer comes after it timed out:
        assert teleop.read().action[1] == pytest.approx(45.0, abs=0.2)  # lerobot's retry decodes it
        servos.mem[2][56:58] = (2048 - 512).to_bytes(2, "little")  # the human moves on
        assert teleop.read().action[1] == pytest.approx(-45.0, abs=0.2)  # the late answer does not answer this read
    finally:
        teleop.disconnect()
    with pytest.raises(ValueError, match="no_such_leader"):
        LerobotTeleop(LerobotTeleopConfig(type="no_such_leader"), list(JOINTS))


def test_an_uncalibrated_leader_arm_is_refused_at_connect_not_at_the_first_takeover(servos, tmp_path):
    from robolearn.hardware.teleop import LerobotTeleop, LerobotTeleopConfig
    from robolearn.sim.so101 import JOINTS

    teleop = LerobotTeleop(LerobotTeleopConfig(type="so101_leader", port="/dev/fake-ttyACM1",
                                               calibration_dir=str(tmp_path)), list(JOINTS))  # no calibration file
    with pytest.raises(RuntimeError, match="teleop so101_leader on /dev/fake-ttyACM1 is not calibrated"):
        teleop.connect()
    assert not teleop.device.is_connected


@pytest.mark.parametrize("mode, torque_after", [("torque_off", 0), ("hold", 1)])
def test_disconnect_leaves_the_arm_limp_or_holding_as_configured(servos, tmp_path, mode, torque_after):
    from tests.fake_feetech import ADDR_TORQUE

    _calibrated_robot(tmp_path)
    robot = LerobotRobot(LerobotRobotConfig(port="/dev/fake-ttyACM0", calibration_dir=str(tmp_path),
                                            on_disconnect=mode))
    robot.connect()
    robot.send_action(np.array([10.0, 0, 0, 0, 0, 50.0], np.float32))
    assert all(servos.mem[i][ADDR_TORQUE] == 1 for i in range(1, 7))
    robot.disconnect()
    assert all(servos.mem[i][ADDR_TORQUE] == torque_after for i in range(1, 7))


def test_robot_cameras_are_lerobot_opencv_cameras_in_the_observation_spec(tmp_path):
    robot = LerobotRobot(LerobotRobotConfig(port="/dev/fake-ttyACM0", calibration_dir=str(tmp_path), cameras={
        "wrist": {"index_or_path": 0, "width": 64, "height": 48, "fps": 30}}))
    spec = robot.observation_spec.arrays["wrist"]
    assert spec.shape == (48, 64, 3) and spec.dtype == "uint8" and not robot.is_connected
    with pytest.raises(ValueError, match="robot.cameras"):
        LerobotRobot(LerobotRobotConfig(port="/dev/fake-ttyACM0", cameras={"wrist": {"no_such_field": 1}}))


def test_max_relative_target_holds_each_goal_near_the_present_position_on_the_real_arm_and_its_twin(servos,
                                                                                                   tmp_path, caplog):
    """lerobot's own clamp on the real follower (over the fake bus: its servos reach a goal at once) and the same
    rule in the sim twin: a goal 30 deg away goes out 10 deg from where the joint is."""
    _calibrated_robot(tmp_path)
    real = LerobotRobot(LerobotRobotConfig(port="/dev/fake-ttyACM0", calibration_dir=str(tmp_path),
                                           max_relative_target=10.0))
    real.connect()
    try:
        target = np.array([30.0, 0, 0, 0, 0, 50.0], np.float32)
        with caplog.at_level(logging.WARNING):
            first = real.send_action(target)
        assert "clamped" not in caplog.text  # lerobot's warning at every clamped tick: counted by the guard instead
        assert first[0] == pytest.approx(10.0, abs=0.2)  # the gripper's 50 is where it is: unchanged
        assert first[5] == pytest.approx(50.0, abs=0.2) and first[1] == pytest.approx(0.0, abs=0.2)
        assert real.send_action(target)[0] == pytest.approx(20.0, abs=0.3)  # from where it now is
    finally:
        real.disconnect()
    sim = SimSO101(SimSO101Config(max_relative_target=10.0))
    sim.connect()
    present = sim.joint_positions()
    sent = sim.send_action(present + np.array([30.0, 0, 0, 0, 0, 0], np.float32))
    np.testing.assert_allclose(sent, present + np.array([10.0, 0, 0, 0, 0, 0], np.float32), atol=1e-3)
    with pytest.raises(ValueError, match="max_relative_target"):
        SimSO101Config(max_relative_target=0.0)
    with pytest.raises(ValueError, match="max_relative_target"):
        LerobotRobotConfig(max_relative_target=-1.0)


def test_a_target_pushed_into_the_table_stays_within_max_relative_target_of_the_arm():
    """push_cube with random full-range actions drives the hand into the table: without the setting the servo
    targets run far ahead of joints that cannot follow (a wind-up the state does not show); with it, every target
    stays within 6 deg of where the arm was when it was sent."""
    from robolearn.sim.cube_tasks import PushCubeEnv

    def largest_lead(robot: SimSO101Config) -> float:
        env, rng, lead = PushCubeEnv(robot=robot), np.random.default_rng(0), 0.0
        for ep in range(3):
            env.reset(seed=ep)
            done = False
            while not done:
                before = env.robot.joint_positions()
                action = env.action_spec.to_robot(rng.uniform(-1, 1, env.action_spec.dim).astype(np.float32))
                _, _, terminated, truncated, _ = env.step(action)
                lead = max(lead, float(np.abs(env.robot.commanded_positions() - before).max()))
                done = terminated or truncated
        env.close()
        return lead

    assert largest_lead(SimSO101Config()) > 20.0
    assert largest_lead(SimSO101Config(max_relative_target=6.0)) <= 6.0 + 1e-3
