"""One robot's feed to the GUI page (``apps/gui``): frames out, the person's acts in.

An ``EpisodeLoop`` subscriber that the actor also ``pump``s on every beat where the robot does not step (a
reset, the wait for "ready", a latched e-stop), so the page shows those too. On the control thread it only
copies: every ``1 / gui.fps`` s, once its thread is done with the last frame, it takes the frame's image (an
observation camera: the real robot's, or the twin's) or a snapshot of the sim scene's positions, the tip path
already executed, and the path the queued actions will take (``foresight``), and hands them to its own thread,
which renders a snapshot (``sim.view.SceneView``), projects the paths into the image, encodes the JPEG and sends it
without blocking (``transport.gui_channel``): a slow page never slows the robot, it gets fewer frames. A frame is
taken only when the thread can start on it at once (one taken while it still draws the last would wait there and
show the person an older robot), and the policy's uncertainty at the newest chunk is measured after a frame is
sent, not ahead of it (ahead of it only with ``gui.help_holds``, where the measurement is what holds the robot).

Foresight: the queued actions from now on (what the robot will execute unless a new chunk replaces them) are
delta joint commands; added up from the current command they give the joints of each coming tick, and the
task's forward kinematics (``env.tip_position``) their tip. The first ``planned delay`` of them are committed
(they execute while the next chunk is computed). Drawn only where the env has that kinematics and the camera
a projection (a sim camera; a real one with ``gui.camera_intrinsics`` / ``camera_extrinsics``).
"""

from __future__ import annotations

import io
import queue
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import zmq
from PIL import Image

from robolearn.actor.config import GuiConfig
from robolearn.actor.episode import StepRecord
from robolearn.policies.encoders import image_keys
from robolearn.rundir import RunDir
from robolearn.sim.view import PinholeCamera, SceneView, Snapshot
from robolearn.transport.gui_channel import Command, FrameInfo, GuiCommandSub, GuiFramePush
from robolearn.transport.security import CurveKeys

EXECUTED_POINTS = 60   # the executed tip path drawn: this many frames back (4 s at 15 fps)
CHECK_EVERY_S = 1.0    # how often the feed looks for a (restarted) GUI


@dataclass(frozen=True)
class _Capture:
    """What the control thread hands the feed's thread: copies only."""

    info: dict
    image: np.ndarray | None            # an observation camera's frame, or None: render ``snapshot``
    snapshot: Snapshot | None
    future: np.ndarray                  # (H, 3) tip positions of the queued actions, world frame
    executed: np.ndarray                # (N, 3)
    chunk_obs: dict | None = None       # the observation of a chunk not yet measured for uncertainty


class GuiFeed:
    def __init__(self, gui: GuiConfig, run: RunDir, robot_id: str, env, ctx: zmq.Context, keys: CurveKeys | None,
                 control: Callable[[], str], prompt: Callable[[], str],
                 future_actions: Callable[[int], tuple[np.ndarray, int]],
                 on_command: Callable[[Command], None],
                 uncertainty: Callable[[dict[str, np.ndarray]], float] | None = None) -> None:
        """``control()``: who drives now (``gui_channel.CONTROL``); ``future_actions(tick)``: the queued actions
        from ``tick`` on (H, A) and how many of them are committed; ``on_command``: the person's acts;
        ``uncertainty(obs)``: the policy's at an observation (asked once per chunk)."""
        self.gui, self.robot_id, self.env = gui, robot_id, env
        self.control, self.prompt, self.future_actions, self.on_command = control, prompt, future_actions, on_command
        self.measure_uncertainty = uncertainty
        self.period = 1.0 / gui.fps
        self.commands = GuiCommandSub(ctx, run.root / "gui.json", robot_id, keys)
        self._push = GuiFramePush(ctx, run.root / "gui.json", robot_id, keys)
        cameras = image_keys(env.observation_spec)
        # the tile's image: an observation camera (a real robot's, the twin's), else the sim scene rendered
        self.obs_camera = gui.camera if gui.camera in cameras else ("" if gui.camera or not cameras else cameras[0])
        self.model = getattr(env.robot, "model", None)   # a sim scene (the twin's too): rendered or projected
        self.data = getattr(env.robot, "data", None)
        self.sim_camera = (self.obs_camera or gui.camera or "front") if self.model is not None else ""
        self.real_projection = (PinholeCamera.from_config(gui.camera_intrinsics, gui.camera_extrinsics)
                                if gui.camera_intrinsics else None)
        self.kinematics = hasattr(env, "tip_position") and hasattr(env, "commanded")
        names = env.robot.observation_spec.arrays["state"].names
        self._vel = [i for i, n in enumerate(names) if n.endswith(".vel")]  # the robot state's joint velocities
        self.dismissed = False  # the person dismissed the robot's help request (until its uncertainty drops)
        self.episode = self.step = self.tick = 0
        self.obs: dict[str, np.ndarray] | None = None
        self._measured: tuple[int, float] | None = None  # (episode, uncertainty): replaced whole by the feed's thread
        self._chunk_obs: dict | None = None
        self.classifier_p: float | None = None
        self._executed: deque[np.ndarray] = deque(maxlen=EXECUTED_POINTS)
        self._next_frame = 0.0
        self._next_check = 0.0
        self.command_delays: deque[float] = deque(maxlen=500)  # the page's stamp -> taken here (s)
        self._queue: queue.Queue[_Capture | None] = queue.Queue(maxsize=1)
        self._busy = threading.Event()  # set from a capture until its frame is sent and its chunk measured
        self.failure: BaseException | None = None  # the feed thread's error: the page goes dark, the robot acts on
        self._thread = threading.Thread(target=self._work, name=f"gui-feed-{robot_id}", daemon=True)
        self._thread.start()  # after every attribute it reads or writes is set

    # --- EpisodeLoop subscriber
    def on_episode_start(self, episode_id: int, seed: int, obs: dict[str, np.ndarray]) -> None:  # noqa: ARG002
        self.episode, self.step, self.obs = episode_id, 0, obs
        self.dismissed, self._chunk_obs = False, None  # the uncertainty measured before is the last episode's
        self._executed.clear()
        self.pump()

    def on_step(self, step: StepRecord) -> None:
        self.step, self.tick, self.obs = step.step + 1, step.tick + 1, step.next_obs
        p = step.info.get("success_probability")
        self.classifier_p = float(p) if p is not None else None
        self.pump()

    def on_chunk(self, start: int, chunk: np.ndarray) -> None:  # noqa: ARG002 - the executor's chunk callback
        """A new chunk: the feed's thread measures the policy's uncertainty at the newest observation (off the
        control thread: several sampled chunks cost several forward passes)."""
        if self.measure_uncertainty is not None and self.obs is not None:
            self._chunk_obs = self.obs

    @property
    def uncertainty(self) -> float | None:
        """The policy's uncertainty at this episode's newest measured chunk. None before one is measured (a
        measurement of the last episode's chunk that ends after this one began is not this episode's), and once the
        feed's thread has failed: no value of it can drop any more, and the robot acts on without its tile."""
        measured = self._measured  # one read: the feed's thread replaces the pair whole
        if measured is None or measured[0] != self.episode or self.failure is not None:
            return None
        return measured[1]

    @property
    def asks_for_help(self) -> bool:
        """The policy's uncertainty at its newest chunk is above ``gui.help_threshold`` (0: it never asks)."""
        u = self.uncertainty  # one read: another thread may turn it to None (a new episode, a failed feed)
        return bool(self.gui.help_threshold and u is not None and u > self.gui.help_threshold)

    def _joint_speed(self) -> float | None:
        """The fastest joint's speed now (robot units / s): the sim's state at once; a real robot's as of its last
        observation (its bus is read by the control loop only)."""
        if not self._vel:
            return None
        if self.data is not None:
            state = self.env.robot.get_observation()["state"]
        elif self.obs is not None:
            state = self.obs["state"]
        else:
            return None
        return float(np.abs(np.asarray(state)[self._vel]).max())

    # --- every beat
    def take_commands(self) -> None:
        """The person's acts that arrived: before every tick (the actor's gate), so a key pressed while the loop
        waited for this tick drives this tick's command, not the next one's."""
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + CHECK_EVERY_S
            self.commands.check()
        for command in self.commands.receive():
            if command.t_key:
                self.command_delays.append(time.time() - command.t_key)
            self.on_command(command)

    def command_delay_ms(self, q: float) -> float | None:
        """Quantile ``q`` of the person's acts' delay from the page's key press to this actor (ms)."""
        return round(float(np.quantile(self.command_delays, q)) * 1e3, 1) if self.command_delays else None

    def pump(self) -> None:
        """A frame when one is due, and the acts that arrived."""
        self.take_commands()
        now = time.monotonic()
        if now < self._next_frame or self._busy.is_set():
            return  # not due, or the thread is busy with the last one: a frame taken now would wait, stale
        self._next_frame = max(self._next_frame + self.period, now)
        if self.kinematics:
            self._executed.append(self.env.tip_position(self.env.commanded()))
        capture = self._capture()  # first: a capture that raises must not leave the thread marked busy for good
        self._busy.set()
        self._queue.put_nowait(capture)

    def _capture(self) -> _Capture:
        future = np.zeros((0, 3))
        committed = 0
        if self.kinematics:
            actions, committed = self.future_actions(self.tick)
            if len(actions):  # the path starts where the tip is told to be now
                now = self.env.commanded()
                joints = np.concatenate([now[None], now + np.cumsum(actions, axis=0)])
                future = np.stack([self.env.tip_position(j) for j in joints])
                committed += 1
        image = None
        if self.obs_camera and self.obs is not None:
            image = np.array(self.obs[self.obs_camera], copy=True)
        snapshot = Snapshot.of(self.data) if self.data is not None and self.sim_camera else None
        info = dict(robot_id=self.robot_id, tick=self.tick, episode=self.episode, step=self.step,
                    t_capture=time.time(), control=self.control(), joints=[float(x) for x in self.env.commanded()]
                    if self.kinematics else [], committed=int(min(committed, len(future))),
                    uncertainty=self.uncertainty, classifier_p=self.classifier_p, prompt=self.prompt(),
                    help=self.asks_for_help and not self.dismissed, joint_speed=self._joint_speed())
        chunk_obs, self._chunk_obs = self._chunk_obs, None
        return _Capture(info, image, snapshot, future, np.array(self._executed).reshape(-1, 3), chunk_obs)

    # --- the feed's thread: render, project, encode, send
    def _work(self) -> None:
        view: SceneView | None = None
        try:
            while (capture := self._queue.get()) is not None:
                # after the frame, not ahead of it (it shows on the next one); ahead of it only where the robot
                # holds for help (gui.help_holds): there the measurement is what stops the robot
                measure_first = self.gui.help_holds
                if capture.chunk_obs is not None and measure_first:
                    self._measure(capture.info["episode"], capture.chunk_obs)
                view = self._draw(capture, view)
                if capture.chunk_obs is not None and not measure_first:
                    self._measure(capture.info["episode"], capture.chunk_obs)
                self._busy.clear()
        except Exception as exc:  # noqa: BLE001 - printed and in the status: the robot goes on, its tile goes dark
            self.failure = exc
            traceback.print_exc()
            print(f"[gui feed {self.robot_id}] stopped: {exc!r}; the robot goes on without its tile", file=sys.stderr,
                  flush=True)
        finally:
            if view is not None:
                view.close()
            self._push.close()

    def _draw(self, capture: _Capture, view: SceneView | None) -> SceneView | None:
        """Render (or take the camera's image), project the paths, encode and send one frame; the scene view,
        made on first use."""
        self._push.check()
        image, camera = capture.image, self.real_projection
        if capture.snapshot is not None:
            if view is None:
                view = SceneView(self.model, self.sim_camera, self.gui.size)
            if image is None:
                image, camera = view.render(capture.snapshot)
            else:
                h, w = image.shape[:2]
                camera = view.camera_at(capture.snapshot, w, h)
        if image is not None:
            info = FrameInfo(**{**capture.info, **self._project(camera, capture)})
            self._push.send(info, self._jpeg(image))
        return view

    def _measure(self, episode: int, obs: dict[str, np.ndarray]) -> None:
        self._measured = (episode, self.measure_uncertainty(obs))
        if not self.asks_for_help:
            self.dismissed = False  # a later request is a new one

    @staticmethod
    def _project(camera: PinholeCamera | None, capture: _Capture) -> dict:
        if camera is None:
            return {}

        def pixels(points: np.ndarray) -> tuple[list[list[float]], np.ndarray]:
            px = camera.project(points) if len(points) else np.zeros((0, 2))
            seen = np.isfinite(px).all(axis=1)  # a point behind the camera is left out
            return [[round(float(x), 1), round(float(y), 1)] for x, y in px[seen]], seen

        chunk, seen = pixels(capture.future)
        return {"chunk": chunk, "executed": pixels(capture.executed)[0],
                "committed": int(seen[:capture.info["committed"]].sum())}

    def _jpeg(self, image: np.ndarray) -> bytes:
        out = io.BytesIO()
        Image.fromarray(image).save(out, format="JPEG", quality=self.gui.jpeg_quality)
        return out.getvalue()

    @property
    def frames_sent(self) -> int:
        return self._push.sent

    def close(self) -> None:
        try:
            self._queue.get_nowait()
        except queue.Empty:
            pass
        self._queue.put(None)
        self._thread.join(timeout=2.0)
        self.commands.close()
