"""Queue, scheduler and splicing semantics of the chunk executor, with a scripted policy whose chunks
are easy to read: action value = 100 * request id + chunk position (1-D actions in robot units)."""

import numpy as np
import pytest

from robolearn.actor.action_queue import ActionQueue
from robolearn.actor.chunking import ChunkExecutor, ChunkingConfig, DelayEstimator
from robolearn.clock import DelaySampler, SimClock
from robolearn.inference.client import SimulatedLatencyClient
from robolearn.inference.protocol import ChunkResponse
from robolearn.specs import ActionSpec, ArraySpec

H = 8
SPEC = ActionSpec(ArraySpec((1,), low=(-1000.0,), high=(1000.0,)))  # robot units == 1000 * normalised


class ScriptedRunner:
    """Stands in for ChunkPolicyRunner: records requests, returns readable chunks honouring the prefix."""

    def __init__(self):
        self.requests = []
        self.trunk_saw = []  # two-stage: (request id, its observation's state, whether a mid observation was there)

    def run_trunk(self, requests):
        self.trunk_saw += [(r.request_id, r.observation["state"][0], r.mid_observation is not None) for r in requests]
        return "features"

    def run_head(self, requests, trunk):
        assert trunk == "features"
        return self.run(requests)

    def run(self, requests):
        out = []
        for r in requests:
            self.requests.append(r)
            values = (100.0 * r.request_id + np.arange(H)) / 1000.0
            chunk = values[:, None].astype(np.float32)
            # like ChunkPolicyRunner: a two-stage chunk starts at the mid observation's tick
            k = 0 if r.mid_observation is None else r.mid_tick - r.tick
            chunk[:r.prefix_len - k] = r.prefix[k:]  # a prefix-conditioned policy agrees with the committed actions
            out.append(ChunkResponse(r.request_id, r.tick, chunk, policy_version=7, prefix_len=r.prefix_len - k,
                                     chunk_start=r.tick + k))
        return out


def executor(mode, delay, splice="prefix", **kw):
    runner = ScriptedRunner()
    clock = SimClock(DelaySampler("fixed", ticks=delay))
    ex = ChunkExecutor(SimulatedLatencyClient(runner, clock), SPEC, H,
                       ChunkingConfig(mode=mode, splice=splice, initial_delay=delay, **kw))
    return ex, runner


def run(ex, ticks, start=0):
    obs = {"state": np.zeros(3, np.float32)}
    ex.start_episode(obs, start, SimClock())
    out = []
    for t in range(start, start + ticks):
        item = ex.tick(t, obs)
        out.append(None if item is None else round(float(item.action[0])))
    return out


def test_queue_never_returns_an_action_twice_or_out_of_order():
    q = ActionQueue()
    q.push_chunk(0, np.arange(5, dtype=np.float32)[:, None], chunk_id=0, policy_version=1)
    assert q.pop(0).tick == 0
    with pytest.raises(ValueError, match="already executed"):
        q.pop(0)
    # a late chunk cannot re-queue a tick that already ran
    assert q.replace_from(0, 0, np.ones((3, 1), np.float32), 1, 1, 0) == 2
    assert q.pop(1).chunk_id == 1 and q.remaining(2) == 3


def test_blend_is_lerobots_weighted_average_on_overlap_only():
    q = ActionQueue()
    q.push_chunk(0, np.full((4, 1), 10.0, np.float32), chunk_id=0, policy_version=1)
    q.blend_from(2, 2, np.full((4, 1), 20.0, np.float32), 0.3, chunk_id=1, policy_version=2, delay_ticks=0)
    got = [float(q.pop(t).action[0]) for t in range(6)]
    assert got == pytest.approx([10, 10, 0.3 * 10 + 0.7 * 20, 0.3 * 10 + 0.7 * 20, 20, 20])


def test_sync_mode_holds_still_for_the_whole_delay():
    ex, _ = executor("sync", delay=3)
    out = run(ex, 2 * H + 6)
    # first chunk at rest; then every empty queue costs exactly `delay` stalled ticks
    assert out[:H] == list(range(H))
    assert out[H:H + 3] == [None, None, None]
    assert out[H + 3:2 * H + 3] == [100 + k for k in range(H)]
    assert ex.metrics.stalled_ticks == 6


def test_naive_async_asks_at_the_threshold_drops_stale_and_blends():
    ex, runner = executor("naive_async", delay=2, queue_threshold=0.5)
    out = run(ex, H + 2)
    # asked when 4 of 8 remained (tick 4); the answer for ticks 4.. arrives at tick 6: 4 and 5 are stale,
    # ticks 6 and 7 are blended 0.3 old + 0.7 new, ticks 8.. are new
    assert runner.requests[1].tick == 4 and runner.requests[1].prefix_len == 0
    assert out[:6] == [0, 1, 2, 3, 4, 5]
    assert out[6] == round(0.3 * 6 + 0.7 * 102) and out[7] == round(0.3 * 7 + 0.7 * 103)
    assert out[8:] == [104, 105]
    assert ex.metrics.stalled_ticks == 0


def test_latency_aware_asks_just_in_time_with_the_committed_prefix():
    ex, runner = executor("latency_aware", delay=3)
    out = run(ex, 3 * H)
    second = runner.requests[1]
    # asked when exactly `delay` actions were left; they are the committed prefix
    assert second.tick == H - 3 and second.planned_delay == 3
    np.testing.assert_allclose(second.prefix[:, 0] * 1000, [5, 6, 7], atol=1e-3)
    # no stall, the committed actions run unchanged, the new chunk takes over right after them
    assert None not in out and ex.metrics.stalled_ticks == 0
    assert out[:H] == list(range(H)) and out[H:H + 5] == [103, 104, 105, 106, 107]
    assert ex.metrics.delays == {3: len(runner.requests) - 1}


def test_latency_aware_learns_a_longer_delay_than_it_assumed():
    runner = ScriptedRunner()
    clock = SimClock(DelaySampler("fixed", ticks=4))
    ex = ChunkExecutor(SimulatedLatencyClient(runner, clock), SPEC, H,
                       ChunkingConfig(mode="latency_aware", initial_delay=1))
    out = run(ex, 6 * H)
    assert ex.delay.planned() == 4
    stalls_late = sum(v is None for v in out[3 * H:])
    assert ex.metrics.stalled_ticks > 0 and stalls_late == 0  # early misses only, then on time


def test_replace_splice_drops_the_stale_head_of_a_late_chunk():
    ex, _ = executor("latency_aware", delay=2, splice="replace")
    out = run(ex, H + 2)
    # the second chunk (asked at tick 6 for ticks 6..) arrives at tick 8: its first two are stale
    assert out[:H] == list(range(H)) and out[H:] == [102, 103]


def test_delay_estimate_is_the_windowed_quantile():
    est = DelayEstimator(window=10, quantile=0.9, initial=2)
    assert est.planned() == 2
    for d in [1] * 9 + [9]:
        est.add(d)
    assert est.planned() == 2  # ceil of the 0.9 quantile (1.8)
    for d in [5] * 10:
        est.add(d)
    assert est.planned() == 5  # old samples left the window


def test_lost_request_is_resent_after_the_timeout():
    class BlackHole:
        submitted = 0

        def submit(self, request):
            BlackHole.submitted += 1

        def poll(self, tick):
            return []

    ex = ChunkExecutor(BlackHole(), SPEC, H, ChunkingConfig(request_timeout=5))
    obs = {"state": np.zeros(3, np.float32)}
    for t in range(20):
        assert ex.tick(t, obs) is None  # stalls, never blocks
    assert ex.metrics.resent == 3 and BlackHole.submitted == 4 and ex.metrics.stalled_ticks == 20


@pytest.mark.parametrize("bad", [{"mode": "fast"}, {"splice": "mix"}, {"queue_threshold": 0}, {"delay_quantile": 2}])
def test_bad_chunking_config_names_the_key(bad):
    with pytest.raises(ValueError, match=f"chunking.{next(iter(bad))}"):
        ChunkingConfig(**bad)


def test_delay_sampler_is_seeded():
    a = [DelaySampler("uniform", low=1, high=6, seed=3).sample() for _ in range(1)]
    s1, s2 = DelaySampler("uniform", low=1, high=6, seed=3), DelaySampler("uniform", low=1, high=6, seed=3)
    seq1, seq2 = [s1.sample() for _ in range(50)], [s2.sample() for _ in range(50)]
    assert seq1 == seq2 and set(seq1) == {1, 2, 3, 4, 5, 6} and a[0] == seq1[0]
    with pytest.raises(ValueError, match="low <= high"):
        DelaySampler("uniform", low=3, high=1)


def test_same_seed_same_trajectory_under_the_simulated_clock():
    import torch

    from robolearn.actor.episode import EpisodeLoop, SeedTorch
    from robolearn.inference.runner import ChunkPolicyRunner
    from robolearn.policies.flow_chunk import FlowChunkPolicy, FlowChunkPolicyConfig
    from robolearn.sim.cube_tasks import PushCubeEnv

    env = PushCubeEnv()
    torch.manual_seed(0)
    policy = FlowChunkPolicy(env.observation_spec, env.action_spec,
                             FlowChunkPolicyConfig(chunk_horizon=8, max_prefix=4, hidden_dims=[32], flow_steps=3))
    runner = ChunkPolicyRunner(policy, env.observation_spec, env.action_spec.dim)

    def trajectory(delay_seed):
        clock = SimClock(DelaySampler("uniform", low=0, high=4, seed=delay_seed))
        ex = ChunkExecutor(SimulatedLatencyClient(runner, clock), env.action_spec, 8,
                           ChunkingConfig(mode="latency_aware", max_prefix=4, execute_horizon=4))
        loop = EpisodeLoop(env, ex, clock, subscribers=[SeedTorch()])
        results = [loop.run(seed=seed) for seed in (3, 4)]
        return results, ex.metrics.summary()

    (a, ma), (b, mb), (_, mc) = trajectory(1), trajectory(1), trajectory(2)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.actions, y.actions)
    assert ma == mb and len(ma["delay_histogram"]) > 1   # the delays really varied, identically
    assert ma["delay_histogram"] != mc["delay_histogram"]  # another delay seed is another run


def test_two_stage_request_gets_the_mid_observation_d_rl_ticks_before_the_chunk_is_due():
    delay, d_rl = 4, 1
    ex, runner = executor("latency_aware", delay, mid_observation_ticks=d_rl, execute_horizon=4)
    ex.start_episode({"state": np.zeros(3, np.float32)}, 0, SimClock())
    out = []
    for t in range(3 * H):
        item = ex.tick(t, {"state": np.full(3, t, np.float32)})  # the state says which tick it is from
        out.append(None if item is None else item.tick)
    assert None not in out and out == list(range(3 * H))  # never stalls, every tick once, in order
    assert runner.requests[0].mid_observation is None      # the first request, at rest, is one-stage
    later = runner.requests[1:]
    assert later and all(r.mid_ticks == d_rl for r in later)
    for r in later:
        assert r.mid_tick == r.tick + delay - d_rl
        assert r.mid_observation["state"][0] == r.mid_tick and r.observation["state"][0] == r.tick
    # the trunk ran on each two-stage request when it was made: on its first observation, before any mid one
    assert runner.trunk_saw == [(r.request_id, r.tick, False) for r in later]
    # the chunk still arrives after the whole delay
    assert set(ex.metrics.delays) == {delay}


def test_two_stage_needs_a_client_and_a_policy_that_take_the_mid_observation():
    from robolearn.inference.client import RemoteClient
    from robolearn.inference.protocol import ChunkRequest
    from robolearn.inference.runner import ChunkPolicyRunner
    from robolearn.policies.mlp import GaussianChunkPolicy, MLPPolicyConfig
    from robolearn.specs import ObservationSpec, SpecError

    class OneStageClient:  # a client that cannot take a mid observation
        def submit(self, request): ...

        def poll(self, tick): return []

        def close(self): ...

    with pytest.raises(ValueError, match="mid_observation_ticks needs a client.*OneStageClient"):
        ChunkExecutor(OneStageClient(), SPEC, H, ChunkingConfig(mid_observation_ticks=1))
    remote = RemoteClient("tcp://127.0.0.1:1", "r0", H, SPEC.dim)
    try:  # over the wire too: the server's head takes it
        ChunkExecutor(remote, SPEC, H, ChunkingConfig(mid_observation_ticks=1))
    finally:
        remote.close()
    with pytest.raises(ValueError, match="mode=latency_aware"):
        ChunkingConfig(mode="naive_async", mid_observation_ticks=1)
    obs_spec = ObservationSpec({"state": ArraySpec((3,), low=(-1.0,) * 3, high=(1.0,) * 3)})
    runner = ChunkPolicyRunner(GaussianChunkPolicy(obs_spec, SPEC, MLPPolicyConfig(chunk_horizon=H)), obs_spec, 1)
    state = {"state": np.zeros(3, np.float32)}
    req = ChunkRequest(0, 0, state, np.zeros((0, 1), np.float32), 3, mid_ticks=1, mid_observation=state, mid_tick=2)
    with pytest.raises(SpecError, match="takes no mid-inference observation"):
        runner.run([req])


def test_two_stage_delay_estimate_comes_down_when_it_was_planned_too_high():
    # the policy answers in 1 tick but the scheduler starts out planning for 4: the mid observation is
    # then sent late and holds the answer back; the estimate must still fall to the real delay
    runner = ScriptedRunner()
    clock = SimClock(DelaySampler("fixed", ticks=1))
    ex = ChunkExecutor(SimulatedLatencyClient(runner, clock), SPEC, H,
                       ChunkingConfig(mode="latency_aware", initial_delay=4, mid_observation_ticks=1,
                                      execute_horizon=4, delay_window=10))
    out = run(ex, 40 * H)
    assert None not in out
    assert ex.delay.planned() == 1
    assert ex.metrics.delays[1] > ex.metrics.delays.get(4, 0)


@pytest.mark.parametrize("d_rl", [0, 1])
def test_each_chunk_runs_s_actions_from_its_arrival(d_rl):
    """One-stage (d_rl=0): chunk positions d..d+s-1 execute. Two-stage: the chunk starts at the mid
    observation, d - d_rl ticks later, so positions d_rl..d_rl+s-1 execute (fresher)."""
    delay, s = 3, 4  # s >= d (one request in flight: a chunk runs at least d actions) and d + s <= H
    ex, runner = executor("latency_aware", delay, mid_observation_ticks=d_rl, execute_horizon=s)
    ex.start_episode({"state": np.zeros(3, np.float32)}, 0, SimClock())
    items = [ex.tick(t, {"state": np.full(3, t, np.float32)}) for t in range(12 * H)]
    assert None not in items
    later = items[4 * H:]  # steady state
    first_executed = d_rl if d_rl else delay
    assert {it.chunk_index for it in later} == set(range(first_executed, first_executed + s))
    ticks = [r.tick for r in runner.requests[5:]]
    assert set(np.diff(ticks)) == {s}


@pytest.mark.parametrize("in_flight", [1, 4])
def test_pipelined_requests_keep_the_robot_fed_when_inference_takes_most_of_a_chunk(in_flight):
    """Inference of 4-6 ticks with H = 8 (0.5-0.75 of the chunk): one request at a time brings at most H - d new
    actions per d ticks and stalls; with requests pipelined (asked every s = 2 ticks, several in flight) none."""
    runner = ScriptedRunner()
    clock = SimClock(DelaySampler("uniform", low=4, high=6, seed=3))
    ex = ChunkExecutor(SimulatedLatencyClient(runner, clock), SPEC, H,
                       ChunkingConfig(mode="latency_aware", initial_delay=6, execute_horizon=2,
                                      max_in_flight=in_flight))
    ex.start_episode({"state": np.zeros(3, np.float32)}, 0, SimClock())
    items, most_in_flight = [], 0
    for t in range(400):
        items.append(ex.tick(t, {"state": np.zeros(3, np.float32)}))
        most_in_flight = max(most_in_flight, len(ex._in_flight))
    executed = [it for it in items if it is not None]
    assert [it.tick for it in executed] == sorted({it.tick for it in executed})  # once each, in order
    chunks = [it.chunk_id for it in executed]
    assert chunks == sorted(chunks)  # an older chunk never comes back after a newer one
    assert most_in_flight <= in_flight
    if in_flight == 1:
        assert ex.metrics.stalled_ticks > 50
    else:
        assert ex.metrics.stalled_ticks == 0 and most_in_flight > 1
        assert set(ex.metrics.delays) == {4, 5, 6}  # the delays really varied


def test_max_in_flight_needs_the_latency_aware_mode():
    with pytest.raises(ValueError, match="max_in_flight"):
        ChunkingConfig(mode="naive_async", max_in_flight=2)
    with pytest.raises(ValueError, match="max_in_flight"):
        ChunkingConfig(max_in_flight=0)


def test_a_pipelined_chunk_that_arrives_after_a_newer_one_is_dropped():
    runner = ScriptedRunner()
    clock = SimClock(DelaySampler("uniform", low=1, high=7, seed=5))  # later requests often overtake earlier ones
    ex = ChunkExecutor(SimulatedLatencyClient(runner, clock), SPEC, H,
                       ChunkingConfig(mode="latency_aware", initial_delay=6, execute_horizon=2, max_in_flight=4))
    ex.start_episode({"state": np.zeros(3, np.float32)}, 0, SimClock())
    executed = [it for t in range(400) if (it := ex.tick(t, {"state": np.zeros(3, np.float32)})) is not None]
    chunks = [it.chunk_id for it in executed]
    assert chunks == sorted(chunks) and len(set(chunks)) > 50


def test_two_stage_requests_are_not_pipelined_and_need_a_two_stage_policy():
    from robolearn.inference.protocol import ChunkRequest
    from robolearn.inference.runner import ChunkPolicyRunner
    from robolearn.policies.flow_chunk import FlowChunkPolicy, FlowChunkPolicyConfig
    from robolearn.sim.reach import ReachEnv
    from robolearn.specs import SpecError

    with pytest.raises(ValueError, match="cannot be combined"):
        ChunkingConfig(max_in_flight=2, mid_observation_ticks=1)
    env = ReachEnv()
    one_stage = FlowChunkPolicy(env.observation_spec, env.action_spec, FlowChunkPolicyConfig(hidden_dims=[16]))
    runner = ChunkPolicyRunner(one_stage, env.observation_spec, 6)
    obs, _ = env.reset(seed=0)
    req = ChunkRequest(0, 0, obs, np.zeros((2, 6), np.float32), planned_delay=2, mid_ticks=1)
    with pytest.raises(SpecError, match="takes no mid-inference observation"):
        runner.run_trunk([req])
    env.close()
