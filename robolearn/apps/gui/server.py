"""The GUI process: a Starlette app on uvicorn serving the page (``static/``) and one websocket per open page.

    actors --gui_frame--> [zmq thread] newest frame per robot --> every page's websocket (msgpack, binary)
    page   --msgpack----> websocket --> hold / release / label / ready / dismiss --gui_command--> that actor
                                    --> e-stop / re-arm: the run's latch files (hardware.safety.EStop), directly
    status files, learner status (every 0.5 s) --> every page: tiles' figures, the session plots

Messages to the page (msgpack maps, ``t`` says which): ``hello`` (robots, run name), ``frame`` (robot, JPEG
bytes, the frame's ``FrameInfo``, ``t_sent``), ``status`` (per robot: its actor status and e-stop; the learner;
the session series). From the page: ``hold`` (robot, axes, ``t_key``), ``release``, ``label`` (label),
``ready``, ``dismiss``, ``estop`` and ``rearm`` (robot or ``all``). A page that closes or loses its websocket
while it holds a robot releases it at once (and the actor's dead-man lets go 150 ms after the last hold in
any case); closing a page never re-arms anything.

Loopback by default. A token (``gui.token``, or one made at each start) is required in the page's URL and on its
websocket (the URL printed at start carries it), and a websocket opened from a page of another origin is refused:
without both, any web page open in the person's browser could drive the robots through ``ws://127.0.0.1``. Off
loopback the token travels in plain HTTP: use it on a network you trust (or behind an HTTPS proxy).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import uvicorn
import zmq
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from robolearn.config import RunConfig
from robolearn.hardware.safety import EStop
from robolearn.logging.status import read_json
from robolearn.rundir import RunDir
from robolearn.transport.gui_channel import Command, GuiEndpoints, GuiSockets
from robolearn.transport.security import Authenticator, load_keys
from robolearn.transport.sockets import endpoint_port

STATIC = Path(__file__).parent / "static"
STATUS_EVERY_S = 0.5
SERIES_EVERY_S = 2.0
SERIES_POINTS = 1800          # an hour of session plots at one point per 2 s
MAX_PAGE_MESSAGE = 4096       # bytes: a page's acts are small
ROBOT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # what a robot id may be (it names its latch file)


@dataclass
class _Robots:
    """What the zmq thread hands the websockets: the newest frame of each robot and a counter per robot."""

    frames: dict[str, tuple[dict, bytes]] = field(default_factory=dict)
    seq: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class GuiServer:
    def __init__(self, run: RunDir, cfg: RunConfig) -> None:
        self.run, self.cfg, self.gui = run, cfg, cfg.gui
        self.robot_ids: list[str] = []  # as they appear in the actors' status files (the page acts on these only)
        self.ctx = zmq.Context()
        earlier = GuiEndpoints.read(run.root / "gui.json")  # a restarted GUI binds the same ports, the same token
        self.token = self.gui.token or (_query_token(earlier.url) if earlier else "") or secrets.token_urlsafe(16)
        self.port = endpoint_port(earlier.url.split("?")[0].rstrip("/")) if earlier else self.gui.port
        keys = load_keys(cfg.runtime.keys_dir)
        self._auth = Authenticator(self.ctx, keys) if keys else None  # only the run's clients connect
        self.sockets = GuiSockets(self.ctx, cfg.runtime.host, keys,
                                  endpoint_port(earlier.frames) if earlier else 0,
                                  endpoint_port(earlier.commands) if earlier else 0)
        self.robots = _Robots()
        self.status()  # the robots already acting (a restarted GUI)
        self.series: deque[dict] = deque(maxlen=SERIES_POINTS)
        self._stop = threading.Event()
        self._pages: set[asyncio.Event] = set()  # one per open page: set when a new frame is in
        self._loop: asyncio.AbstractEventLoop | None = None
        self.app = Starlette(routes=[
            Route("/", self.index), Route("/health", self.health), WebSocketRoute("/ws", self.websocket),
            Mount("/static", StaticFiles(directory=STATIC)),
        ], lifespan=self._lifespan)

    # --- http
    def _authorised(self, token: str | None) -> bool:
        return secrets.compare_digest(token or "", self.token)

    async def index(self, request: Request) -> Response:
        if not self._authorised(request.query_params.get("token")):
            return PlainTextResponse("this page needs the token of its URL (printed when the run started)", 403)
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def health(self, request: Request) -> Response:  # noqa: ARG002
        return PlainTextResponse("ok")

    # --- the frames thread (zmq) and the status task
    def _receive_frames(self) -> None:
        while not self._stop.is_set():
            got = self.sockets.receive_frame(timeout_ms=100)
            if got is None:
                continue
            info, jpeg = got
            robot = str(info.get("robot_id", ""))
            if not ROBOT_ID.fullmatch(robot):
                self.sockets.rejects.reject(f"a frame from robot id {robot[:40]!r}")
                continue
            with self.robots.lock:
                self.robots.frames[robot] = (info, jpeg)
                self.robots.seq[robot] = self.robots.seq.get(robot, 0) + 1
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._wake_pages)

    def _wake_pages(self) -> None:
        for event in self._pages:
            event.set()

    def status(self) -> dict:
        robots = {}
        for i in range(self.cfg.runtime.total_actors):
            status = read_json(self.run.status(f"actor-{i}")) or {}
            robot = status.get("robot_id")
            if not isinstance(robot, str) or not ROBOT_ID.fullmatch(robot):
                continue
            if robot not in self.robot_ids:
                self.robot_ids.append(robot)
            estop = EStop(self.run.estop(robot), also=(self.run.estop(),)).state()
            robots[robot] = {**{k: status.get(k) for k in (
                "env_steps", "episodes", "successes", "intervention_steps", "version", "stalled_ticks",
                "delay_histogram", "planned_delay_ticks", "operator_prompt", "watchdog_tripped", "task", "gui",
                "p99_period_error_ms")}, "estop": {"latched": estop.latched, "by": estop.by, "reason": estop.reason}}
        learner = read_json(self.run.status("learner")) or {}
        return {"t": "status", "robots": robots, "learner": {k: learner.get(k) for k in (
            "version", "updates", "updates_per_s", "env_steps", "episodes", "success_rate_50", "return_50")},
            "estop_all": EStop(self.run.estop()).latched, "time": time.time()}

    def _sample_series(self, status: dict) -> None:
        robots = status["robots"].values()
        steps = sum(r.get("env_steps") or 0 for r in robots)
        human = sum(r.get("intervention_steps") or 0 for r in robots)
        learner = status["learner"]
        last = self.series[-1] if self.series else None
        rate = None
        if last is not None and steps > last["_steps"]:
            rate = (human - last["_human"]) / (steps - last["_steps"])
        self.series.append({"time": status["time"], "success_rate": learner.get("success_rate_50"),
                            "intervention_rate": rate, "return": learner.get("return_50"),
                            "updates_per_s": learner.get("updates_per_s"), "_steps": steps, "_human": human})

    # --- the page's acts
    def act(self, message: dict, held: set[str]) -> None:
        """ValueError naming what is wrong with a page's message."""
        kind = message.get("t")
        robot = str(message.get("robot", ""))
        if kind in ("estop", "rearm"):
            if robot != "all" and robot not in self.robot_ids:  # ids from the actors' status files only
                raise ValueError(f"no robot {robot!r} in this run")
            latch = EStop(self.run.estop(robot))
            if kind == "estop":
                latch.press(by="gui", reason=str(message.get("reason", "the page's e-stop")))
            else:
                latch.rearm()  # a person's explicit act on the page; closing the page never does this
            return
        if robot not in self.robot_ids:
            raise ValueError(f"no robot {robot!r} in this run")
        command = Command(robot, str(kind), time.time(), tuple(float(a) for a in message.get("axes", ())),
                          str(message.get("label", "")), float(message.get("t_key", 0.0)))
        if command.kind == "hold":
            held.add(robot)
        elif command.kind == "release":
            held.discard(robot)
        self.sockets.publish(command)  # only ever from the event loop: one thread uses the PUB

    async def websocket(self, ws: WebSocket) -> None:
        origin = ws.headers.get("origin")
        if not self._authorised(ws.query_params.get("token")) or (origin and origin.split("//", 1)[-1] !=
                                                                     ws.headers.get("host")):
            await ws.close(code=4403)
            return
        await ws.accept()
        held: set[str] = set()
        await ws.send_bytes(msgpack.packb({"t": "hello", "robots": self.robot_ids, "run": self.cfg.run_name,
                                           "fps": self.gui.fps}))
        woken = asyncio.Event()
        self._pages.add(woken)
        sender = asyncio.create_task(self._send_loop(ws, woken))
        # a page whose frames and status stopped must not go on driving: if the sender fails, the socket closes
        sender.add_done_callback(lambda task: task.cancelled() or asyncio.ensure_future(ws.close(code=1011)))
        try:
            while True:
                data = await ws.receive_bytes()
                if len(data) > MAX_PAGE_MESSAGE:
                    await ws.send_bytes(msgpack.packb({"t": "error", "error": "message too large"}))
                    continue
                try:
                    message = msgpack.unpackb(data, raw=False, max_str_len=256, max_array_len=16, max_map_len=16)
                    if not isinstance(message, dict):
                        raise ValueError("a page message must be a map")
                    self.act(message, held)
                except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
                    await ws.send_bytes(msgpack.packb({"t": "error", "error": str(exc)}))
        except (WebSocketDisconnect, RuntimeError):  # RuntimeError: receiving on a socket the sender closed
            pass
        finally:
            self._pages.discard(woken)
            sender.cancel()
            for robot in held:  # a page gone while holding: hand back now, not at the actor's dead-man timeout
                self.sockets.publish(Command(robot, "release", time.time()))

    async def _send_loop(self, ws: WebSocket, woken: asyncio.Event) -> None:
        sent: dict[str, int] = {}
        next_status = 0.0
        while True:
            woken.clear()  # before reading what is new: a frame arriving while this sends wakes the next wait
            now = time.monotonic()
            if now >= next_status:
                next_status = now + STATUS_EVERY_S
                status = self.status()
                status["series"] = [{k: v for k, v in p.items() if not k.startswith("_")} for p in self.series]
                await ws.send_bytes(msgpack.packb(status))
            with self.robots.lock:
                due = [(r, self.robots.frames[r]) for r, n in self.robots.seq.items() if sent.get(r) != n]
                sent.update({r: self.robots.seq[r] for r, _ in due})
            for robot, (info, jpeg) in due:
                await ws.send_bytes(msgpack.packb({"t": "frame", "robot": robot, "jpeg": jpeg, "info": info,
                                                   "t_sent": time.time()}))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), timeout=max(0.0, next_status - time.monotonic()))

    async def _series_loop(self) -> None:
        while True:
            self._sample_series(self.status())
            await asyncio.sleep(SERIES_EVERY_S)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette):  # noqa: ARG002
        self._loop = asyncio.get_running_loop()
        frames = threading.Thread(target=self._receive_frames, name="gui-frames", daemon=True)
        frames.start()
        series = asyncio.create_task(self._series_loop())
        yield
        series.cancel()
        self._stop.set()
        frames.join(timeout=2.0)

    def url(self, port: int) -> str:
        host = socket.gethostname() if self.gui.host in ("0.0.0.0", "::") else self.gui.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}/?token={self.token}"

    def serve(self) -> None:
        port = self.port
        if port and not _port_free(self.gui.host, port):  # another run's page (or an old one) has it
            print(f"[gui] port {port} is taken; serving on a free one (gui.port)", file=sys.stderr, flush=True)
            port = 0
        config = uvicorn.Config(self.app, host=self.gui.host, port=port, log_level="warning",
                                ws_max_size=MAX_PAGE_MESSAGE * 4, lifespan="on")
        server = _Server(config)

        async def main() -> None:
            # SIGTERM (the runtime stopping it) ends the server and this process with code 0
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, lambda: setattr(server, "should_exit", True))
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, lambda: setattr(server, "should_exit", True))
            serving = asyncio.create_task(server.serve())
            while not server.started:
                if serving.done():
                    serving.result()  # raises why it could not start (the port is taken, ...)
                    return
                await asyncio.sleep(0.05)
            port = server.servers[0].sockets[0].getsockname()[1]
            url = self.url(port)
            GuiEndpoints(self.sockets.frames_endpoint, self.sockets.commands_endpoint, url, os.getpid()).write(
                self.run.root / "gui.json")
            print(f"[gui] serving {url}", flush=True)
            await serving

        try:
            asyncio.run(main())
        finally:
            self.sockets.close()
            if self._auth is not None:
                self._auth.stop()
            self.ctx.term()


class _Server(uvicorn.Server):
    """uvicorn's server without its own signal handling (which re-raises SIGTERM once it has stopped, so the
    process would die with -15 before closing its sockets): ``serve`` installs handlers that just stop it."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _query_token(url: str) -> str:
    return url.split("token=", 1)[1].split("&")[0] if "token=" in url else ""
