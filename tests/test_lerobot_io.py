"""LeRobotDataset v3 round trip: lerobot writes -> robolearn imports and samples -> exports -> lerobot loads."""

import numpy as np
import pytest

from robolearn.buffer.lerobot_io import export_lerobot, import_lerobot, spec_from_lerobot
from robolearn.buffer.replay_buffer import ReplayBuffer
from robolearn.specs import SpecError
from tests.buffer_data import ACT, OBS, batch

FEATURES = {
    "observation.state": {"dtype": "float32", "shape": (3,), "names": ["a", "b", "c"]},
    "observation.images.front": {"dtype": "image", "shape": (8, 8, 3), "names": ["height", "width", "channel"]},
    "action": {"dtype": "float32", "shape": (2,), "names": ["a.pos", "b.pos"]},
    "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
    "next.done": {"dtype": "bool", "shape": (1,), "names": None},
}


def _frame(ep, i, n):
    img = np.zeros((8, 8, 3), np.uint8)
    img[i % 8] = (ep * 40 + i) % 256
    return {"observation.state": np.array([ep, i, 0.25 * i], np.float32), "observation.images.front": img,
            "action": np.array([i, -ep], np.float32), "next.reward": np.array([float(i == n - 1)], np.float32),
            "next.done": np.array([i == n - 1]), "task": "reach"}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = tmp_path_factory.mktemp("lerobot") / "demos"
    ds = LeRobotDataset.create("local/demos", fps=25, features=FEATURES, root=root, use_videos=False)
    for ep, n in enumerate([5, 7, 4]):
        for i in range(n):
            ds.add_frame(_frame(ep, i, n))
        ds.save_episode()
    ds.finalize()
    return root


def _load(root, repo_id):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset(repo_id, root=root)
    return ds, [ds[i] for i in range(len(ds))]


def test_import_sample_export_and_load_in_lerobot_keeps_values(dataset, tmp_path):
    _, original = _load(dataset, "local/demos")
    obs_spec = spec_from_lerobot(FEATURES)
    buf = ReplayBuffer(tmp_path / "buffer", obs_spec, ACT)
    assert import_lerobot(buf, dataset, "local/demos") == 3
    assert buf.partition_sizes()["demo"] == 16
    by_key = {(int(f["episode_index"]), int(f["frame_index"])): f for f in original}

    sample = buf.sample(64, gamma=0.9)
    for i in range(64):
        ep, step = int(sample["obs.state"][i, 0]), int(sample["obs.state"][i, 1])
        f = by_key[(ep, step)]
        np.testing.assert_array_equal(sample["obs.state"][i], f["observation.state"].numpy())
        np.testing.assert_array_equal(sample["obs.front"][i],
                                      np.round(f["observation.images.front"].numpy() * 255).astype(np.uint8)
                                      .transpose(1, 2, 0))
        np.testing.assert_array_equal(sample["action"][i, 0], f["action"].numpy())
        assert sample["reward"][i] == pytest.approx(float(f["next.reward"]))

    out = tmp_path / "exported"
    assert export_lerobot(buf, out, "local/exported") == 3
    _, again = _load(out, "local/exported")
    assert len(again) == len(original)
    for a, b in zip(original, again):
        for key in ("observation.state", "observation.images.front", "action", "next.reward", "next.done",
                    "episode_index", "frame_index"):
            np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)


def test_export_filters_successes_and_interventions(tmp_path):
    buf = ReplayBuffer(tmp_path / "buffer", OBS, ACT)
    buf.add("r", batch(0, 0, 6, end="terminated", success=True))
    buf.add("r", batch(1, 0, 4, end="truncated"))
    buf.add("r", batch(2, 0, 2))
    buf.add("r", batch(2, 2, 3, intervention=True))
    buf.add("r", batch(2, 5, 2, end="terminated", success=True))
    assert export_lerobot(buf, tmp_path / "ok", "local/ok", only="successes") == 2
    assert export_lerobot(buf, tmp_path / "iv", "local/iv", only="interventions") == 1
    ds, frames = _load(tmp_path / "iv", "local/iv")
    assert [int(f["observation.state"][1]) for f in frames] == [2, 3, 4]
    assert all(bool(f["complementary_info.is_intervention"]) for f in frames)
    _, ok = _load(tmp_path / "ok", "local/ok")
    assert len(ok) == 6 + 7
    with pytest.raises(ValueError, match="only must be"):
        export_lerobot(buf, tmp_path / "x", "local/x", only="failures")


def test_one_step_episodes_export_beside_longer_ones(tmp_path):
    """Ten one-step intervention runs (lerobot writes episode metadata ten at a time), then a three-step one:
    lerobot alone cannot append the longer episode's statistics to the file the short ones created (its min / max
    dtypes differ with the length); all of them load, in order."""
    buf = ReplayBuffer(tmp_path / "buffer", OBS, ACT)
    for k in range(10):
        buf.add("r", batch(0, 2 * k, 1))
        buf.add("r", batch(0, 2 * k + 1, 1, intervention=True))
    buf.add("r", batch(0, 20, 1))
    buf.add("r", batch(0, 21, 3, intervention=True))
    buf.add("r", batch(0, 24, 1, end="terminated", success=True))
    assert export_lerobot(buf, tmp_path / "iv", "local/iv", only="interventions") == 11
    ds, frames = _load(tmp_path / "iv", "local/iv")
    assert [int(f["observation.state"][1]) for f in frames] == [*range(1, 20, 2), 21, 22, 23]
    assert [int(f["episode_index"]) for f in frames] == [*range(10), 10, 10, 10]


def test_import_names_a_missing_observation(dataset, tmp_path):
    buf = ReplayBuffer(tmp_path / "buffer", OBS.__class__({**OBS.arrays, "wrist": OBS.arrays["front"]}), ACT)
    with pytest.raises(SpecError, match="wrist"):
        import_lerobot(buf, dataset, "local/demos")


def test_import_refuses_a_dataset_recorded_at_another_rate(dataset, tmp_path):
    buf = ReplayBuffer(tmp_path / "buffer", spec_from_lerobot(FEATURES), ACT)
    with pytest.raises(SpecError, match="recorded at 25 fps, but this run's robot ticks at 50 Hz"):
        import_lerobot(buf, dataset, "local/demos", control_hz=50)
    assert buf.partition_sizes()["demo"] == 0
    assert import_lerobot(buf, dataset, "local/demos", control_hz=25.0) == 3
