"""Batches from the index: who is drawn (uniform, partition mix, age-weighted, episode filters) and what a
draw gathers (one-step transitions, H-step action windows, n-step returns).

Contract: every random choice comes from the one ``rng`` given at construction, in a fixed order per call,
so restoring its state repeats the batches exactly (the learner's exact resume relies on it). ``draw`` runs
under the facade's lock and returns per-table batches whose images are still lz4 blocks; ``assemble`` joins
them and decompresses outside the lock. Steps the online ring overwrote are never returned.

Observation ids (``with_ids``): one int64 per stored observation, the same every time it is drawn and never reused
while the buffer is open: a step's own observation is its table's code times ``ID_STRIDE`` plus its gid (gids count
up and are never reused), an episode's final observation ``FINAL_IDS`` plus the episode's index. What is computed
from an observation alone (a frozen encoder's features) can be kept by its id.
"""

from __future__ import annotations

import numpy as np

from robolearn.buffer.storage import ImageCache
from robolearn.buffer.tables import PARTITIONS, StepIndex, StepTable, table_of
from robolearn.transition import OBS_PREFIX

Picks = list[tuple[str, np.ndarray]]  # (partition, drawn gids of its table)
TABLE_CODES = {"online": 0, "demo": 1}
ID_STRIDE = 1 << 40                        # more steps than a table will ever hold
FINAL_IDS = len(TABLE_CODES) * ID_STRIDE   # episodes' final observations: FINAL_IDS + episode index


class NotEnoughData(Exception):
    """Nothing the request may draw is in the buffer yet. The one sampling failure the learner waits out;
    it is no ``RuntimeError``, so torch's own errors are never mistaken for it."""


class Sampler:
    def __init__(self, index: StepIndex, images: ImageCache, rng: np.random.Generator) -> None:
        self.index = index
        self.images = images
        self.rng = rng
        # episode filters (Hi-ORS): each ended episode's sampleable steps by partition, computed once, and the
        # last filter's result, valid until another episode ends or the ring overwrites another eighth of itself
        self._ep_candidates: dict[int, dict[str, np.ndarray]] = {}
        self._filter_cache: tuple[tuple, Picks] | None = None

    def draw(self, batch_size: int, horizon: int, gamma: float, n_step: int, mix: dict[str, float] | None,
             age_decay: float | None, age_uniform: float, current_version: int | None, success_only: bool,
             min_return: float | None, min_episode_steps: int, with_info: bool,
             with_ids: bool = False) -> list[dict]:
        """One batch per table drawn from (see ``ReplayBuffer.sample`` for the arguments)."""
        if success_only or min_return is not None or min_episode_steps:
            picks = self._pick_filtered(batch_size, success_only, min_return, min_episode_steps)
        else:
            picks = self._pick_mixed(batch_size, mix, age_decay, age_uniform, current_version)
        by_table: dict[str, Picks] = {}
        for part, gids in picks:
            if len(gids):
                by_table.setdefault(table_of(part), []).append((part, gids))
        parts = []
        for name, items in by_table.items():
            gids = np.concatenate([g for _, g in items]) if len(items) > 1 else items[0][1]
            codes = np.concatenate([np.full(len(g), PARTITIONS.index(p), np.uint8) for p, g in items]) \
                if with_info else None
            parts.append(self._gather(name, gids, codes, horizon, n_step, gamma, with_ids))
        return parts

    def assemble(self, parts: list[dict]) -> dict[str, np.ndarray]:
        """Join ``draw``'s per-table batches and decompress their images (lz4 releases the GIL)."""
        if len(parts) == 1:
            out = parts[0]
        else:
            out = {k: (sum((p[k] for p in parts), []) if isinstance(parts[0][k], list) else
                       np.concatenate([p[k] for p in parts])) for k in parts[0]}
        for k in self.index.img_keys:
            for prefix in (OBS_PREFIX, "next_obs."):
                out[f"{prefix}{k}"] = self.images.decompress(k, out.pop(f"{prefix}{k}"))
        return out

    # ============================================================================================
    # who is drawn
    def _pick_mixed(self, b: int, mix: dict[str, float] | None, age_decay: float | None, age_uniform: float,
                    current_version: int | None) -> Picks:
        """``b`` sampleable steps: split over the partitions by ``mix`` (default: by their sizes), then
        uniform within each, or weighted by policy age with ``age_decay``."""
        live = {p: self.index.live(p) for p in PARTITIONS}
        nonempty = [p for p in PARTITIONS if len(live[p])]
        if mix is None and age_decay is None and len(nonempty) == 1:  # the usual case: one partition
            p = nonempty[0]
            return [(p, self._draw_alive(self.index.table(p), live[p], b))]
        counts = self.rng.multinomial(b, self._ratios(live, mix))
        picks = []
        for p, c in zip(PARTITIONS, counts):
            if not c:
                continue
            table = self.index.table(p)
            if age_decay is None:
                picks.append((p, self._draw_alive(table, live[p], c)))
            else:
                picks.append((p, self._draw_by_age(table, live[p], c, age_decay, age_uniform, current_version)))
        return picks

    @staticmethod
    def _ratios(live: dict[str, np.ndarray], mix: dict[str, float] | None) -> np.ndarray:
        """Share of the batch per partition (``PARTITIONS`` order); an empty partition gets none."""
        if mix is None:
            sizes = np.array([len(live[p]) for p in PARTITIONS], float)
            if sizes.sum() == 0:
                raise NotEnoughData("the buffer has no sampleable step yet")
            return sizes / sizes.sum()
        unknown = set(mix) - set(PARTITIONS)
        if unknown:
            raise ValueError(f"unknown partition(s) {sorted(unknown)} in mix; partitions are {PARTITIONS}")
        ratios = np.array([mix.get(p, 0.0) if len(live[p]) else 0.0 for p in PARTITIONS])
        if ratios.sum() <= 0:
            raise NotEnoughData(f"no sampleable step in the partitions of {mix}")
        return ratios / ratios.sum()

    def _draw_by_age(self, table: StepTable, gids: np.ndarray, count: int, age_decay: float, age_uniform: float,
                     current_version: int | None) -> np.ndarray:
        """``count`` draws weighted by age_decay^(version - the step's policy version), a binomial
        ``age_uniform`` share of them uniform instead."""
        gids = gids[table.alive(gids)]
        version = self.index.max_version if current_version is None else current_version
        age = version - table.cols["policy_version"][table.slot(gids)]
        w = np.power(age_decay, np.maximum(age, 0).astype(np.float64))
        n_uniform = self.rng.binomial(count, age_uniform)
        return np.concatenate([gids[self.rng.integers(0, len(gids), n_uniform)],
                               self.rng.choice(gids, size=count - n_uniform, p=w / w.sum())])

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

    # ============================================================================================
    # episode filters (Hi-ORS)
    def _pick_filtered(self, b: int, success_only: bool, min_return: float | None, min_steps: int) -> Picks:
        """``b`` uniform draws over the steps of the ended episodes that pass the filter."""
        for refresh in (False, True):
            cands = self._filtered_gids(success_only, min_return, min_steps, refresh)
            if not sum(len(g) for _, g in cands):
                raise NotEnoughData("no committed episode passes the success/return filter yet")
            sizes = np.array([len(g) for _, g in cands], float)
            counts = self.rng.multinomial(b, sizes / sizes.sum())
            picks = [(p, self._draw_alive(self.index.table(p), g, c)) for (p, g), c in zip(cands, counts)]
            if sum(len(g) for _, g in picks) == b:
                break  # else most cached steps were overwritten since: recompute once
        return picks

    def _filtered_gids(self, success_only: bool, min_return: float | None, min_steps: int,
                       refresh: bool) -> Picks:
        """Sampleable steps of the ended episodes that pass the filter, by partition. Cached: Hi-ORS asks
        with the same threshold for many batches, and its threshold moves only when an episode ends. The
        cache may hold a few steps the ring has since overwritten; ``_draw_alive`` skips them."""
        online = self.index.tables["online"]
        evicted_eighths = max(online.n - online.capacity, 0) // max(online.capacity // 8, 1)
        stamp = (success_only, min_return, min_steps, self.index.episode_changes, evicted_eighths)
        if not refresh and self._filter_cache is not None and self._filter_cache[0] == stamp:
            return self._filter_cache[1]
        by_part: dict[str, list[np.ndarray]] = {p: [] for p in PARTITIONS}
        for idx, ep in self.index.episodes.items():
            if not ep.ended or (success_only and not ep.success) or (min_return is not None and ep.ret < min_return):
                continue
            if ep.n_steps < min_steps:
                continue
            table = self.index.tables[ep.table]
            if not table.holds(ep.last_gid):
                self._ep_candidates.pop(idx, None)  # wholly overwritten
                continue
            if idx not in self._ep_candidates:
                self._ep_candidates[idx] = self._episode_candidates(idx, table)
            for p, gids in self._ep_candidates[idx].items():
                by_part[p].append(gids)
        result = [(p, np.concatenate(v)) for p, v in by_part.items() if v and sum(len(x) for x in v)]
        self._filter_cache = (stamp, result)
        return result

    def _episode_candidates(self, idx: int, table: StepTable) -> dict[str, np.ndarray]:
        """An ended episode's sampleable steps (those with a next observation), by partition."""
        gids = self.index.episode_gids(idx)
        gids = gids[table.cols["has_next"][table.slot(gids)]]
        return self.index.split_by_partition(table, gids)

    # ============================================================================================
    # what a draw gathers
    def _gather(self, table_name: str, start: np.ndarray, part_codes: np.ndarray | None, horizon: int,
                n_step: int, gamma: float, with_ids: bool = False) -> dict:
        """Assemble a batch from ``start`` steps of one table; ``part_codes`` given: add the info fields;
        ``with_ids``: ``obs_id`` and ``next_obs_id`` (B,) int64, the observation ids (module docstring)."""
        index = self.index
        table = index.tables[table_name]
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
            labelled = (index.ep_ended[ep] & ~cols["intervention"][ss]
                        & (cols["step"][ss] > index.ep_last_intervention[ep]))
            out.update({"intervention": cols["intervention"][ss], "action_source": cols["action_source"][ss],
                        "policy_version": cols["policy_version"][ss], "partition": part_codes,
                        "episode_success": index.ep_success[ep], "episode_ended": index.ep_ended[ep],
                        "labelled": labelled})
        succ_slot = table.slot(np.where(has_succ, nxt, last))
        ends = np.flatnonzero(~has_succ)
        ep_of_last = cols["episode_key"][ls[ends]]
        next_rows = table.block[succ_slot] if rows is not None else None
        if with_ids:
            base = TABLE_CODES[table_name] * ID_STRIDE
            out["obs_id"] = base + start
            out["next_obs_id"] = base + np.where(has_succ, nxt, last)
            out["next_obs_id"][ends] = FINAL_IDS + ep_of_last
        for k in index.vec_keys:
            name = f"{OBS_PREFIX}{k}"
            if rows is not None and name in table.layout:
                out[name] = rows[:, table.layout[name]]
                nxt_obs = next_rows[:, table.layout[name]]
            else:
                out[name] = cols[name][ss]
                nxt_obs = cols[name][succ_slot]
            nxt_obs[ends] = index.final_vec[k][ep_of_last]
            out[f"next_obs.{k}"] = nxt_obs
        for k in index.img_keys:
            out[f"{OBS_PREFIX}{k}"] = [self.images.blob(table, k, int(g)) for g in start]
            nb = [self.images.blob(table, k, int(g)) for g in np.where(has_succ, nxt, last)]
            for i, e in zip(ends, ep_of_last):
                nb[i] = index.final_img[k][e] or nb[i]
            out[f"next_obs.{k}"] = nb
        return out

    @staticmethod
    def _walk(table: StepTable, start: np.ndarray, horizon: int, n_step: int, gamma: float):
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
