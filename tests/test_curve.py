"""CurveZMQ: with a run's keys every channel (transitions, weights, leases, inference) admits only clients whose
key the server folder authorizes; a peer with a key of its own, or none, gets nothing through; without keys a
non-loopback bind is still refused."""

import time

import numpy as np
import pytest
import torch
import zmq

from robolearn.config import ConfigError, validate
from robolearn.hardware.resources import LeaseClient, LeaseManager, Resource
from robolearn.inference.client import RemoteClient
from robolearn.inference.protocol import ChunkRequest
from robolearn.inference.runner import ChunkPolicyRunner
from robolearn.inference.server import PolicyServer
from robolearn.policies.flow_chunk import FlowChunkPolicy, FlowChunkPolicyConfig
from robolearn.sim.reach import ReachEnv
from robolearn.transport.learner_status import LearnerStatus
from robolearn.transport.security import Authenticator, CurveKeys, KeysError, generate_keys
from robolearn.transport.sockets import bind_random_port
from robolearn.transport.spool import Spool
from robolearn.transport.transitions import BatchId, TransitionReceiver, TransitionSender
from robolearn.transport.weights import WeightPublisher, WeightSubscriber
from robolearn.transport.wire import RejectCounter
from tests.test_cli_config import _cfg


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """The server folder, an authorized robot PC, and an intruder with a key pair the server never saw."""
    root = tmp_path_factory.mktemp("keys")
    folders = generate_keys(root / "run", ["robot-pc"])
    intruder = generate_keys(root / "other", [])["server"]
    return CurveKeys.load(folders["server"]), CurveKeys.load(folders["robot-pc"]), CurveKeys.load(intruder)


def test_generated_folders_hold_what_each_machine_needs_and_are_never_overwritten(tmp_path):
    folders = generate_keys(tmp_path / "k", ["robot-pc-1", "robot-pc-2"])
    server = CurveKeys.load(folders["server"])
    assert server.server_secret is not None and sorted(p.name for p in server.authorized.iterdir()) == [
        "local.key", "robot-pc-1.key", "robot-pc-2.key"]
    robot = CurveKeys.load(folders["robot-pc-1"])
    assert robot.server_secret is None and robot.server_public == server.server_public
    assert oct((folders["robot-pc-1"] / "client.key_secret").stat().st_mode & 0o777) == "0o600"
    with pytest.raises(KeysError, match="never overwritten"):
        generate_keys(tmp_path / "k", [])
    with pytest.raises(KeysError, match="can only connect"):
        robot.serve(zmq.Context.instance().socket(zmq.PULL))


def test_transitions_channel_admits_only_authorized_clients(keys, tmp_path):
    server, robot, intruder = keys
    ctx = zmq.Context()
    auth = Authenticator(ctx, server)
    receiver = TransitionReceiver(ctx, "127.0.0.1", RejectCounter(), server)
    try:
        for who, client_keys in (("intruder", intruder), ("plain", None), ("robot", robot)):
            sender = TransitionSender(ctx, receiver.endpoint, who, Spool(tmp_path / who, 10**6), client_keys,
                                      resend_after_s=0.2)  # re-sent until the handshake lets it through
            sender.send(who, {"x": np.zeros(3, np.float32)})
            got, deadline = [], time.monotonic() + 1.5
            while time.monotonic() < deadline and not got:
                sender.poll()
                received = receiver.recv()
                if received is None:
                    time.sleep(0.02)
                    continue
                got.append(received)
                receiver.ack(received[0], BatchId(who, 0), "stored")
            if who == "robot":
                assert sender.drain(2.0) and sender.acked == 1
            sender.close()
            assert len(got) == (1 if who == "robot" else 0), who
    finally:
        receiver.close()
        auth.stop()
        ctx.term()


def test_weights_channel_reaches_only_authorized_subscribers(keys):
    server, robot, intruder = keys
    env = ReachEnv()
    policy = FlowChunkPolicy(env.observation_spec, env.action_spec, FlowChunkPolicyConfig(hidden_dims=[16]))
    env.close()
    ctx = zmq.Context()
    auth = Authenticator(ctx, server)
    pub = WeightPublisher(ctx, "127.0.0.1", full_every=1, keys=server)
    subs = {who: WeightSubscriber(ctx, pub.endpoint, policy, RejectCounter(), k)
            for who, k in (("robot", robot), ("intruder", intruder), ("plain", None))}
    status = LearnerStatus(version=1, updates=0, env_steps=0, learned_env_steps=0, caught_up=True)
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and subs["robot"].pending is None:
            pub.publish(1, policy, status, full=True)
            for sub in subs.values():
                sub.poll(timeout_ms=50)
        assert subs["robot"].pending is not None and subs["robot"].learner_status == status
        assert subs["intruder"].pending is None and subs["plain"].pending is None
    finally:
        for sub in subs.values():
            sub.close()
        pub.close()
        auth.stop()
        ctx.term()


def test_lease_manager_answers_only_authorized_clients(keys):
    server, robot, intruder = keys
    leases = LeaseManager([Resource("sim-0", "sim", "sim_so101")])
    endpoint = leases.serve("127.0.0.1", server)
    try:
        good = LeaseClient(endpoint, "actor-0", timeout_s=2.0, keys=robot)
        assert good.call({"op": "status"})["resources"][0]["name"] == "sim-0"
        good.close()
        for client_keys in (intruder, None):
            bad = LeaseClient(endpoint, "intruder", timeout_s=1.0, keys=client_keys)
            with pytest.raises(TimeoutError):
                bad.call({"op": "status"})
            bad.close()
    finally:
        leases.close()


def test_policy_server_serves_only_authorized_robots(keys):
    server, robot, intruder = keys
    env = ReachEnv()
    torch.manual_seed(0)
    policy = FlowChunkPolicy(env.observation_spec, env.action_spec,
                             FlowChunkPolicyConfig(chunk_horizon=4, max_prefix=2, hidden_dims=[16], flow_steps=2))
    obs, _ = env.reset(seed=0)
    runner = ChunkPolicyRunner(policy, env.observation_spec, env.action_spec.dim)
    srv = PolicyServer(runner, "127.0.0.1", keys=server)
    clients = {who: RemoteClient(srv.endpoint, who, 4, env.action_spec.dim, keys=k)
               for who, k in (("robot", robot), ("intruder", intruder), ("plain", None))}
    try:
        answers = {who: [] for who in clients}
        for client in clients.values():
            client.submit(ChunkRequest(1, 0, obs, np.zeros((0, env.action_spec.dim), np.float32)))
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not answers["robot"]:
            srv.serve_once(50)
            for who, client in clients.items():
                answers[who] += client.poll(0, timeout_ms=10)
        assert len(answers["robot"]) == 1 and answers["robot"][0].actions.shape == (4, env.action_spec.dim)
        assert answers["intruder"] == [] and answers["plain"] == [] and srv.requests == 1
    finally:
        for client in clients.values():
            client.close()
        srv.close()
        env.close()


def test_off_loopback_needs_the_server_keys(keys, tmp_path):
    with pytest.raises(ConfigError, match="not a loopback"):
        validate(_cfg(**{"runtime.host": "0.0.0.0"}))
    with pytest.raises(PermissionError, match="without CurveZMQ keys"):
        bind_random_port(zmq.Context.instance().socket(zmq.PULL), "10.1.2.3")
    client_only = generate_keys(tmp_path / "k", ["robot-pc"])["robot-pc"]
    with pytest.raises(ConfigError, match="client folder"):
        validate(_cfg(**{"runtime.host": "0.0.0.0", "runtime.keys_dir": str(client_only)}))
    server_folder = tmp_path / "k" / "server"
    cfg = validate(_cfg(**{"runtime.host": "0.0.0.0", "runtime.keys_dir": str(server_folder)}))
    assert cfg.runtime.keys_dir == str(server_folder)


@pytest.mark.e2e
@pytest.mark.slow  # 37 s; the fast tier keeps each channel's CURVE tests above
def test_a_run_with_keys_encrypts_every_channel_and_learns(tmp_path):
    import json

    from tests.helpers import robolearn

    folders = generate_keys(tmp_path / "keys", [])
    r = robolearn(["run", "run_name=curve", "budget.minutes=0.3", f"runtime.keys_dir={folders['server']}",
                   "runtime.live_console=false", "policy.hidden_dims=[32,32]", "algo.critic_hidden_dims=[32,32]",
                   "learner.batch_size=32", "learner.learning_starts=100"], cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    summary = json.loads((tmp_path / "runs" / "curve" / "summary.json").read_text())
    assert summary["ok"] and summary["env_steps"] > 100 and summary["updates"] > 0
    assert summary["buffer_records"] > 0 and summary["rejected_messages"] == 0
