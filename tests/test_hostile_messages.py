"""A pickled payload and malformed messages sent to each process's socket are rejected and counted,
and the process keeps running (each worker process is run alone against sockets this test owns)."""

import json
import pickle
import signal
import subprocess
import sys
import time

import msgpack
import numpy as np
import pytest
import zmq

from robolearn.builders import build_policy, build_task
from robolearn.config import to_yaml, validate
from robolearn.hardware.resources import LeaseManager, Resource
from robolearn.logging.status import read_json, write_json_atomic
from robolearn.transition import TransitionWriter
from robolearn.transport.learner_status import LearnerStatus
from robolearn.transport.sockets import send
from robolearn.transport.weight_sync import DeltaPublisher
from robolearn.transport.weights import weights_arrays
from tests.helpers import wait_for
from tests.test_cli_config import _cfg

pytestmark = pytest.mark.e2e


class Boom:
    def __reduce__(self):
        return (exec, ("open('PWNED', 'w').write('pickle executed')",))


HOSTILE = [
    [pickle.dumps(Boom())],                                            # a pickle RCE payload
    [b"\x93\x01\x02"],                                                 # msgpack, but not a header map
    [msgpack.packb({"type": "transitions", "schema": 1, "sender": "x", "seq": 0, "meta": {},
                    "arrays": [{"name": "action", "dtype": "float32", "shape": [10 ** 6]}]}), b"\0" * 4],
]


def _run_dir(tmp_path):
    cfg = validate(_cfg(run_name="hostile", **{"policy.hidden_dims": "[16,16]", "algo.critic_hidden_dims": "[16,16]",
                                               "learner.learning_starts": "100000",
                                               "actor.drain_timeout_s": "1"}))  # stand-in learners never ack
    run = tmp_path / "runs" / "hostile"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(to_yaml(cfg))
    return cfg, run


def _worker(role, run, *extra):
    return subprocess.Popen([sys.executable, "-m", "robolearn.runtime.worker", role, str(run), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=run)


def _valid_batch(env, episode_id=0):
    w = TransitionWriter(env.observation_spec)
    obs, _ = env.reset(seed=0)
    for i in range(3):
        a = np.zeros(6, np.float32)
        nxt, r, te, tr, info = env.step(a)
        w.add(obs, a, action_source=0, intervention=False, reward=r, terminated=False, truncated=False, success=False,
              episode_id=episode_id, step=i, tick=i, t_obs=0.0, t_act=0.0, policy_version=1, chunk_id=i, chunk_index=0,
              delay_ticks=0)
        obs = nxt
    return w.flush()


def _stop(proc):
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out


def test_learner_transitions_socket_rejects_and_survives(tmp_path):
    cfg, run = _run_dir(tmp_path)
    proc = _worker("learner", run)
    ctx = zmq.Context()
    try:
        endpoints = wait_for(lambda: read_json(run / "endpoints.json"), 120, "learner endpoints")
        push = ctx.socket(zmq.DEALER)  # the learner's transitions socket is a ROUTER (acknowledgements)
        push.connect(endpoints["transitions"])
        for frames in HOSTILE:
            push.send_multipart(frames)
        env = build_task(cfg)
        bad = _valid_batch(env)
        bad["obs.state"] = bad["obs.state"][:, :5].copy()  # well-formed wire message, wrong observation shape
        send(push, "transitions", "intruder", 0, {}, bad)
        send(push, "transitions", "sim_so101-0", 1, {}, _valid_batch(env))
        status = wait_for(lambda: (s := read_json(run / "status" / "learner.json")) and s["buffer_records"] == 1 and s,
                          60, "the valid batch to be stored")
        assert status["rejected_messages"] == len(HOSTILE) + 1
        assert proc.poll() is None
        push.close(linger=0)
    finally:
        ctx.term()
        code, out = _stop(proc)
    assert code == 0, out
    assert not (run / "PWNED").exists()
    assert "rejected a message" in out


def test_actor_weights_socket_rejects_and_survives(tmp_path):
    cfg, run = _run_dir(tmp_path)
    ctx = zmq.Context()
    pull, pub = ctx.socket(zmq.ROUTER), ctx.socket(zmq.PUB)  # a stand-in learner that never acknowledges
    t_port = pull.bind_to_random_port("tcp://127.0.0.1")
    w_port = pub.bind_to_random_port("tcp://127.0.0.1")
    write_json_atomic(run / "endpoints.json", {"transitions": f"tcp://127.0.0.1:{t_port}",
                                              "weights": f"tcp://127.0.0.1:{w_port}", "next_episode_id": 0})
    leases = LeaseManager([Resource("sim_so101-0", "sim", "sim_so101")])
    write_json_atomic(run / "resources.json", {"endpoint": leases.serve(), "type": "sim_so101"})
    env = build_task(cfg)
    policy = build_policy(cfg, env.observation_spec, env.action_spec)
    sync_meta, weights = DeltaPublisher().encode(1, weights_arrays(policy))
    status = LearnerStatus(version=1, updates=0, env_steps=0, learned_env_steps=10 ** 9, caught_up=False)
    meta = {**status.to_meta(), **sync_meta}
    proc = _worker("actor", run, "0")
    try:
        def actor_sends():
            send(pub, "weights", "learner", 1, meta, weights)
            return pull.poll(200)

        wait_for(actor_sends, 120, "the actor to act on valid weights")
        for frames in HOSTILE:
            pub.send_multipart(frames)
        wrong = dict(weights)
        wrong.pop(next(iter(wrong)))
        send(pub, "weights", "learner", 2, {**meta, "version": 2}, wrong)  # valid wire, wrong parameters
        send(pub, "weights", "learner", 3, {**meta, "version": "3"}, weights)  # version is not an int
        status = wait_for(lambda: (s := read_json(run / "status" / "actor-0.json")) and
                          s["rejected_messages"] >= len(HOSTILE) + 2 and s, 60, "the actor to count the rejects")
        assert status["rejected_messages"] == len(HOSTILE) + 2
        assert status["version"] == 1  # the bad versions were never applied
        steps = status["env_steps"]
        time.sleep(1.0)
        assert proc.poll() is None
        assert json.loads((run / "status" / "actor-0.json").read_text())["env_steps"] > steps  # still acting
        while pull.poll(0):
            pull.recv_multipart()
    finally:
        code, out = _stop(proc)
        pull.close(linger=0)
        pub.close(linger=0)
        ctx.term()
        leases.close()
    assert code == 0, out
    assert not (run / "PWNED").exists()
