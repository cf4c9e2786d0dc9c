"""Records on disk and back: the one path by which a batch enters the index, at run time and at start-up.

Contract: ``Storage.append`` writes a compressed batch to the segment log (the acknowledgement point), then
indexes it; ``Storage.load`` rebuilds the index by replaying every intact record in log order, then closes
the episodes a crash left open by appending an ``episode_truncated`` record for each (so the recovery is
itself durable and happens once). A record that does not fit the index (a gap in its episode, another
spec) is reported in ``log.problems`` and skipped. ``ImageCache`` keeps each step's frames as lz4 blocks in
RAM up to a byte budget, dropping the oldest first, and reads a dropped one back from its segment file.
Not thread-safe: the ``ReplayBuffer`` facade holds its lock around every call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from robolearn.buffer.images import Z_PREFIX, ZLEN_PREFIX, compress_images, decompress_images
from robolearn.buffer.log import RecordRef, SegmentLog
from robolearn.buffer.tables import StepIndex, StepTable
from robolearn.specs import SpecError
from robolearn.transition import OBS_PREFIX
from robolearn.transport.wire import encode

RECORD_TYPES = frozenset({"transitions", "episode_truncated"})


class ImageCache:
    """The frames of every step, as lz4 blocks: in ``StepTable.blobs`` while they fit ``ram_budget`` bytes,
    else read from the segment file at the offset kept in the table's ``ref.<key>`` column."""

    def __init__(self, log: SegmentLog, tables: dict[str, StepTable], shapes: dict[str, tuple[int, ...]],
                 ram_budget: int) -> None:
        self.log = log
        self.tables = tables
        self.shapes = shapes
        self.ram_budget = ram_budget
        self.ram_bytes = 0

    def place(self, table: StepTable, slots: np.ndarray, overwritten: np.ndarray, batch: dict[str, np.ndarray],
              ref: RecordRef) -> None:
        """Cache the frames of a stored batch (``batch``, at ``ref``) in ``slots``; free what ``overwritten`` held."""
        for s_old in overwritten:
            self._evict(table, int(s_old))
        frame_of = {name: i for i, name in enumerate(batch)}  # encode() keeps dict order
        for k in table.img_keys:
            field_name = f"{OBS_PREFIX}{k}"
            lens = batch[f"{ZLEN_PREFIX}{field_name}"]
            ends = np.cumsum(lens)
            starts = ends - lens
            refs = table.cols[f"ref.{k}"]
            refs[slots, 0] = ref.segment
            refs[slots, 1] = ref.frame_offsets[1 + frame_of[f"{Z_PREFIX}{field_name}"]] + starts  # 0: header
            refs[slots, 2] = lens
            data = batch[f"{Z_PREFIX}{field_name}"].tobytes()
            ram = table.blobs[k]
            for s_new, a, e in zip(slots.tolist(), starts.tolist(), ends.tolist()):
                ram[s_new] = data[a:e]
            self.ram_bytes += int(ends[-1])

    def enforce_budget(self) -> None:
        """Drop the oldest cached frames, online first, until the cache fits its budget again."""
        if self.ram_bytes <= self.ram_budget:
            return
        for table in (self.tables["online"], self.tables["demo"]):
            while self.ram_bytes > self.ram_budget and table.ram_oldest < table.n:
                g = table.ram_oldest
                if table.holds(g):
                    self._evict(table, table.slot(g))
                table.ram_oldest += 1

    def _evict(self, table: StepTable, s: int) -> None:
        for k in table.img_keys:
            blob = table.blobs[k][s]
            if blob is not None:
                self.ram_bytes -= len(blob)
                table.blobs[k][s] = None

    def blob(self, table: StepTable, key: str, gid: int) -> bytes:
        """The lz4 block of step ``gid``'s ``key`` frame, from RAM or else from its segment."""
        s = table.slot(gid)
        blob = table.blobs[key][s]
        if blob is None:
            seg, off, length = table.cols[f"ref.{key}"][s]
            blob = self.log.read_frame(int(seg), int(off), int(length))
        return blob

    def decompress(self, key: str, blobs: Sequence[bytes]) -> np.ndarray:
        return decompress_images(blobs, self.shapes[key])


class Storage:
    """The segment log, the image cache and the index they feed."""

    def __init__(self, log: SegmentLog, index: StepIndex, shapes: dict[str, tuple[int, ...]],
                 ram_budget: int) -> None:
        self.log = log
        self.index = index
        self.images = ImageCache(log, index.tables, shapes, ram_budget)
        self._seq = 0  # the wire sequence number of the next record this process appends
        self.batches: set[tuple[str, int]] = set()  # (actor, batch number) of every stored batch that has one

    def compress(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A validated batch in its stored form (the caller does this outside its lock: lz4 is the slow part)."""
        return compress_images(arrays, self.images.shapes)

    def append(self, robot_id: str, record: dict[str, np.ndarray], partition: str,
               batch_key: tuple[str, int] | None = None) -> None:
        """Persist a compressed batch (returns once the OS has it), then index it. ``batch_key`` (actor, batch
        number) goes on disk with it, so a re-sent copy is known as one after a restart too."""
        meta = {"partition": partition}
        if batch_key is not None:
            meta.update(actor=batch_key[0], batch=batch_key[1])
        ref = self.log.append(encode("transitions", robot_id, self._seq, meta, record))
        self._seq += 1
        self._index(robot_id, record, partition, ref)
        if batch_key is not None:
            self.batches.add(batch_key)

    def load(self) -> list[tuple[str, int]]:
        """Rebuild the index from the log; unless read-only, close the episodes a crash cut, durably.
        Returns those episodes as (robot id, episode id)."""
        for ref, msg in self.log.read_messages(RECORD_TYPES):
            if msg.type == "episode_truncated":
                self.index.close_open_episode((msg.sender, int(msg.meta["episode_id"]), msg.meta["partition"]))
                continue
            partition = msg.meta.get("partition", "online")
            if "actor" in msg.meta:
                self.batches.add((str(msg.meta["actor"]), int(msg.meta["batch"])))
            key = (msg.sender, int(msg.arrays["episode_id"][0]), partition)
            try:
                self.index.check_continues(key, int(msg.arrays["step"][0]))
            except SpecError as exc:  # a record before it was lost to corruption: keep what precedes the gap
                self.log.problems.append(f"{exc}; kept what precedes the gap (marked truncated), skipped the rest")
                self.index.close_open_episode(key)
                continue
            try:
                self._index(msg.sender, msg.arrays, partition, ref)
            except (SpecError, KeyError, ValueError) as exc:
                self.log.problems.append(f"a stored batch of {msg.sender} does not fit this buffer, skipped: {exc}")
        if self.log.read_only:  # another process may be writing: its open episodes are not ours to close
            return []
        recovered = []
        for key in list(self.index.open_episodes):  # cut by a crash: keep what was acknowledged
            self.close_episode(key)
            recovered.append(key[:2])
        return recovered

    def close_episode(self, key: tuple[str, int, str]) -> None:
        """End an open episode durably (an ``episode_truncated`` record): its last step is marked truncated."""
        robot_id, episode_id, partition = key
        self.log.append(encode("episode_truncated", robot_id, 0, {"episode_id": episode_id, "partition": partition}))
        self.index.close_open_episode(key)

    def _index(self, robot_id: str, batch: dict[str, np.ndarray], partition: str, ref: RecordRef) -> None:
        self.index.insert(robot_id, batch, partition,
                          lambda table, slots, overwritten: self.images.place(table, slots, overwritten, batch, ref))
        self.images.enforce_budget()
