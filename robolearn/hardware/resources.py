"""Robots, simulators, cameras and teleops as schedulable resources: a registry and a lease manager.

A ``Resource`` is something an actor needs exclusively (a robot, a sim instance, a camera, a teleop).
The ``LeaseManager`` hands resources out by requirement (resource type, named cameras, count):

    lease   exclusive; granted when enough healthy free resources match, else the request queues
            (first come, first served: a later request never overtakes an earlier waiting one)
    renew   every lease must be renewed by heartbeat within ``ttl_s``; a holder that dies stops
            renewing and its lease expires, returning the resources to the pool
    health  each resource's probe runs every ``probe_every_s``; a failing resource is not handed out

The manager runs inside the runtime process and serves clients over zmq (ROUTER, loopback, msgpack,
no pickle); ``LeaseClient`` is what an actor uses (acquire / background heartbeat / release).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgpack
import zmq

from robolearn.transport.security import Authenticator, CurveKeys
from robolearn.transport.sockets import LEASE_LIMITS, bind_random_port, connect, limit_receive

MAX_REQUEST_BYTES = LEASE_LIMITS[0]


@dataclass
class Resource:
    name: str
    kind: str                      # robot | sim | camera | teleop
    type: str                      # e.g. sim_so101, so101_follower
    cameras: tuple[str, ...] = ()
    probe: Callable[[], bool] = field(default=lambda: True, repr=False)
    healthy: bool = True
    last_error: str = ""


@dataclass
class Requirement:
    type: str
    cameras: tuple[str, ...] = ()
    count: int = 1
    name: str = ""   # this resource and no other (the Ray runtime: the robot on the node the actor was placed on)

    def matches(self, r: Resource) -> bool:
        return (r.type == self.type and set(self.cameras) <= set(r.cameras)
                and (not self.name or r.name == self.name))

    @property
    def queue(self) -> tuple[str, str]:
        """Requests in one queue wait in order: those for any resource of a type, or for one named resource."""
        return self.type, self.name


def port_probe(port: str) -> Callable[[], bool]:
    """A lerobot robot on a serial port is present while its device node exists. The probe never opens the
    port: only the actor that holds the robot's lease does (opening a tty can reset the board behind it)."""

    def probe() -> bool:
        return os.path.exists(port)

    return probe


def resources_for(robot_config, robot_type: str, count: int) -> list[Resource]:
    """A run's resources from its robot config plus probes: a simulator is always available (one instance
    per actor); a lerobot robot is one resource, healthy while its serial port opens, plus the cameras
    lerobot's discovery finds."""
    port = getattr(robot_config, "port", None)
    if port is None:
        return [Resource(f"{robot_type}-{i}", "sim", robot_type) for i in range(count)]
    from robolearn.hardware.teleop import discover_cameras

    cams = [Resource(c["name"], "camera", "opencv") for c in discover_cameras()]
    return [Resource(f"{robot_type}-0", "robot", robot_type, probe=port_probe(port)), *cams]


@dataclass
class _Lease:
    lease_id: str
    holder: str
    resources: list[str]
    expires: float


class LeaseManager:
    def __init__(self, resources: list[Resource], ttl_s: float = 5.0, probe_every_s: float = 2.0) -> None:
        names = [r.name for r in resources]
        if len(set(names)) != len(names):
            raise ValueError(f"resource names must be unique, got {names}")
        self.resources = {r.name: r for r in resources}
        self.ttl_s = ttl_s
        self.probe_every_s = probe_every_s
        self.leases: dict[str, _Lease] = {}
        self.waiting: list[tuple[str, Requirement]] = []   # (holder, requirement), oldest first
        self._last_seen: dict[str, float] = {}              # waiter -> last request (a dead waiter drops out)
        self._next_id = 0
        self._lock = threading.Lock()
        self._last_probe = 0.0

    # --- the scheduling logic (also usable in-process) --------------------------------------------
    def holder_of(self, name: str) -> str | None:
        for lease in self.leases.values():
            if name in lease.resources:
                return lease.holder
        return None

    def _expire_and_probe(self, now: float) -> None:
        for lease_id in [k for k, v in self.leases.items() if v.expires < now]:
            del self.leases[lease_id]
        gone = {h for h, _ in self.waiting if self._last_seen.get(h, now) < now - self.ttl_s}
        self.waiting = [(h, r) for h, r in self.waiting if h not in gone]
        if now - self._last_probe >= self.probe_every_s:
            self._last_probe = now
            for r in self.resources.values():
                try:
                    r.healthy, r.last_error = bool(r.probe()), ""
                except Exception as exc:  # a probe that raises marks the resource unhealthy
                    r.healthy, r.last_error = False, f"{type(exc).__name__}: {exc}"

    def request(self, holder: str, req: Requirement, now: float | None = None) -> dict:
        """Grant a lease to ``holder`` if it is first in line and enough resources are free and healthy."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._expire_and_probe(now)
            if not any(req.matches(r) for r in self.resources.values()):
                return {"error": f"no resource of type {req.type!r} with cameras {list(req.cameras)}"
                                 f"{f' named {req.name!r}' if req.name else ''}; "
                                 f"known: {[(r.name, r.type, list(r.cameras)) for r in self.resources.values()]}"}
            if (holder, req) not in self.waiting:
                self.waiting.append((holder, req))
            self._last_seen[holder] = now
            # serve the queue in order; a waiter that cannot be served blocks those behind it for its type
            blocked: set[tuple[str, str]] = set()
            for h, r in list(self.waiting):
                if r.queue in blocked:
                    continue
                free = [x.name for x in self.resources.values()
                        if r.matches(x) and x.healthy and self.holder_of(x.name) is None]
                if len(free) < r.count:
                    blocked.add(r.queue)
                    continue
                if h == holder and r == req:
                    self.waiting.remove((h, r))
                    self._next_id += 1
                    lease = _Lease(f"lease-{self._next_id}", holder, free[: r.count], now + self.ttl_s)
                    self.leases[lease.lease_id] = lease
                    return {"granted": lease.resources, "lease_id": lease.lease_id, "ttl_s": self.ttl_s}
                blocked.add(r.queue)  # an earlier waiter goes first
            position = [h for h, _ in self.waiting].index(holder)
            return {"queued": position}

    def renew(self, lease_id: str, now: float | None = None) -> dict:
        now = time.monotonic() if now is None else now
        with self._lock:
            self._expire_and_probe(now)
            lease = self.leases.get(lease_id)
            if lease is None:
                return {"error": f"lease {lease_id} has expired or does not exist"}
            lease.expires = now + self.ttl_s
            return {"ok": True}

    def release(self, lease_id: str) -> dict:
        with self._lock:
            return {"ok": self.leases.pop(lease_id, None) is not None}

    def cancel(self, holder: str) -> None:
        with self._lock:
            self.waiting = [(h, r) for h, r in self.waiting if h != holder]

    def release_holder(self, holder: str) -> list[str]:
        """Free every lease ``holder`` has (a process the runtime saw die), without waiting for its ttl;
        returns the resources freed."""
        with self._lock:
            gone = [lid for lid, lease in self.leases.items() if lease.holder == holder]
            freed = [name for lid in gone for name in self.leases.pop(lid).resources]
            self.waiting = [(h, r) for h, r in self.waiting if h != holder]
        return freed

    def status(self) -> list[dict]:
        with self._lock:
            self._expire_and_probe(time.monotonic())
            return [{"name": r.name, "kind": r.kind, "type": r.type, "cameras": list(r.cameras),
                     "healthy": r.healthy, "error": r.last_error, "holder": self.holder_of(r.name)}
                    for r in self.resources.values()]

    # --- serving over zmq --------------------------------------------------------------------------
    def serve(self, host: str = "127.0.0.1", keys: CurveKeys | None = None) -> str:
        """Start serving on a background thread; returns the endpoint. With ``keys``: CURVE, authorized
        clients only."""
        self._ctx = zmq.Context()
        self._auth = Authenticator(self._ctx, keys) if keys else None
        self._sock = limit_receive(self._ctx.socket(zmq.ROUTER), LEASE_LIMITS)
        endpoint = bind_random_port(self._sock, host, keys)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="lease-manager", daemon=True)
        self._thread.start()
        return endpoint

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self._sock.poll(100):
                continue
            frames = self._sock.recv_multipart()  # REQ clients: [identity, b"", request]
            if len(frames) != 3 or frames[1] != b"" or len(frames[2]) > MAX_REQUEST_BYTES:
                continue  # malformed: dropped
            try:
                msg = msgpack.unpackb(frames[2], raw=False, strict_map_key=True, max_bin_len=0)
                reply = self._handle(msg)
            except Exception as exc:  # a bad request gets an error reply, never a crash
                reply = {"error": f"bad request: {type(exc).__name__}: {exc}"}
            self._sock.send_multipart([frames[0], b"", msgpack.packb(reply)])

    def _handle(self, msg: dict) -> dict:
        op = msg["op"]
        if op == "lease":
            req = Requirement(str(msg["type"]), tuple(msg.get("cameras", ())), int(msg.get("count", 1)),
                              str(msg.get("name", "")))
            return self.request(str(msg["holder"]), req)
        if op == "renew":
            return self.renew(str(msg["lease_id"]))
        if op == "release":
            return self.release(str(msg["lease_id"]))
        if op == "cancel":
            self.cancel(str(msg["holder"]))
            return {"ok": True}
        if op == "status":
            return {"resources": self.status()}
        return {"error": f"unknown op {op!r}"}

    def close(self) -> None:
        if hasattr(self, "_thread"):
            self._stop.set()
            self._thread.join(timeout=2)
            self._sock.close(linger=0)
            if self._auth:
                self._auth.stop()
            self._ctx.term()


class LeaseClient:
    """An actor's side: ``acquire`` blocks in the queue until granted, then a thread keeps renewing."""

    def __init__(self, endpoint: str, holder: str, timeout_s: float = 5.0, keys: CurveKeys | None = None) -> None:
        self.endpoint, self.holder, self.timeout_s, self.keys = endpoint, holder, timeout_s, keys
        self._ctx = zmq.Context()
        self._lock = threading.Lock()
        self._sock = self._new_socket()
        self.lease_id: str | None = None
        self.resources: list[str] = []
        self.lost = threading.Event()   # set when a renewal is refused (the lease expired)
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def _new_socket(self) -> zmq.Socket:
        sock = limit_receive(self._ctx.socket(zmq.REQ), LEASE_LIMITS)
        sock.setsockopt(zmq.LINGER, 0)
        # a send can block too: with no usable peer (a refused CURVE handshake drops the pipe) a REQ has nowhere to
        # queue the request, and without this a client with the wrong keys waited forever instead of timing out
        sock.setsockopt(zmq.SNDTIMEO, int(self.timeout_s * 1000))
        return connect(sock, self.endpoint, self.keys)

    def call(self, msg: dict) -> dict:
        with self._lock:
            try:
                self._sock.send(msgpack.packb(msg))
                answered = self._sock.poll(int(self.timeout_s * 1000))
            except zmq.Again:  # the send timed out
                answered = False
            if not answered:
                self._sock.close()
                self._sock = self._new_socket()  # a REQ socket is stuck after a lost reply
                raise TimeoutError(f"no answer from the lease manager at {self.endpoint}")
            return msgpack.unpackb(self._sock.recv(), raw=False)

    def acquire(self, type: str, cameras: tuple[str, ...] = (), count: int = 1, timeout_s: float = 60.0,
                poll_s: float = 0.1, stop: Callable[[], bool] = lambda: False, name: str = "") -> list[str]:
        """Blocks in the queue until granted: ``count`` resources of ``type`` (with ``cameras``), or the one
        called ``name``."""
        deadline = time.monotonic() + timeout_s
        msg = {"op": "lease", "holder": self.holder, "type": type, "cameras": list(cameras), "count": count,
               "name": name}
        while True:
            reply = self.call(msg)
            if "error" in reply:
                raise LookupError(reply["error"])
            if "granted" in reply:
                self.lease_id, self.resources = reply["lease_id"], reply["granted"]
                self._renewer = threading.Thread(target=self._renew, args=(reply["ttl_s"] / 3,), daemon=True)
                self._renewer.start()
                return self.resources
            if stop() or time.monotonic() > deadline:
                self.call({"op": "cancel", "holder": self.holder})
                raise TimeoutError(f"{self.holder}: no free {type!r} within {timeout_s} s "
                                   f"(position {reply['queued']} in the queue)")
            time.sleep(poll_s)

    def _renew(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                reply = self.call({"op": "renew", "lease_id": self.lease_id})
            except TimeoutError:
                continue
            if "error" in reply:
                self.lost.set()
                return

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=2)
        if self.lease_id is not None:
            try:
                self.call({"op": "release", "lease_id": self.lease_id})
            except TimeoutError:
                pass  # the lease will expire by itself
            self.lease_id = None

    def close(self) -> None:
        self.release()
        self._sock.close()
        self._ctx.term()

