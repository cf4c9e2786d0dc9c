"""Messages an actor sent and the learner has not acknowledged yet, kept on the actor's own disk.

One file per batch, ``<dir>/<batch:012d>.msg``: u32 frame count, u64 length of each frame, u32 crc32 of all
that follows, the frames (the wire message exactly as sent). Each is written under a temporary name and
renamed, so a crash leaves a whole file or none; a file that fails its checksum is moved to ``corrupt/`` and
reported, never re-sent. The next batch number lives in ``next_batch`` (also renamed into place), so
numbers keep counting up across restarts of the actor and the learner can drop a re-sent batch it has.
A batch the learner rejected (invalid) is moved to ``rejected/`` with the reason beside it.

Steps of the batch being filled are journaled as they happen (``stage``): ``<batch:012d>.open`` gets one
record per step (the same framing), appended with one write each, so a killed actor loses no step it took.
``put`` of that batch number removes its journal; a journal left without its batch is what a crash cut,
read back with ``staged`` (a torn last record is dropped: that step's write never finished).
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

_COUNT, _LEN, _CRC = struct.Struct("<I"), struct.Struct("<Q"), struct.Struct("<I")


def _pack(frames: list[bytes]) -> bytes:
    lengths = b"".join(_LEN.pack(len(f)) for f in frames)
    body = b"".join(frames)
    return _COUNT.pack(len(frames)) + lengths + _CRC.pack(zlib.crc32(body, zlib.crc32(lengths))) + body


def _unpack(data: bytes) -> list[bytes] | None:
    """The frames, or None when the file is torn or corrupt."""
    if len(data) < _COUNT.size:
        return None
    (n,) = _COUNT.unpack_from(data)
    head = _COUNT.size + n * _LEN.size
    if n > 4096 or len(data) < head + _CRC.size:
        return None
    lengths = [_LEN.unpack_from(data, _COUNT.size + i * _LEN.size)[0] for i in range(n)]
    (crc,) = _CRC.unpack_from(data, head)
    body = data[head + _CRC.size:]
    if len(body) != sum(lengths) or zlib.crc32(body, zlib.crc32(data[_COUNT.size:head])) != crc:
        return None
    frames, off = [], 0
    for length in lengths:
        frames.append(body[off:off + length])
        off += length
    return frames


def _packed_size(data: bytes, off: int) -> int:
    """The size of the packed record at ``off`` by its header (0 when the header itself is torn)."""
    if len(data) - off < _COUNT.size:
        return 0
    (n,) = _COUNT.unpack_from(data, off)
    head = _COUNT.size + n * _LEN.size + _CRC.size
    if n > 4096 or len(data) - off < head:
        return 0
    return head + sum(_LEN.unpack_from(data, off + _COUNT.size + i * _LEN.size)[0] for i in range(n))


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class Spool:
    def __init__(self, directory: str | Path, max_bytes: int) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.problems: list[str] = []
        for tmp in self.dir.glob("*.tmp"):  # a write a crash interrupted: never renamed, so never acknowledged
            tmp.unlink()
        self._sizes = {int(p.stem): p.stat().st_size for p in self.dir.glob("*.msg")}
        for journal in self.dir.glob("*.open"):
            if int(journal.stem) in self._sizes:  # the crash came after the batch was put, before this went
                journal.unlink()
        self._journal: tuple[int, object] | None = None  # (batch number, open file) of the batch being filled
        self._bytes = sum(self._sizes.values())  # kept as batches come and go: the gate reads it every tick
        counter = self.dir / "next_batch"
        stored = int(counter.read_text()) if counter.exists() else 0
        self._next = max(stored, max(self._sizes, default=-1) + 1)

    def _path(self, seq: int) -> Path:
        return self.dir / f"{seq:012d}.msg"

    def next_seq(self) -> int:
        """Reserve the next batch number (kept on disk: it never repeats, even after a restart)."""
        seq = self._next
        self._next += 1
        _write_atomic(self.dir / "next_batch", str(self._next).encode())
        return seq

    def put(self, seq: int, frames: list[bytes]) -> None:
        data = _pack(frames)
        _write_atomic(self._path(seq), data)
        self._bytes += len(data) - self._sizes.get(seq, 0)
        self._sizes[seq] = len(data)
        if self._journal is not None and self._journal[0] == seq:
            self._journal[1].close()
            self._journal = None
        self._path(seq).with_suffix(".open").unlink(missing_ok=True)

    def stage(self, seq: int, frames: list[bytes]) -> None:
        """Journal one step of batch ``seq`` (not put yet), durable against a crash of this process."""
        if self._journal is None or self._journal[0] != seq:
            if self._journal is not None:
                self._journal[1].close()
            self._journal = (seq, open(self._path(seq).with_suffix(".open"), "ab", buffering=0))
        self._journal[1].write(_pack(frames))  # one write: the record is whole or torn, never interleaved

    def drop_staged(self, seq: int) -> None:
        self._path(seq).with_suffix(".open").unlink(missing_ok=True)

    def set_aside_staged(self, seq: int, reason: str) -> None:
        """Move a journal that cannot be turned into a batch to ``corrupt/``, never deleted."""
        (self.dir / "corrupt").mkdir(exist_ok=True)
        journal = self._path(seq).with_suffix(".open")
        os.replace(journal, self.dir / "corrupt" / journal.name)
        self.problems.append(f"{journal.name}: {reason}; moved to {self.dir / 'corrupt'}")

    def close(self) -> None:
        """Close the journal being written (it stays on disk: the batch it belongs to is not complete)."""
        if self._journal is not None:
            self._journal[1].close()
            self._journal = None

    def staged(self) -> dict[int, list[list[bytes]]]:
        """Journals a crash left without their batch: batch number -> the frames of each whole step record."""
        return {int(journal.stem): _read_journal(journal, self.problems) for journal in sorted(self.dir.glob("*.open"))}

    def read(self, seq: int) -> list[bytes]:
        frames = _unpack(self._path(seq).read_bytes())
        if frames is None:
            self._move(seq, "corrupt")
            self.problems.append(f"spooled batch {seq} failed its checksum; moved to {self.dir / 'corrupt'}")
            return []
        return frames

    def remove(self, seq: int) -> bool:
        """Forget an acknowledged batch; False when it was not (or no longer) spooled."""
        if not self._forget(seq):
            return False
        self._path(seq).unlink(missing_ok=True)
        return True

    def _forget(self, seq: int) -> bool:
        size = self._sizes.pop(seq, None)
        if size is None:
            return False
        self._bytes -= size
        return True

    def reject(self, seq: int, reason: str) -> bool:
        """Move a batch the learner rejected to ``rejected/`` with the reason; False when it was not spooled."""
        if seq not in self._sizes:
            return False
        self._move(seq, "rejected")
        (self.dir / "rejected" / f"{seq:012d}.reason.txt").write_text(reason + "\n")
        return True

    def _move(self, seq: int, folder: str) -> None:
        (self.dir / folder).mkdir(exist_ok=True)
        os.replace(self._path(seq), self.dir / folder / self._path(seq).name)
        self._forget(seq)

    def note(self, name: str, value: int) -> None:
        """Keep a small number beside the batches (e.g. the actor's next episode id), renamed into place."""
        _write_atomic(self.dir / name, str(value).encode())

    def noted(self, name: str) -> int | None:
        try:
            return int((self.dir / name).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def pending(self) -> list[int]:
        return sorted(self._sizes)

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def full(self) -> bool:
        return self.bytes > self.max_bytes


def _read_journal(journal: Path, problems: list[str]) -> list[list[bytes]]:
    data, records, off = journal.read_bytes(), [], 0
    while off < len(data):
        size = _packed_size(data, off)
        frames = _unpack(data[off:off + size]) if size else None
        if frames is None:
            problems.append(f"{journal.name}: a torn step record at byte {off} dropped")
            break
        records.append(frames)
        off += size
    return records


def spooled_messages(directory: str | Path) -> list[list[bytes]]:
    """Read-only: every whole message a spool holds, spooled batches and the steps of journals without
    their batch (what an audit counts as not in the buffer yet). Changes nothing on disk."""
    directory = Path(directory)
    batches = {p.stem for p in directory.glob("*.msg")}
    out = [frames for p in sorted(directory.glob("*.msg")) if (frames := _unpack(p.read_bytes())) is not None]
    for journal in sorted(directory.glob("*.open")):
        if journal.stem not in batches:
            out.extend(_read_journal(journal, []))
    return out
