"""The GUI's parts without a browser: the page's commands are validated, the browser as a teleop device lets go by
itself 150 ms after the last hold, a world point projects onto its own pixels in a rendered sim frame, and the
frame and command channel carries what it is given and nothing malformed, a robot's feed takes a frame only when
it can draw it at once, and its help request stands only on this episode's uncertainty, measured by a feed that is
still alive."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import zmq

from robolearn.actor.config import GuiConfig
from robolearn.actor.gui_feed import GuiFeed
from robolearn.hardware.browser_teleop import BrowserDriver, GuiTeleopConfig
from robolearn.hardware.teleop import TeleopEvent
from robolearn.rundir import RunDir
from robolearn.sim.reach import ReachConfig, ReachEnv
from robolearn.sim.view import PinholeCamera, SceneView, Snapshot
from robolearn.specs import ArraySpec, ObservationSpec
from robolearn.transport.gui_channel import (
    HOLD_TIMEOUT_S,
    Command,
    FrameInfo,
    GuiCommandSub,
    GuiEndpoints,
    GuiFramePush,
    GuiSockets,
    command_from_meta,
)


def test_commands_are_checked():
    with pytest.raises(ValueError, match="unknown GUI command"):
        Command("r", "jump", 0.0)
    with pytest.raises(ValueError, match="unknown label"):
        Command("r", "label", 0.0, label="great")
    with pytest.raises(ValueError, match="axes"):
        Command("r", "hold", 0.0, axes=(2.0,))
    with pytest.raises(ValueError, match="axes"):
        Command("r", "hold", 0.0, axes=(float("nan"),))
    with pytest.raises(ValueError, match="malformed"):
        command_from_meta({"kind": "hold"})
    assert command_from_meta({"robot_id": "r", "kind": "hold", "t_sent": 1.0, "axes": [0.5]}).axes == (0.5,)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_browser_holds_only_while_holds_keep_coming():
    clock = FakeClock()
    driver = BrowserDriver(GuiTeleopConfig(), clock=clock)
    assert driver.poll() == ([], False)
    driver.command(Command("r", "hold", time.time() - 1.0))  # sent a second ago (held up on the way): ignored
    assert not driver.poll()[1]
    driver.command(Command("r", "hold", time.time(), axes=(1.0, 0.0, 0.0, 0.0)))
    assert driver.poll()[1]
    clock.now += HOLD_TIMEOUT_S - 0.01
    assert driver.poll()[1]
    clock.now += 0.02                      # 150 ms after the last hold: let go, with no message at all
    assert not driver.poll()[1]
    driver.command(Command("r", "hold", time.time()))
    driver.command(Command("r", "release", time.time()))
    assert not driver.poll()[1]            # an explicit release at once
    driver.command(Command("r", "label", 0.0, label="failure"))
    driver.command(Command("r", "ready", 0.0))
    assert driver.poll() == ([TeleopEvent.FAILURE, TeleopEvent.READY], False)


def test_a_world_point_projects_onto_its_own_pixels():
    env = ReachEnv(ReachConfig())
    env.reset(seed=3)
    view = SceneView(env.robot.model, "front", 160)
    try:
        image, camera = view.render(Snapshot.of(env.robot.data))
        target = env.robot.data.xpos[env.robot.model.body("target").id]
        x, y = camera.project(target[None])[0]
        patch = image[int(round(y)) - 1:int(round(y)) + 2, int(round(x)) - 1:int(round(x)) + 2].reshape(-1, 3)
        g = patch.astype(int)
        assert np.all(g[:, 1] > g[:, 0] + 40) and np.all(g[:, 1] > g[:, 2] + 40), f"not the green target: {patch}"
        # a point well away from the target is not green (the check can fail)
        x2, y2 = camera.project((target + np.array([0.0, 0.0, 0.15]))[None])[0]
        far = image[int(round(y2)), int(round(x2))].astype(int)
        assert not (far[1] > far[0] + 40 and far[1] > far[2] + 40)
        # a point behind the camera does not project
        behind = 2 * camera_position(camera) - target
        assert np.isnan(camera.project(behind[None])).all()
    finally:
        view.close()
        env.close()


def camera_position(camera: PinholeCamera) -> np.ndarray:
    return -camera.rotation.T @ camera.translation


def test_a_configured_real_camera_is_the_inverse_of_its_pose():
    pose = np.eye(4)
    pose[:3, 3] = [0.5, 0.0, 0.3]
    camera = PinholeCamera.from_config([100.0, 100.0, 64.0, 48.0], pose.tolist())
    assert np.allclose(camera.project(np.array([[0.5, 0.0, 1.3]])), [[64.0, 48.0]])      # 1 m ahead: the centre
    assert np.allclose(camera.project(np.array([[0.6, 0.0, 1.3]])), [[74.0, 48.0]])      # 0.1 m right: +10 px
    with pytest.raises(ValueError, match="intrinsics"):
        PinholeCamera.from_config([1.0, 2.0], pose.tolist())


def test_frames_and_commands_cross_the_channel(tmp_path):
    ctx = zmq.Context()
    gui = GuiSockets(ctx, "127.0.0.1", None)
    path = tmp_path / "gui.json"
    push, sub = GuiFramePush(ctx, path, "robot-1"), GuiCommandSub(ctx, path, "robot-1")
    try:
        assert not push.check() and not push.send(FrameInfo("robot-1", 0, 0, 0, 0.0, "policy"), b"x")
        GuiEndpoints(gui.frames_endpoint, gui.commands_endpoint, "http://x/").write(path)
        assert push.check() and sub.check()
        time.sleep(0.3)  # the SUB's subscription reaches the PUB
        info = FrameInfo("robot-1", 7, 2, 3, time.time(), "human", chunk=[[1.0, 2.0]], committed=1)
        assert push.send(info, b"\xff\xd8jpeg")
        got = gui.receive_frame(timeout_ms=2000)
        assert got is not None and got[1] == b"\xff\xd8jpeg" and got[0]["tick"] == 7 and got[0]["control"] == "human"
        gui.publish(Command("robot-1", "hold", time.time(), axes=(0.5, 0.0, 0.0, 0.0)))
        gui.publish(Command("robot-10", "hold", time.time()))  # another robot whose id starts the same
        time.sleep(0.2)
        commands = sub.receive()
        assert [c.robot_id for c in commands] == ["robot-1"] and commands[0].axes == (0.5, 0.0, 0.0, 0.0)
        with pytest.raises(ValueError, match="control"):
            FrameInfo("robot-1", 0, 0, 0, 0.0, "nobody")
    finally:
        push.close()
        sub.close()
        gui.close()
        ctx.term()


def _camera_env() -> SimpleNamespace:
    """A robot with a two-joint state and an 8-px front camera, and no sim scene: the feed sends the camera's image."""
    state = ArraySpec((2,), low=(-1.0, -1.0), high=(1.0, 1.0), names=("a.pos", "b.pos"))
    spec = ObservationSpec({"state": state, "front": ArraySpec((8, 8, 3), dtype="uint8")})
    robot = SimpleNamespace(observation_spec=ObservationSpec({"state": state}))
    return SimpleNamespace(observation_spec=spec, robot=robot)


@pytest.mark.parametrize("measured", [True, False], ids=["uncertainty-measured", "no-uncertainty"])
def test_a_frame_never_waits_behind_another_or_behind_the_uncertainty(tmp_path, measured):
    """The feed takes a frame only when its thread is free, and measures the policy's uncertainty after a frame is
    sent: each frame goes out one draw after it was taken. Drawing (here the JPEG) takes 150 ms, measuring as long,
    a frame is due every 135 ms and the robot's beat is 20 ms. Measured ahead of the frame, a frame would go out two
    draws after it was taken; taken on time while the last one was still drawn, it would wait in the queue for up to
    a frame period, more with each frame (the second case, where nothing is measured, shows this alone)."""
    draw_s = 0.15
    env = _camera_env()
    measurements = []

    def uncertainty(obs: dict) -> float:
        time.sleep(draw_s)
        measurements.append(time.time())
        return 0.5

    ctx = zmq.Context()
    feed = GuiFeed(GuiConfig(fps=1 / (0.9 * draw_s)), RunDir(tmp_path), "robot-1", env, ctx, None, lambda: "policy",
                   lambda: "", lambda tick: (np.zeros((0, 2)), 0), lambda command: None,
                   uncertainty if measured else None)
    sent: list[tuple[float, float]] = []  # (taken, sent)

    def slow_jpeg(image: np.ndarray) -> bytes:
        time.sleep(draw_s)
        return b"jpeg"

    feed._jpeg = slow_jpeg
    feed._push.send = lambda info, jpeg: sent.append((info.t_capture, time.time()))
    try:
        feed.on_episode_start(0, 0, {"state": np.zeros(2, np.float32), "front": np.zeros((8, 8, 3), np.uint8)})
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            feed.on_chunk(0, np.zeros((1, 2)))  # a new chunk every beat: its uncertainty is always due
            feed.pump()
            time.sleep(0.02)
    finally:
        feed.close()
        ctx.term()
    assert feed.failure is None
    assert len(sent) >= 5 and bool(measurements) == measured, (len(sent), len(measurements))
    delays = [out - taken for taken, out in sent]
    assert max(delays) < 1.5 * draw_s, [round(d, 3) for d in delays]


def _help_feed(tmp_path, ctx: zmq.Context, uncertainty) -> GuiFeed:
    """A feed on an 8-px camera robot that asks for help above 0.3 and holds for it (measures before drawing)."""
    feed = GuiFeed(GuiConfig(fps=60, help_threshold=0.3, help_holds=True), RunDir(tmp_path), "robot-1",
                   _camera_env(), ctx, None, lambda: "policy", lambda: "", lambda tick: (np.zeros((0, 2)), 0),
                   lambda command: None, uncertainty)
    feed._push.send = lambda info, jpeg: None
    return feed


def _pump_until(feed: GuiFeed, done, timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    while not done() and time.monotonic() < end:
        feed.pump()
        time.sleep(0.005)
    assert done()


OBS = {"state": np.zeros(2, np.float32), "front": np.zeros((8, 8, 3), np.uint8)}


def test_the_last_episodes_uncertainty_does_not_ask_for_help_in_the_next(tmp_path):
    """A chunk of episode 0 is still being measured (high) when episode 1 begins: its value, written after, is not
    episode 1's, so the robot is not held for it."""
    release, measuring = threading.Event(), threading.Event()

    def uncertainty(obs: dict) -> float:
        measuring.set()
        release.wait(5)
        return 0.9

    ctx = zmq.Context()
    feed = _help_feed(tmp_path, ctx, uncertainty)
    try:
        feed.on_episode_start(0, 0, OBS)
        feed.on_chunk(0, np.zeros((1, 2)))
        _pump_until(feed, measuring.is_set)
        feed.on_episode_start(1, 1, OBS)  # the measurement of episode 0's chunk is still running
        release.set()
        _pump_until(feed, lambda: feed._measured is not None)
        assert feed.uncertainty is None and not feed.asks_for_help
        feed.on_chunk(0, np.zeros((1, 2)))  # episode 1's own chunk, as uncertain: that one asks
        _pump_until(feed, lambda: feed.asks_for_help)
        assert feed.uncertainty == 0.9
    finally:
        release.set()
        feed.close()
        ctx.term()


def test_a_failed_feed_leaves_no_help_request_holding_the_robot(tmp_path):
    """The help request stands on a high uncertainty; then the feed's thread fails (its next frame cannot be
    encoded): no measurement can lower the value any more, so it no longer asks (the robot acts on)."""
    ctx = zmq.Context()
    feed = _help_feed(tmp_path, ctx, lambda obs: 0.9)
    try:
        feed.on_episode_start(0, 0, OBS)
        feed.on_chunk(0, np.zeros((1, 2)))
        _pump_until(feed, lambda: feed.asks_for_help)

        def broken_jpeg(image: np.ndarray) -> bytes:
            raise OSError("encoder gone")

        feed._jpeg = broken_jpeg
        _pump_until(feed, lambda: feed.failure is not None)
        assert not feed.asks_for_help and feed.uncertainty is None
    finally:
        feed.close()
        ctx.term()
