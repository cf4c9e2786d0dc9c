"""A policy server's answers are checked before the actor uses them: wrong dtype, wrong or broadcastable shape,
non-finite actions, a prefix outside the chunk, a bad compute time, too many frames and an oversized frame are
rejected and counted, never raised in the actor; a valid answer still gets through."""

import time

import msgpack
import numpy as np
import pytest
import zmq

from robolearn.inference.client import RemoteClient
from robolearn.inference.protocol import RESPONSE
from robolearn.transport.sockets import RESPONSE_LIMITS
from robolearn.transport.wire import encode

H, A = 8, 6


def _chunk(actions, **meta) -> list[bytes]:
    fields = {"request_id": 1, "tick": 0, "version": 3, "prefix_len": 0, "compute_ms": 1.5, **meta}
    return [bytes(f) for f in encode(RESPONSE, "policy-server", 1, fields, {"actions": actions})]


GOOD = np.zeros((H, A), np.float32)
HOSTILE = {
    "float64 actions": _chunk(GOOD.astype(np.float64)),
    "(H, 1) actions that would broadcast to every joint": _chunk(np.zeros((H, 1), np.float32)),
    "a chunk of another horizon": _chunk(np.zeros((H + 1, A), np.float32)),
    "NaN actions": _chunk(np.full((H, A), np.nan, np.float32)),
    "prefix_len past the chunk": _chunk(GOOD, prefix_len=H),
    "a string compute_ms": _chunk(GOOD, compute_ms="slow"),
    "an infinite compute_ms": _chunk(GOOD, compute_ms=float("inf")),
    "a bool request id": _chunk(GOOD, request_id=True),
    "too many frames": [msgpack.packb({"type": RESPONSE, "schema": 1, "sender": "x", "seq": 0, "meta": {},
                                       "arrays": []}), *([b"\0"] * 300)],
}


@pytest.fixture
def server_and_client():
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    client = RemoteClient(f"tcp://127.0.0.1:{port}", "robot-0", H, A)
    client.sock.send_multipart([b"hello"])  # the server learns the client's identity
    identity = router.recv_multipart()[0]
    yield router, identity, client
    client.close()
    router.close(linger=0)
    ctx.term()


def _poll_all(client, wait_s=2.0):
    got, deadline = [], time.monotonic() + wait_s
    while time.monotonic() < deadline:
        got += client.poll(0, timeout_ms=50)
    return got


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_answer_is_rejected_and_counted_then_a_valid_one_gets_through(server_and_client, case):
    router, identity, client = server_and_client
    router.send_multipart([identity, *HOSTILE[case]])
    router.send_multipart([identity, *_chunk(np.ones((H, A), np.float32))])
    got = _poll_all(client, 1.0)
    assert client.rejects.total == 1, client.rejects.last_reason
    assert len(got) == 1 and got[0].actions.shape == (H, A) and np.all(got[0].actions == 1.0)


def test_an_oversized_frame_is_refused_by_zmq_before_it_is_allocated(server_and_client):
    router, identity, client = server_and_client
    assert client.sock.getsockopt(zmq.MAXMSGSIZE) == RESPONSE_LIMITS[0]
    huge = np.zeros(RESPONSE_LIMITS[0] // 4 + 1, np.float32)  # one frame over the limit
    router.send_multipart([identity, *_chunk(huge)])
    assert _poll_all(client, 1.0) == []  # zmq dropped the connection: nothing reached the decoder
