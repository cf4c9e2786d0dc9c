"""The policy server process: batching, versions, hostile requests, and a restart mid-run."""

import signal
import time

import numpy as np
import pytest
import torch
import zmq

from robolearn.actor.chunking import ChunkExecutor, ChunkingConfig
from robolearn.actor.episode import hold_action
from robolearn.clock import RealClock
from robolearn.inference.client import RemoteClient
from robolearn.inference.protocol import MID, REQUEST, ChunkRequest, request_to_wire
from robolearn.inference.runner import ChunkPolicyRunner
from robolearn.inference.server import PolicyServer
from robolearn.policies.flow_chunk import FlowChunkPolicy, FlowChunkPolicyConfig
from robolearn.runtime.policy_server import spawn_server
from robolearn.sim.reach import ReachEnv
from robolearn.transport.sockets import send

H, A = 8, 6  # the chunk every client here expects: the policy's horizon, reach's action dim
POLICY_CFG = {"chunk_horizon": H, "max_prefix": 4, "hidden_dims": [64, 64], "flow_steps": 4}


@pytest.fixture
def env():
    e = ReachEnv()
    yield e
    e.close()


def make_runner(env) -> ChunkPolicyRunner:
    torch.manual_seed(0)
    policy = FlowChunkPolicy(env.observation_spec, env.action_spec, FlowChunkPolicyConfig(**POLICY_CFG))
    return ChunkPolicyRunner(policy, env.observation_spec, env.action_spec.dim, version=3)


def request(env, i, prefix_len=0):
    obs, _ = env.reset(seed=i)
    prefix = np.full((prefix_len, 6), 0.5, np.float32)
    return ChunkRequest(i, 100 + i, obs, prefix, planned_delay=prefix_len, robot_id=f"robot-{i}")


def test_concurrent_robots_are_batched_and_get_their_own_chunks(env):
    server = PolicyServer(make_runner(env))
    clients = [RemoteClient(server.endpoint, f"robot-{i}", H, A) for i in range(4)]
    try:
        for i, c in enumerate(clients):
            c.submit(request(env, i, prefix_len=i))
        time.sleep(0.2)  # all four are waiting: one forward pass serves them
        assert server.serve_once(1000) == 4 and list(server.batch_sizes) == [4]
        for i, c in enumerate(clients):
            (resp,) = c.poll(0, timeout_ms=2000)
            assert resp.request_id == i and resp.tick == 100 + i and resp.policy_version == 3
            assert resp.actions.shape == (8, 6) and resp.prefix_len == i
            np.testing.assert_allclose(resp.actions[:i], 0.5, atol=1e-6)  # the committed prefix is kept
    finally:
        for c in clients:
            c.close()
        server.close()


def test_bad_requests_are_rejected_and_counted_not_fatal(env):
    server = PolicyServer(make_runner(env))
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(server.endpoint)
    try:
        sock.send_multipart([b"\x80\x04\x95 pickle", b"x"])  # not our wire format
        req = request(env, 0)
        meta, arrays = request_to_wire(req)
        arrays["obs.state"] = np.zeros(5, np.float32)  # wrong shape
        send(sock, REQUEST, "r", 0, meta, arrays)
        meta, arrays = request_to_wire(request(env, 1, prefix_len=9))  # prefix longer than the chunk
        send(sock, REQUEST, "r", 1, meta, arrays)
        time.sleep(0.2)
        assert server.serve_once(500) == 0
        assert server.rejects.total == 3 and "prefix" in server.rejects.last_reason
        send(sock, MID, "r", 2, {"request_id": "zero", "tick": 0}, {})  # a mid observation with a bad id
        time.sleep(0.2)
        assert server.serve_once(500) == 0
        assert server.rejects.total == 4 and "chunk_mid field 'request_id'" in server.rejects.last_reason
        state = request(env, 0).observation["state"]
        send(sock, MID, "r", 3, {"request_id": 7, "tick": 0}, {"obs.state": state})  # for no request waiting
        time.sleep(0.2)
        assert server.serve_once(500) == 1  # taken, then refused
        assert server.rejects.total == 5 and "for no request waiting" in server.rejects.last_reason
        client = RemoteClient(server.endpoint, "good", H, A)
        client.submit(request(env, 2))
        assert server.serve_once(2000) == 1 and len(client.poll(0, timeout_ms=2000)) == 1
        client.close()
    finally:
        sock.close(linger=0)
        ctx.term()
        server.close()


def test_server_follows_the_learners_weight_versions(env):
    from robolearn.transport.sockets import bind_random_port
    from robolearn.transport.weight_sync import DeltaPublisher
    from robolearn.transport.weights import weights_arrays

    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    endpoint = bind_random_port(pub)
    runner = make_runner(env)
    server = PolicyServer(runner, weights_endpoint=endpoint)
    client = RemoteClient(server.endpoint, "robot-0", H, A)
    try:
        newer = make_runner(env).policy
        with torch.no_grad():
            for p in newer.parameters():
                p.add_(0.5)
        deadline = time.monotonic() + 10
        version = 0
        while version != 5:  # PUB/SUB joins asynchronously: publish until the server has taken it
            assert time.monotonic() < deadline, "server never applied the published weights"
            send(pub, "weights", "learner", 5, *DeltaPublisher().encode(5, weights_arrays(newer)))
            client.submit(request(env, 0))
            server.serve_once(500)
            (resp,) = client.poll(0, timeout_ms=2000)
            version = resp.policy_version
        for a, b in zip(runner.policy.parameters(), newer.parameters()):
            assert torch.equal(a, b)
        bad = {"not": np.zeros(3, np.float32)}
        send(pub, "weights", "learner", 6, *DeltaPublisher().encode(6, bad))  # wrong names
        time.sleep(0.2)
        client.submit(request(env, 1))
        server.serve_once(500)
        assert client.poll(0, timeout_ms=2000)[0].policy_version == 5 and server.rejects.total >= 1
    finally:
        client.close()
        server.close()
        pub.close(linger=0)
        ctx.term()


def test_the_request_a_dead_server_took_goes_again_to_its_replacement(env):
    server = PolicyServer(make_runner(env))
    client = RemoteClient(server.endpoint, "robot-0", H, A)
    try:
        client.submit(request(env, 0))
        deadline = time.monotonic() + 5
        while not server.sock.poll(10):  # the old server has it queued, and dies without answering
            assert time.monotonic() < deadline
        port = int(server.endpoint.rsplit(":", 1)[1])
        server.close()
        server = PolicyServer(make_runner(env), port=port)
        got = []
        while not got and time.monotonic() < deadline + 10:
            got = client.poll(0, timeout_ms=20)  # the client, not the executor, asks again: submit is not called
            server.serve_once(10)
        assert [r.request_id for r in got] == [0] and client.resent == 1
    finally:
        client.close()
        server.close()


def start_server(tmp_path, weights, port=0):
    return spawn_server("reach", "flow_chunk", weights, tmp_path / "server.json", port, POLICY_CFG)


@pytest.mark.slow
def test_server_restart_mid_run_costs_stalls_not_a_crash(env, tmp_path):
    weights = tmp_path / "policy.pt"
    torch.save(make_runner(env).policy.state_dict(), weights)
    proc, endpoint = start_server(tmp_path, weights)
    port = int(endpoint.rsplit(":", 1)[1])
    client = RemoteClient(endpoint, "robot-0", H, A)
    executor = ChunkExecutor(client, env.action_spec, 8, ChunkingConfig(mode="latency_aware", request_timeout=10))
    clock = RealClock(50)
    obs, _ = env.reset(seed=0)
    executor.start_episode(obs, 0, clock)
    clock.reset()
    chunks_before = stalls_before = None
    try:
        for tick in range(400):
            if tick == 100:  # the server dies mid-run
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                chunks_before, stalls_before = executor.metrics.chunks, executor.metrics.stalled_ticks
            if tick == 160:  # and comes back on the same port
                proc, _ = start_server(tmp_path, weights, port)
                clock.reset()  # starting the server process here paused this loop; not the robot's fault
            if tick == 300:
                stalls_300 = executor.metrics.stalled_ticks
            item = executor.tick(tick, obs)
            obs, _, terminated, truncated, _ = env.step(item.action if item else hold_action(env))
            if terminated or truncated:
                obs, _ = env.reset(seed=tick)
            clock.wait()
        assert stalls_before == 0
        assert executor.metrics.stalled_ticks > 0            # the outage cost stalls...
        assert executor.metrics.chunks > chunks_before + 5   # ...and the actor got chunks again afterwards
        assert executor.metrics.resent >= 1
        assert executor.metrics.stalled_ticks == stalls_300  # running normally again
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


@pytest.mark.parametrize("concurrent", [False, True])
def test_emulated_latency_is_served_one_batch_at_a_time_or_concurrently(env, concurrent):
    """Three requests 50 ms apart against a 300 ms emulated model: one batch at a time answers the last after about
    3 x 300 ms; a server that runs several at once answers each about 300 ms after it was asked."""
    import threading

    server = PolicyServer(make_runner(env), extra_latency_ms=(300.0, 300.0), concurrent_latency=concurrent)
    stop = threading.Event()
    serving = threading.Thread(target=lambda: [server.serve_once(5) for _ in iter(stop.is_set, True)])
    serving.start()  # the server's own loop, as in its process; this thread is the robot
    client = RemoteClient(server.endpoint, "r", H, A)
    asked, answered = {}, {}
    try:
        t0 = time.perf_counter()
        while len(answered) < 3 and time.perf_counter() - t0 < 5.0:
            now = time.perf_counter() - t0
            if len(asked) < 3 and now >= 0.05 * len(asked):
                client.submit(request(env, len(asked)))
                asked[len(asked)] = now
            for resp in client.poll(0):
                answered[resp.request_id] = time.perf_counter() - t0
            time.sleep(0.002)
    finally:
        stop.set()
        serving.join()
        client.close()
        server.close()
    waits = [answered[i] - asked[i] for i in range(3)]
    if concurrent:
        assert all(0.28 <= w < 0.5 for w in waits), waits
    else:
        assert waits[2] >= 0.45, waits  # batched behind the first: about 0.6 - 0.1 s


def test_a_newer_request_ends_the_wait_of_an_older_two_stage_one_and_no_weights_land_between_trunk_and_head(env):
    from robolearn.transport.sockets import bind_random_port
    from robolearn.transport.weight_sync import DeltaPublisher
    from robolearn.transport.weights import weights_arrays

    torch.manual_seed(0)
    policy = FlowChunkPolicy(env.observation_spec, env.action_spec,
                             FlowChunkPolicyConfig(**POLICY_CFG, mid_observation=True))
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    endpoint = bind_random_port(pub)
    runner = ChunkPolicyRunner(policy, env.observation_spec, A, version=3)
    server = PolicyServer(runner, weights_endpoint=endpoint, mid_timeout_s=0.5)
    client = RemoteClient(server.endpoint, "robot-0", H, A)
    obs, _ = env.reset(seed=0)
    prefix = np.full((3, A), 0.5, np.float32)
    try:
        deadline = time.monotonic() + 10
        while runner.version != 4:  # PUB/SUB joins asynchronously: publish until the server has taken it
            assert time.monotonic() < deadline, "server never applied the published weights"
            send(pub, "weights", "learner", 4, *DeltaPublisher().encode(4, weights_arrays(policy)))
            server.serve_once(100)
        client.submit(ChunkRequest(0, 100, obs, prefix, planned_delay=3, robot_id="robot-0", mid_ticks=1))
        assert server.serve_once(1000) == 1 and len(server._awaiting) == 1  # the trunk ran; it waits
        while server.weights.pending is None:  # version 5 arrives while request 0 waits for its mid observation
            assert time.monotonic() < deadline, "version 5 never arrived"
            send(pub, "weights", "learner", 5, *DeltaPublisher().encode(5, weights_arrays(policy)))
            server.serve_once(20)
        assert runner.version == 4  # not between request 0's trunk and its head
        client.submit(ChunkRequest(1, 103, obs, np.zeros((0, A), np.float32), robot_id="robot-0"))  # asked anew
        got = []
        while time.monotonic() < deadline and not got:
            server.serve_once(50)
            got += client.poll(103, timeout_ms=10)
        time.sleep(0.6)  # past request 0's wait: it must not be answered late
        server.serve_once(50)
        got += client.poll(103, timeout_ms=100)
    finally:
        client.close()
        server.close()
        pub.close(linger=0)
        ctx.term()
    assert [r.request_id for r in got] == [1]  # request 0 was given up: no late answer for it
    assert not server._awaiting and runner.version == 5  # nothing waits, so the new weights are in


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan"), float("inf")])
def test_the_server_and_the_in_process_client_refuse_a_mid_timeout_that_is_not_a_number_above_zero(env, seconds):
    from robolearn.inference.client import ThreadedClient

    with pytest.raises(ValueError, match="mid_timeout_s must be a number > 0"):
        PolicyServer(make_runner(env), mid_timeout_s=seconds)
    with pytest.raises(ValueError, match="mid_timeout_s must be a number > 0"):
        ThreadedClient(make_runner(env), mid_timeout_s=seconds)
