import copy
import math

import pytest
import torch

from robolearn.learner.sac import SAC, EnsembleCritic, EnsembleLinear, SACConfig
from robolearn.policies.mlp import MLPPolicyConfig, make_policy
from robolearn.sim.reach import ReachEnv


def _sac(seed=0, policy_kw=None, **kw):
    torch.manual_seed(seed)
    env = ReachEnv()
    policy = make_policy(env.observation_spec, env.action_spec,
                         MLPPolicyConfig(hidden_dims=[32, 32], **(policy_kw or {})))
    return SAC(policy, SACConfig(critic_hidden_dims=[32, 32], **kw), seed=seed)


def _batch(b=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"obs": torch.randn(b, 18, generator=g), "action": torch.rand(b, 6, generator=g) * 2 - 1,
            "reward": torch.randn(b, generator=g), "discount": torch.full((b,), 0.99),
            "next_obs": torch.randn(b, 18, generator=g)}


def test_ensemble_linear_equals_independent_linears():
    layer = EnsembleLinear(3, 4, 5)
    x = torch.randn(3, 7, 4)
    out = layer(x)
    for i in range(3):
        torch.testing.assert_close(out[i], x[i] @ layer.weight[i] + layer.bias[i])


def test_critic_members_are_independent_and_layernormed():
    sac = _sac(num_critics=4, critic_subset=2)
    critic: EnsembleCritic = sac.critic
    q = critic(torch.randn(5, 18), torch.rand(5, 6))
    assert q.shape == (4, 5)
    assert not torch.allclose(q[0], q[1])


def test_target_is_min_over_a_random_subset_of_target_critics():
    """The critic loss of one update against a hand computation: every critic member made a constant (zero head
    weights, a chosen bias), the policy's next actions and log-probs fixed, so nothing of SAC's own modules
    computes the expected value. The lowest target critic is the one the subset leaves out, so a target over
    all members gives another loss."""
    sac = _sac(num_critics=3, critic_subset=2, actor_update_every=1000)  # the actor update does not run
    batch = _batch()
    subset = torch.randperm(3, generator=torch.Generator().set_state(sac.generator.get_state()))[:2]
    target_q = torch.tensor([2.0, 3.0, 4.0])
    target_q[({0, 1, 2} - set(subset.tolist())).pop()] = -5.0
    online_q = torch.tensor([0.5, -0.5, 1.0])
    with torch.no_grad():
        for net, values in ((sac.critic_target, target_q), (sac.critic, online_q)):
            net.head.weight.zero_()
            net.head.bias.copy_(values.view(3, 1, 1))
    log_prob = torch.linspace(-1.0, 1.0, 16)
    sac.actor.sample_features = lambda feat: (torch.zeros(len(feat), 6), log_prob)
    alpha = sac.temperature.alpha
    r, d = batch["reward"], batch["discount"]

    def loss(target_value: float) -> float:
        y = r + d * (target_value - alpha * log_prob)
        return sum(float(((q - y) ** 2).mean()) for q in online_q)

    expected = loss(float(target_q[subset].min()))
    assert abs(expected - loss(float(target_q.min()))) > 1.0  # the figure tells the subset from all members
    assert abs(sac.update(batch)["critic_loss"] - expected) < 1e-4


def test_target_entropy_is_minus_half_action_dim_by_default_and_scales_with_its_setting():
    assert _sac().target_entropy == -3.0
    assert _sac(target_entropy_per_dim=-1.0).target_entropy == -6.0
    assert _sac(target_entropy_per_dim=-1.0).temperature.target_entropy == -6.0


def test_a_target_entropy_that_is_not_a_number_is_refused():
    with pytest.raises(ValueError, match="target_entropy_per_dim"):
        SACConfig(target_entropy_per_dim=float("nan"))


def test_state_dict_round_trip_reproduces_the_next_update():
    a = _sac()
    for i in range(5):
        a.update(_batch(seed=i))
    b = _sac(seed=99)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    torch.manual_seed(7)
    ma = a.update(_batch(seed=42))
    torch.manual_seed(7)
    mb = b.update(_batch(seed=42))
    assert ma == mb
    for pa, pb in zip(a.actor.parameters(), b.actor.parameters()):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)


def test_critic_learns_a_constant_reward():
    sac = _sac()
    batch = _batch()
    batch["reward"] = torch.ones(16)
    batch["discount"] = torch.zeros(16)
    first = sac.update(batch)["critic_loss"]
    for _ in range(200):
        last = sac.update(batch)["critic_loss"]
    assert last < 0.05 * first


def test_temperature_steps_like_torch_adam_on_the_alpha_loss():
    from robolearn.learner.sac import Temperature

    temp = Temperature(init=0.1, target_entropy=-3.0, lr=0.05)
    log_alpha = torch.tensor(math.log(0.1), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([log_alpha], lr=0.05)
    for mean_log_prob in (2.0, -1.5, 4.0, 0.3, -6.0, 1.0):
        loss = -(log_alpha * (torch.tensor(mean_log_prob, dtype=torch.float64) - 3.0))
        opt.zero_grad()
        loss.backward()
        opt.step()
        temp.update(mean_log_prob)
        assert abs(temp.log_alpha - log_alpha.item()) < 1e-12
    # entropy above the target (-mean log pi > target_entropy) lowers alpha; below it raises alpha
    for mean_log_prob, lower in ((-10.0, True), (10.0, False)):
        fresh = Temperature(init=0.1, target_entropy=-3.0, lr=0.05)
        fresh.update(mean_log_prob)
        assert (fresh.alpha < 0.1) == lower


def test_a_state_encoder_is_shared_with_the_critic_and_only_the_critic_loss_moves_it():
    """lerobot's SAC layout (policy.state_encoder_dim, policy.layer_norm): Linear -> LayerNorm -> tanh on the
    normalised state, read by the critic (input 8 + 6 wide, not 18 + 6) and by the actor; the critic loss trains
    it, the actor's does not. The actor's hidden layers are LayerNormed."""
    sac = _sac(policy_kw={"state_encoder_dim": 8, "layer_norm": True})
    assert [type(m).__name__ for m in sac.actor.trunk] == ["Linear", "LayerNorm", "ReLU", "Linear", "LayerNorm"]
    enc = sac.actor.state_encoder
    assert [type(m).__name__ for m in enc] == ["Linear", "LayerNorm", "Tanh"] and sac.actor.feature_dim == 8
    assert sac.critic.layers[0].weight.shape[-2] == 8 + 6
    in_critic = {id(p) for p in sac._critic_params}
    assert all(id(p) in in_critic for p in enc.parameters())
    assert not {id(p) for p in enc.parameters()} & {id(p) for p in sac._actor_params}
    before = [p.detach().clone() for p in enc.parameters()]
    sac.update(_batch())
    assert any(not torch.equal(a, b) for a, b in zip(before, enc.parameters()))  # the critic loss moved it


def test_grad_clip_norm_bounds_each_networks_gradient():
    """With algo.grad_clip_norm the gradients the optimisers step on have at most that global norm; without it
    the same batch gives a larger one (so the bound is the clipping's doing)."""
    norms = {}
    for clip in (0.0, 1e-3):
        sac = _sac(grad_clip_norm=clip)
        batch = _batch()
        batch["reward"] = batch["reward"] * 100  # a large TD error: a large critic gradient
        sac.update(batch)
        norms[clip] = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in sac._critic_params])).item()
    assert norms[1e-3] <= 1e-3 * (1 + 1e-4) and norms[0.0] > 1.0


def test_bc_weight_pulls_the_actor_toward_the_demo_rows_actions_and_only_those():
    """With ``bc_weight`` the actor's mean action on the demo rows' states moves to the demo action; the same
    updates without it, or with no row marked offline, leave it far away (they are the same update); marking the
    other rows instead does not pull the demo rows' states either."""
    g = torch.Generator().manual_seed(1)
    demo_obs = torch.randn(8, 18, generator=g)
    target = torch.full((8, 6), 0.8)

    def train(bc_weight: float, offline: torch.Tensor) -> tuple[float, SAC]:
        sac = _sac(seed=3, bc_weight=bc_weight)
        for step in range(150):
            batch = _batch(b=16, seed=step)
            batch["obs"][:8] = demo_obs
            batch["action"][:8] = target
            batch["reward"] = torch.full((16,), -1.0)  # |Q| > 0: TD3+BC's scale is not zero
            batch["offline"] = offline
            sac.update(batch)
        with torch.no_grad():
            mean = torch.tanh(sac.actor.head(sac.actor.features(demo_obs))[0])
        return (mean - target).abs().mean().item(), sac

    rows = torch.arange(16)
    with_bc, sac = train(2.0, rows < 8)
    without, _ = train(0.0, rows < 8)
    unmarked, _ = train(2.0, torch.zeros(16, dtype=torch.bool))
    others, _ = train(2.0, rows >= 8)
    assert with_bc < 0.15 < without
    assert unmarked == without
    assert others > 0.4
    assert "bc_error" in sac._last_actor_metrics


def test_bc_error_is_the_mean_squared_error_on_the_marked_rows_and_leaves_the_critic_step_alone():
    sac = _sac(bc_weight=1.0)
    feat = sac.actor.features(torch.randn(6, 18))
    action = torch.rand(6, 6) * 2 - 1
    offline = torch.tensor([True, False, True, False, False, True])
    with torch.no_grad():
        expected = (torch.tanh(sac.actor.head(feat[offline])[0]) - action[offline]).square().mean()
    torch.testing.assert_close(sac.bc_error(feat, action, offline), expected)
    # the critic moves by its own loss only: two updates, with and without the term, leave the same critic
    other = _sac(bc_weight=0.0)
    critic_before = [p.clone() for p in sac.critic.parameters()]
    batch = _batch()
    batch["offline"] = torch.arange(16) < 8
    for algo in (sac, other):
        torch.manual_seed(5)  # the same next-action draws
        algo.update(dict(batch))
    for a, b, before in zip(sac.critic.parameters(), other.critic.parameters(), critic_before):
        torch.testing.assert_close(a, b)
        assert not torch.equal(a, before)
    assert sac._last_actor_metrics["actor_loss"] != other._last_actor_metrics["actor_loss"]


def test_sample_windows_marks_the_demo_and_intervention_rows(tmp_path):
    from robolearn.buffer.replay_buffer import ReplayBuffer
    from robolearn.learner.sac import sample_windows
    from tests.buffer_data import ACT, OBS, batch

    buf = ReplayBuffer(tmp_path, OBS, ACT, capacity=1000, seed=0)
    buf.add("r", batch(0, 0, 30, end="terminated"))
    buf.add("r", batch(1, 0, 30, end="truncated", intervention=True))
    buf.add("demo", batch(2, 0, 30, end="terminated", success=True), partition="demo")
    drawn = sample_windows(buf, ACT, 400, 1, 0.99, demo_ratio=0.5, with_offline=True)
    episode = drawn["obs"][:, 0]  # the state's first element is the episode id
    assert torch.equal(drawn["offline"], episode >= 1)
    assert 0.4 < drawn["offline"].float().mean().item() < 0.6
    assert "offline" not in sample_windows(buf, ACT, 8, 1, 0.99, demo_ratio=0.5)


def test_n_step_returns_sum_the_next_n_rewards_and_bootstrap_n_steps_on(tmp_path):
    """``algo.n_step=3`` with single actions: r = sum_k gamma^k r_{t+k}, s' = s_{t+3}, discount gamma^3; a window
    that meets the episode's end bootstraps from its final observation with gamma^k, or 0 when it terminated. The
    expected values come from the data's own rule (reward s + 1 at step s), not from the buffer."""
    from robolearn.buffer.replay_buffer import ReplayBuffer
    from robolearn.specs import ObservationSpec
    from tests.buffer_data import ACT, OBS, batch

    buf = ReplayBuffer(tmp_path, OBS, ACT, capacity=1000, seed=0)
    buf.add("r", batch(0, 0, 30, end="terminated"))
    policy = make_policy(ObservationSpec({"state": OBS.arrays["state"]}), ACT, MLPPolicyConfig(hidden_dims=[8]))
    g = 0.9
    sac = SAC(policy, SACConfig(critic_hidden_dims=[8], gamma=g, n_step=3, demo_ratio=0.0))
    drawn = sac.sample_batch(buf, ACT, 200)
    for step, reward, discount, next_step in zip(drawn["obs"][:, 1].tolist(), drawn["reward"].tolist(),
                                                 drawn["discount"].tolist(), drawn["next_obs"][:, 1].tolist()):
        k = min(3, 30 - int(step))  # steps left in the window
        assert reward == pytest.approx(sum(g ** i * (step + i + 1) for i in range(k)), rel=1e-5)
        assert next_step == step + k
        assert discount == pytest.approx(0.0 if step + k == 30 else g ** 3)  # the window reached the termination
    assert set(drawn["obs"][:, 1].tolist()) >= {0.0, 28.0, 29.0}  # windows cut by the end were drawn too


def test_an_n_step_shorter_than_the_chunk_is_refused():
    with pytest.raises(ValueError, match="n_step=2 is shorter than the policy's chunk horizon 3"):
        _sac(policy_kw={"chunk_horizon": 3}, n_step=2)
    assert _sac(policy_kw={"chunk_horizon": 3}, n_step=3).cfg.n_step == 3
