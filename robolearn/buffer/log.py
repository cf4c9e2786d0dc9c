"""Append-only, checksummed segment files: how transitions reach the disk as they arrive.

Each record is one wire message (msgpack header + raw array frames, see ``transport.wire``), so the
disk holds exactly what was validated on arrival and the loader reuses the wire's bounded decoder:
nothing on disk is ever unpickled. Layout of a record::

    magic b"RLR1" | u32 n_frames | u64 length of each frame ... | u32 crc32 of all that follows | frames

A write is acknowledged once it has been handed to the OS (``write`` + ``flush``), which survives
SIGKILL of the process; ``fsync="strict"`` also fsyncs every record (survives power loss),
``fsync="batched"`` (default) fsyncs at most every ``fsync_interval_s`` and when a segment is sealed.

Loading verifies every checksum. A torn tail (a crash mid-write) is cut so appends continue after the
last intact record. A corrupt record inside a file is reported, skipped, and reading resumes at the
next intact record (found by its magic and checksum), so one bad spot costs only what it covers.
A log is a directory of segments ``seg-000000.log``, ``seg-000001.log``, ...; the last one is
appended to and a new one starts when it exceeds ``segment_bytes``.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from robolearn.transport.wire import Message, WireError, decode

MAGIC = b"RLR1"
_HEAD = struct.Struct("<4sI")
MAX_FRAMES = 4096


@dataclass(frozen=True)
class RecordRef:
    """Where a record's frames lie: segment index and the byte offset of each frame."""

    segment: int
    frame_offsets: tuple[int, ...]


def _parse_at(data: bytes | memoryview, pos: int) -> tuple[int, list[int], list[int]] | str:
    """Parse the record starting at ``pos``: (end, frame offsets, lengths), or a reason it is bad."""
    if pos + _HEAD.size > len(data):
        return "record header runs past the end of the file"
    magic, n = _HEAD.unpack_from(data, pos)
    if magic != MAGIC or n > MAX_FRAMES:
        return "bad record header"
    lengths_end = pos + _HEAD.size + 8 * n
    if lengths_end + 4 > len(data):
        return "record runs past the end of the file (torn, or corrupt lengths)"
    lengths = list(struct.unpack_from(f"<{n}Q", data, pos + _HEAD.size))
    (crc,) = struct.unpack_from("<I", data, lengths_end)
    end = lengths_end + 4 + sum(lengths)
    if end > len(data):
        return "record runs past the end of the file (torn, or corrupt lengths)"
    check = zlib.crc32(data[pos + _HEAD.size:lengths_end])
    offsets, off = [], lengths_end + 4
    for length in lengths:
        offsets.append(off)
        check = zlib.crc32(data[off:off + length], check)
        off += length
    if check != crc:
        return "checksum mismatch"
    return end, offsets, lengths


class SegmentLog:
    def __init__(self, directory: str | Path, fsync: str = "batched", fsync_interval_s: float = 1.0,
                 segment_bytes: int = 256 * 1024 * 1024, read_only: bool = False) -> None:
        if fsync not in ("strict", "batched", "off"):
            raise ValueError(f"buffer.fsync must be strict, batched or off, got {fsync!r}")
        self.dir = Path(directory)
        self.read_only = read_only
        if not read_only:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.fsync_interval_s = fsync_interval_s
        self.segment_bytes = segment_bytes
        self.problems: list[str] = []      # corruption found at load, one line each
        self.num_records = 0
        self._file = None
        self._readers: dict[int, int] = {}  # segment -> file descriptor, for random reads
        self._last_fsync = time.monotonic()

    # --- paths -----------------------------------------------------------------------------------
    def segment_path(self, index: int) -> Path:
        return self.dir / f"seg-{index:06d}.log"

    def segments(self) -> list[int]:
        return sorted(int(p.stem.split("-")[1]) for p in self.dir.glob("seg-*.log"))

    # --- reading (call before appending) ---------------------------------------------------------
    def scan(self) -> Iterator[tuple[RecordRef, list[bytes]]]:
        """Yield every intact record in order, reporting corruption in ``problems``.

        A bad spot followed by intact records is skipped; one at the very end of the last segment is a
        write cut by a crash, and the file is cut back to the last intact record.
        """
        segs = self.segments()
        for k, seg in enumerate(segs):
            path = self.segment_path(seg)
            data = path.read_bytes()
            pos = 0
            while pos < len(data):
                parsed = _parse_at(data, pos)
                if isinstance(parsed, str):
                    nxt = data.find(MAGIC, pos + 1)
                    while nxt != -1 and isinstance(_parse_at(data, nxt), str):
                        nxt = data.find(MAGIC, nxt + 1)
                    if nxt != -1:
                        self.problems.append(f"{path.name}: {parsed} at byte {pos}; skipped {nxt - pos} bytes "
                                             "up to the next intact record")
                        pos = nxt
                        continue
                    if k == len(segs) - 1 and not self.read_only:
                        self.problems.append(f"{path.name}: {parsed} at byte {pos}; the last {len(data) - pos} "
                                             "bytes (a write cut by a crash) were removed")
                        with open(path, "r+b") as f:
                            f.truncate(pos)
                    else:
                        self.problems.append(f"{path.name}: {parsed} at byte {pos}; the remaining "
                                             f"{len(data) - pos} bytes of this segment skipped")
                    break
                end, offsets, lengths = parsed
                frames = [data[o:o + length] for o, length in zip(offsets, lengths)]
                self.num_records += 1
                yield RecordRef(seg, tuple(offsets)), frames
                pos = end

    def read_messages(self, expected_types: frozenset[str] | None = None) -> Iterator[tuple[RecordRef, Message]]:
        for ref, frames in self.scan():
            try:
                yield ref, decode(frames, expected_types)
            except WireError as exc:  # checksummed but undecodable: not written by robolearn
                self.problems.append(f"{self.segment_path(ref.segment).name}: undecodable record skipped: {exc}")

    def read_frame(self, segment: int, offset: int, length: int) -> bytes:
        """Random access to one frame (for data no longer cached in RAM)."""
        fd = self._readers.get(segment)
        if fd is None:
            fd = self._readers[segment] = os.open(self.segment_path(segment), os.O_RDONLY)
        return os.pread(fd, length, offset)

    # --- writing ---------------------------------------------------------------------------------
    def _open_for_append(self) -> None:
        segs = self.segments()
        seg = segs[-1] if segs else 0
        if segs and self.segment_path(seg).stat().st_size >= self.segment_bytes:
            seg += 1
        self._seg = seg
        self._file = open(self.segment_path(seg), "ab")

    def append(self, frames: list[bytes | memoryview]) -> RecordRef:
        """Append one record; returns once the OS has it (the acknowledgement point)."""
        if self.read_only:
            raise PermissionError(f"{self.dir} was opened read-only")
        if self._file is None:
            self._open_for_append()
        elif self._file.tell() >= self.segment_bytes:
            self._seal()
            self._seg += 1
            self._file = open(self.segment_path(self._seg), "ab")
        sizes = [len(f) for f in frames]
        lengths = struct.pack(f"<{len(frames)}Q", *sizes)
        body = b"".join(frames)  # one copy, then one checksum and one write instead of one per frame
        crc = zlib.crc32(body, zlib.crc32(lengths))
        start = self._file.tell()
        head = _HEAD.pack(MAGIC, len(frames)) + lengths + struct.pack("<I", crc)
        self._file.write(head + body)
        offsets, off = [], start + len(head)
        for n in sizes:
            offsets.append(off)
            off += n
        self._file.flush()
        self.num_records += 1
        now = time.monotonic()
        if self.fsync == "strict" or (self.fsync == "batched" and now - self._last_fsync >= self.fsync_interval_s):
            os.fsync(self._file.fileno())
            self._last_fsync = now
        return RecordRef(self._seg, tuple(offsets))

    def _seal(self) -> None:
        self._file.flush()
        if self.fsync != "off":
            os.fsync(self._file.fileno())
        self._file.close()

    def flush(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.flush()
            if self.fsync != "off":
                os.fsync(self._file.fileno())

    def disk_bytes(self) -> int:
        if not self.dir.exists():
            return 0
        return sum(self.segment_path(s).stat().st_size for s in self.segments())

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._seal()
        for fd in self._readers.values():
            os.close(fd)
        self._readers.clear()
