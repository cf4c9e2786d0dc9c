"""The persistent replay buffer: every step a robot took, on disk as it arrives, cached in RAM.

Storage (chosen; figures from ``make bench-buffer``, ``benchmarks/results/buffer.json``, 2 cores):
append-only checksummed segment files (``log.SegmentLog``), one record per received transition
batch, plus an in-RAM index rebuilt by one sequential scan at start-up. Why not SQLite-WAL + array
files or LMDB: the data is written once and never updated, so a log needs a single sequential write
per batch (no WAL double write, no page splits), the checksum makes a torn or corrupt record
detectable and skippable without any index to repair, and the "index" is derived from the log so it
can never disagree with it. Measured: durable appends at ~40k state-only and ~14k two-camera
transitions/s (lerobot's in-memory buffer: ~32k and ~11k), uniform batches of 256 at ~7k/s
state-only and ~64/s with images (lerobot: ~5k and ~47/s), ~4 KB resident per two-camera
transition (lerobot: ~227 KB). Images are lz4-compressed (a rendered 96x96 sim frame: 27.6 KB ->
~1.7 KB), so the start-up scan stays short; its cost is one read of the segments.

Durability: ``add`` returns after the record is handed to the OS (survives SIGKILL of any process);
``fsync="strict"`` fsyncs every record (survives power loss); ``"batched"`` (default) fsyncs at most
every ``fsync_interval_s``. An episode is committed by the record that ends it (terminated or
truncated, with its final observation); an episode still open when the buffer is reopened was cut by
a crash: it is kept up to its last acknowledged step and marked truncated, durably.

Memory: images stay uint8 and are held lz4-compressed, in RAM and on disk; a next observation is
never stored, it is the following step's observation (or the episode's final observation). Images of
old steps beyond ``ram_budget_mb`` are dropped from RAM and read back from the segment files when
sampled. Online steps live in a ring of ``capacity`` steps (FIFO by age); demos are never evicted.

Partitions: ``online`` (robot steps), ``intervention`` (online steps a human drove), ``demo``
(imported or recorded demonstrations).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import lz4.block
import numpy as np

from robolearn.buffer.log import SegmentLog
from robolearn.specs import ActionSpec, ObservationSpec, SpecError
from robolearn.transition import FINAL_OBS_PREFIX, OBS_PREFIX, SCALAR_FIELDS, validate_batch
from robolearn.transport.wire import encode

PARTITIONS = ("online", "intervention", "demo")
Z_PREFIX = "z."       # lz4 blobs of an image field, concatenated
ZLEN_PREFIX = "zlen."  # their lengths
RECORD_TYPES = frozenset({"transitions", "episode_truncated"})


def is_image(spec) -> bool:
    return spec.dtype == "uint8" and len(spec.shape) == 3


@dataclass
class Episode:
    robot_id: str
    episode_id: int
    partition: str
    table: str                     # "online" or "demo"
    first_gid: int
    last_gid: int = -1
    n_steps: int = 0
    ret: float = 0.0
    success: bool = False
    ended: bool = False            # committed (ended by its own record, or closed after a crash)
    truncated_by_recovery: bool = False
    interventions: int = 0


class StepTable:
    """Columnar steps. ``ring``: a fixed ring of ``capacity`` slots (slot = gid % capacity);
    otherwise grows without bound (slot = gid). ``gid`` counts steps ever added to this table.

    The float32 fields a SAC batch reads together (1-D float32 observations, action, reward) share one
    row-major ``block``, and ``cols`` holds views into it: sampling is bound by random memory access,
    and one gather of a ~100-byte row touches far fewer cache lines than one gather per field."""

    def __init__(self, obs_spec: ObservationSpec, action_dim: int, capacity: int, ring: bool) -> None:
        self.ring = ring
        self.capacity = capacity if ring else 1024
        self.n = 0
        self.vec_keys = [k for k, s in obs_spec.arrays.items() if not is_image(s)]
        self.img_keys = [k for k, s in obs_spec.arrays.items() if is_image(s)]
        packed = [(f"{OBS_PREFIX}{k}", obs_spec.arrays[k].size) for k in self.vec_keys
                  if obs_spec.arrays[k].dtype == "float32" and len(obs_spec.arrays[k].shape) == 1]
        packed += [("action", action_dim), ("reward", 0)]  # width 0: a scalar column
        self.layout: dict[str, slice | int] = {}
        width = 0
        for name, w in packed:
            self.layout[name] = slice(width, width + w) if w else width
            width += max(w, 1)
        self.block_width = width
        c = self.capacity
        self.block = np.zeros((c, width), np.float32)
        self.cols: dict[str, np.ndarray] = {name: np.zeros(c, dtype) for name, dtype in SCALAR_FIELDS.items()
                                            if name not in self.layout}
        self.cols["gid"] = np.full(c, -1, np.int64)
        self.cols["next_gid"] = np.full(c, -1, np.int64)
        self.cols["has_next"] = np.zeros(c, bool)
        self.cols["episode_key"] = np.full(c, -1, np.int64)
        for k in self.vec_keys:
            spec = obs_spec.arrays[k]
            if f"{OBS_PREFIX}{k}" not in self.layout:
                self.cols[f"{OBS_PREFIX}{k}"] = np.zeros((c, *spec.shape), spec.dtype)
        for k in self.img_keys:
            self.cols[f"ref.{k}"] = np.zeros((c, 3), np.int64)  # segment, offset, length of the blob on disk
        self._bind_views()
        self.blobs: dict[str, list[bytes | None]] = {k: [None] * c for k in self.img_keys}
        self.ram_oldest = 0  # oldest gid whose blobs may still be in RAM

    def _bind_views(self) -> None:
        for name, where in self.layout.items():
            self.cols[name] = self.block[:, where]

    def slot(self, gid):
        return gid % self.capacity if self.ring else gid

    def alive(self, gid: np.ndarray) -> np.ndarray:
        low = self.n - self.capacity if self.ring else 0
        return (gid >= max(low, 0)) & (gid < self.n)

    def reserve(self, k: int) -> None:
        """Make room for k more steps (grows a non-ring table)."""
        if self.ring or self.n + k <= self.capacity:
            return
        new = max(2 * self.capacity, self.n + k)
        for name, col in self.cols.items():
            if name in self.layout:
                continue
            grown = np.zeros((new, *col.shape[1:]), col.dtype)
            if name in ("gid", "next_gid", "episode_key"):
                grown[:] = -1
            grown[: self.capacity] = col
            self.cols[name] = grown
        block = np.zeros((new, self.block_width), np.float32)
        block[: self.capacity] = self.block
        self.block = block
        self._bind_views()
        for k2 in self.img_keys:
            self.blobs[k2].extend([None] * (new - self.capacity))
        self.capacity = new


class ReplayBuffer:
    def __init__(self, directory: str | Path, obs_spec: ObservationSpec, action_spec: ActionSpec,
                 capacity: int = 1_000_000, ram_budget_mb: float = 4096.0, fsync: str = "batched",
                 fsync_interval_s: float = 1.0, segment_mb: float = 256.0, seed: int = 0,
                 read_only: bool = False) -> None:
        """``read_only``: inspect a buffer another process may be writing (no recovery, no appends)."""
        self.obs_spec, self.action_spec = obs_spec, action_spec
        self.read_only = read_only
        self.log = SegmentLog(directory, fsync, fsync_interval_s, int(segment_mb * 1024 * 1024), read_only)
        adim = action_spec.dim
        self.tables = {"online": StepTable(obs_spec, adim, capacity, ring=True),
                       "demo": StepTable(obs_spec, adim, capacity, ring=False)}
        self.vec_keys = self.tables["online"].vec_keys
        self.img_keys = self.tables["online"].img_keys
        self.img_shapes = {k: obs_spec.arrays[k].shape for k in self.img_keys}
        self.ram_budget = int(ram_budget_mb * 1024 * 1024)
        self.ram_image_bytes = 0
        self.episodes: dict[int, Episode] = {}
        self._episode_index: dict[tuple[str, int, str], int] = {}
        self._open: dict[tuple[str, int, str], int] = {}       # episode index key -> last gid
        # per partition: gids (of its table) that are sampleable, in the order they became so
        self._part_gids = {p: np.zeros(1024, np.int64) for p in PARTITIONS}
        self._part_len = dict.fromkeys(PARTITIONS, 0)
        self._part_head = dict.fromkeys(PARTITIONS, 0)
        self.counts_by_source = np.zeros(3, np.int64)
        # by episode index, for vectorised lookups in sampling: success, final observations
        self._ep_success = np.zeros(1024, bool)
        self._ep_ended = np.zeros(1024, bool)
        self._ep_last_intervention = np.full(1024, -1, np.int64)  # step index of its last intervention step
        self._final_vec = {k: np.zeros((1024, *obs_spec.arrays[k].shape), obs_spec.arrays[k].dtype)
                           for k in self.vec_keys}
        self._final_img: dict[str, list[bytes | None]] = {k: [None] * 1024 for k in self.img_keys}
        self.max_version = 0
        # episode filters (Hi-ORS): each ended episode's sampleable steps by partition, computed once, and the
        # last filter's result, valid until another episode ends or the ring overwrites another eighth of itself
        self._ep_candidates: dict[int, dict[str, np.ndarray]] = {}
        self._episodes_ended = 0
        self._filter_cache: tuple[tuple, list[tuple[str, np.ndarray]]] | None = None
        self.rng = np.random.default_rng(seed)
        self.lock = threading.RLock()
        self._seq = 0
        self.recovered_episodes: list[tuple[str, int]] = []
        self._load()

    # ============================================================================================
    # loading and recovery
    def _load(self) -> None:
        for ref, msg in self.log.read_messages(RECORD_TYPES):
            if msg.type == "episode_truncated":
                self._close_open_episode((msg.sender, int(msg.meta["episode_id"]), msg.meta["partition"]))
                continue
            partition = msg.meta.get("partition", "online")
            key = (msg.sender, int(msg.arrays["episode_id"][0]), partition)
            try:
                self._check_continues(key, int(msg.arrays["step"][0]))
            except SpecError as exc:  # a record before it was lost to corruption: keep what precedes the gap
                self.log.problems.append(f"{exc}; kept what precedes the gap (marked truncated), skipped the rest")
                self._close_open_episode(key)
                continue
            try:
                self._insert(msg.sender, msg.arrays, partition, ref)
            except (SpecError, KeyError, ValueError) as exc:
                self.log.problems.append(f"a stored batch of {msg.sender} does not fit this buffer, skipped: {exc}")
        if self.read_only:
            return
        # episodes cut by a crash: keep what was acknowledged, mark them truncated, durably
        for key in list(self._open):
            robot_id, episode_id, partition = key
            self.log.append(encode("episode_truncated", robot_id, 0,
                                   {"episode_id": episode_id, "partition": partition}))
            self._close_open_episode(key)
            self.recovered_episodes.append((robot_id, episode_id))

    def _close_open_episode(self, key: tuple[str, int, str]) -> None:
        last = self._open.pop(key, None)
        if last is None:
            return
        ep = self.episodes[self._episode_index[key]]
        table = self.tables[ep.table]
        if table.alive(np.array([last]))[0]:
            table.cols["truncated"][table.slot(last)] = True
        ep.ended = ep.truncated_by_recovery = True  # its last step has no known next observation
        self._ep_ended[self._episode_index[key]] = True
        self._episodes_ended += 1

    # ============================================================================================
    # adding
    def add(self, robot_id: str, arrays: dict[str, np.ndarray], partition: str = "online") -> int:
        """Validate, persist (the acknowledgement point), then index one batch of consecutive steps of one
        episode (the wire's columnar batch, images raw uint8). Returns the number of steps added."""
        if partition not in ("online", "demo"):
            raise ValueError(f"partition must be 'online' or 'demo' (interventions are flagged per step), "
                             f"got {partition!r}")
        n = validate_batch(arrays, self.obs_spec, self.action_spec)
        episode, step = arrays["episode_id"], arrays["step"]
        if n > 1 and not (episode == episode[0]).all():
            raise SpecError("a transition batch must hold steps of one episode")
        if n > 1 and not (step[1:] - step[:-1] == 1).all():
            raise SpecError("the steps of a transition batch are not consecutive")
        key = (robot_id, int(arrays["episode_id"][0]), partition)
        with self.lock:
            self._check_continues(key, int(arrays["step"][0]))
        disk = self._compress(arrays)
        with self.lock:
            ref = self.log.append(encode("transitions", robot_id, self._seq, {"partition": partition}, disk))
            self._seq += 1
            self._insert(robot_id, disk, partition, ref)
        return n

    def _check_continues(self, key: tuple[str, int, str], first_step: int) -> None:
        """A batch must continue its episode where the previous one stopped (no gaps, nothing after the end)."""
        idx = self._episode_index.get(key)
        if idx is None:
            if first_step != 0:
                raise SpecError(f"episode {key[1]} of {key[0]} starts at step {first_step}, not 0; "
                                "steps are not consecutive")
            return
        ep = self.episodes[idx]
        if ep.ended:
            raise SpecError(f"episode {key[1]} of {key[0]} has already ended")
        table = self.tables[ep.table]
        last_step = int(table.cols["step"][table.slot(ep.last_gid)])
        if first_step != last_step + 1:
            raise SpecError(f"episode {key[1]} of {key[0]}: step {first_step} follows step {last_step}; "
                            "steps are not consecutive")

    def _compress(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for name, arr in arrays.items():
            key = name.removeprefix(OBS_PREFIX).removeprefix(FINAL_OBS_PREFIX)
            if key in self.img_keys and (name.startswith(OBS_PREFIX) or name.startswith(FINAL_OBS_PREFIX)):
                imgs = arr.reshape(-1, *self.img_shapes[key])
                blobs = [lz4.block.compress(np.ascontiguousarray(im), store_size=False) for im in imgs]
                out[f"{Z_PREFIX}{name}"] = np.frombuffer(b"".join(blobs), np.uint8)
                out[f"{ZLEN_PREFIX}{name}"] = np.array([len(b) for b in blobs], np.int64)
            else:
                out[name] = arr
        return out

    def _insert(self, robot_id: str, d: dict[str, np.ndarray], partition: str, ref) -> None:
        """Index a stored record. ``d`` holds compressed image fields; ``ref`` locates its frames on disk."""
        n = len(d["action"])
        key = (robot_id, int(d["episode_id"][0]), partition)
        table_name = "demo" if partition == "demo" else "online"
        table = self.tables[table_name]
        table.reserve(n)
        ep_idx = self._episode_index.get(key)
        if ep_idx is None:
            ep_idx = len(self.episodes)
            self._episode_index[key] = ep_idx
            self.episodes[ep_idx] = Episode(robot_id, key[1], partition, table_name, first_gid=table.n)
            if ep_idx >= len(self._ep_success):  # per-episode arrays grow together
                self._ep_success = np.concatenate([self._ep_success, np.zeros_like(self._ep_success)])
                self._ep_ended = np.concatenate([self._ep_ended, np.zeros_like(self._ep_ended)])
                self._ep_last_intervention = np.concatenate(
                    [self._ep_last_intervention, np.full_like(self._ep_last_intervention, -1)])
                for k in self.vec_keys:
                    self._final_vec[k] = np.concatenate([self._final_vec[k], np.zeros_like(self._final_vec[k])])
                for k in self.img_keys:
                    self._final_img[k].extend([None] * (len(self._ep_success) - len(self._final_img[k])))
        ep = self.episodes[ep_idx]
        names = list(d)
        frame_of = {name: i for i, name in enumerate(names)}  # encode() keeps dict order
        cols = table.cols
        gids = np.arange(table.n, table.n + n)
        slots = table.slot(gids)
        if table.ring:  # overwriting the oldest steps: free their cached images
            for s_old in slots[cols["gid"][slots] >= 0]:
                self._evict_slot(table, int(s_old))
        cols["gid"][slots] = gids
        for name in SCALAR_FIELDS:
            cols[name][slots] = d[name]
        cols["action"][slots] = d["action"]
        cols["episode_key"][slots] = ep_idx
        cols["next_gid"][slots[:-1]] = gids[1:]
        cols["next_gid"][slots[-1]] = -1
        cols["has_next"][slots] = False
        for k in self.vec_keys:
            cols[f"{OBS_PREFIX}{k}"][slots] = d[f"{OBS_PREFIX}{k}"]
        for k in self.img_keys:
            field_name = f"{OBS_PREFIX}{k}"
            lens = d[f"{ZLEN_PREFIX}{field_name}"]
            ends_ = np.cumsum(lens)
            starts = ends_ - lens
            refs = cols[f"ref.{k}"]
            refs[slots, 0] = ref.segment
            refs[slots, 1] = ref.frame_offsets[1 + frame_of[f"{Z_PREFIX}{field_name}"]] + starts  # 0: header
            refs[slots, 2] = lens
            data = d[f"{Z_PREFIX}{field_name}"].tobytes()
            ram = table.blobs[k]
            for s_new, a, e in zip(slots.tolist(), starts.tolist(), ends_.tolist()):
                ram[s_new] = data[a:e]
            self.ram_image_bytes += int(ends_[-1])
        prev = self._open.get(key)
        if prev is not None and table.alive(np.array([prev]))[0]:
            cols["next_gid"][table.slot(prev)] = gids[0]
            self._make_sampleable(table, np.array([prev]))
        self._make_sampleable(table, gids[:-1])
        table.n += n
        ep.n_steps += n
        ep.ret += float(d["reward"].sum())
        ep.interventions += int(d["intervention"].sum())
        if d["intervention"].any():
            self._ep_last_intervention[ep_idx] = int(d["step"][np.flatnonzero(d["intervention"])[-1]])
        self.counts_by_source += np.bincount(d["action_source"], minlength=3)[:3]
        self.max_version = max(self.max_version, int(d["policy_version"].max()))
        ep.last_gid = int(gids[-1])
        if d["terminated"][-1] or d["truncated"][-1]:
            ep.ended = True
            ep.success = bool(d["success"][-1])
            self._ep_success[ep_idx] = ep.success
            self._ep_ended[ep_idx] = True
            self._episodes_ended += 1
            for k in self.vec_keys:
                self._final_vec[k][ep_idx] = d[f"{FINAL_OBS_PREFIX}{k}"]
            for k in self.img_keys:
                self._final_img[k][ep_idx] = d[f"{Z_PREFIX}{FINAL_OBS_PREFIX}{k}"].tobytes()
            self._make_sampleable(table, gids[-1:])
            self._open.pop(key, None)
        else:
            self._open[key] = int(gids[-1])
        self._enforce_ram_budget()

    def _make_sampleable(self, table: StepTable, gids: np.ndarray) -> None:
        """Mark steps whose next observation is now known, and file them under their partition."""
        if not len(gids):
            return
        slots = table.slot(gids)
        table.cols["has_next"][slots] = True
        if table is self.tables["demo"]:
            groups = {"demo": gids}
        else:
            flag = table.cols["intervention"][slots]
            groups = {"intervention": gids[flag], "online": gids[~flag]}
        for part, g in groups.items():
            arr, n = self._part_gids[part], self._part_len[part]
            if n + len(g) > len(arr):
                arr = self._part_gids[part] = np.concatenate([arr, np.zeros(max(len(arr), len(g)), np.int64)])
            arr[n:n + len(g)] = g
            self._part_len[part] = n + len(g)

    def _evict_slot(self, table: StepTable, s: int) -> None:
        for k in self.img_keys:
            blob = table.blobs[k][s]
            if blob is not None:
                self.ram_image_bytes -= len(blob)
                table.blobs[k][s] = None

    def _enforce_ram_budget(self) -> None:
        if self.ram_image_bytes <= self.ram_budget:
            return
        for table in (self.tables["online"], self.tables["demo"]):
            while self.ram_image_bytes > self.ram_budget and table.ram_oldest < table.n:
                g = table.ram_oldest
                if table.alive(np.array([g]))[0]:
                    self._evict_slot(table, table.slot(g))
                table.ram_oldest += 1

    # ============================================================================================
    # sampling
    def _live(self, part: str) -> np.ndarray:
        table = self.tables["demo" if part == "demo" else "online"]
        arr, head, n = self._part_gids[part], self._part_head[part], self._part_len[part]
        low = table.n - table.capacity if table.ring else 0
        while head < n and arr[head] < low:
            head += 1  # evicted by age (the oldest come first)
        self._part_head[part] = head
        return arr[head:n]

    def episode(self, robot_id: str, episode_id: int, partition: str = "online") -> Episode | None:
        """The bookkeeping of one episode (steps, return, success, interventions), None if unknown."""
        with self.lock:
            idx = self._episode_index.get((robot_id, episode_id, partition))
            return None if idx is None else self.episodes[idx]

    def partition_sizes(self) -> dict[str, int]:
        with self.lock:
            return {p: len(self._live(p)) for p in PARTITIONS}

    def sample(self, batch_size: int, horizon: int = 1, gamma: float = 0.99, n_step: int | None = None,
               mix: dict[str, float] | None = None, age_decay: float | None = None, age_uniform: float = 0.5,
               current_version: int | None = None, success_only: bool = False,
               min_return: float | None = None, min_episode_steps: int = 0,
               with_info: bool = False) -> dict[str, np.ndarray]:
        """A batch of windows of ``horizon`` consecutive steps (actions) with ``n_step`` returns.

        Who is drawn: ``mix`` gives partition ratios (e.g. ``{"online": 0.5, "demo": 0.5}``; default:
        uniform over every sampleable step); ``age_decay`` weights a step by decay^(current_version -
        its policy version), mixed with uniform in proportion ``age_uniform``; ``success_only`` /
        ``min_return`` / ``min_episode_steps`` keep only committed episodes that succeeded / reached that
        return / are that long (Hi-ORS).

        Returns ``obs.<key>`` / ``next_obs.<key>`` (B, ...), images uint8; ``action`` (B, horizon, A)
        in robot units, padded with the last action after an episode end, ``action_mask`` (B, horizon);
        ``reward`` (B,) = sum_k gamma^k r_{t+k} over n steps; ``discount`` (B,) = gamma^n, 0 after
        termination. With ``with_info``: ``intervention``, ``action_source``, ``policy_version``,
        ``partition`` (B,) of the first step, ``episode_success`` / ``episode_ended`` (B,), and ``labelled``
        (B,): the step is autonomous, in an ended episode, after that episode's last intervention (the
        steps HABC labels with the outcome). Each extra field is another random gather, so plain SAC
        batches leave them out.
        """
        n_step = horizon if n_step is None else n_step
        with self.lock:
            picks = self._pick(batch_size, mix, age_decay, age_uniform, current_version, success_only, min_return,
                               min_episode_steps)
            by_table: dict[str, list] = {}
            for part, gids in picks:
                if len(gids):
                    by_table.setdefault("demo" if part == "demo" else "online", []).append((part, gids))
            parts = []
            for name, items in by_table.items():
                gids = np.concatenate([g for _, g in items]) if len(items) > 1 else items[0][1]
                codes = np.concatenate([np.full(len(g), PARTITIONS.index(p), np.uint8) for p, g in items]) \
                    if with_info else None
                parts.append(self._gather(self.tables[name], gids, codes, horizon, n_step, gamma))
        if len(parts) == 1:
            out = parts[0]
        else:
            out = {k: (sum((p[k] for p in parts), []) if isinstance(parts[0][k], list) else
                       np.concatenate([p[k] for p in parts])) for k in parts[0]}
        for k in self.img_keys:  # decompress outside the lock (lz4 releases the GIL)
            for prefix in (OBS_PREFIX, "next_obs."):
                out[f"{prefix}{k}"] = self._decompress(k, out.pop(f"{prefix}{k}"))
        return out

    def _pick(self, b, mix, age_decay, age_uniform, current_version, success_only, min_return, min_steps=0):
        if success_only or min_return is not None or min_steps:
            for refresh in (False, True):
                cands = self._filtered_gids(success_only, min_return, min_steps, refresh)
                if not sum(len(g) for _, g in cands):
                    raise RuntimeError("no committed episode passes the success/return filter yet")
                sizes = np.array([len(g) for _, g in cands], float)
                counts = self.rng.multinomial(b, sizes / sizes.sum())
                picks = [(p, self._draw_alive(self.tables["demo" if p == "demo" else "online"], g, c))
                         for (p, g), c in zip(cands, counts)]
                if sum(len(g) for _, g in picks) == b:
                    break  # else most cached steps were overwritten since: recompute once
            return picks
        live = {p: self._live(p) for p in PARTITIONS}
        nonempty = [p for p in PARTITIONS if len(live[p])]
        if mix is None and age_decay is None and len(nonempty) == 1:  # the usual case: one partition
            p = nonempty[0]
            return [(p, self._draw_alive(self.tables["demo" if p == "demo" else "online"], live[p], b))]
        if mix is None:
            sizes = np.array([len(live[p]) for p in PARTITIONS], float)
            if sizes.sum() == 0:
                raise RuntimeError("the buffer has no sampleable step yet")
            ratios = sizes / sizes.sum()
        else:
            unknown = set(mix) - set(PARTITIONS)
            if unknown:
                raise ValueError(f"unknown partition(s) {sorted(unknown)} in mix; partitions are {PARTITIONS}")
            ratios = np.array([mix.get(p, 0.0) if len(live[p]) else 0.0 for p in PARTITIONS])
            if ratios.sum() <= 0:
                raise RuntimeError(f"no sampleable step in the partitions of {mix}")
            ratios = ratios / ratios.sum()
        counts = self.rng.multinomial(b, ratios)
        picks = []
        for p, c in zip(PARTITIONS, counts):
            if not c:
                continue
            table = self.tables["demo" if p == "demo" else "online"]
            gids = live[p]
            if age_decay is None:
                picks.append((p, self._draw_alive(table, gids, c)))
                continue
            gids = gids[table.alive(gids)]
            version = self.max_version if current_version is None else current_version
            age = version - table.cols["policy_version"][table.slot(gids)]
            w = np.power(age_decay, np.maximum(age, 0).astype(np.float64))
            n_uniform = self.rng.binomial(c, age_uniform)
            chosen = np.concatenate([gids[self.rng.integers(0, len(gids), n_uniform)],
                                     self.rng.choice(gids, size=c - n_uniform, p=w / w.sum())])
            picks.append((p, chosen))
        return picks

    def _draw_alive(self, table: StepTable, gids: np.ndarray, count: int) -> np.ndarray:
        """``count`` uniform draws from ``gids``, redrawing the rare entry evicted behind the head."""
        drawn = gids[self.rng.integers(0, len(gids), count)]
        if not table.ring or table.n <= table.capacity:
            return drawn  # nothing has been evicted yet
        for _ in range(100):
            dead = drawn < table.n - table.capacity
            if not dead.any():
                return drawn
            drawn[dead] = gids[self.rng.integers(0, len(gids), int(dead.sum()))]
        return drawn[table.alive(drawn)]

    def _filtered_gids(self, success_only: bool, min_return: float | None, min_steps: int = 0,
                       refresh: bool = False) -> list[tuple[str, np.ndarray]]:
        """Sampleable steps of the ended episodes that pass the filter, by partition. Cached: Hi-ORS asks
        with the same threshold for many batches, and its threshold moves only when an episode ends. The
        cache may hold a few steps the ring has since overwritten; ``_draw_alive`` skips them."""
        online = self.tables["online"]
        evicted_eighths = max(online.n - online.capacity, 0) // max(online.capacity // 8, 1)
        stamp = (success_only, min_return, min_steps, self._episodes_ended, evicted_eighths)
        if not refresh and self._filter_cache is not None and self._filter_cache[0] == stamp:
            return self._filter_cache[1]
        by_part: dict[str, list[np.ndarray]] = {p: [] for p in PARTITIONS}
        for idx, ep in self.episodes.items():
            if not ep.ended or (success_only and not ep.success) or (min_return is not None and ep.ret < min_return):
                continue
            if ep.n_steps < min_steps:
                continue
            table = self.tables[ep.table]
            if not table.alive(np.array([ep.last_gid]))[0]:
                self._ep_candidates.pop(idx, None)  # wholly overwritten
                continue
            if idx not in self._ep_candidates:
                self._ep_candidates[idx] = self._episode_candidates(idx, ep, table)
            for p, gids in self._ep_candidates[idx].items():
                by_part[p].append(gids)
        result = [(p, np.concatenate(v)) for p, v in by_part.items() if v and sum(len(x) for x in v)]
        self._filter_cache = (stamp, result)
        return result

    @staticmethod
    def _episode_gids(idx: int, ep: Episode, table: StepTable) -> np.ndarray:
        """The gids of episode ``idx`` still in its table, in order. They span [first_gid, last_gid], which
        may interleave with other robots' episodes."""
        gids = np.arange(ep.first_gid, ep.last_gid + 1)
        gids = gids[table.alive(gids)]
        return gids[table.cols["episode_key"][table.slot(gids)] == idx]

    def _episode_candidates(self, idx: int, ep: Episode, table: StepTable) -> dict[str, np.ndarray]:
        """An ended episode's sampleable steps (those with a next observation), by partition."""
        gids = self._episode_gids(idx, ep, table)
        gids = gids[table.cols["has_next"][table.slot(gids)]]
        if ep.table == "demo":
            return {"demo": gids}
        flag = table.cols["intervention"][table.slot(gids)]
        return {"online": gids[~flag], "intervention": gids[flag]}

    def _gather(self, table: StepTable, start: np.ndarray, part_codes: np.ndarray | None, horizon: int,
                n_step: int, gamma: float) -> dict:
        """Assemble a batch from ``start`` steps of one table; ``part_codes`` given: add the info fields."""
        cols = table.cols
        b = len(start)
        ss = table.slot(start)
        rows = None
        if horizon == 1 and n_step == 1:  # plain one-step transitions: the common case, kept lean
            last, ls = start, ss
            rows = table.block[ss]  # observation, action and reward in one gather
            action = rows[:, table.layout["action"]][:, None]
            mask = np.ones((b, 1), bool)
            reward = rows[:, table.layout["reward"]]
            disc = np.float32(gamma)
        else:
            action, mask, reward, disc, last = self._walk(table, start, horizon, n_step, gamma)
            ls = table.slot(last)
        nxt = cols["next_gid"][ls]
        has_succ = nxt >= 0  # else the window ends its episode: the next observation is the final one
        out = {"action": action, "action_mask": mask, "reward": reward.astype(np.float32, copy=False),
               "discount": (~cols["terminated"][ls] * disc).astype(np.float32, copy=False)}
        if part_codes is not None:
            ep = cols["episode_key"][ss]
            # outcome-labelled (HABC credit): an autonomous step of an ended episode after its last intervention
            labelled = (self._ep_ended[ep] & ~cols["intervention"][ss]
                        & (cols["step"][ss] > self._ep_last_intervention[ep]))
            out.update({"intervention": cols["intervention"][ss], "action_source": cols["action_source"][ss],
                        "policy_version": cols["policy_version"][ss], "partition": part_codes,
                        "episode_success": self._ep_success[ep], "episode_ended": self._ep_ended[ep],
                        "labelled": labelled})
        succ_slot = table.slot(np.where(has_succ, nxt, last))
        ends = np.flatnonzero(~has_succ)
        ep_of_last = cols["episode_key"][ls[ends]]
        next_rows = table.block[succ_slot] if rows is not None else None
        for k in self.vec_keys:
            name = f"{OBS_PREFIX}{k}"
            if rows is not None and name in table.layout:
                out[name] = rows[:, table.layout[name]]
                nxt_obs = next_rows[:, table.layout[name]]
            else:
                out[name] = cols[name][ss]
                nxt_obs = cols[name][succ_slot]
            nxt_obs[ends] = self._final_vec[k][ep_of_last]
            out[f"next_obs.{k}"] = nxt_obs
        for k in self.img_keys:
            out[f"{OBS_PREFIX}{k}"] = [self._blob(table, k, int(g)) for g in start]
            nb = [self._blob(table, k, int(g)) for g in np.where(has_succ, nxt, last)]
            for i, e in zip(ends, ep_of_last):
                nb[i] = self._final_img[k][e] or nb[i]
            out[f"next_obs.{k}"] = nb
        return out

    def _walk(self, table: StepTable, start: np.ndarray, horizon: int, n_step: int, gamma: float):
        """Follow next links for H-step action windows and n-step returns; stop at an episode end or at a step
        whose own next observation is not known yet. Returns (action, mask, reward, discount, last step)."""
        cols = table.cols
        b = len(start)
        gid = start.copy()
        alive = np.ones(b, bool)      # the window has not passed an episode end
        last = start.copy()           # last step inside the window (for n-step bootstrapping)
        reward = np.zeros(b, np.float64)
        disc = np.ones(b, np.float64)
        action = np.zeros((b, horizon, cols["action"].shape[1]), np.float32)
        mask = np.zeros((b, horizon), bool)
        for k in range(max(horizon, n_step)):
            s = table.slot(gid)
            if k < horizon:
                action[:, k] = cols["action"][table.slot(np.where(alive, gid, last))]
                mask[:, k] = alive
            if k < n_step:
                reward += np.where(alive, disc * cols["reward"][s], 0.0)
                disc = np.where(alive, disc * gamma, disc)
                last = np.where(alive, gid, last)
            nxt = cols["next_gid"][s]
            ok = alive & (nxt >= 0)
            ok[ok] = table.alive(nxt[ok]) & cols["has_next"][table.slot(nxt[ok])]
            alive = ok
            gid = np.where(alive, nxt, gid)
        return action, mask, reward, disc, last

    def _blob(self, table: StepTable, key: str, gid: int) -> bytes:
        s = table.slot(gid)
        blob = table.blobs[key][s]
        if blob is None:  # not in RAM any more: read it from its segment
            seg, off, ln = table.cols[f"ref.{key}"][s]
            blob = self.log.read_frame(int(seg), int(off), int(ln))
        return blob

    def _decompress(self, key: str, blobs: np.ndarray) -> np.ndarray:
        shape = self.img_shapes[key]
        size = int(np.prod(shape))
        out = np.empty((len(blobs), *shape), np.uint8)
        for i, blob in enumerate(blobs):
            out[i] = np.frombuffer(lz4.block.decompress(blob, uncompressed_size=size), np.uint8).reshape(shape)
        return out

    # ============================================================================================
    # reading whole episodes (export, inspection)
    def iter_episodes(self, successes_only: bool = False) -> Iterator[tuple[Episode, dict[str, np.ndarray]]]:
        """Committed episodes still fully in the buffer, as columnar arrays (images decompressed)."""
        for idx, ep in list(self.episodes.items()):
            if not ep.ended or (successes_only and not ep.success):
                continue
            table = self.tables[ep.table]
            gids = self._episode_gids(idx, ep, table)
            if len(gids) != ep.n_steps:
                continue  # partly evicted
            s = table.slot(gids)
            out = {name: table.cols[name][s].copy() for name in (*SCALAR_FIELDS, "action")}
            for k in self.vec_keys:
                out[f"{OBS_PREFIX}{k}"] = table.cols[f"{OBS_PREFIX}{k}"][s].copy()
            for k in self.img_keys:
                out[f"{OBS_PREFIX}{k}"] = self._decompress(k, [self._blob(table, k, int(g)) for g in gids])
            yield ep, out

    # ============================================================================================
    # inspection
    def info(self) -> dict:
        with self.lock:
            eps = [e for e in self.episodes.values()]
            ended = [e for e in eps if e.ended]
            vec_bytes = sum(c.nbytes for t in self.tables.values() for c in t.cols.values())
            return {
                "steps": {"online": self.tables["online"].n, "demo": self.tables["demo"].n},
                "sampleable_by_partition": {p: len(self._live(p)) for p in PARTITIONS},
                "steps_by_source": {"policy": int(self.counts_by_source[0]), "human": int(self.counts_by_source[1]),
                                    "scripted": int(self.counts_by_source[2])},
                "episodes": len(eps), "episodes_committed": len(ended), "episodes_open": len(self._open),
                "episodes_recovered_after_crash": sum(e.truncated_by_recovery for e in eps),
                "episodes_with_interventions": sum(e.interventions > 0 for e in eps),
                "success_rate": (sum(e.success for e in ended) / len(ended)) if ended else 0.0,
                "disk_bytes": self.log.disk_bytes(), "ram_image_bytes": self.ram_image_bytes,
                "ram_table_bytes": int(vec_bytes), "records": self.log.num_records,
                "problems": list(self.log.problems),
            }

    def check_consistency(self) -> None:
        """Raise AssertionError if the in-RAM index disagrees with itself (used by the fault tests)."""
        for idx, ep in self.episodes.items():
            table = self.tables[ep.table]
            mine = self._episode_gids(idx, ep, table)
            steps = table.cols["step"][table.slot(mine)]
            assert np.all(np.diff(steps) == 1), f"episode {ep.episode_id}: steps not consecutive"
            nxt = table.cols["next_gid"][table.slot(mine[:-1])]
            assert np.array_equal(nxt, mine[1:]), f"episode {ep.episode_id}: broken next links"
            if ep.ended and len(mine):
                end = table.slot(mine[-1])
                assert table.cols["terminated"][end] or table.cols["truncated"][end], \
                    f"episode {ep.episode_id} ended without an end flag"
        assert not self._open or all(not self.episodes[self._episode_index[k]].ended for k in self._open)

    def flush(self) -> None:
        with self.lock:
            self.log.flush()

    def close(self) -> None:
        with self.lock:
            self.log.close()
