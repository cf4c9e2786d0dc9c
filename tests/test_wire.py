import pickle

import msgpack
import numpy as np
import pytest

from robolearn.transport.wire import MAX_HEADER_BYTES, WireError, decode, encode


def _bytes(frames):
    return [bytes(f) for f in frames]


def test_round_trip_keeps_arrays_and_meta():
    arrays = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.array([True, False]),
              "empty": np.zeros((0, 3), np.int64), "scalar": np.array(2.5),  # 0-d, as a state dict's counters
              "strided": np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]}
    msg = decode(_bytes(encode("transitions", "arm-0", 7, {"k": 1}, arrays)))
    assert (msg.type, msg.sender, msg.seq, msg.meta) == ("transitions", "arm-0", 7, {"k": 1})
    for k, v in arrays.items():
        np.testing.assert_array_equal(msg.arrays[k], v)
        assert msg.arrays[k].dtype == v.dtype and msg.arrays[k].shape == v.shape


def test_pickled_payload_is_rejected_not_executed():
    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('pickle executed')",))

    with pytest.raises(WireError):
        decode([pickle.dumps(Boom())])
    with pytest.raises(WireError):  # a pickle hidden in an array frame is only bytes, and has no valid header
        decode([pickle.dumps({"type": "transitions"}), pickle.dumps(Boom())])


@pytest.mark.parametrize("frames, reason", [
    ([], "empty"),
    ([b"\xc1\xc1\xc1"], "not valid msgpack"),
    ([msgpack.packb([1, 2, 3])], "expected a map"),
    ([msgpack.packb({"type": "x", "schema": 1, "sender": "s", "seq": 0, "meta": {}, "arrays": []})], None),
    ([msgpack.packb({"type": "transitions", "schema": 99, "sender": "s", "seq": 0, "meta": {}, "arrays": []})],
     "schema version"),
    ([msgpack.packb({"type": "transitions", "schema": 1, "sender": "s", "seq": 0, "meta": {},
                     "arrays": [{"name": "a", "dtype": "float32", "shape": [4]}]}), b"\0" * 15], "bytes for shape"),
    ([msgpack.packb({"type": "transitions", "schema": 1, "sender": "s", "seq": 0, "meta": {},
                     "arrays": [{"name": "a", "dtype": "object", "shape": [1]}]}), b"\0" * 8], "not allowed"),
    ([msgpack.packb({"type": "transitions", "schema": 1, "sender": "s", "seq": 0, "meta": {},
                     "arrays": [{"name": "a", "dtype": "uint8", "shape": [1]}]})], "frames follow"),
    ([b"\x80" + b"x" * MAX_HEADER_BYTES], "exceeds"),
])
def test_malformed_messages_are_rejected_with_a_reason(frames, reason):
    with pytest.raises(WireError) as err:
        decode(frames, frozenset({"transitions"}))
    if reason:
        assert reason in str(err.value)
    else:
        assert "unexpected message type" in str(err.value)


def test_non_loopback_bind_needs_curve_keys():
    import zmq

    from robolearn.transport.sockets import bind_random_port, is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    try:
        with pytest.raises(PermissionError, match="CurveZMQ"):
            bind_random_port(sock, "0.0.0.0")
        assert bind_random_port(sock, "127.0.0.1").startswith("tcp://127.0.0.1:")
    finally:
        sock.close(linger=0)
        ctx.term()
