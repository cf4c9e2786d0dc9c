"""The GUI page in a real browser (Debian's chromium, headless, driven by Playwright) against a real
``robolearn run`` on the sim twin: two robots, ``teleop=gui`` (the page is the person), real time.

Each figure is checked against a source the page does not control: frame rates are counted in the page, but
interventions, labels and the hand-back time come from the buffer (the steps the actors stored, with their own
wall times), the e-stop's effect from the sim robot's joint speeds, the overlay from the canvas's pixels at the
points the actor projected."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import CHROMIUM, CHROMIUM_ARGS, read_buffer, start_robolearn, wait_for

pytestmark = pytest.mark.e2e
ROBOTS = ("sim_so101-0", "sim_so101-1")


def _steps(run: Path, robot: str) -> dict[str, np.ndarray]:
    batches = [b for b in read_buffer(run) if b["_sender"] == robot]
    keys = ("intervention", "success", "terminated", "truncated", "episode_id", "t_act", "step", "action")
    return {k: np.concatenate([b[k] for b in batches]) if batches else np.zeros((0, 6) if k == "action" else 0)
            for k in keys}


def _frames(page) -> dict[str, int]:
    return page.evaluate("({...window.robolearnGui.frames})")


def _status(run: Path, robot: str) -> dict:
    for path in (run / "status").glob("actor-*.json"):
        status = json.loads(path.read_text())
        if status.get("robot_id") == robot:
            return status
    return {}


def test_the_page_watches_takes_over_labels_and_stops_two_sim_robots(tmp_path):
    assert Path(CHROMIUM).exists(), "make test installs Debian's chromium (apt-get install chromium)"
    from playwright.sync_api import sync_playwright

    proc = start_robolearn([
        "run", "task=real", "robot=sim_so101", "teleop=gui", "gui.enabled=true", "gui.port=0", "gui.fps=15",
        "gui.help_threshold=1e-9", "actor.realtime=true", "runtime.num_actors=2", "task.reset.ready_timeout_s=0.2",
        "task.episode_s=30", "task.workspace_low=[0.1,-0.25,0.0]", "task.workspace_high=[0.4,0.25,0.3]",  # in view
        "policy.chunk_horizon=8", "policy.hidden_dims=[32,32]", "budget.minutes=5",
        "run_name=gui", "runtime.live_console=false"], tmp_path)
    run = tmp_path / "runs" / "gui"
    try:
        served = wait_for(lambda: (run / "gui.json").exists() and json.loads((run / "gui.json").read_text()), 120,
                          "the GUI's gui.json")
        wait_for(lambda: all(_status(run, r).get("env_steps", 0) > 0 for r in ROBOTS), 120, "both robots acting")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(served["url"])

            # one tile per robot, frames at >= 10 fps each, counted in the page over 3 s
            page.wait_for_function("Object.keys(window.robolearnGui.frames).length === 2", timeout=30_000)
            assert sorted(page.eval_on_selector_all(".tile", "ts => ts.map(t => t.dataset.robot)")) == list(ROBOTS)
            page.wait_for_function("Object.values(window.robolearnGui.frames).every(n => n > 5)", timeout=30_000)
            before = _frames(page)
            time.sleep(3.0)
            after = _frames(page)
            fps = {r: (after[r] - before[r]) / 3.0 for r in ROBOTS}
            assert all(f >= 10 for f in fps.values()), fps

            # the predicted chunk is drawn: the overlay's colour at the points the actor projected
            hits = page.evaluate("""async () => {
                for (let tries = 0; tries < 100; tries++) {
                    await new Promise(r => setTimeout(r, 100));
                    const tile = document.querySelector('.tile[data-robot="sim_so101-0"]');
                    const info = window.robolearnGui.lastInfo && window.robolearnGui.lastInfo['sim_so101-0'];
                    const canvas = tile.querySelector('canvas');
                    const inside = info ? info.chunk.filter(([x, y]) =>
                        x >= 3 && y >= 3 && x < canvas.width - 3 && y < canvas.height - 3) : [];
                    if (inside.length < 2) continue;   // the tip out of the camera's view just now
                    const ctx = canvas.getContext('2d');
                    let hit = 0;
                    for (const [x, y] of inside) {
                        const d = ctx.getImageData(Math.round(x) - 2, Math.round(y) - 2, 5, 5).data;
                        for (let i = 0; i < d.length; i += 4)
                            if (d[i] > 200 && d[i + 1] < 80 && d[i + 2] > 200) { hit++; break; }
                    }
                    return [hit, inside.length];
                }
                return [0, 0];
            }""")
            assert hits[1] >= 2 and hits[0] >= hits[1] * 0.8, f"chunk points with the overlay's colour: {hits}"

            # the robot asks for help: its policy's uncertainty is above the (tiny) threshold
            page.wait_for_selector('.tile[data-robot="sim_so101-0"] .help-flag:not([hidden])', timeout=10_000)

            # hold space on robot 0: intervention-flagged steps in the buffer; releasing hands back
            page.click('.tile[data-robot="sim_so101-0"] .robot')
            t_press = time.time()
            page.keyboard.down("Space")
            page.keyboard.down("KeyW")
            page.wait_for_selector('.tile[data-robot="sim_so101-0"][data-control="human"]', timeout=5_000)
            time.sleep(1.5)
            page.keyboard.up("KeyW")
            page.keyboard.up("Space")
            t_release = time.time()
            page.wait_for_selector('.tile[data-robot="sim_so101-0"][data-control="policy"]', timeout=5_000)
            time.sleep(1.0)
            steps = wait_for(lambda: (s := _steps(run, "sim_so101-0")) and s["t_act"].max(initial=0) > t_release + 0.5
                             and s, 30, "robot 0's steps after the release in the buffer")
            human = steps["intervention"].astype(bool)
            in_hold = (steps["t_act"] > t_press + 0.3) & (steps["t_act"] < t_release - 0.1)
            assert human[in_hold].mean() > 0.9, f"{human[in_hold].sum()} of {in_hold.sum()} steps held were flagged"
            moved = np.abs(steps["action"][in_hold]).max(axis=1) > 1e-3
            assert moved.sum() >= 10, "W held: the tip target moved, and the arm with it (up to the workspace's edge)"
            assert not human[steps["t_act"] > t_release + 0.3].any(), "steps after the release still flagged"
            assert not _steps(run, "sim_so101-1")["intervention"].any(), "the other robot was never taken over"

            # the on-screen button holds too
            button = page.locator('.tile[data-robot="sim_so101-1"] .takeover')
            button.hover()
            page.mouse.down()
            page.wait_for_selector('.tile[data-robot="sim_so101-1"][data-control="human"]', timeout=5_000)
            time.sleep(1.0)
            page.mouse.up()
            page.wait_for_selector('.tile[data-robot="sim_so101-1"][data-control="policy"]', timeout=5_000)
            assert wait_for(lambda: _steps(run, "sim_so101-1")["intervention"].sum() > 20, 30,
                            "robot 1's button-held steps in the buffer")

            # closing the websocket while held hands back within 150 ms (the robot's own step times)
            page.keyboard.down("Space")
            page.wait_for_selector('.tile[data-robot="sim_so101-0"][data-control="human"]', timeout=5_000)
            time.sleep(0.5)
            t_close = page.evaluate("() => { const t = Date.now() / 1000; window.robolearnGuiSocket().close(); "
                                    "return t; }")
            page.keyboard.up("Space")
            time.sleep(1.5)
            steps = _steps(run, "sim_so101-0")
            last_human = steps["t_act"][steps["intervention"].astype(bool)].max()
            assert last_human <= t_close + 0.15, f"a human step {last_human - t_close:.3f} s after the socket closed"
            assert steps["t_act"].max() > t_close + 0.5, "the robot went on with the policy after the hand-back"

            # the page stops sending holds without closing anything (a frozen tab, a network that drops them): the
            # robot's dead-man lets go by itself within 150 ms of the last hold it got
            page.wait_for_function("window.robolearnGui.connected", timeout=10_000)
            page.click('.tile[data-robot="sim_so101-0"] .robot')
            page.keyboard.down("Space")
            page.wait_for_selector('.tile[data-robot="sim_so101-0"][data-control="human"]', timeout=5_000)
            time.sleep(0.5)
            t_mute = page.evaluate("""() => { const s = window.robolearnGuiSocket(); window.__send = s.send;
                s.send = () => {}; return Date.now() / 1000; }""")
            time.sleep(1.0)
            # the key goes up while the page is still mute: restored first, a hold the page sends on its own beat
            # between the two calls would take over again, after the time this checks
            page.keyboard.up("Space")
            page.evaluate("() => { const s = window.robolearnGuiSocket(); s.send = window.__send; }")
            time.sleep(1.0)
            steps = _steps(run, "sim_so101-0")
            last_human = steps["t_act"][steps["intervention"].astype(bool)].max()
            assert t_mute - 0.2 < last_human <= t_mute + 0.15 + 0.05, \
                f"the last human step {last_human - t_mute:+.3f} s from the last hold (dead-man 150 ms + a tick)"

            # success / failure buttons end robot 1's episodes with those labels
            page.wait_for_function("window.robolearnGui.connected", timeout=10_000)
            previous = -1
            for label in ("success", "failure"):
                page.wait_for_selector('.tile[data-robot="sim_so101-1"][data-control="policy"]', timeout=30_000)
                # a frame of the next episode first: while the robot resets no frame comes, and the page's last one
                # still names the episode the previous label just ended
                page.wait_for_function(f"window.robolearnGui.lastInfo['sim_so101-1'].episode > {previous}",
                                       timeout=30_000)
                time.sleep(0.5)
                running = int(page.evaluate("window.robolearnGui.lastInfo['sim_so101-1'].episode"))
                previous = running
                page.click(f'.tile[data-robot="sim_so101-1"] button.label.{label}')

                def ended(ep=running):
                    s = _steps(run, "sim_so101-1")
                    mine = np.flatnonzero(s["episode_id"] == ep)
                    return len(mine) and (s["terminated"][mine[-1]] or s["truncated"][mine[-1]]) and (s, mine[-1])

                steps, last = wait_for(ended, 30, f"episode {running} ended by {label}")
                if label == "success":
                    assert steps["success"][last] and steps["terminated"][last]
                else:
                    assert steps["truncated"][last] and not steps["success"][last]
                assert steps["step"][last] < 30 * 50 - 1, "ended by the label, not by the time limit"

            # e-stop on robot 0: it holds (joint speeds ~0) across a page reload until re-armed
            page.click('.tile[data-robot="sim_so101-0"] button.estop')
            page.wait_for_selector('.tile[data-robot="sim_so101-0"][data-control="estop"]', timeout=5_000)
            time.sleep(1.0)
            steps_at = _status(run, "sim_so101-0")["env_steps"]
            page.reload()
            page.wait_for_selector('.tile[data-robot="sim_so101-0"][data-control="estop"]', timeout=15_000)
            speeds = page.evaluate("""async () => {
                const out = [];
                for (let i = 0; i < 10; i++) {
                    await new Promise(r => setTimeout(r, 150));
                    const info = window.robolearnGui.lastInfo['sim_so101-0'];
                    if (info) out.push(info.joint_speed);
                }
                return out;
            }""")
            assert speeds and max(speeds) < 1.0, f"joint speeds while e-stopped (deg/s): {speeds}"
            assert _status(run, "sim_so101-0")["env_steps"] == steps_at, "the robot stepped while e-stopped"
            assert (run / "estop" / "sim_so101-0.json").exists()
            page.click('.tile[data-robot="sim_so101-0"] button.rearm')
            wait_for(lambda: _status(run, "sim_so101-0")["env_steps"] > steps_at + 50, 30, "the robot acting again")
            assert not errors, errors
            browser.close()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, out[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["exit_codes"].get("gui") == 0 and not summary["restarts"], summary  # stopped cleanly, never died
