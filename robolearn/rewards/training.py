"""``robolearn reward train DATASET --out FOLDER``: fit a success classifier (``rewards.classifier``) on the
labelled frames of a LeRobotDataset v3 and report how well it does on episodes it never saw.

Labels: a frame is a success when its image shows success, i.e. the step before it ended in success (the previous
frame's ``next.success``; ``shows_success``). ``robolearn record ... hold_ticks=N`` writes such frames for the N
ticks the expert holds after succeeding; a buffer export marks the last frame of each successful episode (the
moment the person said success). Every other frame is a failure frame; ``record ... near_misses=M`` adds
episodes that end close to success without it, the frames a classifier most easily gets wrong.

Batches are half success frames, half others (drawn with replacement), as success frames are few; so the model's
P(success) is not calibrated to real frames, and the threshold is chosen (``threshold=0``, the default) on
validation episodes split off the training ones (``validation``): the one with the highest precision among those
that keep the validation recall at ``min_recall`` or more (the higher threshold on a tie). Precision first, because
the classifier is a reward: a policy learns to find every state it wrongly calls a success and stops there, while a
missed success only makes the reward a little sparser (docs/algorithms.md, "A learned reward"). The held-out
episodes of the report are never seen by either.
Split: whole episodes are held out (``holdout`` of the successful ones and of the failed ones, at least one
of each), so no held-out frame has a near-duplicate neighbour in training. Loss: binary cross-entropy, Adam,
images shifted by up to ``shift`` pixels (random shift, default 4) in training. State (``state``): the elements of
``observation.state`` whose names match the given patterns, e.g. the joint positions and the tip position
(``*.pos``, ``tip.*``), what a real arm measures; leave out what only a simulator knows (the target's position would
make the classifier a distance test that no camera has to pass). A selected value that is constant in the training
frames (the expert never moved the gripper) is left out and named (``drop_constant_state``). Reported on the held-out
episodes: frame precision and recall at the threshold, and episode precision and recall (an episode is called a
success when any of its frames is).
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from robolearn.policies.encoders import random_shift
from robolearn.rewards.classifier import ClassifierSpec, SuccessClassifier, save_classifier

LABEL = "next.success"


@dataclass
class TrainConfig:
    cameras: tuple[str, ...] = ()      # empty: every camera of the dataset
    state: tuple[str, ...] = ()        # observation.state elements to feed too: names or fnmatch patterns
                                       # ("*.pos", "tip.*"; "*": all); empty: images only
    epochs: int = 15
    batch_size: int = 64
    lr: float = 3e-4
    holdout: float = 0.25              # share of episodes held out, per outcome
    seed: int = 0
    feature_dim: int = 32
    hidden: int = 128
    threshold: float = 0.0             # P(success) that counts as one; 0: chosen on validation episodes
    validation: float = 0.2            # share of the training episodes, per outcome, that choose the threshold
    min_recall: float = 0.97           # the chosen threshold keeps at least this validation recall
    threads: int = 2
    shift: int = 4                     # random-shift augmentation, pixels (0: none)
    encoder: str = "flat"              # flat | keypoints (rewards/classifier.py)

    def __post_init__(self) -> None:
        if not 0.0 < self.holdout < 1.0:
            raise ValueError(f"holdout must be in (0, 1), got {self.holdout}")
        if self.epochs < 1 or self.batch_size < 2:
            raise ValueError("epochs must be >= 1 and batch_size >= 2")
        if not 0.0 <= self.threshold < 1.0 or not 0.0 < self.validation < 1.0:
            raise ValueError(f"threshold must be in [0, 1) (0: chosen on validation episodes) and validation in "
                             f"(0, 1), got {self.threshold}, {self.validation}")
        if self.shift < 0:
            raise ValueError(f"shift must be >= 0 pixels, got {self.shift}")
        if not 0.0 < self.min_recall <= 1.0:
            raise ValueError(f"min_recall must be in (0, 1], got {self.min_recall}")


@dataclass
class LabelledFrames:
    images: dict[str, np.ndarray]      # camera -> uint8 (N, H, W, 3)
    state: np.ndarray                  # (N, S) float32
    label: np.ndarray                  # (N,) bool
    episode: np.ndarray                # (N,) int
    state_names: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.label)


def load_frames(root: Path, cameras: tuple[str, ...] = ()) -> LabelledFrames:
    """Every frame of the LeRobotDataset at ``root`` with its label; ValueError naming what is missing."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/reward", root=root)
    have = [n.removeprefix("observation.images.") for n in ds.features if n.startswith("observation.images.")]
    cameras = tuple(cameras) or tuple(have)
    missing = [c for c in cameras if c not in have]
    if missing or not cameras:
        raise ValueError(f"dataset {root}: no camera(s) {missing or '(none at all)'}; it has {have}")
    if LABEL not in ds.features:
        raise ValueError(f"dataset {root} has no per-frame success label ({LABEL}); record it with robolearn record "
                         "or export a buffer with robolearn buffer export")
    images = {c: [] for c in cameras}
    state, label, episode = [], [], []
    for i in range(len(ds)):
        item = ds[i]
        for c in cameras:
            frame = item[f"observation.images.{c}"].numpy()  # float CHW in [0, 1]
            images[c].append(np.round(np.transpose(frame, (1, 2, 0)) * 255.0).clip(0, 255).astype(np.uint8))
        state.append(np.asarray(item["observation.state"], np.float32) if "observation.state" in item else np.zeros(0))
        label.append(bool(np.asarray(item[LABEL]).reshape(-1)[0]))
        episode.append(int(item["episode_index"]))
    names = ds.features.get("observation.state", {}).get("names") or ()
    return LabelledFrames({c: np.stack(v) for c, v in images.items()}, np.stack(state).astype(np.float32),
                          shows_success(np.array(label), np.array(episode)), np.array(episode),
                          tuple(names) if isinstance(names, list) else ())


def select_state(names: tuple[str, ...], patterns: tuple[str, ...]) -> np.ndarray:
    """Indices of the state elements whose names match any of ``patterns`` (fnmatch), in the state's order;
    ValueError naming a pattern that matches nothing, or patterns on a state without names."""
    if not patterns:
        return np.zeros(0, np.int64)
    if not names:
        raise ValueError("the dataset's observation.state has no element names to select from; use state '*' "
                         "(all of it) or record names with it")
    unmatched = [p for p in patterns if not fnmatch.filter(names, p)]
    if unmatched:
        raise ValueError(f"state pattern(s) {unmatched} match no element of observation.state {list(names)}")
    return np.array([i for i, n in enumerate(names) if any(fnmatch.fnmatchcase(n, p) for p in patterns)])


def shows_success(next_success: np.ndarray, episode: np.ndarray) -> np.ndarray:
    """Whether each frame's image shows success: the step before it ended in success (``next.success`` of the
    previous frame of its episode), as the run asks the classifier about the observation a step leads to. A
    frame's own ``next.success`` is about the state after its action, which can be centimetres from the one its
    image shows. An episode whose only success is its last step (a buffer export: the observation that showed it
    is no frame) keeps that last frame as its success."""
    shown = np.zeros_like(next_success)
    same = episode[1:] == episode[:-1]
    shown[1:] = next_success[:-1] & same
    for e in np.unique(episode):
        mine = np.flatnonzero(episode == e)
        if next_success[mine[-1]] and not shown[mine].any():
            shown[mine[-1]] = True
    return shown


def split_episodes(frames: LabelledFrames, holdout: float, seed: int,
                   within: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) frame indices (of ``within``, default all); whole episodes, ``holdout`` of the successful and of
    the failed ones each."""
    rng = np.random.default_rng(seed)
    within = np.arange(len(frames)) if within is None else within
    episodes = np.unique(frames.episode[within])
    good = np.array([frames.label[frames.episode == e].any() for e in episodes])
    if good.sum() < 2 or (~good).sum() < 2:
        raise ValueError(f"the dataset needs at least 2 episodes with success frames and 2 without ({good.sum()} and "
                         f"{(~good).sum()} here): record successes (hold_ticks) and failures (near_misses)")
    test = []
    for group in (episodes[good], episodes[~good]):
        n = min(len(group) - 1, max(1, round(holdout * len(group))))
        test.extend(rng.choice(group, n, replace=False).tolist())
    in_test = np.isin(frames.episode[within], test)
    return within[~in_test], within[in_test]


def _batch(frames: LabelledFrames, idx: np.ndarray, spec: ClassifierSpec, rng: np.random.Generator | None,
           shift: int = 0):
    obs = {}
    for c in spec.cameras:
        x = torch.from_numpy(frames.images[c][idx])
        obs[c] = random_shift(x, rng, shift) if rng is not None and shift else x
    if spec.state_dim:
        obs["state"] = torch.from_numpy(frames.state[idx])
    return obs


@torch.no_grad()
def probabilities(model: SuccessClassifier, frames: LabelledFrames, idx: np.ndarray, batch: int = 256) -> np.ndarray:
    model.eval()
    out = [torch.sigmoid(model(_batch(frames, idx[i:i + batch], model.spec, None))).numpy()
           for i in range(0, len(idx), batch)]
    return np.concatenate(out) if out else np.zeros(0)


def scores(predicted: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    tp = int(np.sum(predicted & truth))
    fp, fn = int(np.sum(predicted & ~truth)), int(np.sum(~predicted & truth))
    return {"precision": tp / (tp + fp) if tp + fp else 0.0, "recall": tp / (tp + fn) if tp + fn else 0.0,
            "true_positives": tp, "false_positives": fp, "false_negatives": fn, "count": int(len(truth))}


def evaluate(model: SuccessClassifier, frames: LabelledFrames, idx: np.ndarray) -> dict:
    """Frame and episode precision / recall of ``model`` on frames ``idx``."""
    p = probabilities(model, frames, idx)
    predicted, truth = p >= model.spec.threshold, frames.label[idx]
    eps = frames.episode[idx]
    ids = np.unique(eps)
    ep_pred = np.array([predicted[eps == e].any() for e in ids], bool)
    ep_true = np.array([truth[eps == e].any() for e in ids], bool)
    return {"frames": scores(predicted, truth), "episodes": scores(ep_pred, ep_true)}


LOWEST_THRESHOLD = 1e-6  # thresholds are tried in [this, 1 - this]: 0 would call every frame a success


def choose_threshold(p: np.ndarray, truth: np.ndarray, min_recall: float) -> float:
    """The threshold with the highest precision on these frames among those whose recall is at least
    ``min_recall`` (the higher one on a tie). Raises when none keeps it (success frames with P below
    ``LOWEST_THRESHOLD``, the lowest one tried)."""
    if not truth.any():
        raise ValueError("no success frame in the validation episodes to choose a threshold on: record more "
                         "successful episodes, or give a threshold")
    best, best_precision = None, -1.0
    for threshold in np.unique(np.clip(p, LOWEST_THRESHOLD, 1 - LOWEST_THRESHOLD)):
        s = scores(p >= threshold, truth)
        if s["recall"] >= min_recall and s["precision"] >= best_precision:
            best, best_precision = float(threshold), s["precision"]
    if best is None:
        reached = scores(p >= LOWEST_THRESHOLD, truth)["recall"]
        raise ValueError(f"no threshold keeps the validation recall at min_recall={min_recall} (at most "
                         f"{reached:.3f}: the classifier gives some success frames P < {LOWEST_THRESHOLD:g}); "
                         "train longer, or lower --min-recall")
    return best


CONSTANT_STD = 1e-3  # relative to max(1, |mean|): below it a state value counts as constant in the training frames


def drop_constant_state(train_state: np.ndarray, columns: np.ndarray, names: tuple[str, ...]
                        ) -> tuple[np.ndarray, tuple[str, ...], list[tuple[str, float]]]:
    """The selected state ``columns`` (named ``names``) less those constant over the training frames (N, S_all), and
    the (name, value) of each left out. Standardised, such a value's tiny spread would turn any change on the robot
    (a policy that moves the gripper the expert never moved) into hundreds of standard deviations. An unnamed state
    keeps every column: the classifier reads it whole, by position."""
    if not names:
        return columns, names, []
    values = train_state[:, columns]
    std, mean = values.std(0), values.mean(0)
    varies = std >= CONSTANT_STD * np.maximum(1.0, np.abs(mean))
    constant = [(names[i], round(float(mean[i]), 4)) for i in np.flatnonzero(~varies)]
    return columns[varies], tuple(n for n, v in zip(names, varies) if v), constant


def train_classifier(frames: LabelledFrames, config: TrainConfig,
                     progress: Callable[[str], None] = print) -> tuple[SuccessClassifier, dict]:
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    rng = np.random.default_rng(config.seed)
    train, test = split_episodes(frames, config.holdout, config.seed)
    validation = np.zeros(0, np.int64)
    if not config.threshold:
        train, validation = split_episodes(frames, config.validation, config.seed + 1, within=train)
    cameras = tuple(frames.images)
    if config.state == ("*",) and not frames.state_names:  # all of an unnamed state
        columns, names = np.arange(frames.state.shape[1]), ()
    else:
        columns = select_state(frames.state_names, config.state)
        names = tuple(frames.state_names[i] for i in columns)
    columns, names, constant = drop_constant_state(frames.state[train], columns, names)
    for name, value in constant:
        progress(f"state {name} is {value:g} in every training frame: left out (a value that never varies tells "
                 "nothing, and the robot moving it would look like nothing ever seen)")
    frames = replace(frames, state=frames.state[:, columns])
    spec = ClassifierSpec(cameras, tuple(frames.images[cameras[0]].shape[1:]), len(columns), config.feature_dim,
                          config.hidden, config.threshold or 0.5, names, config.encoder)
    model = SuccessClassifier(spec)
    if spec.state_dim:
        model.state_mean.copy_(torch.from_numpy(frames.state[train].mean(0)))
        model.state_std.copy_(torch.from_numpy(frames.state[train].std(0) + 1e-3))
    optim = torch.optim.Adam(model.parameters(), lr=config.lr)
    labels = torch.from_numpy(frames.label.astype(np.float32))
    t0 = time.monotonic()
    positives, negatives = train[frames.label[train]], train[~frames.label[train]]
    half = config.batch_size // 2
    for epoch in range(config.epochs):
        model.train()
        losses = []
        for _ in range(max(1, len(train) // config.batch_size)):
            # balanced batches: success frames are few (a few ticks an episode), so each batch is half of them
            idx = np.concatenate([rng.choice(positives, half), rng.choice(negatives, config.batch_size - half)])
            loss = F.binary_cross_entropy_with_logits(model(_batch(frames, idx, spec, rng, config.shift)), labels[idx])
            optim.zero_grad()
            loss.backward()
            optim.step()
            losses.append(float(loss.detach()))
        progress(f"epoch {epoch + 1}/{config.epochs}: loss {np.mean(losses):.4f} ({time.monotonic() - t0:.0f} s)")
    if not config.threshold:
        model.spec = replace(model.spec, threshold=choose_threshold(probabilities(model, frames, validation),
                                                                    frames.label[validation], config.min_recall))
    held_out = evaluate(model, frames, test)
    report = {"train_frames": int(len(train)), "test_frames": int(len(test)),
              "train_episodes": int(len(np.unique(frames.episode[train]))),
              "test_episodes": int(len(np.unique(frames.episode[test]))),
              "train_success_frames": int(frames.label[train].sum()), "threshold": model.spec.threshold,
              "validation_episodes": int(len(np.unique(frames.episode[validation]))),
              "held_out": held_out,
              "state_left_out_constant": [name for name, _ in constant],
              "train_seconds": time.monotonic() - t0, "config": {k: list(v) if isinstance(v, tuple) else v
                                                                  for k, v in asdict(config).items()}}
    return model, report


def train_and_save(dataset: Path, out: Path, config: TrainConfig, progress: Callable[[str], None] = print) -> dict:
    if (Path(out) / "classifier.json").exists():
        raise FileExistsError(f"{out} already holds a classifier; choose a new folder")
    frames = load_frames(Path(dataset), config.cameras)
    progress(f"{len(frames)} frames, {int(frames.label.sum())} labelled success, "
             f"{len(np.unique(frames.episode))} episodes, cameras {list(frames.images)}")
    model, report = train_classifier(frames, config, progress)
    report["dataset"] = str(dataset)
    save_classifier(model, Path(out), report)
    return report
