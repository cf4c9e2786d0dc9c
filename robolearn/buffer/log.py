"""An append-only, checksummed record log: how transitions reach the disk as they arrive.

Each record is one wire message (msgpack header + raw array frames, see ``transport.wire``), so the
disk holds exactly what was validated on arrival and the loader reuses the wire's bounded decoder:
nothing on disk is ever unpickled. Layout of a record::

    magic b"RLR1" | u32 n_frames | u64 length of each frame ... | u32 crc32 of all that follows | frames

A write is acknowledged after it has been handed to the OS (``write`` + ``flush``), which survives
SIGKILL of the process; ``fsync="strict"`` also fsyncs every record (survives power loss),
``fsync="batched"`` (default) fsyncs at most every ``fsync_interval_s``. Loading stops at the first
torn or corrupt record, reports it, and truncates the tail so that the next append starts clean.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

from robolearn.transport.wire import Message, WireError, decode

MAGIC = b"RLR1"
_HEAD = struct.Struct("<4sI")


class RecordLog:
    def __init__(self, path: str | Path, fsync: str = "batched", fsync_interval_s: float = 1.0) -> None:
        if fsync not in ("strict", "batched", "off"):
            raise ValueError(f"buffer.fsync must be strict, batched or off, got {fsync!r}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.fsync_interval_s = fsync_interval_s
        self.recovered_bytes_dropped = 0
        self.corruption: str | None = None
        self._good_end, self.num_records = self._scan()
        self._file = open(self.path, "ab")
        if self._file.tell() != self._good_end:  # cut a torn tail so appends continue after good data
            self._file.truncate(self._good_end)
            self._file.seek(self._good_end)
        self._last_fsync = time.monotonic()

    # --- writing -------------------------------------------------------------------------------
    def append(self, frames: list[bytes | memoryview]) -> None:
        """Append one record; returns once the OS has it (the acknowledgement point)."""
        lengths = struct.pack(f"<{len(frames)}Q", *(len(f) for f in frames))
        crc = zlib.crc32(lengths)
        for f in frames:
            crc = zlib.crc32(f, crc)
        self._file.write(_HEAD.pack(MAGIC, len(frames)) + lengths + struct.pack("<I", crc))
        for f in frames:
            self._file.write(f)
        self._file.flush()
        self.num_records += 1
        now = time.monotonic()
        if self.fsync == "strict" or (self.fsync == "batched" and now - self._last_fsync >= self.fsync_interval_s):
            os.fsync(self._file.fileno())
            self._last_fsync = now

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            if self.fsync != "off":
                os.fsync(self._file.fileno())
            self._file.close()

    # --- reading -------------------------------------------------------------------------------
    def _iter_raw(self, stop_at: int | None = None) -> Iterator[tuple[int, list[bytes]]]:
        """Yield (end offset, frames) for each intact record; stop silently at the first bad one."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            data = f.read() if stop_at is None else f.read(stop_at)
        pos = 0
        while pos + _HEAD.size <= len(data):
            magic, n = _HEAD.unpack_from(data, pos)
            if magic != MAGIC or n > 4096:
                self.corruption = f"bad record header at byte {pos}"
                return
            lengths_end = pos + _HEAD.size + 8 * n
            if lengths_end + 4 > len(data):
                self.corruption = f"torn record at byte {pos}"
                return
            lengths = struct.unpack_from(f"<{n}Q", data, pos + _HEAD.size)
            (crc,) = struct.unpack_from("<I", data, lengths_end)
            body_start = lengths_end + 4
            end = body_start + sum(lengths)
            if end > len(data):
                self.corruption = f"torn record at byte {pos}"
                return
            frames, off = [], body_start
            for ln in lengths:
                frames.append(data[off:off + ln])
                off += ln
            check = zlib.crc32(data[pos + _HEAD.size:lengths_end])
            for fr in frames:
                check = zlib.crc32(fr, check)
            if check != crc:
                self.corruption = f"checksum mismatch in record at byte {pos}"
                return
            yield end, frames
            pos = end

    def _scan(self) -> tuple[int, int]:
        """(byte offset after the last intact record, number of intact records)."""
        end, count = 0, 0
        for count, (end, _) in enumerate(self._iter_raw(), start=1):  # noqa: B007
            pass
        size = self.path.stat().st_size if self.path.exists() else 0
        self.recovered_bytes_dropped = size - end
        return end, count

    def read(self, expected_types: frozenset[str] | None = None) -> Iterator[Message]:
        """Decode every intact record in order (with the wire's bounded decoder)."""
        for _, frames in self._iter_raw(stop_at=self._good_end):
            try:
                yield decode(frames, expected_types)
            except WireError as exc:  # checksummed but undecodable: written by something else
                self.corruption = f"undecodable record: {exc}"
                return
