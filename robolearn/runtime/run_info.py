"""What a robot PC needs to join a run (``robolearn join``), served by the learner workstation's runtime.

    robot PC -> workstation   {"op": "info", "actors": [..]}  -> RunInfo as a dict (the actors join)
                              {"op": "leave", "actor": .., "unacked": n} -> {"ok": true} (that actor stopped;
                                                          n batches it could not deliver stay in its spool)

One ROUTER socket on ``runtime.host`` (port ``runtime.join_port``), CURVE with the run's keys like every other
socket of the run, plain msgpack both ways (bounded, never unpickled). ``stopping`` turns true when the run
ends: joined actors then stop and drain their spools while the learner is still up; the workstation waits
for their ``leave`` (bounded by ``runtime.shutdown_timeout_s``) before it stops the learner.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import msgpack
import zmq

from robolearn.transport.security import Authenticator, CurveKeys
from robolearn.transport.sockets import bind_random_port, connect, limit_receive

RUN_INFO_LIMITS = (1024 * 1024, 100)  # a request or a reply: the config is a few kB


@dataclass(frozen=True)
class RunInfo:
    run_name: str
    run_id: str               # the run directory's identity (RunDir.run_id): kept by resumes
    config_yaml: str          # the run's resolved config (robolearn.config.to_yaml)
    ports: dict[str, int]     # channel -> port on the workstation (transitions, weights)
    next_episode_id: int      # past the episode ids the learner's buffer held when it (re)started
    first_index: int          # the first actor index for robot PCs (runtime.num_actors)
    remote_actors: int        # how many actor slots robot PCs may take
    stopping: bool

    @classmethod
    def from_dict(cls, d: dict) -> RunInfo:
        try:
            info = cls(str(d["run_name"]), str(d["run_id"]), str(d["config_yaml"]),
                       {str(k): int(v) for k, v in d["ports"].items()},
                       int(d["next_episode_id"]), int(d["first_index"]), int(d["remote_actors"]), bool(d["stopping"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"malformed run info from the workstation: {exc!r}") from None
        return info


class RunInfoServer:
    """Answers robot PCs on a background thread; ``joined`` / ``left`` hold the actors that asked for the run /
    said they drained."""

    def __init__(self, info: RunInfo, host: str, keys: CurveKeys | None, port: int = 0,
                 refresh: Callable[[RunInfo], RunInfo] = lambda info: info) -> None:
        """``refresh``: applied before each answer (the learner's ports and next episode id after a restart)."""
        self.info, self.refresh = info, refresh
        self.joined: set[str] = set()
        self.left: set[str] = set()
        self._lock = threading.Lock()
        self._ctx = zmq.Context()
        self._auth = Authenticator(self._ctx, keys) if keys else None
        self._sock = limit_receive(self._ctx.socket(zmq.ROUTER), RUN_INFO_LIMITS)
        self.endpoint = bind_random_port(self._sock, host, keys, port)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="run-info", daemon=True)
        self._thread.start()

    def announce_stop(self) -> None:
        with self._lock:
            self.info = replace(self.info, stopping=True)

    def wait_for_leaves(self, timeout_s: float) -> set[str]:
        """Wait (bounded) until every actor that joined has left; returns those that did not."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                missing = self.joined - self.left
            if not missing:
                return set()
            time.sleep(0.1)
        return missing

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self._sock.poll(100):
                continue
            frames = self._sock.recv_multipart()  # REQ clients: [identity, b"", request]
            if len(frames) != 3 or frames[1] != b"":
                continue  # not a REQ request: dropped
            try:
                msg = msgpack.unpackb(frames[2], raw=False, strict_map_key=True, max_bin_len=0)
                reply = self._handle(msg) if isinstance(msg, dict) else {"error": "a request is a map"}
            except (msgpack.UnpackException, ValueError) as exc:
                reply = {"error": f"bad request: {exc}"}
            self._sock.send_multipart([frames[0], b"", msgpack.packb(reply)])

    def _handle(self, msg: dict) -> dict:
        op = msg.get("op")
        with self._lock:
            if op == "info":
                actors = msg.get("actors", [])
                if not isinstance(actors, list) or not all(isinstance(a, str) for a in actors):
                    return {"error": "actors must be a list of names"}
                self.joined.update(actors)
                self.info = self.refresh(self.info)
                return asdict(self.info)
            if op == "leave" and isinstance(msg.get("actor"), str):
                self.left.add(msg["actor"])
                if msg.get("unacked"):
                    print(f"[runtime] {msg['actor']} left with {msg['unacked']} batches unacknowledged (kept in "
                          "its spool on its machine)", flush=True)
                return {"ok": True}
        return {"error": f"unknown request {op!r}"}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close(linger=0)
        if self._auth:
            self._auth.stop()
        self._ctx.term()


def ask(endpoint: str, msg: dict, keys: CurveKeys | None, timeout_s: float = 5.0) -> dict:
    """One request to a workstation's ``RunInfoServer``; ``TimeoutError`` when nothing answers."""
    ctx = zmq.Context()
    sock = connect(limit_receive(ctx.socket(zmq.REQ), RUN_INFO_LIMITS), endpoint, keys)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.send(msgpack.packb(msg))
        if not sock.poll(int(timeout_s * 1000)):
            raise TimeoutError(f"no answer from the run at {endpoint} within {timeout_s:.0f} s (is it running? "
                               "with CURVE keys, is this machine's client key authorized there?)")
        reply = msgpack.unpackb(sock.recv(), raw=False)
    finally:
        sock.close()
        ctx.term()
    if not isinstance(reply, dict) or "error" in reply:
        raise ValueError(f"the run at {endpoint} refused {msg.get('op')!r}: {reply}")
    return reply
