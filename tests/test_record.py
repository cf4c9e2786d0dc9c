"""``robolearn record`` writes expert demos as a LeRobotDataset v3 that lerobot loads and trains ACT on."""

import numpy as np
import pytest
import torch

from robolearn.sim.reach import ReachConfig, ReachEnv
from tests.helpers import robolearn


def test_reach_expert_succeeds_on_seeded_episodes():
    env = ReachEnv()
    successes = 0
    for seed in range(20):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(env.expert_action())
            done = terminated or truncated
        successes += info["success"]
    assert successes / 20 >= 0.95  # the full 100-episode figure: benchmarks/experts.py


@pytest.mark.slow
@pytest.mark.e2e
def test_recorded_demos_load_in_lerobot_and_act_trains_on_them(tmp_path):
    from lerobot.configs.types import FeatureType
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.utils.feature_utils import dataset_to_policy_features

    out = tmp_path / "demos"
    r = robolearn(["record", "task=reach", "episodes=12", f"out={out}", "task.cameras=[front]", "seed=7"],
                  cwd=tmp_path, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "recorded 12 episodes" in r.stdout and "success 100%" in r.stdout

    meta = LeRobotDatasetMetadata("robolearn/reach", root=out)
    assert meta.total_episodes == 12 and meta.fps == 25
    features = dataset_to_policy_features(meta.features)
    assert features["observation.images.front"].shape == (3, 96, 96)
    ds = LeRobotDataset("robolearn/reach", root=out, delta_timestamps={"action": [i / meta.fps for i in range(5)]})
    first = ds[0]
    env = ReachEnv(ReachConfig(cameras=["front"]))
    obs, _ = env.reset(seed=7)
    np.testing.assert_allclose(first["observation.state"].numpy(), obs["state"], rtol=1e-6)
    np.testing.assert_allclose(first["action"][0].numpy(), env.expert_action(), rtol=1e-5)

    outputs = {k: f for k, f in features.items() if f.type is FeatureType.ACTION}
    inputs = {k: f for k, f in features.items() if k not in outputs}
    cfg = ACTConfig(input_features=inputs, output_features=outputs, chunk_size=5, n_action_steps=5, dim_model=32,
                    n_heads=2, dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1, latent_dim=8,
                    n_vae_encoder_layers=1, pretrained_backbone_weights=None, device="cpu")

    def normalised(batch: dict) -> dict:  # by the recorded dataset's own stats, as lerobot's processor does
        batch = dict(batch)
        for key in {"action", "observation.state"} & batch.keys():
            mean, std = (torch.as_tensor(meta.stats[key][s], dtype=torch.float32) for s in ("mean", "std"))
            batch[key] = (batch[key] - mean) / std.clamp_min(1e-6)
        return batch

    # trained on episodes 0-9, judged on episodes 10-11, which it never sees, against the best constant guess (the
    # training actions' per-dimension median, what minimises L1): fitting one batch, or the mean, cannot pass
    train = LeRobotDataset("robolearn/reach", root=out, episodes=list(range(10)), delta_timestamps=ds.delta_timestamps)
    held_out = LeRobotDataset("robolearn/reach", root=out, episodes=[10, 11], delta_timestamps=ds.delta_timestamps)
    held = normalised(next(iter(torch.utils.data.DataLoader(held_out, batch_size=len(held_out)))))
    train_actions = normalised({"action": torch.stack([train[i]["action"] for i in range(len(train))])})["action"]
    median = train_actions.flatten(0, 1).median(dim=0).values
    pad = held["action_is_pad"].unsqueeze(-1)
    constant_l1 = ((held["action"] - median).abs().masked_fill(pad, 0).sum() / (~pad).sum() / median.numel()).item()
    torch.manual_seed(0)
    policy = ACTPolicy(cfg)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    losses = []
    for _ in range(10):  # epochs of the ten training episodes (after one it is no better than the constant)
        for batch in torch.utils.data.DataLoader(train, batch_size=16, shuffle=True):
            loss, _ = policy.forward(normalised(batch))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    # the training loss falls, not just stays finite
    assert all(np.isfinite(losses)) and np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
    policy.eval()
    with torch.no_grad():
        _, info = policy.forward(held)
    assert np.isfinite(info["l1_loss"]) and info["l1_loss"] < 0.75 * constant_l1, (info, constant_l1)


def test_language_task_records_each_episodes_instruction_as_the_lerobot_task(tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robolearn.record import record
    from robolearn.sim.cube_tasks import PickCubeColorConfig, PickCubeEnv

    env = PickCubeEnv(PickCubeColorConfig())
    asked = []
    for seed in range(3):
        env.reset(seed=seed)
        asked.append(env.instruction)
    result = record(env, 3, tmp_path / "demos", "robolearn/pick_cube_color", fps=25, seed=0, task="pick_cube_color")
    assert result.successes == 3
    ds = LeRobotDataset("robolearn/pick_cube_color", root=tmp_path / "demos")
    first_frames = [ds[int(i)] for i in ds.meta.episodes["dataset_from_index"]]
    assert [f["task"] for f in first_frames] == asked
    assert all(t.startswith("pick up the ") for t in asked) and len(set(asked)) > 1
