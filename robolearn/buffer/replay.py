"""The learner's in-RAM replay of a run's transitions, with n-step / chunk windows.

Steps are stored in arrival order; ``next_index`` links each step to the following step of the same
(robot, episode), so episodes from several actors may interleave. A step is sampleable once its
next observation is known: the next step arrived, or the episode ended with a ``final_obs``.

Sampling a window of H steps from step i (H = chunk horizon; H = 1 is plain SAC) returns
``action`` = a_{i:i+H} (padded with the last action after an episode end), ``reward`` =
sum_k gamma^k r_{i+k}, ``discount`` = gamma^n (n steps taken) or 0 after termination, and
``next_obs`` = the observation after the window.
"""

from __future__ import annotations

import numpy as np

from robolearn.transition import FINAL_OBS_PREFIX, OBS_PREFIX


class Replay:
    def __init__(self, obs_dim: int, action_dim: int, capacity: int, seed: int = 0) -> None:
        self.capacity = capacity
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), np.float32)
        self.action = np.zeros((capacity, action_dim), np.float32)
        self.reward = np.zeros(capacity, np.float32)
        self.terminated = np.zeros(capacity, bool)
        self.ended = np.zeros(capacity, bool)
        self.has_next = np.zeros(capacity, bool)
        self.next_index = np.full(capacity, -1, np.int64)
        self.episode_key = np.full(capacity, -1, np.int64)
        self.step = np.zeros(capacity, np.int32)
        self.policy_version = np.zeros(capacity, np.int64)
        self.size = 0
        self.total_added = 0
        self._last_of_episode: dict[tuple[str, int], int] = {}
        self._episode_keys: dict[tuple[str, int], int] = {}
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, robot_id: str, arrays: dict[str, np.ndarray], action_normalised: np.ndarray) -> None:
        """Add one validated columnar batch (one robot, consecutive steps of one episode)."""
        n = len(action_normalised)
        state = arrays[f"{OBS_PREFIX}state"]
        for j in range(n):
            i = self.total_added % self.capacity
            ep = (robot_id, int(arrays["episode_id"][j]))
            key = self._episode_keys.setdefault(ep, len(self._episode_keys))
            prev = self._last_of_episode.get(ep)
            if prev is not None and self.episode_key[prev] == key:
                self.next_obs[prev] = state[j]
                self.has_next[prev] = True
                self.next_index[prev] = i
            self.obs[i] = state[j]
            self.action[i] = action_normalised[j]
            self.reward[i] = arrays["reward"][j]
            self.terminated[i] = arrays["terminated"][j]
            self.ended[i] = arrays["terminated"][j] or arrays["truncated"][j]
            self.has_next[i] = False
            self.next_index[i] = -1
            self.episode_key[i] = key
            self.step[i] = arrays["step"][j]
            self.policy_version[i] = arrays["policy_version"][j]
            self._last_of_episode[ep] = i
            self.total_added += 1
            self.size = min(self.size + 1, self.capacity)
        if self.ended[i]:
            self.next_obs[i] = arrays[f"{FINAL_OBS_PREFIX}state"]
            self.has_next[i] = True
            del self._last_of_episode[ep]

    def sample(self, batch_size: int, horizon: int, gamma: float) -> dict[str, np.ndarray]:
        """A batch of H-step windows starting at uniformly drawn sampleable steps."""
        starts = self._draw_starts(batch_size, horizon)
        action = np.empty((batch_size, horizon, self.action.shape[1]), np.float32)
        reward = np.zeros(batch_size, np.float32)
        discount = np.ones(batch_size, np.float32)
        alive = np.ones(batch_size, bool)  # window not yet past an episode end
        last = starts.copy()
        cur = starts.copy()
        for k in range(horizon):
            action[:, k] = self.action[np.where(alive, cur, last)]
            reward += np.where(alive, discount * self.reward[cur], 0.0)
            discount = np.where(alive, discount * gamma, discount)
            last = np.where(alive, cur, last)
            alive &= ~self.ended[cur]
            if k + 1 < horizon:
                cur = np.where(alive, self.next_index[cur], cur)
        discount = np.where(self.terminated[last], 0.0, discount).astype(np.float32)
        return {"obs": self.obs[starts], "action": action.reshape(batch_size, -1), "reward": reward,
                "discount": discount, "next_obs": self.next_obs[last]}

    def _window_ready(self, idx: np.ndarray, horizon: int) -> np.ndarray:
        ok = self.has_next[idx].copy()
        cur = idx.copy()
        for _ in range(horizon - 1):
            go_on = ok & ~self.ended[cur]
            nxt = self.next_index[cur]
            ok &= ~go_on | ((nxt >= 0) & self.has_next[np.maximum(nxt, 0)])
            cur = np.where(go_on & (nxt >= 0), nxt, cur)
        return ok

    def _draw_starts(self, batch_size: int, horizon: int) -> np.ndarray:
        out = np.empty(0, np.int64)
        for _ in range(100):
            idx = self.rng.integers(0, self.size, size=2 * batch_size)
            out = np.concatenate([out, idx[self._window_ready(idx, horizon)]])
            if len(out) >= batch_size:
                return out[:batch_size]
        raise RuntimeError("replay has too few complete windows to sample from")

    def num_sampleable(self) -> int:
        return int(self.has_next[: self.size].sum())
