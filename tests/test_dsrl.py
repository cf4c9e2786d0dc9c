"""DSRL: the frozen flow policy's weights stay bit-identical while the noise policy and critics learn, the noise
policy's gradient comes through the flow (or, with the noise critic, from a critic on the noise distilled from the
action critic), serving keeps the committed prefix, and a wrong set-up is named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robolearn.checkpoint import save_policy_checkpoint
from robolearn.learner.dsrl import DSRL, DSRLConfig
from robolearn.learner.feature_cache import FeatureCache
from robolearn.policies.dsrl import DSRLPolicy, DSRLPolicyConfig
from robolearn.policies.flow_chunk import FlowChunkPolicy, FlowChunkPolicyConfig
from robolearn.policies.mlp import GaussianChunkPolicy, MLPPolicyConfig
from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec

# the last state element is unbounded: normalised by running statistics, which the learner updates (pi_W's only)
OBS = ObservationSpec({"state": ArraySpec((6,), low=(-1.0,) * 5 + (-np.inf,), high=(1.0,) * 5 + (np.inf,))})
ACT = ActionSpec(ArraySpec((3,), low=(-1.0,) * 3, high=(1.0,) * 3))
BASE = FlowChunkPolicyConfig(chunk_horizon=4, max_prefix=2, hidden_dims=[32, 32], flow_steps=4)


def _base_checkpoint(tmp_path, config: FlowChunkPolicyConfig = BASE) -> str:
    torch.manual_seed(1)
    base = FlowChunkPolicy(OBS, ACT, config)
    path = tmp_path / "bc" / "checkpoints" / "latest.pt"
    save_policy_checkpoint(path, base.state_dict())
    return str(path)


def _dsrl(tmp_path) -> tuple[DSRLPolicy, DSRL]:
    policy = DSRLPolicy(OBS, ACT, DSRLPolicyConfig(base=BASE, base_checkpoint=_base_checkpoint(tmp_path),
                                                   hidden_dims=[32, 32]))
    return policy, DSRL(policy, DSRLConfig(critic_hidden_dims=[32, 32]))


def _batch(b: int = 32) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"obs": torch.rand(b, 6, generator=g) * 2 - 1, "next_obs": torch.rand(b, 6, generator=g) * 2 - 1,
            "action": torch.rand(b, 12, generator=g) * 2 - 1, "reward": torch.rand(b, generator=g),
            "discount": torch.full((b,), 0.9)}


def test_the_flow_policy_stays_bit_identical_while_the_noise_policy_and_critics_learn(tmp_path):
    policy, algo = _dsrl(tmp_path)
    saved = torch.load(_base_checkpoint(tmp_path), weights_only=True)["algo"]["actor"]
    assert all(torch.equal(v, saved[k]) for k, v in policy.base.state_dict().items())  # loaded from the checkpoint
    noise_before = {k: v.clone() for k, v in policy.noise_actor.state_dict().items()}
    critic_before = {k: v.clone() for k, v in algo.critic.state_dict().items()}
    for _ in range(5):
        metrics = algo.update(_batch())
    assert all(np.isfinite(v) for v in metrics.values())
    assert all(torch.equal(v, saved[k]) for k, v in policy.base.state_dict().items())  # parameters and statistics
    assert any(not torch.equal(v, noise_before[k]) for k, v in policy.noise_actor.state_dict().items())
    assert any(not torch.equal(v, critic_before[k]) for k, v in algo.critic.state_dict().items())


def test_the_noise_policy_waits_for_the_critic_during_the_actor_warmup(tmp_path):
    policy = DSRLPolicy(OBS, ACT, DSRLPolicyConfig(base=BASE, base_checkpoint=_base_checkpoint(tmp_path),
                                                   hidden_dims=[32, 32]))
    algo = DSRL(policy, DSRLConfig(critic_hidden_dims=[32, 32], actor_warmup=3))
    weights = {k: v.clone() for k, v in policy.noise_actor.state_dict().items() if "normalise" not in k}
    critic = {k: v.clone() for k, v in algo.critic.state_dict().items()}
    for _ in range(3):
        metrics = algo.update(_batch())
    assert "actor_loss" not in metrics  # three critic-only updates
    assert all(torch.equal(v, policy.noise_actor.state_dict()[k]) for k, v in weights.items())
    assert any(not torch.equal(v, algo.critic.state_dict()[k]) for k, v in critic.items())
    assert "actor_loss" in algo.update(_batch())  # the fourth moves pi_W
    assert any(not torch.equal(v, policy.noise_actor.state_dict()[k]) for k, v in weights.items())
    with pytest.raises(ValueError, match="actor_warmup"):
        DSRLConfig(actor_warmup=-1)


def test_the_noise_policy_learns_through_the_flow(tmp_path):
    policy, algo = _dsrl(tmp_path)
    state = _batch()["obs"]
    w = torch.zeros(32, 4, 3, requires_grad=True)
    a = policy.actions(state, w)
    (grad,) = torch.autograd.grad(algo.critic(policy.normalise(state), a.flatten(1)).mean(), w)
    assert grad.abs().sum() > 0  # the critic's value moves with the noise, through the frozen flow
    assert not torch.allclose(policy.actions(state, torch.ones(32, 4, 3)), policy.actions(state, -torch.ones(32, 4, 3)))
    # the same noise is the same chunk: the flow is deterministic given it
    assert torch.equal(policy.actions(state, torch.ones(32, 4, 3)), policy.actions(state, torch.ones(32, 4, 3)))


def test_the_critic_scores_only_the_actions_executed_before_the_next_chunk(tmp_path, monkeypatch):
    import robolearn.learner.dsrl as dsrl_module

    policy = DSRLPolicy(OBS, ACT, DSRLPolicyConfig(base=BASE, base_checkpoint=_base_checkpoint(tmp_path),
                                                   hidden_dims=[32, 32]))
    algo = DSRL(policy, DSRLConfig(critic_hidden_dims=[32, 32], critic_horizon=2))  # 2 of the chunk's 4 actions
    state = _batch()["obs"]
    context = algo.context(state, None)
    torch.manual_seed(3)
    scored, _ = algo.policy_actions(state, context)
    torch.manual_seed(3)
    noise, _ = policy.noise(context)
    assert torch.equal(scored, policy.actions(state, noise)[:, :2].flatten(1))  # F_k: the first k actions
    windows = []
    monkeypatch.setattr(dsrl_module, "sample_windows", lambda *args, **kwargs: windows.append(args[3]))
    algo.sample_batch(None, ACT, 8)
    assert windows == [2]  # k-step windows: k actions, their k-step return, the observation k steps on
    batch = {**_batch(), "action": _batch()["action"][:, :6]}
    assert all(np.isfinite(v) for v in algo.update(batch).values())
    with pytest.raises(RuntimeError):  # the critic takes k actions, not the whole chunk
        algo.critic(policy.normalise(context), _batch()["action"])
    with pytest.raises(ValueError, match="critic_horizon"):
        DSRLConfig(critic_horizon=-1)
    with pytest.raises(ValueError, match=r"critic_horizon \(5\) must be at most the base's chunk of 4"):
        DSRL(policy, DSRLConfig(critic_horizon=5))


def test_the_noise_critic_is_distilled_from_the_action_critic_and_pi_w_learns_from_it_not_through_the_flow(
        tmp_path, monkeypatch):
    policy = DSRLPolicy(OBS, ACT, DSRLPolicyConfig(base=BASE, base_checkpoint=_base_checkpoint(tmp_path),
                                                   hidden_dims=[32, 32]))
    algo = DSRL(policy, DSRLConfig(critic_hidden_dims=[64, 64], noise_critic=True, critic_horizon=2))
    state = _batch(2)["obs"].repeat(32, 1)  # two states, alternating: Q_W must learn how the value moves with w
    context = algo.context(state, None)
    feat = policy.normalise(context)
    trained = algo.critic
    algo.critic = lambda feat, action: -(action ** 2).sum(dim=1, keepdim=True).T * 10  # (1, B): a critic that cares

    def fit_error() -> float:
        """Q_W(s, w) against the critic's value of F_k(s, w) on fresh noise from the base's prior: the larger of the
        two states' squared errors over that value's variance across the noise at the state."""
        with torch.no_grad():
            b = policy.config.noise_bound
            w = torch.randn(64, policy.horizon, policy.action_dim, generator=torch.Generator().manual_seed(9))
            w = w.clamp(-b, b)
            value = algo.critic(feat, policy.actions(state, w)[:, :2].flatten(1)).mean(dim=0)
            error = (algo.noise_critic(feat, w.flatten(1)).mean(dim=0) - value) ** 2
            return max(float(error[i::2].mean() / value[i::2].var()) for i in (0, 1))
    assert fit_error() > 1  # worse than the value's mean would be
    for _ in range(1000):  # the action critic held still: only Q_W learns
        algo.distil_step(state, context, feat)
    # Q_W(s, w) now says most of what the critic says of F_k(s, w) at each state (about 0.3 here; a constant scores
    # 1, and noise paired with another row's actions about 1.5: nothing in w then tells the value)
    assert fit_error() < 0.5
    algo.critic = trained

    graded = []  # was the flow ever run with gradients on? (pi_W's gradient through F would need them)
    chunk = policy.base.chunk_from_noise
    monkeypatch.setattr(policy.base, "chunk_from_noise", lambda *a, **k: graded.append(torch.is_grad_enabled())
                        or chunk(*a, **k))
    saved = {k: v.clone() for k, v in policy.base.state_dict().items()}
    batch = {**_batch(), "action": _batch()["action"][:, :6]}
    for _ in range(3):
        metrics = algo.update(batch)
    assert {"noise_critic_loss", "actor_loss"} <= metrics.keys() and all(np.isfinite(v) for v in metrics.values())
    assert graded and not any(graded)  # F ran for the TD target and the distillation only, never for pi_W's step
    assert all(torch.equal(v, saved[k]) for k, v in policy.base.state_dict().items())
    graded.clear()
    DSRL(policy, DSRLConfig(critic_hidden_dims=[32, 32], critic_horizon=2)).update(batch)
    assert any(graded)  # without the noise critic pi_W's step does run F with gradients (the check can fail)

    # pi_W climbs Q_W: with a noise critic that peaks at w = 0.5 everywhere, its mean noise moves there
    algo.noise_critic = lambda feat, w: -((w - 0.5) ** 2).sum(dim=1, keepdim=True).T * 10  # (1, B)
    monkeypatch.setattr(algo, "distil_step", lambda *args: {})  # Q_W held at that
    context = algo.context(batch["obs"], None)

    def distance() -> float:
        with torch.no_grad():
            return float((policy.noise(context, explore=False)[0] - 0.5).abs().mean())
    before = distance()
    for _ in range(100):
        algo.update(batch)
    assert distance() < 0.5 * before


def test_the_target_entropy_counts_every_element_of_the_noise(tmp_path):
    policy = DSRLPolicy(OBS, ACT, DSRLPolicyConfig(base=BASE, base_checkpoint=_base_checkpoint(tmp_path),
                                                   hidden_dims=[32, 32]))
    assert DSRL(policy, DSRLConfig(critic_horizon=2)).target_entropy == -0.5 * 4 * 3  # |W| = H * A, not k * A
    assert DSRL(policy, DSRLConfig(target_entropy_per_dim=0.0)).temperature.target_entropy == 0.0
    with pytest.raises(ValueError, match="target_entropy_per_dim must be a finite number"):
        DSRLConfig(target_entropy_per_dim=float("nan"))


def test_shared_noise_is_one_action_sized_choice_started_at_every_position_of_the_chunk(tmp_path):
    policy = DSRLPolicy(OBS, ACT, DSRLPolicyConfig(base=BASE, base_checkpoint=_base_checkpoint(tmp_path),
                                                   hidden_dims=[32, 32], shared_noise=True))
    assert policy.noise_dim == 3 and policy.noise_actor.action_dim == 3  # |W| = A, not H * A
    state = _batch()["obs"]
    torch.manual_seed(0)
    w, log_prob = policy.noise(state)
    assert w.shape == (32, 4, 3) and log_prob.shape == (32,)
    assert torch.equal(w, w[:, :1].expand(-1, 4, -1))  # the same vector at each of the H positions
    assert not torch.equal(w[0, 0], w[1, 0])  # chosen per state
    assert torch.equal(policy.chunk_noise(policy.noise_vector(w)), w)
    # served: the base's chunk from the repeated noise policy's mean
    prefix, prefix_len = np.zeros((32, 2, 3), np.float32), np.zeros(32, np.int64)
    mean, _ = policy.noise(state, explore=False)
    served = policy.predict_chunk({"state": state.numpy()}, prefix, prefix_len)
    np.testing.assert_array_equal(served, policy.base.chunk_from_noise(
        state, mean, torch.as_tensor(prefix), torch.as_tensor(prefix_len)).detach().numpy())
    algo = DSRL(policy, DSRLConfig(critic_hidden_dims=[32, 32], noise_critic=True, critic_horizon=2))
    assert algo.target_entropy == -0.5 * 3  # e * |W| with |W| = A
    batch = {**_batch(), "action": _batch()["action"][:, :6]}
    before = {k: v.clone() for k, v in policy.noise_actor.state_dict().items()}
    for _ in range(3):
        metrics = algo.update(batch)  # Q_W reads v (B, A)
    assert all(np.isfinite(v) for v in metrics.values())
    assert any(not torch.equal(v, before[k]) for k, v in policy.noise_actor.state_dict().items())
    with pytest.raises(RuntimeError):  # Q_W takes the A-vector, not the chunk's H * A noise
        algo.noise_critic(policy.normalise(state), w.flatten(1))
    # without the noise critic pi_W's gradient comes through F from the repeated vector
    through_flow = DSRL(policy, DSRLConfig(critic_hidden_dims=[32, 32], critic_horizon=2))
    before = {k: v.clone() for k, v in policy.noise_actor.state_dict().items()}
    assert "actor_loss" in through_flow.update(batch)
    assert any(not torch.equal(v, before[k]) for k, v in policy.noise_actor.state_dict().items())
    # the noise bound's constant: log pi_W(v) = log pi(u) - |W| log b, |W| = A
    wide = DSRLPolicy(OBS, ACT, DSRLPolicyConfig(base=BASE, base_checkpoint=_base_checkpoint(tmp_path),
                                                 hidden_dims=[32, 32], shared_noise=True, noise_bound=2.0))
    wide.noise_actor.load_state_dict(policy.noise_actor.state_dict())
    torch.manual_seed(1)
    _, narrow_log_prob = policy.noise(state)
    torch.manual_seed(1)
    _, wide_log_prob = wide.noise(state)
    torch.testing.assert_close(wide_log_prob, narrow_log_prob - 3 * (np.log(2.0) - np.log(1.5)))
    # a run resumed with the other setting is told which
    per_action = DSRLPolicy(OBS, ACT, DSRLPolicyConfig(base=BASE, base_checkpoint=_base_checkpoint(tmp_path),
                                                       hidden_dims=[32, 32]))
    resumed = DSRL(per_action, DSRLConfig(critic_hidden_dims=[32, 32], noise_critic=True, critic_horizon=2))
    with pytest.raises(ValueError, match="policy.shared_noise it was saved with"):
        resumed.load_state_dict(algo.state_dict())


def test_a_critic_horizon_other_than_the_executed_actions_is_warned_of(tmp_path, capsys):
    from robolearn.builders import build_policy, task_specs
    from robolearn.config import check_buildable, validate
    from tests.test_cli_config import _cfg

    base = {"hidden_dims": "[32,32]", "chunk_horizon": "4", "max_prefix": "2", "flow_steps": "4"}
    flow = validate(_cfg(policy="flow_chunk", **{f"policy.{k}": v for k, v in base.items()}))
    path = tmp_path / "bc" / "checkpoints" / "latest.pt"
    save_policy_checkpoint(path, build_policy(flow, *task_specs(flow)).state_dict())

    def check(critic: int, executed: int) -> str:
        check_buildable(validate(_cfg(**{"policy": "dsrl", "algo": "dsrl", "policy.base_checkpoint": path,
                                         **{f"policy.base.{k}": v for k, v in base.items()},
                                         "algo.critic_horizon": critic, "actor.chunking.execute_horizon": executed})))
        return capsys.readouterr().err
    assert "critic_horizon" not in check(2, 2) and "critic_horizon" not in check(0, 0)  # 0: the whole chunk
    assert "algo.critic_horizon=0 scores 4 actions of each chunk, and the robot executes 2" in check(0, 2)


def test_serving_keeps_the_committed_prefix_and_stays_in_bounds(tmp_path):
    policy, _ = _dsrl(tmp_path)
    state = np.random.default_rng(0).uniform(-1, 1, (2, 6)).astype(np.float32)
    prefix = np.full((2, 2, 3), 0.25, np.float32)
    for explore in (False, True):
        chunks = policy.predict_chunk({"state": state}, prefix, np.array([2, 0]), explore=explore)
        assert chunks.shape == (2, 4, 3) and np.abs(chunks).max() <= 1.0
        np.testing.assert_allclose(chunks[0, :2], prefix[0])  # row 0's first two actions are committed


def test_a_wrong_set_up_is_named(tmp_path):
    mlp = GaussianChunkPolicy(OBS, ACT, MLPPolicyConfig(hidden_dims=[8]))
    with pytest.raises(ValueError, match="policy=dsrl"):
        DSRL(mlp, DSRLConfig())
    with pytest.raises(ValueError, match="set policy.base_checkpoint"):
        DSRL(DSRLPolicy(OBS, ACT, DSRLPolicyConfig(base=BASE)), DSRLConfig())
    missing = DSRLPolicy(OBS, ACT, DSRLPolicyConfig(base=BASE, base_checkpoint=str(tmp_path / "none.pt")))
    with pytest.raises(ValueError, match="policy.base_checkpoint: .* no checkpoint"):
        DSRL(missing, DSRLConfig())
    other = FlowChunkPolicyConfig(chunk_horizon=4, max_prefix=2, hidden_dims=[16], flow_steps=4)
    wrong = DSRLPolicy(OBS, ACT, DSRLPolicyConfig(base=BASE, base_checkpoint=_base_checkpoint(tmp_path, other)))
    with pytest.raises(ValueError, match="policy.base does not describe the flow policy"):
        DSRL(wrong, DSRLConfig())
    with pytest.raises(ValueError, match="one-stage"):
        DSRLPolicyConfig(base=FlowChunkPolicyConfig(mid_observation=True))


@pytest.mark.parametrize("noise_critic", [False, True])
def test_a_dsrl_learner_on_reach_resumes_exactly_and_never_changes_the_flow_policy(tmp_path, noise_critic):
    from robolearn.builders import build_policy, task_specs
    from robolearn.config import RunConfig, validate
    from robolearn.learner.loop import Learner
    from robolearn.rundir import RunDir
    from tests.test_cli_config import _cfg
    from tests.test_exact_resume import fill, params

    base = {"hidden_dims": "[32,32]", "chunk_horizon": "4", "max_prefix": "2", "flow_steps": "4"}
    bc = validate(_cfg(task="reach", policy="flow_chunk", algo="habc", **{f"policy.{k}": v for k, v in base.items()}))
    flow = build_policy(bc, *task_specs(bc))  # stands in for a trained one: DSRL treats any as frozen
    path = tmp_path / "bc" / "checkpoints" / "latest.pt"
    save_policy_checkpoint(path, flow.state_dict())
    overrides = {**{f"policy.base.{k}": v for k, v in base.items()}, "policy.base_checkpoint": str(path),
                 "policy.hidden_dims": "[32,32]", "algo.critic_hidden_dims": "[32,32]", "learner.batch_size": "32"}

    def dsrl_config(noise_critic: bool) -> RunConfig:
        return validate(_cfg(task="reach", policy="dsrl", algo="dsrl", run_name="dsrl", **overrides,
                             **{"algo.noise_critic": str(noise_critic).lower()}))
    cfg = dsrl_config(noise_critic)
    run = RunDir(tmp_path / "run")
    a = Learner(run, cfg, stop=None)
    fill(a)
    for _ in range(4):
        a.update_once()
    a.checkpoint()
    metrics_a, after_a = a.update_once(), params(a)
    a.buffer.close()
    b = Learner(run, cfg, stop=None)
    assert b.resumed_from["updates"] == 4
    assert b.update_once() == metrics_a
    after_b = params(b)
    b.buffer.close()
    assert all(torch.equal(after_a[k], after_b[k]) for k in after_a)
    frozen = flow.state_dict()
    assert all(torch.equal(after_b[f"base.{k}"], v) for k, v in frozen.items())  # the flow policy, bit for bit
    assert ("noise_critic_loss" in metrics_a) == noise_critic
    with pytest.raises(ValueError, match="resume with the setting it was saved with"):
        Learner(run, dsrl_config(not noise_critic), stop=None)


@pytest.mark.e2e
@pytest.mark.slow  # about a minute: a BC flow policy on reach's expert, then robolearn run with DSRL on it
def test_robolearn_run_steers_a_bc_flow_policy_and_leaves_it_unchanged(tmp_path):
    import json

    from robolearn.builders import build_policy, build_task, task_specs
    from robolearn.config import validate
    from robolearn.learner.bc import expert_demos, train_bc
    from tests.helpers import fast_run_overrides, robolearn
    from tests.test_cli_config import _cfg

    base = {"hidden_dims": "[64,64]", "chunk_horizon": "4", "max_prefix": "2", "flow_steps": "4"}
    bc = validate(_cfg(task="reach", policy="flow_chunk", algo="habc", **{f"policy.{k}": v for k, v in base.items()}))
    flow = build_policy(bc, *task_specs(bc))
    env = build_task(bc)
    train_bc(flow, expert_demos(env, 20, flow.horizon), steps=300, batch_size=128)
    env.close()
    path = tmp_path / "runs" / "bc" / "checkpoints" / "latest.pt"
    save_policy_checkpoint(path, flow.state_dict())

    overrides = [o for o in fast_run_overrides("dsrl", 0.5) if not o.startswith("policy.hidden_dims")]
    r = robolearn(["run", *overrides, "policy=dsrl", "algo=dsrl", f"policy.base_checkpoint={path}",
                   "policy.hidden_dims=[32,32]", *[f"policy.base.{k}={v}" for k, v in base.items()],
                   "algo.critic_horizon=2", "actor.chunking.execute_horizon=2"],  # the critic on what executes
                  cwd=tmp_path, timeout=240)
    run = tmp_path / "runs" / "dsrl"
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((run / "logs").glob("*.log")))
    assert r.returncode == 0, r.stdout + r.stderr + logs
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ok"] and summary["updates"] > 0 and summary["actors"][0]["versions_received"] >= 2, summary
    learned = torch.load(run / "checkpoints" / "latest.pt", weights_only=True)["algo"]["actor"]
    assert all(torch.equal(learned[f"base.{k}"], v) for k, v in flow.state_dict().items())  # bit for bit
    ev = robolearn(["eval", f"run_dir={run}", "episodes=3"], cwd=tmp_path, timeout=120)
    assert ev.returncode == 0 and "over 3 episodes" in ev.stdout, ev.stdout + ev.stderr


def test_the_feature_cache_encodes_each_id_once_and_starts_again_when_full():
    calls = []

    def encode(obs):
        calls.append(obs["x"][:, 0].tolist())
        return obs["x"] * 2

    cache = FeatureCache(encode, capacity=4)
    x = torch.tensor([[1.0], [2.0], [1.0], [3.0]])  # ids 10, 20, 10, 30: row 2 is row 0 drawn again
    out = cache({"x": x}, torch.tensor([10, 20, 10, 30]))
    assert out[:, 0].tolist() == [2.0, 4.0, 2.0, 6.0] and calls == [[1.0, 2.0, 3.0]] and len(cache) == 3
    assert cache({"x": x[[3, 0]]}, torch.tensor([30, 10]))[:, 0].tolist() == [6.0, 2.0] and len(calls) == 1
    # two new ids do not fit beside three: the cache starts again with just them
    out = cache({"x": torch.tensor([[4.0], [5.0]])}, torch.tensor([40, 50]))
    assert out[:, 0].tolist() == [8.0, 10.0] and len(cache) == 2 and calls[-1] == [4.0, 5.0]
    assert cache({"x": x[:1]}, torch.tensor([10]))[:, 0].tolist() == [2.0] and calls[-1] == [1.0]
    assert (cache.encoded, cache.lookups) == (6, 9)
    # a batch of kept and new ids that does not fit: all of it encoded again, none of it lost
    out = cache({"x": torch.tensor([[5.0], [6.0], [7.0], [1.0]])}, torch.tensor([50, 60, 70, 10]))
    assert out[:, 0].tolist() == [10.0, 12.0, 14.0, 2.0] and calls[-1] == [1.0, 5.0, 6.0, 7.0] and len(cache) == 4
    with pytest.raises(ValueError, match="at least one row"):
        FeatureCache(encode, capacity=0)
