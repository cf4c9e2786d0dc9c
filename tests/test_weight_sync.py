"""Sparse delta weight sync: bit-exact reconstruction, fallbacks, and rejection of anything off."""

import numpy as np
import pytest

from robolearn.transport.weight_sync import IDX, VAL, DeltaPublisher, DeltaSubscriber


def layout(w):
    return {k: (v.shape, str(v.dtype)) for k, v in w.items()}


def weights(seed=0):
    rng = np.random.default_rng(seed)
    return {"a": rng.normal(size=(64, 32)).astype(np.float32), "b": rng.normal(size=(300,)).astype(np.float32)}


def test_sparse_changes_travel_as_a_delta_and_rebuild_bit_exactly():
    pub, w = DeltaPublisher(full_every=10), weights()
    sub = DeltaSubscriber(layout(w))
    meta, arrays = pub.encode(1, w)
    assert meta["kind"] == "full"
    sub.apply(meta, arrays)
    w2 = {k: v.copy() for k, v in w.items()}
    w2["a"][3, 5] = np.nextafter(w2["a"][3, 5], np.float32(10))  # a one-ulp change is a change
    w2["a"][60, 0] = -0.0 if w2["a"][60, 0] == 0 else 0.0
    meta, arrays = pub.encode(2, w2)
    assert meta["kind"] == "delta" and meta["base_version"] == 1
    assert set(arrays) == {"a" + IDX, "a" + VAL}  # "b" did not change, so it is not sent
    assert arrays["a" + IDX].dtype == np.uint16   # gaps fit in 16 bits
    got = sub.apply(meta, arrays)
    for k in w2:
        assert got[k].tobytes() == w2[k].tobytes()
    assert sub.version == 2 and pub.bytes_sent < pub.bytes_full


def test_dense_change_falls_back_to_a_full_snapshot_and_so_does_every_kth_version():
    pub = DeltaPublisher(full_every=3)
    kinds = [pub.encode(1, weights(0))[0]["kind"], pub.encode(2, weights(1))[0]["kind"]]  # all elements change
    w = weights(1)
    for v in (3, 4, 5):
        w["b"][v] += 1.0
        kinds.append(pub.encode(v, w)[0]["kind"])
    assert kinds == ["full", "full", "delta", "delta", "full"]  # at most full_every - 1 deltas in a row


def test_a_receiver_that_missed_a_version_waits_for_the_next_full_snapshot():
    pub, w = DeltaPublisher(full_every=4), weights()
    sub = DeltaSubscriber(layout(w))
    msgs = []
    for v in range(1, 6):
        w["b"][v] += 1.0
        msgs.append(pub.encode(v, w))
    sub.apply(*msgs[0])
    with pytest.raises(ValueError, match="waiting for a full snapshot"):
        sub.apply(*msgs[2])  # v3 patches v2, which this receiver never got
    assert sub.version == 1
    assert msgs[4][0]["kind"] == "full"  # every 4th version is full again: the receiver catches up
    got = sub.apply(*msgs[4])
    assert sub.version == 5 and all(got[k].tobytes() == w[k].tobytes() for k in w)


def test_tampered_or_malformed_deltas_are_rejected_and_leave_the_weights_alone():
    pub, w = DeltaPublisher(), weights()
    sub = DeltaSubscriber(layout(w))
    sub.apply(*pub.encode(1, w))
    before = {k: v.copy() for k, v in sub.current.items()}
    w["a"][0, :4] += 1.0
    meta, arrays = pub.encode(2, w)
    bad = dict(arrays)
    bad["a" + VAL] = bad["a" + VAL] + 1.0
    with pytest.raises(ValueError, match="hash mismatch"):
        sub.apply(meta, bad)
    with pytest.raises(ValueError, match="unknown array"):
        sub.apply(meta, {**arrays, "zzz" + IDX: np.zeros(1, np.uint8)})
    out_of_range = {"a" + IDX: np.array([5000], np.uint16), "a" + VAL: np.zeros(1, np.float32)}
    with pytest.raises(ValueError, match="out of range"):
        sub.apply(meta, out_of_range)
    with pytest.raises(ValueError, match="do not match"):
        sub.apply({"version": 3, "kind": "full", "sha256": ""}, {"a": w["a"]})
    assert sub.version == 1 and all(sub.current[k].tobytes() == before[k].tobytes() for k in w)
    sub.apply(meta, arrays)  # the genuine message still applies
    assert sub.version == 2


def test_a_repeat_is_the_last_version_as_published_and_the_next_delta_still_applies():
    pub, w = DeltaPublisher(full_every=100), weights()
    sub = DeltaSubscriber(layout(w))
    with pytest.raises(RuntimeError, match="nothing to repeat"):
        pub.repeat()
    sub.apply(*pub.encode(1, w))
    published = {k: v.copy() for k, v in w.items()}
    w["b"][7] += 1.0  # trained after v1 went out, not yet a version
    meta, arrays = pub.repeat()
    assert meta["version"] == 1 and meta["kind"] == "full"
    assert all(arrays[k].tobytes() == published[k].tobytes() for k in w)  # v1 as it was, not the weights since
    w["b"][8] += 1.0
    meta, arrays = pub.encode(2, w)
    assert meta["kind"] == "delta" and set(arrays) == {"b" + IDX, "b" + VAL}
    got = sub.apply(meta, arrays)  # the subscriber never took the repeat of the v1 it holds
    assert sub.version == 2 and all(got[k].tobytes() == w[k].tobytes() for k in w)
