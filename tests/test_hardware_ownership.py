"""Hardware is opened only by its actor, after its lease: building a task or a real robot opens nothing, the
lease manager's health probe does not open the serial port, and the actor connects its robot only once the
lease is granted and disconnects it before the lease is released."""

import builtins
import threading

import pytest
import scservo_sdk.port_handler
import zmq

from robolearn.actor.loop import Actor
from robolearn.builders import build_task, task_specs
from robolearn.config import to_yaml, validate
from robolearn.hardware.lerobot_robot import LerobotRobot, LerobotRobotConfig
from robolearn.hardware.resources import LeaseManager, Resource, port_probe
from robolearn.logging.status import write_json_atomic
from robolearn.rundir import RunDir
from robolearn.stop_flag import StopFlag
from robolearn.transport.learner_status import LearnerStatus
from robolearn.transport.weights import WeightPublisher
from tests.fake_feetech import FakeSerial, FakeServos
from tests.helpers import wait_for
from tests.test_cli_config import _cfg


@pytest.fixture
def port_opens(monkeypatch):
    """Every open of the (fake) serial port, through lerobot's real bus code."""
    servos, opened = FakeServos(ids=[1, 2, 3, 4, 5, 6]), []

    def open_port(**kw):
        opened.append(kw.get("port"))
        return FakeSerial(servos, **kw)

    monkeypatch.setattr(scservo_sdk.port_handler.serial, "Serial", open_port)
    return opened


def test_building_a_real_robot_reads_its_specs_without_opening_the_port(port_opens, tmp_path):
    robot = LerobotRobot(LerobotRobotConfig(port="/dev/fake-ttyACM0", calibration_dir=str(tmp_path)))
    assert robot.action_spec.dim == 6 and robot.observation_spec.arrays["state"].shape == (12,)
    assert port_opens == [] and not robot.is_connected
    robot.robot.connect(calibrate=False)  # what LerobotRobot.connect does first: now the port opens
    assert port_opens == ["/dev/fake-ttyACM0"]
    robot.disconnect()


def test_the_health_probe_never_opens_the_port(tmp_path, monkeypatch):
    device = tmp_path / "ttyACM0"
    device.write_bytes(b"")
    real_open = builtins.open

    def no_open(path, *args, **kw):
        assert str(path) != str(device), "the probe opened the serial port"
        return real_open(path, *args, **kw)

    monkeypatch.setattr(builtins, "open", no_open)
    assert port_probe(str(device))() is True
    assert port_probe(str(tmp_path / "unplugged"))() is False


def test_building_a_task_for_its_specs_leaves_its_robot_unconnected():
    cfg = validate(_cfg())
    env = build_task(cfg)
    assert not env.robot.is_connected
    env.close()
    obs_spec, action_spec = task_specs(cfg)
    assert "state" in obs_spec.arrays and action_spec.dim == 6


def test_the_actor_connects_after_the_lease_and_disconnects_before_releasing_it(tmp_path):
    cfg = validate(_cfg(run_name="own", **{"policy.hidden_dims": "[16,16]", "budget.env_steps": "30",
                                           "actor.drain_timeout_s": "1"}))  # this stand-in learner never acks
    run = RunDir(tmp_path / "own")
    run.root.mkdir()
    run.config.write_text(to_yaml(cfg))
    leases = LeaseManager([Resource("sim_so101-0", "sim", "sim_so101")])
    write_json_atomic(run.resources, {"endpoint": leases.serve(), "type": "sim_so101"})
    ctx = zmq.Context()
    pull = ctx.socket(zmq.ROUTER)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    pub = WeightPublisher(ctx, "127.0.0.1", full_every=1)
    write_json_atomic(run.endpoints, {"transitions": f"tcp://127.0.0.1:{port}", "weights": pub.endpoint,
                                      "next_episode_id": 0})
    stop = StopFlag()
    actor = Actor(run, cfg, 0, stop)
    events = []  # (what, who held the lease at that moment)
    robot = actor.env.robot
    connect, disconnect = robot.connect, robot.disconnect
    robot.connect = lambda: (events.append(("connect", leases.holder_of("sim_so101-0"))), connect())[1]
    robot.disconnect = lambda: (events.append(("disconnect", leases.holder_of("sim_so101-0"))), disconnect())[1]
    assert not robot.is_connected  # built, not connected
    thread = threading.Thread(target=actor.run_forever, daemon=True)
    thread.start()
    try:
        status = LearnerStatus(version=1, updates=0, env_steps=0, learned_env_steps=10 ** 6, caught_up=True)
        received = []

        def acted() -> bool:
            pub.publish(1, actor.policy, status, full=True)
            while pull.poll(50):
                received.append(pull.recv_multipart())
            return actor.env_steps >= 30

        wait_for(acted, 60, "the actor to take its 30 steps")
        assert received, "the actor sent no transitions"
    finally:
        stop.set()
        thread.join(timeout=30)
        pub.close()
        pull.close(linger=0)
        ctx.term()
        holder_after = leases.holder_of("sim_so101-0")
        leases.close()
    assert not thread.is_alive()
    assert [e[0] for e in events if e[0] == "connect"] == ["connect"]
    assert events[0] == ("connect", "actor-0"), events          # connected only once it held the lease
    assert ("disconnect", "actor-0") in events, events          # disconnected while it still held it
    assert holder_after is None                                  # and then released
