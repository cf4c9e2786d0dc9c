"""CurveZMQ: encrypted, authenticated sockets for a run whose processes are not all on loopback.

Without keys every socket binds to loopback only (``sockets.bind_random_port`` refuses anything else). With a
keys folder (``runtime.keys_dir``), every socket of the run uses CURVE: the processes that bind (learner:
transitions and weights; the lease manager; the policy server) act as CURVE servers with the run's server key
pair, and a ZAP authenticator on their context admits only the client public keys in ``authorized/``; the
processes that connect (actors, clients of the lease manager and the policy server) prove their own client key
pair. A peer without an authorized key never completes the handshake: it can send nothing and receives
nothing.

A keys folder, as ``robolearn keys generate DIR --clients NAME ...`` writes it (one folder per machine)::

    DIR/server/      server.key, server.key_secret, client.key, client.key_secret (this machine's own actors),
                     authorized/<client>.key for every client admitted (local, and each NAME)
    DIR/<NAME>/      server.key (public only), client.key, client.key_secret

Keys are zmq's certificate files (``zmq.auth``): text, never pickled. The secret files are written 0600.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

LOCAL_CLIENT = "local"


class KeysError(ValueError):
    """A keys folder is missing a file or holds a bad one; the message names it."""


@dataclass(frozen=True)
class CurveKeys:
    server_public: bytes
    client_public: bytes
    client_secret: bytes
    server_secret: bytes | None   # only on the machine whose processes bind
    authorized: Path | None       # the admitted clients' public keys, where servers bind

    @classmethod
    def load(cls, directory: str | Path) -> CurveKeys:
        root = Path(directory)
        if not root.is_dir():
            raise KeysError(f"keys folder {root} does not exist (make one with: robolearn keys generate DIR)")
        server_public, server_secret = _certificate(root / "server.key", root / "server.key_secret")
        client_public, client_secret = _certificate(root / "client.key", root / "client.key_secret")
        if client_secret is None:
            raise KeysError(f"{root} has no client.key_secret: every process that connects needs its client key")
        authorized = root / "authorized"
        return cls(server_public, client_public, client_secret, server_secret,
                   authorized if authorized.is_dir() else None)

    @property
    def can_serve(self) -> bool:
        """A server folder: it can bind (server secret) and knows whom to admit (``authorized/``)."""
        return self.server_secret is not None and self.authorized is not None

    def serve(self, sock: zmq.Socket) -> None:
        """Make ``sock`` a CURVE server (before it binds)."""
        if not self.can_serve:
            raise KeysError("this keys folder can only connect: binding needs server.key_secret and authorized/ "
                            "(the server folder of robolearn keys generate)")
        sock.curve_secretkey = self.server_secret
        sock.curve_publickey = self.server_public
        sock.curve_server = True

    def connect(self, sock: zmq.Socket) -> None:
        """Make ``sock`` a CURVE client of the run's server key (before it connects)."""
        sock.curve_serverkey = self.server_public
        sock.curve_publickey = self.client_public
        sock.curve_secretkey = self.client_secret


def _certificate(public: Path, secret: Path) -> tuple[bytes, bytes | None]:
    if not public.exists():
        raise KeysError(f"keys folder is missing {public}")
    try:
        pub, _ = zmq.auth.load_certificate(public)
        sec = zmq.auth.load_certificate(secret)[1] if secret.exists() else None
    except (ValueError, OSError) as exc:
        raise KeysError(f"cannot read the key {public}: {exc}") from None
    return pub, sec


def load_keys(directory: str | None) -> CurveKeys | None:
    """The keys of ``runtime.keys_dir``, or None when the run has none (loopback only)."""
    return CurveKeys.load(directory) if directory else None


class Authenticator:
    """The ZAP handler of one context: CURVE clients are admitted only with a key in ``keys.authorized``."""

    def __init__(self, ctx: zmq.Context, keys: CurveKeys) -> None:
        if keys.authorized is None:
            raise KeysError("no authorized/ folder: a process that binds must know which clients to admit")
        self._auth = ThreadAuthenticator(ctx)
        self._auth.start()
        self._auth.configure_curve(domain="*", location=str(keys.authorized))

    def stop(self) -> None:
        self._auth.stop()


def generate_keys(directory: str | Path, clients: list[str]) -> dict[str, Path]:
    """Write a run's key folders (layout above) under ``directory``; returns {folder name: path}. Refuses to
    overwrite an existing folder."""
    root = Path(directory)
    names = [LOCAL_CLIENT, *clients]
    if len(set(names)) != len(names) or any(not n or "/" in n or n == "server" for n in names):
        raise KeysError(f"client names must be unique, non-empty, without '/', and not 'server' or "
                        f"'{LOCAL_CLIENT}': got {clients}")
    if root.exists() and any(root.iterdir()):
        raise KeysError(f"{root} is not empty; keys are never overwritten")
    work = root / ".generating"
    work.mkdir(parents=True)
    server_pub, server_sec = zmq.auth.create_certificates(work, "server")
    server = root / "server"
    (server / "authorized").mkdir(parents=True)
    folders = {"server": server, **{name: root / name for name in clients}}
    for name in names:
        pub, sec = zmq.auth.create_certificates(work, name)
        target = server if name == LOCAL_CLIENT else folders[name]  # this machine's own actors use the server's
        target.mkdir(exist_ok=True)
        shutil.copy(pub, target / "client.key")
        shutil.copy(sec, target / "client.key_secret")
        shutil.copy(pub, server / "authorized" / f"{name}.key")
        shutil.copy(server_pub, target / "server.key")
    shutil.copy(server_sec, server / "server.key_secret")
    shutil.rmtree(work)
    for secret in root.rglob("*.key_secret"):
        os.chmod(secret, 0o600)
    return folders
