import numpy as np
import pytest

from robolearn.buffer.log import RecordLog
from robolearn.transport.wire import encode


def _frames(i):
    return [bytes(f) for f in encode("transitions", "arm", i, {}, {"x": np.full(5, i, np.int64)})]


def test_records_survive_reopen(tmp_path):
    log = RecordLog(tmp_path / "t.log")
    for i in range(10):
        log.append(_frames(i))
    log.close()
    again = RecordLog(tmp_path / "t.log")
    assert again.num_records == 10
    assert [int(m.arrays["x"][0]) for m in again.read()] == list(range(10))
    assert again.corruption is None


@pytest.mark.parametrize("fsync", ["strict", "batched", "off"])
def test_torn_tail_is_cut_and_appends_continue(tmp_path, fsync):
    path = tmp_path / "t.log"
    log = RecordLog(path, fsync=fsync)
    for i in range(5):
        log.append(_frames(i))
    log.close()
    with open(path, "ab") as f:  # a write cut by a crash: half a record
        f.write(b"".join([b"RLR1", b"\x02\x00\x00\x00", b"\x10" * 7]))
    log = RecordLog(path)
    assert log.num_records == 5 and log.recovered_bytes_dropped == 15
    log.append(_frames(5))
    log.close()
    assert [int(m.arrays["x"][0]) for m in RecordLog(path).read()] == list(range(6))


def test_corrupted_record_is_detected_and_reported(tmp_path):
    path = tmp_path / "t.log"
    log = RecordLog(path)
    for i in range(4):
        log.append(_frames(i))
    log.close()
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # flip a byte inside the last record's array
    path.write_bytes(bytes(data))
    log = RecordLog(path)
    assert "checksum mismatch" in log.corruption
    assert [int(m.arrays["x"][0]) for m in log.read()] == [0, 1, 2]


def test_bad_fsync_policy_names_the_value(tmp_path):
    with pytest.raises(ValueError, match="sometimes"):
        RecordLog(tmp_path / "t.log", fsync="sometimes")
