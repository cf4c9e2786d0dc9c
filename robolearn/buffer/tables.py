"""The in-RAM index of every stored step: step tables, episode records, and the sampleable steps by partition.

Contract: ``StepIndex`` is derived from the segment log alone (``storage`` feeds it every record in log
order), so it never disagrees with the disk. Steps live in one of two tables: ``online`` (a ring of
``capacity`` steps, the oldest overwritten first) or ``demo`` (grows, never evicted). Sampling reads three
partitions of them: ``online`` (robot steps), ``intervention`` (online steps a human drove), ``demo``.
``table_of`` and ``StepIndex.split_by_partition`` are the one place that maps between the two.

A step becomes sampleable once its next observation is known: when the following step of its episode
arrives, or when the record ending the episode brings the final observation. The index holds images only
as references (their lz4 blocks and where they lie on disk); ``storage`` fills those in. Not thread-safe:
the ``ReplayBuffer`` facade holds its lock around every call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from robolearn.buffer.images import Z_PREFIX, is_image
from robolearn.specs import ObservationSpec, SpecError
from robolearn.transition import FINAL_OBS_PREFIX, OBS_PREFIX, SCALAR_FIELDS


class EpisodeGap(SpecError):
    """A batch does not follow the last stored step of its episode. From a live actor this means an earlier
    batch has not arrived yet (re-sends after a reconnect): the batch is taken again later, not rejected."""

PARTITIONS = ("online", "intervention", "demo")

EpisodeKey = tuple[str, int, str]  # (robot id, episode id, partition it was added to)


def table_of(partition: str) -> str:
    """The table holding a partition's steps: demos have their own, everything else is in the online ring."""
    return "demo" if partition == "demo" else "online"


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

    def holds(self, gid: int) -> bool:
        """Whether step ``gid`` is still in the table (not evicted, already added)."""
        return bool(self.alive(np.array([gid]))[0])

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


# storage's hook into ``StepIndex.insert``: (table, the batch's slots, those of them that held older steps)
PlaceImages = Callable[[StepTable, np.ndarray, np.ndarray], None]


class StepIndex:
    """Both step tables, every episode, and the sampleable steps of each partition.

    By episode index (the key of ``episodes``: 0, 1, ... in order of creation) it also keeps arrays for
    vectorised lookups while sampling: ``ep_success``, ``ep_ended``, ``ep_last_intervention`` (step index of
    its last intervention step, -1 if none) and the final observation (``final_vec``, and ``final_img`` as
    lz4 blocks)."""

    def __init__(self, obs_spec: ObservationSpec, action_dim: int, capacity: int) -> None:
        self.tables = {"online": StepTable(obs_spec, action_dim, capacity, ring=True),
                       "demo": StepTable(obs_spec, action_dim, capacity, ring=False)}
        self.vec_keys = self.tables["online"].vec_keys
        self.img_keys = self.tables["online"].img_keys
        self.episodes: dict[int, Episode] = {}
        self._episode_index: dict[EpisodeKey, int] = {}
        self.open_episodes: dict[EpisodeKey, int] = {}  # episode key -> last gid, for episodes not ended yet
        # per partition: gids (of its table) that are sampleable, in the order they became so
        self._part_gids = {p: np.zeros(1024, np.int64) for p in PARTITIONS}
        self._part_len = dict.fromkeys(PARTITIONS, 0)
        self._part_head = dict.fromkeys(PARTITIONS, 0)
        self.counts_by_source = np.zeros(3, np.int64)
        self.ep_success = np.zeros(1024, bool)
        self.ep_ended = np.zeros(1024, bool)
        self.ep_last_intervention = np.full(1024, -1, np.int64)
        self.final_vec = {k: np.zeros((1024, *obs_spec.arrays[k].shape), obs_spec.arrays[k].dtype)
                          for k in self.vec_keys}
        self.final_img: dict[str, list[bytes | None]] = {k: [None] * 1024 for k in self.img_keys}
        self.max_version = 0
        self.episode_changes = 0  # bumped when an episode ends or reopens: episode filters cache on it

    # ============================================================================================
    # lookups
    def table(self, partition: str) -> StepTable:
        return self.tables[table_of(partition)]

    def episode(self, robot_id: str, episode_id: int, partition: str) -> Episode | None:
        idx = self._episode_index.get((robot_id, episode_id, partition))
        return None if idx is None else self.episodes[idx]

    def episode_gids(self, idx: int) -> np.ndarray:
        """The gids of episode ``idx`` still in its table, in order. They span [first_gid, last_gid], which
        may interleave with other robots' episodes."""
        ep = self.episodes[idx]
        table = self.tables[ep.table]
        gids = np.arange(ep.first_gid, ep.last_gid + 1)
        gids = gids[table.alive(gids)]
        return gids[table.cols["episode_key"][table.slot(gids)] == idx]

    def split_by_partition(self, table: StepTable, gids: np.ndarray) -> dict[str, np.ndarray]:
        """Steps of ``table`` by the partition they are sampled from: intervention steps are online steps
        a human drove (flagged per step), so only the online table splits."""
        if table is self.tables["demo"]:
            return {"demo": gids}
        flag = table.cols["intervention"][table.slot(gids)]
        return {"online": gids[~flag], "intervention": gids[flag]}

    def live(self, part: str) -> np.ndarray:
        """The sampleable gids of partition ``part`` still in its table, oldest first."""
        table = self.table(part)
        arr, head, n = self._part_gids[part], self._part_head[part], self._part_len[part]
        low = table.n - table.capacity if table.ring else 0
        while head < n and arr[head] < low:
            head += 1  # evicted by age (the oldest come first)
        self._part_head[part] = head
        return arr[head:n]

    def partition_sizes(self) -> dict[str, int]:
        return {p: len(self.live(p)) for p in PARTITIONS}

    # ============================================================================================
    # adding
    def check_continues(self, key: EpisodeKey, first_step: int) -> None:
        """A batch must continue its episode where the previous one stopped (no gaps, nothing after the end)."""
        idx = self._episode_index.get(key)
        if idx is None:
            if first_step != 0:
                raise EpisodeGap(f"episode {key[1]} of {key[0]} starts at step {first_step}, not 0; "
                                 "steps are not consecutive")
            return
        ep = self.episodes[idx]
        if ep.ended and not ep.truncated_by_recovery:  # closed at a recovery: its actor may still continue it
            raise SpecError(f"episode {key[1]} of {key[0]} has already ended")
        table = self.tables[ep.table]
        last_step = int(table.cols["step"][table.slot(ep.last_gid)])
        if first_step > last_step + 1:
            raise EpisodeGap(f"episode {key[1]} of {key[0]}: step {first_step} follows step {last_step}; "
                             "steps are not consecutive")
        if first_step <= last_step:  # steps stored already (a re-sent batch the de-duplication missed)
            raise SpecError(f"episode {key[1]} of {key[0]}: step {first_step} is stored already (up to {last_step})")

    def insert(self, robot_id: str, batch: dict[str, np.ndarray], partition: str, place_images: PlaceImages) -> None:
        """Index one stored batch of consecutive steps. ``batch`` holds its image fields compressed; the steps'
        images are left to ``place_images``, called once the other columns are written and before the steps
        become visible, with the slots that held older steps (a ring overwriting its oldest)."""
        n = len(batch["action"])
        key = (robot_id, int(batch["episode_id"][0]), partition)
        table_name = table_of(partition)
        table = self.tables[table_name]
        table.reserve(n)
        ep_idx = self._episode_index.get(key)
        if ep_idx is None:
            ep_idx = self._new_episode(key, table_name, table.n)
        ep = self.episodes[ep_idx]
        if ep.truncated_by_recovery:
            self._reopen(key, ep_idx)
        cols = table.cols
        gids = np.arange(table.n, table.n + n)
        slots = table.slot(gids)
        overwritten = slots[cols["gid"][slots] >= 0] if table.ring else slots[:0]  # only a ring reuses slots
        cols["gid"][slots] = gids
        for name in SCALAR_FIELDS:
            cols[name][slots] = batch[name]
        cols["action"][slots] = batch["action"]
        cols["episode_key"][slots] = ep_idx
        cols["next_gid"][slots[:-1]] = gids[1:]
        cols["next_gid"][slots[-1]] = -1
        cols["has_next"][slots] = False
        for k in self.vec_keys:
            cols[f"{OBS_PREFIX}{k}"][slots] = batch[f"{OBS_PREFIX}{k}"]
        place_images(table, slots, overwritten)
        prev = self.open_episodes.get(key)
        if prev is not None and table.holds(prev):
            cols["next_gid"][table.slot(prev)] = gids[0]
            self._make_sampleable(table, np.array([prev]))
        self._make_sampleable(table, gids[:-1])
        table.n += n
        ep.n_steps += n
        ep.ret += float(batch["reward"].sum())
        ep.interventions += int(batch["intervention"].sum())
        if batch["intervention"].any():
            self.ep_last_intervention[ep_idx] = int(batch["step"][np.flatnonzero(batch["intervention"])[-1]])
        self.counts_by_source += np.bincount(batch["action_source"], minlength=3)[:3]
        self.max_version = max(self.max_version, int(batch["policy_version"].max()))
        ep.last_gid = int(gids[-1])
        if batch["terminated"][-1] or batch["truncated"][-1]:
            ep.success = bool(batch["success"][-1])
            self.ep_success[ep_idx] = ep.success
            self._mark_ended(ep_idx)
            for k in self.vec_keys:
                self.final_vec[k][ep_idx] = batch[f"{FINAL_OBS_PREFIX}{k}"]
            for k in self.img_keys:
                self.final_img[k][ep_idx] = batch[f"{Z_PREFIX}{FINAL_OBS_PREFIX}{k}"].tobytes()
            self._make_sampleable(table, gids[-1:])
            self.open_episodes.pop(key, None)
        else:
            self.open_episodes[key] = int(gids[-1])

    def close_open_episode(self, key: EpisodeKey) -> None:
        """End an episode a crash cut (or one whose next record was lost): keep its steps, mark the last one
        truncated. That step stays unsampleable: its next observation was never stored."""
        last = self.open_episodes.pop(key, None)
        if last is None:
            return
        idx = self._episode_index[key]
        table = self.tables[self.episodes[idx].table]
        if table.holds(last):
            table.cols["truncated"][table.slot(last)] = True
        self.episodes[idx].truncated_by_recovery = True
        self._mark_ended(idx)

    def _reopen(self, key: EpisodeKey, idx: int) -> None:
        """The actor of an episode closed at a learner's recovery goes on with it (it outlived the learner):
        its last step is no longer the end, and links to the steps that follow."""
        ep = self.episodes[idx]
        table = self.tables[ep.table]
        if table.holds(ep.last_gid):
            table.cols["truncated"][table.slot(ep.last_gid)] = False
        ep.ended = ep.truncated_by_recovery = False
        self.ep_ended[idx] = False
        self.episode_changes += 1
        self.open_episodes[key] = ep.last_gid

    def _new_episode(self, key: EpisodeKey, table_name: str, first_gid: int) -> int:
        idx = len(self.episodes)
        self._episode_index[key] = idx
        self.episodes[idx] = Episode(key[0], key[1], key[2], table_name, first_gid=first_gid)
        if idx >= len(self.ep_success):  # per-episode arrays grow together
            self.ep_success = np.concatenate([self.ep_success, np.zeros_like(self.ep_success)])
            self.ep_ended = np.concatenate([self.ep_ended, np.zeros_like(self.ep_ended)])
            self.ep_last_intervention = np.concatenate(
                [self.ep_last_intervention, np.full_like(self.ep_last_intervention, -1)])
            for k in self.vec_keys:
                self.final_vec[k] = np.concatenate([self.final_vec[k], np.zeros_like(self.final_vec[k])])
            for k in self.img_keys:
                self.final_img[k].extend([None] * (len(self.ep_success) - len(self.final_img[k])))
        return idx

    def _mark_ended(self, idx: int) -> None:
        # the three records of "ended" move together: the episode, the sampling lookup, the filter-cache stamp
        self.episodes[idx].ended = True
        self.ep_ended[idx] = True
        self.episode_changes += 1

    def _make_sampleable(self, table: StepTable, gids: np.ndarray) -> None:
        """Mark steps whose next observation is now known, and file them under their partition."""
        if not len(gids):
            return
        table.cols["has_next"][table.slot(gids)] = True
        for part, g in self.split_by_partition(table, gids).items():
            arr, n = self._part_gids[part], self._part_len[part]
            if n + len(g) > len(arr):
                arr = self._part_gids[part] = np.concatenate([arr, np.zeros(max(len(arr), len(g)), np.int64)])
            arr[n:n + len(g)] = g
            self._part_len[part] = n + len(g)

    # ============================================================================================
    # inspection
    def check_consistency(self) -> None:
        """Raise AssertionError if the index disagrees with itself (used by the fault tests)."""
        for idx, ep in self.episodes.items():
            table = self.tables[ep.table]
            mine = self.episode_gids(idx)
            steps = table.cols["step"][table.slot(mine)]
            assert np.all(np.diff(steps) == 1), f"episode {ep.episode_id}: steps not consecutive"
            nxt = table.cols["next_gid"][table.slot(mine[:-1])]
            assert np.array_equal(nxt, mine[1:]), f"episode {ep.episode_id}: broken next links"
            if ep.ended and len(mine):
                end = table.slot(mine[-1])
                assert table.cols["terminated"][end] or table.cols["truncated"][end], \
                    f"episode {ep.episode_id} ended without an end flag"
        assert not self.open_episodes or all(not self.episodes[self._episode_index[k]].ended
                                             for k in self.open_episodes)
