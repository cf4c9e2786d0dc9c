"""LeRobotDataset v3 in and out of the replay buffer.

Feature names follow lerobot: ``observation.state`` <-> obs ``state``, ``observation.images.<cam>``
<-> obs ``<cam>`` (uint8 HWC here, stored as images, not video, so values round-trip exactly),
other ``observation.<key>`` <-> obs ``<key>``, ``action``, ``next.reward``, ``next.done``,
``next.success`` and ``complementary_info.is_intervention`` (lerobot's HIL-SERL naming).

A text observation (an instruction, ``robolearn.specs.is_text``) is not a feature: it is the frame's lerobot
``task`` string, the way lerobot's language-conditioned policies read it; on import it is filled from ``task``.

Imported episodes go to the ``demo`` partition (never evicted). A dataset has no observation after
an episode's last frame, so an imported episode's final observation repeats its last one; with
``next.done`` the last step is terminal and that observation is never bootstrapped from.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from robolearn.buffer.images import is_image
from robolearn.buffer.replay_buffer import ReplayBuffer
from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec, SpecError, decode_text, encode_text, is_text
from robolearn.transition import OBS_PREFIX, ActionSource, TransitionWriter


def feature_name(obs_key: str, spec: ArraySpec) -> str:
    if obs_key == "state":
        return "observation.state"
    return f"observation.images.{obs_key}" if is_image(spec) else f"observation.{obs_key}"


def obs_key_of(feature: str) -> str | None:
    if feature == "observation.state":
        return "state"
    if feature.startswith("observation.images."):
        return feature.removeprefix("observation.images.")
    if feature.startswith("observation."):
        return feature.removeprefix("observation.")
    return None


def lerobot_features(obs_spec: ObservationSpec, action_spec: ActionSpec) -> dict:
    """The LeRobotDataset features of transitions with these specs."""
    feats = {}
    for key, spec in obs_spec.arrays.items():
        if is_text(spec):  # the frame's task string
            continue
        if is_image(spec):
            feats[feature_name(key, spec)] = {"dtype": "image", "shape": tuple(spec.shape),
                                              "names": ["height", "width", "channel"]}
        else:
            feats[feature_name(key, spec)] = {"dtype": spec.dtype, "shape": tuple(spec.shape),
                                              "names": list(spec.names) or None}
    a = action_spec.array
    feats["action"] = {"dtype": "float32", "shape": tuple(a.shape), "names": list(a.names) or None}
    for name, dtype in (("next.reward", "float32"), ("next.done", "bool"), ("next.success", "bool"),
                        ("complementary_info.is_intervention", "bool")):
        feats[name] = {"dtype": dtype, "shape": (1,), "names": None}
    return feats


def lerobot_frame(obs_spec: ObservationSpec, obs: dict[str, np.ndarray], action: np.ndarray, reward: float,
                  done: bool, success: bool, intervention: bool, task: str) -> dict:
    """One ``LeRobotDataset.add_frame`` dict for a step."""
    frame = {feature_name(k, s): obs[k] for k, s in obs_spec.arrays.items() if not is_text(s)}
    frame.update({"action": np.asarray(action, np.float32), "next.reward": np.array([reward], np.float32),
                  "next.done": np.array([done]), "next.success": np.array([success]),
                  "complementary_info.is_intervention": np.array([intervention]), "task": task})
    return frame


def frame_task(obs_spec: ObservationSpec, obs: dict[str, np.ndarray], default: str) -> str:
    """A frame's lerobot ``task``: its text observation (the instruction) when it has one, else ``default``."""
    texts = [k for k, spec in obs_spec.arrays.items() if is_text(spec)]
    return decode_text(obs[texts[0]]) if texts else default


def save_episode(ds) -> None:
    """``ds.save_episode()`` (a ``LeRobotDataset``), with every episode's min / max statistics in float64 whatever
    its length. lerobot keeps a one-frame episode's min / max in the feature's own dtype (bool, int64) but gives
    longer episodes float64 ones, and parquet then refuses to append the one kind to a file of the other ("Table
    schema does not match schema used to create file"): a one-step intervention run, or an episode a success
    classifier ended at its first frame, could not be saved next to the others."""
    import lerobot.datasets.dataset_writer as writer

    compute = writer.compute_episode_stats

    def float_extrema(*args, **kwargs) -> dict:
        stats = compute(*args, **kwargs)
        for feature in stats.values():
            for key in ("min", "max"):
                if key in feature:
                    feature[key] = np.asarray(feature[key], np.float64)
        return stats

    writer.compute_episode_stats = float_extrema
    try:
        ds.save_episode()
    finally:
        writer.compute_episode_stats = compute


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of True in ``mask``."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def export_lerobot(buffer: ReplayBuffer, root: str | Path, repo_id: str = "robolearn/export", fps: int = 25,
                   only: str | None = None, task: str = "robolearn") -> int:
    """Write committed episodes to a new LeRobotDataset v3 folder at ``root``; return the episode count.

    ``only="successes"``: successful episodes; ``only="interventions"``: each run of consecutive human
    intervention steps becomes one episode (the corrections, for imitation).
    """
    if only not in (None, "successes", "interventions"):
        raise ValueError(f"only must be None, 'successes' or 'interventions', got {only!r}")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset.create(repo_id, fps=fps, features=lerobot_features(buffer.obs_spec, buffer.action_spec),
                               root=root, use_videos=False)
    count = 0
    for ep, d in buffer.iter_episodes(successes_only=only == "successes"):
        n = len(d["action"])
        pieces = _runs(d["intervention"]) if only == "interventions" else [(0, n)]
        for start, end in pieces:
            for i in range(start, end):
                obs = {k: d[f"{OBS_PREFIX}{k}"][i] for k in buffer.obs_spec.arrays}
                ds.add_frame(lerobot_frame(buffer.obs_spec, obs, d["action"][i], float(d["reward"][i]),
                                           bool(d["terminated"][i]), bool(i == n - 1 and ep.success),
                                           bool(d["intervention"][i]), frame_task(buffer.obs_spec, obs, task)))
            save_episode(ds)
            count += 1
    ds.finalize()
    return count


def spec_from_lerobot(features: dict) -> ObservationSpec:
    """The observation spec a buffer needs to hold a dataset with these lerobot features."""
    arrays = {}
    for name, f in features.items():
        key = obs_key_of(name)
        if key is None:
            continue
        if f["dtype"] in ("image", "video"):
            shape = tuple(f["shape"])
            if shape[0] in (1, 3) and shape[-1] not in (1, 3):  # CHW -> HWC
                shape = (shape[1], shape[2], shape[0])
            arrays[key] = ArraySpec(shape, dtype="uint8")
        else:
            shape, names = tuple(f["shape"]), f.get("names")
            names = tuple(names) if isinstance(names, list) and len(shape) == 1 and len(names) == shape[0] else ()
            size = int(np.prod(shape))
            arrays[key] = ArraySpec(shape, dtype=f["dtype"], names=names, low=(-np.inf,) * size, high=(np.inf,) * size)
    return ObservationSpec(arrays)


def check_recorded_rate(root: str | Path, control_hz: float | None) -> None:
    """``SpecError`` when the LeRobotDataset folder ``root`` was recorded at another rate than ``control_hz`` (its
    ``meta/info.json`` fps; None: not checked). A per-tick delta action recorded at 25 Hz is another action at
    50 Hz, and an n-step window spans another time."""
    info = Path(root) / "meta" / "info.json"
    if control_hz is None or not info.exists():  # a folder that is not a dataset fails where it is opened
        return
    fps = json.loads(info.read_text())["fps"]
    if abs(fps - control_hz) > 0.5:
        raise SpecError(f"dataset {root} was recorded at {fps} fps, but this run's robot ticks at {control_hz:g} Hz: "
                        f"record it again at this rate (robot.control_hz={control_hz:g}) or run the robot at {fps} Hz")


def import_lerobot(buffer: ReplayBuffer, root: str | Path, repo_id: str = "local/dataset",
                   robot_id: str = "lerobot", source: ActionSource = ActionSource.HUMAN,
                   control_hz: float | None = None) -> int:
    """Append every episode of a local LeRobotDataset v3 folder to the ``demo`` partition; return the count.
    ``control_hz``: the rate the run's robot ticks at; a dataset recorded at another rate is refused (its actions
    are per-tick deltas of other dynamics, and its windows span another time)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    check_recorded_rate(root, control_hz)
    ds = LeRobotDataset(repo_id, root=root)
    keys = {obs_key_of(n): n for n in ds.features if obs_key_of(n) is not None}
    missing = {k for k, spec in buffer.obs_spec.arrays.items() if not is_text(spec)} - set(keys)
    if missing:
        raise SpecError(f"dataset {root} lacks observation(s) {sorted(missing)} that the buffer needs "
                        f"(it has {sorted(keys)})")
    episodes: dict[int, list[dict]] = {}
    for i in range(len(ds)):
        item = ds[i]
        episodes.setdefault(int(item["episode_index"]), []).append(item)
    first_id = max((e.episode_id for e in buffer.episodes.values() if e.robot_id == robot_id), default=-1) + 1
    for n_ep, (_, frames) in enumerate(sorted(episodes.items())):
        writer = TransitionWriter(buffer.obs_spec)
        obs_list = [_obs(buffer, keys, f) for f in frames]
        for j, f in enumerate(frames):
            last = j == len(frames) - 1
            done = bool(_scalar(f, "next.done", last))
            reward = float(_scalar(f, "next.reward", 0.0))
            success = bool(_scalar(f, "next.success", last and done and reward > 0))
            intervention = bool(_scalar(f, "complementary_info.is_intervention", False))
            writer.add(obs_list[j], np.asarray(f["action"], np.float32), action_source=int(source),
                       intervention=intervention, reward=reward, terminated=last and done,
                       truncated=last and not done, success=last and success, episode_id=first_id + n_ep, step=j,
                       tick=int(f["frame_index"]), t_obs=float(f["timestamp"]), t_act=float(f["timestamp"]),
                       policy_version=0, chunk_id=-1, chunk_index=0, delay_ticks=0)
        buffer.add(robot_id, writer.flush(final_obs=obs_list[-1]), partition="demo")
    return len(episodes)


def _scalar(frame: dict, key: str, default):
    if key not in frame:
        return default
    return np.asarray(frame[key]).reshape(-1)[0].item()


def _obs(buffer: ReplayBuffer, keys: dict[str, str], frame: dict) -> dict[str, np.ndarray]:
    out = {}
    for key, spec in buffer.obs_spec.arrays.items():
        if is_text(spec):
            out[key] = encode_text(frame["task"], spec.shape[0])
            continue
        value = np.asarray(frame[keys[key]])
        if is_image(spec):  # lerobot returns float CHW in [0, 1]
            value = np.round(value * 255.0).clip(0, 255).astype(np.uint8)
            if value.shape != tuple(spec.shape):
                value = np.transpose(value, (1, 2, 0))
        out[key] = value.astype(spec.dtype).reshape(spec.shape)
    return out
