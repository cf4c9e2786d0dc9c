"""The learners' losses against values computed by hand on tiny batches (docs/algorithms.md: SAC and RLPD,
HABC, Hi-ORS)."""

import math

import numpy as np
import pytest
import torch

from robolearn.buffer.replay_buffer import ReplayBuffer
from robolearn.learner.habc import gate, normalise_weights, raw_weights, value_losses
from robolearn.learner.hiors import AcceptanceThreshold, HiORS, HiORSConfig, not_noop
from robolearn.learner.sac import SAC, SACConfig
from robolearn.policies.flow_chunk import FlowChunkPolicy, FlowChunkPolicyConfig
from robolearn.policies.mlp import GaussianChunkPolicy, MLPPolicyConfig
from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec
from robolearn.transition import TransitionWriter

OBS = ObservationSpec({"state": ArraySpec((2,), low=(-100.0, -100.0), high=(100.0, 100.0))})
ACT = ActionSpec(ArraySpec((1,), low=(-1.0,), high=(1.0,)))


def window_batch(**cols):
    """A chunk-window batch of len(any column) rows; unspecified labels are 0."""
    n = len(next(iter(cols.values())))
    keys = ("demo", "intervention", "labelled", "episode_success", "done")
    return {k: torch.tensor(cols.get(k, [0.0] * n), dtype=torch.float32) for k in keys}


def test_habc_gate_matches_hand_computed_values():
    z_s, z_next = torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0])
    ve_s, ve_next = torch.tensor([-2.0, -2.0]), torch.tensor([-1.0, -7.0])
    g = gate(z_s, z_next, ve_s, ve_next, success_end=torch.tensor([0.0, 1.0]))
    # p_v = 0.5; A_v = 1; A_e = -1 + (-1) - (-2) = 0, and at the success -1 + 0 - (-2) = 1 (V_e(s') is 0)
    assert g.tolist() == pytest.approx([1 + math.tanh(0.5), 1 + math.tanh(1.0)])
    assert ((0 <= g) & (g <= 2)).all()


def test_habc_weights_by_source_then_normalised_by_the_mean():
    b = window_batch(demo=[1, 0, 0, 0, 0], intervention=[0, 1, 0, 0, 0], labelled=[1, 0, 1, 1, 0],
                     episode_success=[1, 1, 1, 0, 1])
    g = torch.full((5,), 1.5)
    # demo 1, intervention 1, labelled success g, labelled failure 0, unlabelled autonomous (before a takeover) 0
    raw = raw_weights(g, b, reweight_interventions=False)
    assert raw.tolist() == pytest.approx([1, 1, 1.5, 0, 0])
    assert normalise_weights(raw).tolist() == pytest.approx([1 / 0.7, 1 / 0.7, 1.5 / 0.7, 0, 0])
    assert raw_weights(g, b, reweight_interventions=True)[1].item() == pytest.approx(1.5)
    assert normalise_weights(torch.zeros(3)).tolist() == [0, 0, 0]  # no division by zero


class TableHeads(torch.nn.Module):
    """Value heads that read (z_v, V_e) from a table indexed by obs[:, 0]."""

    def __init__(self, z, ve):
        super().__init__()
        self.z = torch.nn.Parameter(torch.tensor(z))
        self.ve = torch.nn.Parameter(torch.tensor(ve))

    def forward(self, obs):
        i = obs[:, 0].long()
        return self.z[i], self.ve[i]


def test_habc_value_losses_use_the_right_windows_and_targets():
    heads = TableHeads(z=[0.0, 2.0, -1.0, 0.0], ve=[-3.0, -1.5, 0.5, -2.0])
    # rows: s -> s'
    #   0 -> 1: labelled autonomous, successful episode, not the end    (viability y=1; V_e target -1 + V_e(1) = -2.5)
    #   2 -> 3: labelled autonomous, failed episode                      (viability y=0; no V_e)
    #   1 -> 3: intervention, successful episode, ends in the success    (no viability; V_e target 0)
    #   3 -> 0: unlabelled autonomous, successful episode                (neither)
    batch = window_batch(intervention=[0, 0, 1, 0], labelled=[1, 1, 0, 0], episode_success=[1, 0, 1, 1],
                         done=[0, 0, 1, 0])
    batch["obs"] = torch.tensor([[0.0], [2.0], [1.0], [3.0]])
    batch["next_obs"] = torch.tensor([[1.0], [3.0], [3.0], [0.0]])
    loss_v, loss_e, _ = value_losses(heads, batch, huber_delta=1.0)
    bce = lambda z, y: -(y * math.log(1 / (1 + math.exp(-z))) + (1 - y) * math.log(1 - 1 / (1 + math.exp(-z))))  # noqa: E731
    assert loss_v.item() == pytest.approx((bce(0.0, 1) + bce(-1.0, 0)) / 2)
    huber = lambda e: 0.5 * e * e if abs(e) <= 1 else abs(e) - 0.5  # noqa: E731
    assert loss_e.item() == pytest.approx((huber(-3.0 - (-2.5)) + huber(-1.5 - 0.0)) / 2)


def write_episode(buffer, episode_id, interventions, end=True, success=True, n=10):
    w = TransitionWriter(OBS)
    for t in range(n):
        last = end and t == n - 1
        w.add({"state": np.array([episode_id, t], np.float32)}, np.zeros(1, np.float32), action_source=0,
              intervention=t in interventions, reward=0.0, terminated=last and success,
              truncated=last and not success, success=last and success, episode_id=episode_id, step=t, tick=t,
              t_obs=0.0, t_act=0.0, policy_version=1, chunk_id=0, chunk_index=0, delay_ticks=0)
    buffer.add("r0", w.flush(final_obs={"state": np.array([episode_id, n], np.float32)} if end else None))


def test_credit_labels_only_the_autonomous_suffix_after_the_last_intervention(tmp_path):
    buf = ReplayBuffer(tmp_path, OBS, ACT, fsync="off")
    write_episode(buf, 0, interventions={3, 4, 6})   # labelled: steps 7..9
    write_episode(buf, 1, interventions=set())       # fully autonomous: every step
    write_episode(buf, 2, interventions={1}, end=False)  # not ended yet: nothing labelled
    b = buf.sample(3000, with_info=True)
    ep, step = b["obs.state"][:, 0].astype(int), b["obs.state"][:, 1].astype(int)
    expected = np.where(ep == 0, step > 6, np.where(ep == 1, True, False))
    assert (b["labelled"] == expected).all()
    assert not b["labelled"][b["intervention"]].any()
    assert set(step[(ep == 0) & b["labelled"]]) == {7, 8, 9}
    buf.close()


def test_sac_target_is_the_min_over_a_random_subset_of_the_target_ensemble():
    torch.manual_seed(0)
    policy = GaussianChunkPolicy(OBS, ACT, MLPPolicyConfig(hidden_dims=[8]))
    sac = SAC(policy, SACConfig(num_critics=3, critic_subset=2, critic_hidden_dims=[8], init_temperature=0.1))
    fixed_q = torch.tensor([[1.0, 5.0], [3.0, 2.0], [0.0, 4.0]])  # (N=3 critics, B=2): critic 2 is lowest in column 0
    sac.critic_target.forward = lambda feat, a: fixed_q
    sac.actor.sample_features = lambda feat: (torch.zeros(2, 1), torch.tensor([0.5, -1.0]))
    got, expected = [], []
    for _ in range(12):  # each target draws its own subset from the algorithm's generator
        subset = torch.randperm(3, generator=torch.Generator().set_state(sac.generator.get_state()))[:2]
        y = sac.td_target(torch.tensor([1.0, 2.0]), torch.tensor([0.9, 0.0]), torch.zeros(2, 2), torch.tensor(0.1))
        assert y[1].item() == pytest.approx(2.0)  # discount 0: the reward alone
        got.append(y[0].item())
        expected.append(1.0 + 0.9 * (fixed_q[subset, 0].min().item() - 0.1 * 0.5))
    assert got == pytest.approx(expected)
    full_min = 1.0 + 0.9 * (0.0 - 0.1 * 0.5)  # what ignoring critic_subset (min over all three) gives
    assert any(g != pytest.approx(full_min) for g in got) and any(g == pytest.approx(full_min) for g in got)


def test_hiors_threshold_rises_with_the_return_quantile_and_never_falls():
    m = AcceptanceThreshold(-math.inf, quantile=0.5, window=50)
    assert [m.observe(r) for r in (1.0, 3.0, 2.0, 0.0, -5.0)] == [1.0, 2.0, 2.0, 2.0, 2.0]
    assert not_noop(torch.tensor([[[0.0, 0.0]], [[0.0, 0.5]]]), 1e-3).tolist() == [0.0, 1.0]


@pytest.mark.parametrize("keep", [[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]], ids=["some", "none"])
def test_hiors_loss_is_the_mean_flow_loss_over_the_kept_windows(keep):
    """Hi-ORS's actor loss for the flow policy, sum(keep * l) / max(sum(keep), 1), through ``weighted_loss``."""
    torch.manual_seed(0)
    policy = FlowChunkPolicy(OBS, ACT, FlowChunkPolicyConfig(chunk_horizon=3, max_prefix=1, hidden_dims=[8]))
    algo = HiORS(policy, HiORSConfig())
    state, valid = torch.randn(4, 2), torch.ones(4, 3)
    actions = torch.tensor(keep)[:, None, None].expand(4, 3, 1) * 0.5  # a kept window's first action moves
    torch.manual_seed(1)
    expected = (torch.tensor(keep) * policy.loss(state, actions, valid=valid)).sum() / max(sum(keep), 1.0)
    torch.manual_seed(1)  # the same noise and flow times inside the loss
    got = algo.update({"obs": state, "actions": actions, "valid": valid})["actor_loss"]
    assert got == pytest.approx(expected.item(), rel=1e-5)


def test_discrete_gripper_double_dqn_target_and_policy_output():
    from robolearn.learner.sac import gripper_td_target
    from robolearn.policies.mlp import gripper_class

    assert gripper_class(torch.tensor([-0.9, -0.2, 0.0, 0.5, 1.0])).tolist() == [0, 1, 1, 2, 2]
    q_online = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 0.0]])   # argmax over s': 1, 0
    q_target = torch.tensor([[5.0, 7.0, 9.0], [4.0, 6.0, 8.0]])   # the target net's values there: 7, 4
    y = gripper_td_target(q_online, q_target, torch.tensor([1.0, 0.5]), torch.tensor([0.9, 0.0]))
    assert y.tolist() == pytest.approx([1.0 + 0.9 * 7.0, 0.5])

    act = ActionSpec(ArraySpec((2,), low=(-1.0, -1.0), high=(1.0, 1.0)))
    torch.manual_seed(0)
    policy = GaussianChunkPolicy(OBS, act, MLPPolicyConfig(hidden_dims=[16], discrete_gripper=True))
    sac = SAC(policy, SACConfig(critic_hidden_dims=[16], critic_lr=1e-2))
    assert policy.continuous_dim == 1 and sac.target_entropy == -0.5
    chunk = policy.predict_chunk({"state": np.zeros((64, 2), np.float32)}, np.zeros((64, 0, 2), np.float32),
                                 np.zeros(64, np.int64), explore=True)
    assert chunk.shape == (64, 1, 2) and set(np.unique(chunk[:, 0, 1])) <= {-1.0, 0.0, 1.0}
    # the gripper head learns that "open" pays: reward 1 for open, 0 otherwise, no bootstrap
    g = torch.tensor([-1.0, 0.0, 1.0]).repeat(32)
    batch = {"obs": torch.zeros(96, 2), "next_obs": torch.zeros(96, 2), "action": torch.stack([torch.zeros(96), g], 1),
             "reward": (g == 1.0).float(), "discount": torch.zeros(96)}
    for _ in range(200):
        metrics = sac.update(batch)
    assert metrics["gripper_loss"] < 0.01
    assert policy.gripper_q(policy.features(torch.zeros(1, 2))).argmax().item() == 2
