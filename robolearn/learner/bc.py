"""Behaviour-cloning pretraining of chunk policies from demonstrations.

Demos become (state, chunk) pairs: the state at tick t and the next H actions a_t..a_{t+H-1},
normalised to [-1, 1]; a chunk running past the episode end is padded with the hold action (no
change) and those positions are masked out of the loss. The policy's own ``loss`` does the rest
(for the flow policy: prefix-masked flow matching). For policies that take a mid-inference
observation each pair also keeps where the observations 0..D ticks earlier are (``past_index``, held at
the episode start). A policy that reads more than the state (``policy.observation_keys``, e.g. the VLA's
cameras and instruction) gets those observations too.

Scripted-expert demos can carry perturbation bursts (``Perturbation``, docs/algorithms.md "Demos that show
recovery"): a few ticks of a random action push the arm off the expert's path, the expert's own action stays the
label, and the expert is then seen recovering. A decoy burst instead executes the expert's plan for another goal
(pick_cube_color: another cube) for a few ticks at the start, so the demos show the arm turning from the wrong cube
to the one the instruction names.

DAgger (``OracleLabels``): the states a cloned policy's own mistakes lead to, labelled by the scripted expert's plan
from there, trained on beside the demos.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from robolearn.hardware.task import TaskEnv

if TYPE_CHECKING:  # the actors' loop calls OracleLabels; the learner does not import the actor
    from robolearn.actor.episode import EpisodeResult, StepRecord


@dataclass(frozen=True)
class Burst:
    """One episode's perturbation: its ticks, and either the decoy goal whose expert plan is executed in them or the
    random direction (normalised units, jittered per tick) that is; neither for an episode left alone."""

    ticks: range
    decoy: str | None = None
    direction: np.ndarray | None = None


@dataclass(frozen=True)
class Perturbation:
    """Perturbation bursts in scripted demos: in a ``fraction`` of the episodes, from a tick drawn in ``start``
    [low, high), the robot executes ``ticks`` [low, high] ticks of a random action (one direction drawn uniformly in
    normalised units per burst, plus N(0, ``jitter``) per tick) instead of the expert's. Every tick keeps the
    expert's action as its label (what to do in the state reached); a chunk position whose state was reached through
    a perturbed action is masked out of the loss, since the executed actions before it were not the chunk's.

    ``decoy`` of the episodes (drawn first, in envs with ``decoy_goals()``) get a decoy burst instead: from a tick in
    ``decoy_start``, ``decoy_ticks`` ticks of the expert's plan for another goal (``env.expert_action(goal)``). An
    instruction only decides the first ticks of a clean demo; after them, heading on to the cube already headed for
    predicts the expert as well, and a policy learns to ignore the words. A decoy shows the expert turning back."""

    fraction: float = 1.0
    ticks: tuple[int, int] = (3, 8)
    start: tuple[int, int] = (5, 45)
    jitter: float = 0.2
    decoy: float = 0.0
    decoy_ticks: tuple[int, int] = (5, 20)
    decoy_start: tuple[int, int] = (0, 10)

    def __post_init__(self) -> None:
        for name in ("fraction", "decoy"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"perturbation {name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("ticks", "decoy_ticks"):
            low, high = getattr(self, name)
            if not 1 <= low <= high:
                raise ValueError(f"perturbation {name} must be [low, high] with 1 <= low <= high, got "
                                 f"{getattr(self, name)}")
        for name in ("start", "decoy_start"):
            low, high = getattr(self, name)
            if not 0 <= low < high:
                raise ValueError(f"perturbation {name} must be [low, high) with 0 <= low < high, got "
                                 f"{getattr(self, name)}")
        if self.jitter < 0:
            raise ValueError(f"perturbation jitter must be >= 0, got {self.jitter}")

    def draw(self, rng: np.random.Generator, action_dim: int, decoy_goals: list[str]) -> Burst:
        """One episode's burst (no ticks for an episode left alone). With ``decoy`` 0 the draws are those of random
        bursts alone, and a zero ``fraction`` draws nothing for them."""
        if self.decoy and decoy_goals and rng.random() < self.decoy:
            ticks = _window(rng, self.decoy_start, self.decoy_ticks)
            return Burst(ticks, decoy=decoy_goals[int(rng.integers(len(decoy_goals)))])
        if self.fraction == 0 or rng.random() >= self.fraction:
            return Burst(range(0))
        return Burst(_window(rng, self.start, self.ticks), direction=rng.uniform(-1.0, 1.0, action_dim))


def _window(rng: np.random.Generator, start: tuple[int, int], ticks: tuple[int, int]) -> range:
    """Ticks from a first one in ``start`` [low, high), ``ticks`` [low, high] of them."""
    first = int(rng.integers(*start))
    return range(first, first + int(rng.integers(ticks[0], ticks[1] + 1)))


def mask_after_perturbed(valid: np.ndarray, perturbed: np.ndarray) -> np.ndarray:
    """valid (T, H), perturbed (T,) bool -> valid with position j of row t cleared when any executed action of ticks
    t .. t + j - 1 was perturbed: the state at t + j was not reached by the chunk's own earlier actions."""
    t_len, horizon = valid.shape
    ticks = np.arange(t_len)
    later = np.where(perturbed, ticks, t_len + horizon)
    first = np.minimum.accumulate(later[::-1])[::-1]           # (T,) the first perturbed tick >= t
    keep = np.arange(horizon)[None, :] <= (first - ticks)[:, None]
    return valid * keep


@dataclass
class ChunkDataset:
    states: np.ndarray   # (N, S) float32
    chunks: np.ndarray   # (N, H, A) float32, normalised
    valid: np.ndarray    # (N, H) float32, 1 where the chunk position is a real demo action
    episodes: int
    successes: int
    past_index: np.ndarray | None = None  # (N, D+1) int64: the rows of the observations 0..D ticks earlier
    observations: dict[str, np.ndarray] = field(default_factory=dict)  # other keys than the state, (N, ...)


def past_rows(t_len: int, max_offset: int, start: int = 0) -> np.ndarray:
    """One episode of ``t_len`` ticks whose first row is ``start`` -> (T, max_offset + 1): row t holds the rows of
    ticks t, t - 1 .. t - D, the first tick repeated before the episode start."""
    return start + np.maximum(np.arange(t_len)[:, None] - np.arange(max_offset + 1)[None, :], 0)


def chunk_pairs(states: list[np.ndarray], actions: list[np.ndarray], horizon: int) -> tuple[np.ndarray, ...]:
    """One episode's states (T, S) and normalised actions (T, A) -> states, chunks (T, H, A), valid (T, H)."""
    s, a = np.asarray(states, np.float32), np.asarray(actions, np.float32)
    t_len, dim = a.shape
    padded = np.concatenate([a, np.zeros((horizon, dim), np.float32)])
    idx = np.arange(t_len)[:, None] + np.arange(horizon)[None, :]
    return s, padded[idx], (idx < t_len).astype(np.float32)


def expert_demos(env: TaskEnv, episodes: int, horizon: int, seed: int = 0, action_noise: float = 0.0,
                 past: int = 0, keys: tuple[str, ...] | list[str] = (), log_every: int = 0,
                 perturb: Perturbation | None = None) -> ChunkDataset:
    """Run the env's scripted expert for ``episodes`` seeded episodes and cut them into chunks.

    ``action_noise`` > 0 (normalised units) executes ``expert + N(0, noise)`` while recording the expert's
    own action as the label (DART): the demos then show how to recover from small mistakes, which a
    cloned policy makes. ``past`` = D > 0 also keeps where the observations 0..D ticks before each pair are.
    ``keys``: observations kept besides the state (cameras, the instruction). ``perturb``: bursts of random actions
    or decoy plans the expert recovers from (``Perturbation``); the count of successes is of the episodes as
    executed."""
    if perturb and perturb.decoy and not hasattr(env, "decoy_goals"):
        raise ValueError(f"perturbation decoy={perturb.decoy}: the task {type(env).__name__} has no decoy goals "
                         "(pick_cube_color has: its other cubes)")
    rng = np.random.default_rng(seed)
    all_s, all_c, all_v, all_f, successes, n = [], [], [], [], 0, 0
    kept: dict[str, list[np.ndarray]] = {k: [] for k in keys if k != "state"}
    t0 = time.perf_counter()
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        states, actions, done, info = [], [], False, {}
        burst = perturb.draw(rng, env.action_spec.dim, env.decoy_goals() if perturb.decoy else []) if perturb \
            else Burst(range(0))
        perturbed: list[bool] = []
        while not done:
            action = env.expert_action()
            states.append(obs["state"])
            for k in kept:
                kept[k].append(obs[k])
            label = env.action_spec.to_normalised(action)
            actions.append(label)
            if action_noise > 0:
                noisy = np.clip(label + rng.normal(0.0, action_noise, label.shape), -1, 1)
                action = env.action_spec.to_robot(noisy.astype(np.float32))
            perturbed.append(len(states) - 1 in burst.ticks)
            if perturbed[-1] and burst.decoy is not None:
                action = env.expert_action(burst.decoy)
            elif perturbed[-1]:
                pushed = np.clip(burst.direction + rng.normal(0.0, perturb.jitter, label.shape), -1, 1)
                action = env.action_spec.to_robot(pushed.astype(np.float32))
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        successes += int(bool(info.get("success")))
        s, c, v = chunk_pairs(states, actions, horizon)
        v = mask_after_perturbed(v, np.asarray(perturbed))
        all_s.append(s), all_c.append(c), all_v.append(v)
        if past:
            all_f.append(past_rows(len(s), past, n))
        n += len(s)
        if log_every and (ep + 1) % log_every == 0:
            print(f"  demos {ep + 1}/{episodes}  {n} steps  {successes} successes  ({time.perf_counter() - t0:.0f} s)",
                  flush=True)
    return ChunkDataset(np.concatenate(all_s), np.concatenate(all_c), np.concatenate(all_v), episodes, successes,
                        np.concatenate(all_f) if past else None, {k: np.stack(v) for k, v in kept.items()})


def joined(*parts: ChunkDataset) -> ChunkDataset:
    """One dataset of the pairs of ``parts`` (demos and oracle-labelled rollouts, say), in order; they must keep the
    same observations and no ``past_index`` (its rows would point into another part)."""
    keys = {frozenset(p.observations) for p in parts}
    if len(keys) != 1 or any(p.past_index is not None for p in parts):
        raise ValueError(f"joined: datasets must keep the same observations and no past observations, got "
                         f"{[sorted(p.observations) for p in parts]}, past_index "
                         f"{[p.past_index is not None for p in parts]}")
    return ChunkDataset(np.concatenate([p.states for p in parts]), np.concatenate([p.chunks for p in parts]),
                        np.concatenate([p.valid for p in parts]), sum(p.episodes for p in parts),
                        sum(p.successes for p in parts), None,
                        {k: np.concatenate([p.observations[k] for p in parts]) for k in parts[0].observations})


class OracleLabels:
    """DAgger's data (Ross, Gordon and Bagnell, 2011), gathered as an episode subscriber of the actors' loop
    (``actor.episode.EpisodeLoop``): the policy drives, and before each tick executes (``on_apply``) the env's oracle
    labels the state the policy reached with the scripted expert's next ``horizon`` actions from there
    (``env.expert_chunk``: the expert's plan started from the scene, which is left as it was); ``on_step`` pairs the
    label with the observation the tick's action was chosen on. ``dataset()``: the pairs as ``expert_demos`` makes
    its own (labels normalised, positions after the expert's lifting action or past the time limit masked), to train
    on beside the demos: what to do in the states the policy's own mistakes lead to, which demos never show
    (docs/algorithms.md, "DAgger"). ``keys``: observations kept besides the state."""

    def __init__(self, env: TaskEnv, horizon: int, keys: tuple[str, ...] | list[str] = ()) -> None:
        if not hasattr(env, "expert_chunk"):
            raise ValueError(f"OracleLabels: {type(env).__name__} has no oracle (expert_chunk) to label the states a "
                             "policy reaches; pick_cube and pick_cube_color have")
        self.env, self.horizon = env, horizon
        self._label: np.ndarray | None = None
        self._states: list[np.ndarray] = []
        self._chunks: list[np.ndarray] = []
        self._valid: list[np.ndarray] = []
        self._kept: dict[str, list[np.ndarray]] = {k: [] for k in keys if k != "state"}
        self.episodes = self.successes = 0

    def on_apply(self, episode_id: int, step: int) -> None:  # noqa: ARG002
        self._label = self.env.expert_chunk(self.horizon)  # the scene is the one the tick's observation showed

    def on_step(self, record: StepRecord) -> None:
        if self._label is None:
            raise RuntimeError("OracleLabels.on_step before on_apply: subscribe it to the episode loop")
        label, self._label = self._label, None
        chunk = np.zeros((self.horizon, self.env.action_spec.dim), np.float32)  # normalised 0: the hold action
        chunk[:len(label)] = self.env.action_spec.to_normalised(label)
        self._chunks.append(chunk)
        self._valid.append((np.arange(self.horizon) < len(label)).astype(np.float32))
        self._states.append(record.obs["state"])
        for k, kept in self._kept.items():
            kept.append(record.obs[k])

    def on_episode_end(self, result: EpisodeResult) -> None:
        self.episodes += 1
        self.successes += int(result.success)

    def dataset(self) -> ChunkDataset:
        if not self._states:
            raise ValueError("OracleLabels.dataset: no tick labelled yet")
        return ChunkDataset(np.asarray(self._states, np.float32), np.stack(self._chunks), np.stack(self._valid),
                            self.episodes, self.successes, None, {k: np.stack(v) for k, v in self._kept.items()})


class _Rows:
    """A ChunkDataset's arrays as tensors; ``batch(rows)`` -> the policy's ``loss`` arguments for those rows: the
    observation (the state (B, S), or a dict of it and ``data.observations`` when there are any), the chunks
    (B, H, A), and the keyword arguments (``valid``, and ``past`` for a mid-inference policy)."""

    def __init__(self, data: ChunkDataset) -> None:
        self.states = torch.as_tensor(data.states)
        self.chunks = torch.as_tensor(data.chunks)
        self.valid = torch.as_tensor(data.valid)
        self.past_index = None if data.past_index is None else torch.as_tensor(data.past_index)
        self.others = {k: torch.as_tensor(v) for k, v in data.observations.items()}

    def __len__(self) -> int:
        return len(self.states)

    def observation(self, rows: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        if not self.others:
            return self.states[rows]
        return {"state": self.states[rows], **{k: v[rows] for k, v in self.others.items()}}

    def batch(self, rows: torch.Tensor) -> tuple[torch.Tensor | dict[str, torch.Tensor], torch.Tensor, dict]:
        extra = {} if self.past_index is None else {"past": self.observation(self.past_index[rows])}
        return self.observation(rows), self.chunks[rows], {"valid": self.valid[rows], **extra}


@dataclass(frozen=True)
class Validation:
    """Demos the policy never trains on, scored during ``train_bc``: the mean loss over ``batches`` batches of
    ``batch_size`` rows (the same rows each time, drawn with ``seed``), in eval mode (no augmentation), with the same
    flow noise each time, so that one run's scores compare with each other; the training's random streams are
    untouched (the policy trains as it would without it)."""
    data: ChunkDataset
    batches: int = 20
    batch_size: int = 128
    seed: int = 123

    def __post_init__(self) -> None:
        if self.batches < 1 or self.batch_size < 1:
            raise ValueError(f"Validation: batches and batch_size must be >= 1, got {self.batches}, {self.batch_size}")
        if len(self.data.states) == 0:
            raise ValueError("Validation: the validation demos have no frames")


def held_out_loss(policy: torch.nn.Module, validation: Validation) -> float:
    """The mean of the policy's loss over the validation's fixed batches, in eval mode, with the flow noise (and any
    other draw) from torch's generators seeded with ``validation.seed`` inside a fork: the CPU's and those of the
    CUDA devices the policy is on; the caller's random state and the policy's mode are restored after."""
    rows = _Rows(validation.data)  # tensors sharing the arrays' memory: no copy
    batches = torch.randint(0, len(rows), (validation.batches, validation.batch_size),
                            generator=torch.Generator().manual_seed(validation.seed))
    cuda = sorted({p.device.index or 0 for p in policy.parameters() if p.is_cuda})
    was_training = policy.training
    policy.eval()
    try:
        with torch.random.fork_rng(devices=cuda), torch.no_grad():
            torch.random.default_generator.manual_seed(validation.seed)
            for device in cuda:  # only the forked ones: torch.manual_seed would reseed every device unrestored
                torch.cuda.default_generators[device].manual_seed(validation.seed)
            losses = []
            for b in batches:
                observation, chunks, kwargs = rows.batch(b)
                losses.append(policy.loss(observation, chunks, **kwargs).mean().item())
    finally:
        policy.train(was_training)
    return float(np.mean(losses))


@dataclass(frozen=True)
class BCHistory:
    """What ``train_bc`` measured: the training loss per step, and with a ``Validation`` its loss on the held-out
    demos at each log point (and at the end) as (steps done, loss)."""
    losses: list[float]
    validation: list[tuple[int, float]] = field(default_factory=list)


def train_bc(policy: torch.nn.Module, data: ChunkDataset, steps: int, batch_size: int = 256, lr: float = 1e-3,
             seed: int = 0, log_every: int = 0, validation: Validation | None = None) -> BCHistory:
    """Adam on the policy's per-example ``loss(observation, chunk, valid=...)`` over ``data``; with ``validation``,
    the loss on its held-out demos every ``log_every`` steps and at the end (only at the end when 0): where the
    policy starts to overfit its demos. Returns the ``BCHistory``; the policy is left in eval mode."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    train = _Rows(data)
    opt = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=lr * 0.05)
    policy.train()
    losses, scores, t0 = [], [], time.perf_counter()
    for step in range(steps):
        idx = torch.randint(0, len(train), (batch_size,), generator=gen)
        observation, chunks, kwargs = train.batch(idx)
        loss = policy.loss(observation, chunks, **kwargs).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        log_now = bool(log_every) and (step + 1) % log_every == 0
        if validation is not None and (log_now or step + 1 == steps):
            scores.append((step + 1, held_out_loss(policy, validation)))
        if log_now:
            said = f"  held-out loss {scores[-1][1]:.4f}" if validation is not None else ""
            print(f"  bc step {step + 1}/{steps}  loss {np.mean(losses[-log_every:]):.4f}{said}  "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    policy.eval()
    return BCHistory(losses, scores)
