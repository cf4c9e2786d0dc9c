"""zmq socket construction with robolearn's safety defaults.

Endpoints bind to loopback unless configured otherwise, and a non-loopback bind needs CurveZMQ keys
(an unauthenticated remote peer must not be able to push data or weights into a run).
"""

from __future__ import annotations

import ipaddress

import zmq

from robolearn.transport.wire import Message, RejectCounter, WireError, decode, encode

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_random_port(sock: zmq.Socket, host: str = "127.0.0.1", curve_secret_key: bytes | None = None,
                     port: int = 0) -> str:
    """Bind ``sock`` on ``host`` at ``port`` (0: a free port) and return the endpoint to connect to."""
    if not is_loopback(host):
        if curve_secret_key is None:
            raise PermissionError(f"refusing to bind on non-loopback host {host!r} without CurveZMQ keys")
        sock.curve_secretkey = curve_secret_key
        sock.curve_server = True
    if port:
        sock.bind(f"tcp://{host}:{port}")
    else:
        port = sock.bind_to_random_port(f"tcp://{host}")
    return f"tcp://{host}:{port}"


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
