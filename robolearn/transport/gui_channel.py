"""The channel between each actor and the run's GUI process (``apps/gui``), and the messages on it.

    actor --PUSH--> GUI PULL   ``gui_frame``    what the person sees: a JPEG of the robot's camera (or of the
                                                sim twin), the tick, who is in control, the predicted chunk
                                                and the executed path projected into that image
    actor <--SUB--- GUI PUB    ``gui_command``  what the person does: take over (held, with axes), hand back,
                                                label, ready; topic = the robot id, so each actor gets its own

The GUI binds both sockets (``gui.json`` in the run directory names them; a restarted GUI binds the same
ports, so actors reconnect on their own). Frames are sent without blocking and dropped when the GUI is slow
or absent: a control loop never waits for a screen. Commands carry the time the GUI sent them (the GUI and its
actors share this machine's clock); an actor treats a take-over as held only while fresh ``hold`` commands keep
arriving (``HOLD_TIMEOUT_S``) and ignores one sent longer ago than that: a lost page, tab or websocket hands
control back by itself. The e-stop does not travel here: the GUI presses the run's latch
file itself (``hardware.safety.EStop``), so it works even when an actor is stuck.

Every message is the project's wire format (``transport.wire``): a msgpack header and raw frames, no pickle.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import zmq

from robolearn.transport.security import CurveKeys
from robolearn.transport.sockets import bind_random_port, connect, limit_receive, recv_valid, send
from robolearn.transport.wire import Message, RejectCounter, WireError, decode, encode

GUI_FRAME, GUI_COMMAND = "gui_frame", "gui_command"
HOLD_TIMEOUT_S = 0.15          # a take-over lapses this long after the last ``hold`` the actor received
COMMAND_KINDS = frozenset({"hold", "release", "label", "ready", "dismiss"})
LABELS = frozenset({"success", "failure", "rerecord"})
CONTROL = ("policy", "human", "estop", "waiting")  # who drives the robot now (waiting: a reset or for the person)
MAX_JPEG_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class GuiEndpoints:
    """Where the GUI listens (``<run>/gui.json``) and the page's address."""

    frames: str
    commands: str
    url: str
    pid: int = 0                          # the GUI process

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> GuiEndpoints | None:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        return cls(str(data["frames"]), str(data["commands"]), str(data["url"]), int(data.get("pid", 0)))


@dataclass(frozen=True)
class FrameInfo:
    """What goes with one frame (``gui_frame`` meta). Points are image pixels (x, y) of the gripper tip."""

    robot_id: str
    tick: int
    episode: int
    step: int
    t_capture: float                      # time.time() the frame's image was taken
    control: str                          # one of CONTROL
    joints: list[float] = field(default_factory=list)
    chunk: list[list[float]] = field(default_factory=list)      # the predicted chunk's future tip path
    committed: int = 0                    # how many points of ``chunk`` are already committed (will execute)
    executed: list[list[float]] = field(default_factory=list)   # the tip path actually executed, oldest first
    chunk_start_tick: int = -1
    uncertainty: float | None = None      # the policy's uncertainty at its latest chunk
    help: bool = False                    # the robot asks for help (uncertainty above the threshold)
    classifier_p: float | None = None     # P(success) of the reward classifier, when it is the reward
    joint_speed: float | None = None      # the fastest joint's speed now (robot units / s)
    prompt: str = ""                      # what the run waits for from the person

    def __post_init__(self) -> None:
        if self.control not in CONTROL:
            raise ValueError(f"control must be one of {CONTROL}, got {self.control!r}")


@dataclass(frozen=True)
class Command:
    """One person's act on one robot (``gui_command`` meta)."""

    robot_id: str
    kind: str                             # one of COMMAND_KINDS
    t_sent: float                         # time.time() at the GUI when it forwarded the act
    axes: tuple[float, ...] = ()          # hold: tip velocity x, y, z and gripper, each in [-1, 1]
    label: str = ""                       # label: one of LABELS
    t_key: float = 0.0                    # time.time() in the browser when the key went down (latency figure)

    def __post_init__(self) -> None:
        if self.kind not in COMMAND_KINDS:
            raise ValueError(f"unknown GUI command {self.kind!r}; expected one of {sorted(COMMAND_KINDS)}")
        if self.kind == "label" and self.label not in LABELS:
            raise ValueError(f"unknown label {self.label!r}; expected one of {sorted(LABELS)}")
        if len(self.axes) > 4 or not all(np.isfinite(a) and -1.0 <= a <= 1.0 for a in self.axes):
            raise ValueError(f"axes must be at most 4 finite values in [-1, 1], got {list(self.axes)}")


def command_from_meta(meta: dict) -> Command:
    """ValueError on anything that is not a well-formed command."""
    try:
        return Command(str(meta["robot_id"]), str(meta["kind"]), float(meta["t_sent"]),
                       tuple(float(a) for a in meta.get("axes", ())), str(meta.get("label", "")),
                       float(meta.get("t_key", 0.0)))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed GUI command {meta!r}: {exc}") from exc


class _FollowsGui:
    """An actor-side socket to the GUI, (re)connected when ``gui.json`` appears or changes (``check``)."""

    def __init__(self, ctx: zmq.Context, endpoints_path: Path, robot_id: str, keys: CurveKeys | None) -> None:
        self.ctx, self.path, self.robot_id, self.keys = ctx, endpoints_path, robot_id, keys
        self.sock: zmq.Socket | None = None
        self._endpoints: GuiEndpoints | None = None

    def check(self) -> bool:
        """Look for (new) GUI endpoints; True when connected. Cheap enough to call about once a second."""
        endpoints = GuiEndpoints.read(self.path)
        if endpoints is None:
            return self.sock is not None
        if endpoints != self._endpoints:
            self.close()
            self.sock = self._open(endpoints)
            self._endpoints = endpoints
        return True

    def _open(self, endpoints: GuiEndpoints) -> zmq.Socket:
        raise NotImplementedError

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
        self.sock, self._endpoints = None, None


class GuiFramePush(_FollowsGui):
    """Frames to the GUI: ``send`` never blocks; a frame the GUI is not ready for is dropped (counted). Use it
    from one thread only (the actor's GUI feed thread)."""

    def __init__(self, ctx: zmq.Context, endpoints_path: Path, robot_id: str, keys: CurveKeys | None = None) -> None:
        super().__init__(ctx, endpoints_path, robot_id, keys)
        self.sent = self.dropped = 0
        self._seq = 0

    def _open(self, endpoints: GuiEndpoints) -> zmq.Socket:
        sock = self.ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, 2)      # the newest frames only: a slow screen never queues old ones
        sock.setsockopt(zmq.LINGER, 0)
        return connect(sock, endpoints.frames, self.keys)

    def send(self, info: FrameInfo, jpeg: bytes) -> bool:
        if self.sock is None:
            return False
        try:
            send(self.sock, GUI_FRAME, self.robot_id, self._seq, asdict(info), {"jpeg": np.frombuffer(jpeg, np.uint8)},
                 flags=zmq.NOBLOCK)
        except zmq.Again:
            self.dropped += 1
            return False
        self._seq += 1
        self.sent += 1
        return True


class GuiCommandSub(_FollowsGui):
    """The person's acts on this robot from the GUI (``receive``: those arrived since the last call)."""

    def __init__(self, ctx: zmq.Context, endpoints_path: Path, robot_id: str, keys: CurveKeys | None = None) -> None:
        super().__init__(ctx, endpoints_path, robot_id, keys)
        self.rejects = RejectCounter()

    def _open(self, endpoints: GuiEndpoints) -> zmq.Socket:
        sock = limit_receive(self.ctx.socket(zmq.SUB), (64 * 1024, 256))
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, self.robot_id.encode())
        return connect(sock, endpoints.commands, self.keys)

    def receive(self) -> list[Command]:
        out: list[Command] = []
        while self.sock is not None:
            try:
                frames = self.sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            msg = recv_valid_frames(frames[1:], self.rejects)  # frame 0 is the topic
            if msg is None:
                continue
            try:
                command = command_from_meta(msg.meta)
            except ValueError as exc:
                self.rejects.reject(str(exc))
                continue
            if command.robot_id == self.robot_id:  # topics match by prefix: robot-1 also gets robot-10's
                out.append(command)
        return out


def recv_valid_frames(frames: list[bytes], rejects: RejectCounter) -> Message | None:
    """Decode one ``gui_command`` already received (its topic frame removed); None if rejected."""
    try:
        return decode(frames, frozenset({GUI_COMMAND}))
    except WireError as exc:
        rejects.reject(str(exc))
        return None


class GuiSockets:
    """The GUI's end: ``frames`` (PULL) and ``publish`` (PUB, topic = robot id)."""

    def __init__(self, ctx: zmq.Context, host: str, keys: CurveKeys | None, frames_port: int = 0,
                 commands_port: int = 0) -> None:
        self.rejects = RejectCounter()
        self.pull = limit_receive(ctx.socket(zmq.PULL), (MAX_JPEG_BYTES + 256 * 1024, 64))
        self.pull.setsockopt(zmq.LINGER, 0)
        self.frames_endpoint = bind_random_port(self.pull, host, keys, frames_port)
        self.pub = ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.commands_endpoint = bind_random_port(self.pub, host, keys, commands_port)
        self._seq = 0

    def receive_frame(self, timeout_ms: int = 100) -> tuple[dict, bytes] | None:
        """(the frame's FrameInfo as a dict, its JPEG) of the next frame, or None."""
        if not self.pull.poll(timeout_ms):
            return None
        msg = recv_valid(self.pull, self.rejects, frozenset({GUI_FRAME}))
        if msg is None:
            return None
        jpeg = msg.arrays.get("jpeg")
        if jpeg is None or jpeg.dtype != np.uint8 or jpeg.ndim != 1:
            self.rejects.reject("a gui_frame without a 1-d uint8 jpeg")
            return None
        return msg.meta, jpeg.tobytes()

    def publish(self, command: Command) -> None:
        self._seq += 1
        self.pub.send_multipart([command.robot_id.encode(), *encode(GUI_COMMAND, "gui", self._seq, asdict(command))],
                                copy=False)

    def close(self) -> None:
        self.pull.close(linger=0)
        self.pub.close(linger=0)
