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

Layout: this module is the thread-safe facade (one re-entrant ``lock`` around every read and write of the
index); ``storage`` (the log, start-up rebuild, crash recovery, image cache), ``tables`` (step tables,
episodes, partitions), ``samplers`` (who is drawn, what a draw gathers) and ``images`` (the lz4 form of
camera frames) do the work.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from robolearn.buffer.images import image_shapes
from robolearn.buffer.log import SegmentLog
from robolearn.buffer.samplers import Sampler
from robolearn.buffer.storage import Storage
from robolearn.buffer.tables import PARTITIONS, Episode, EpisodeGap, StepIndex, StepTable
from robolearn.specs import ActionSpec, ObservationSpec, SpecError
from robolearn.transition import OBS_PREFIX, SCALAR_FIELDS, validate_batch

__all__ = ["PARTITIONS", "Episode", "EpisodeGap", "ReplayBuffer"]  # PARTITIONS decodes a batch's ``partition`` codes


class ReplayBuffer:
    def __init__(self, directory: str | Path, obs_spec: ObservationSpec, action_spec: ActionSpec,
                 capacity: int = 1_000_000, ram_budget_mb: float = 4096.0, fsync: str = "batched",
                 fsync_interval_s: float = 1.0, segment_mb: float = 256.0, seed: int = 0,
                 read_only: bool = False) -> None:
        """``read_only``: inspect a buffer another process may be writing (no recovery, no appends)."""
        self.obs_spec, self.action_spec = obs_spec, action_spec
        self.log = SegmentLog(directory, fsync, fsync_interval_s, int(segment_mb * 1024 * 1024), read_only)
        self._index = StepIndex(obs_spec, action_spec.dim, capacity)
        self._storage = Storage(self.log, self._index, image_shapes(obs_spec), int(ram_budget_mb * 1024 * 1024))
        self.rng = np.random.default_rng(seed)  # shared with the sampler: restoring its state repeats batches
        self.lock = threading.RLock()
        self._sampler = Sampler(self._index, self._storage.images, self.rng)
        self.recovered_episodes: list[tuple[str, int]] = self._storage.load()

    @property
    def tables(self) -> dict[str, StepTable]:
        """``online`` (the ring) and ``demo`` step tables."""
        return self._index.tables

    @property
    def episodes(self) -> dict[int, Episode]:
        return self._index.episodes

    @property
    def ram_image_bytes(self) -> int:
        return self._storage.images.ram_bytes

    # ============================================================================================
    # adding
    def add(self, robot_id: str, arrays: dict[str, np.ndarray], partition: str = "online",
            batch_key: tuple[str, int] | None = None) -> int:
        """Validate, persist (the acknowledgement point), then index one batch of consecutive steps of one
        episode (the wire's columnar batch, images raw uint8). Returns the number of steps added.
        ``batch_key``: (actor, batch number) of a batch from an actor, remembered (``has_batch``)."""
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
            self._index.check_continues(key, int(arrays["step"][0]))
        record = self._storage.compress(arrays)  # outside the lock: lz4 releases the GIL
        with self.lock:
            self._storage.append(robot_id, record, partition, batch_key)
        return n

    def close_episode(self, robot_id: str, episode_id: int, partition: str = "online") -> bool:
        """End an episode its actor cut (it crashed mid-episode; a restart sent what it had journaled):
        kept up to its last step, marked truncated, durably. False (nothing done) if it was not open."""
        with self.lock:
            if (robot_id, episode_id, partition) not in self._index.open_episodes:
                return False
            self._storage.close_episode((robot_id, episode_id, partition))
            return True

    def has_batch(self, actor: str, batch: int) -> bool:
        """Whether this actor's batch number ``batch`` is stored (a re-sent copy is then a duplicate)."""
        with self.lock:
            return (actor, batch) in self._storage.batches

    # ============================================================================================
    # sampling
    def episode(self, robot_id: str, episode_id: int, partition: str = "online") -> Episode | None:
        """The bookkeeping of one episode (steps, return, success, interventions), None if unknown."""
        with self.lock:
            return self._index.episode(robot_id, episode_id, partition)

    def partition_sizes(self) -> dict[str, int]:
        with self.lock:
            return self._index.partition_sizes()

    def sample(self, batch_size: int, horizon: int = 1, gamma: float = 0.99, n_step: int | None = None,
               mix: dict[str, float] | None = None, age_decay: float | None = None, age_uniform: float = 0.5,
               current_version: int | None = None, success_only: bool = False,
               min_return: float | None = None, min_episode_steps: int = 0,
               with_info: bool = False, with_ids: bool = False) -> dict[str, np.ndarray]:
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
        batches leave them out. With ``with_ids``: ``obs_id`` and ``next_obs_id`` (B,) int64, ids of the two
        observations, the same each time one is drawn (``buffer.samplers``, "Observation ids").
        """
        n_step = horizon if n_step is None else n_step
        with self.lock:
            parts = self._sampler.draw(batch_size, horizon, gamma, n_step, mix, age_decay, age_uniform,
                                       current_version, success_only, min_return, min_episode_steps, with_info,
                                       with_ids)
        return self._sampler.assemble(parts)  # outside the lock (lz4 releases the GIL)

    # ============================================================================================
    # reading whole episodes (export, inspection)
    def iter_episodes(self, successes_only: bool = False) -> Iterator[tuple[Episode, dict[str, np.ndarray]]]:
        """Committed episodes still fully in the buffer, as columnar arrays (images decompressed)."""
        for idx, ep in list(self.episodes.items()):
            if not ep.ended or (successes_only and not ep.success):
                continue
            table = self.tables[ep.table]
            gids = self._index.episode_gids(idx)
            if len(gids) != ep.n_steps:
                continue  # partly evicted
            s = table.slot(gids)
            out = {name: table.cols[name][s].copy() for name in (*SCALAR_FIELDS, "action")}
            for k in self._index.vec_keys:
                out[f"{OBS_PREFIX}{k}"] = table.cols[f"{OBS_PREFIX}{k}"][s].copy()
            for k in self._index.img_keys:
                out[f"{OBS_PREFIX}{k}"] = self._decompress(k, [self._blob(table, k, int(g)) for g in gids])
            yield ep, out

    def _blob(self, table: StepTable, key: str, gid: int) -> bytes:
        """Step ``gid``'s ``key`` frame as its lz4 block (the durability tests read frames through this pair)."""
        return self._storage.images.blob(table, key, gid)

    def _decompress(self, key: str, blobs: Sequence[bytes]) -> np.ndarray:
        return self._storage.images.decompress(key, blobs)

    # ============================================================================================
    # inspection
    def info(self) -> dict:
        with self.lock:
            eps = list(self.episodes.values())
            ended = [e for e in eps if e.ended]
            vec_bytes = sum(c.nbytes for t in self.tables.values() for c in t.cols.values())
            counts = self._index.counts_by_source
            return {
                "steps": {"online": self.tables["online"].n, "demo": self.tables["demo"].n},
                "sampleable_by_partition": self._index.partition_sizes(),
                "steps_by_source": {"policy": int(counts[0]), "human": int(counts[1]), "scripted": int(counts[2])},
                "episodes": len(eps), "episodes_committed": len(ended),
                "episodes_open": len(self._index.open_episodes),
                "episodes_recovered_after_crash": sum(e.truncated_by_recovery for e in eps),
                "episodes_with_interventions": sum(e.interventions > 0 for e in eps),
                "success_rate": (sum(e.success for e in ended) / len(ended)) if ended else 0.0,
                "disk_bytes": self.log.disk_bytes(), "ram_image_bytes": self.ram_image_bytes,
                "ram_table_bytes": int(vec_bytes), "records": self.log.num_records,
                "problems": list(self.log.problems),
            }

    def check_consistency(self) -> None:
        """Raise AssertionError if the in-RAM index disagrees with itself (used by the fault tests)."""
        self._index.check_consistency()

    def flush(self) -> None:
        with self.lock:
            self.log.flush()

    def close(self) -> None:
        with self.lock:
            self.log.close()
