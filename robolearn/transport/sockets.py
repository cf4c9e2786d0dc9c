"""zmq socket construction with robolearn's safety defaults.

Endpoints bind to loopback unless configured otherwise, and a non-loopback bind needs CurveZMQ keys
(an unauthenticated remote peer must not be able to push data or weights into a run).
"""

from __future__ import annotations

import errno
import ipaddress
import time

import zmq
from zmq.utils.monitor import parse_monitor_message

from robolearn.transport.security import CurveKeys
from robolearn.transport.wire import MAX_MESSAGE_BYTES, Message, RejectCounter, WireError, decode, encode

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# The largest frame each kind of receiving socket accepts (zmq.MAXMSGSIZE: a bigger frame is refused by zmq
# before it is allocated, and the peer disconnected), and its receive high-water mark (messages queued).
TRANSITIONS_LIMITS = (64 * 1024 * 1024, 10_000)   # a batch of send_every steps, images included
WEIGHTS_LIMITS = (MAX_MESSAGE_BYTES, 64)           # one tensor of a policy; deltas must not be dropped unread
REQUEST_LIMITS = (64 * 1024 * 1024, 1_000)         # a chunk request: observation (images) and prefix
RESPONSE_LIMITS = (16 * 1024 * 1024, 100)          # a chunk of actions
LEASE_LIMITS = (64 * 1024, 100)                    # a lease request or reply (plain msgpack)


def limit_receive(sock: zmq.Socket, limits: tuple[int, int]) -> zmq.Socket:
    """Bound what ``sock`` accepts: the largest frame (``zmq.MAXMSGSIZE``) and the messages it queues
    (``zmq.RCVHWM``). Set before connect/bind, so the bound holds from the first message."""
    max_frame_bytes, hwm = limits
    sock.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
    sock.setsockopt(zmq.RCVHWM, hwm)
    return sock


def bind_random_port(sock: zmq.Socket, host: str = "127.0.0.1", keys: CurveKeys | None = None,
                     port: int = 0) -> str:
    """Bind ``sock`` on ``host`` at ``port`` (0: a free port) and return the endpoint to connect to. With
    ``keys`` the socket is a CURVE server (its context needs a ``security.Authenticator``); without, only a
    loopback host is allowed."""
    if keys is not None:
        keys.serve(sock)
    elif not is_loopback(host):
        raise PermissionError(f"refusing to bind on non-loopback host {host!r} without CurveZMQ keys "
                              "(runtime.keys_dir)")
    if port:  # the port an earlier process of the run had: its peers reconnect there on their own
        deadline = time.monotonic() + 10.0
        while True:
            try:
                sock.bind(f"tcp://{host}:{port}")
                break
            except zmq.ZMQError as exc:
                if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)  # the dead process's socket is still being torn down
    else:
        port = sock.bind_to_random_port(f"tcp://{host}")
    return f"tcp://{host}:{port}"


class ConnectionWatch:
    """Follows the connections ``sock`` makes and loses (its socket monitor): ``connections`` counts the ones
    made (each completed handshake, the first one too), ``connected`` whether one is up, as of the last look. A
    peer that restarted lost what was in flight to it, and a new connection is when to send that again. Create
    it before connecting."""

    def __init__(self, sock: zmq.Socket) -> None:
        self.sock = sock
        self.events = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)  # readable
        self.connections = 0
        self.connected = False

    def made(self) -> int:
        """Connections made since the last look."""
        made = 0
        while True:
            try:
                frames = self.events.recv_multipart(flags=zmq.NOBLOCK)  # [event id + value, endpoint]
            except zmq.Again:
                self.connections += made
                return made
            self.connected = parse_monitor_message(frames)["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED
            made += int(self.connected)

    def close(self) -> None:
        self.sock.disable_monitor()
        self.events.close(linger=0)


def endpoint_port(endpoint: object) -> int:
    """The port of a ``tcp://host:port`` endpoint (0 when there is none, e.g. no earlier endpoint)."""
    if not isinstance(endpoint, str) or ":" not in endpoint:
        return 0
    return int(endpoint.rsplit(":", 1)[1])


def connect(sock: zmq.Socket, endpoint: str, keys: CurveKeys | None = None) -> zmq.Socket:
    """Connect ``sock`` to ``endpoint``, as a CURVE client of the run's server key when there are ``keys``."""
    if keys is not None:
        keys.connect(sock)
    sock.connect(endpoint)
    return sock


def send(sock: zmq.Socket, msg_type: str, sender: str, seq: int, meta: dict | None = None,
         arrays: dict | None = None, flags: int = 0) -> None:
    sock.send_multipart(encode(msg_type, sender, seq, meta, arrays), flags=flags, copy=False)


def recv_valid(sock: zmq.Socket, rejects: RejectCounter, expected_types: frozenset[str]) -> Message | None:
    """Receive one message without blocking; return None if none is waiting or it was rejected."""
    try:
        frames = sock.recv_multipart(flags=zmq.NOBLOCK)
    except zmq.Again:
        return None
    try:
        return decode(frames, expected_types)
    except WireError as exc:
        rejects.reject(str(exc))
        return None
