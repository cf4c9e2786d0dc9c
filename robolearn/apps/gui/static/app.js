// The teleop-intervention page: one tile per robot (live frames, figures, who is in control), take over by
// holding space / a gamepad trigger / the tile's button, labels, ready, e-stop, and the session plots.
// Protocol: msgpack maps over one websocket (robolearn/apps/gui/server.py says what each message holds).
"use strict";

const HOLD_EVERY_MS = 50;          // a hold is re-sent this often; the robot lets go 150 ms after the last one
const CHUNK_COLOUR = "#ff00ff";    // the predicted path (the committed prefix drawn thicker and solid)
const EXECUTED_COLOUR = "#00e5ff"; // the path actually executed
const KEY_AXES = { KeyW: [0, 1], ArrowUp: [0, 1], KeyS: [0, -1], ArrowDown: [0, -1], KeyA: [1, 1],
                   ArrowLeft: [1, 1], KeyD: [1, -1], ArrowRight: [1, -1], KeyQ: [2, 1], KeyZ: [2, -1],
                   KeyO: [3, 1], KeyC: [3, -1] };

const token = new URLSearchParams(location.search).get("token") || "";
const tiles = new Map();           // robot id -> tile state
const keysDown = new Set();
let socket = null;
let selected = null;               // the robot that keys act on
let holding = null;                // {robot, by: "key" | "button" | "gamepad"} while the person holds
let holdTimer = null;
let series = [];

// figures the browser tests and the latency benchmark read (measured in the page)
window.robolearnGui = { frames: {}, firstFrameAt: {}, lastFrameAt: {}, lastInfo: {}, latenciesMs: [], errors: [],
                        connected: false, status: null, holdsSent: 0 };
window.robolearnGuiSocket = () => socket;   // the tests close it to check the hand-back

function send(message) {
  if (socket && socket.readyState === WebSocket.OPEN) socket.send(msgpackEncode(message));
}

// --- tiles ----------------------------------------------------------------------------------------------
function tileFor(robot) {
  if (tiles.has(robot)) return tiles.get(robot);
  const node = document.getElementById("tile-template").content.firstElementChild.cloneNode(true);
  node.dataset.robot = robot;
  node.querySelector(".robot").textContent = robot;
  const tile = { robot, node, canvas: node.querySelector("canvas.view"), frames: 0, fpsWindow: [], control: "" };
  tile.ctx = tile.canvas.getContext("2d");
  node.addEventListener("mousedown", () => select(robot));
  const take = node.querySelector(".takeover");
  take.addEventListener("pointerdown", (e) => { e.preventDefault(); startHold(robot, "button"); });
  for (const ev of ["pointerup", "pointerleave", "pointercancel"]) {
    take.addEventListener(ev, () => { if (holding && holding.by === "button") stopHold(); });
  }
  node.querySelectorAll("button.label").forEach((b) => b.addEventListener("click", () => label(robot, b.dataset.label)));
  node.querySelector(".ready").addEventListener("click", () => send({ t: "ready", robot, t_key: Date.now() / 1000 }));
  node.querySelector(".dismiss").addEventListener("click", () => send({ t: "dismiss", robot }));
  node.querySelector(".estop").addEventListener("click", () => send({ t: "estop", robot, reason: "tile button" }));
  node.querySelector(".rearm").addEventListener("click", () => send({ t: "rearm", robot }));
  document.getElementById("tiles").appendChild(node);
  tiles.set(robot, tile);
  window.robolearnGui.frames[robot] = 0;
  if (selected === null) select(robot);
  return tile;
}

function select(robot) {
  selected = robot;
  for (const t of tiles.values()) t.node.classList.toggle("selected", t.robot === robot);
}

function setControl(tile, control) {
  if (tile.control === control) return;
  tile.control = control;
  tile.node.dataset.control = control;
  const badge = tile.node.querySelector(".control");
  badge.className = "control " + control;
  badge.textContent = { policy: "policy", human: "human", estop: "E-STOP", waiting: "waiting", reset: "reset" }[control]
    || control;
}

function set(tile, cls, text) { tile.node.querySelector("." + cls).textContent = text; }

async function drawFrame(robot, jpeg, info) {
  const tile = tileFor(robot);
  const bitmap = await createImageBitmap(new Blob([jpeg], { type: "image/jpeg" }));
  const c = tile.canvas;
  if (c.width !== bitmap.width || c.height !== bitmap.height) { c.width = bitmap.width; c.height = bitmap.height; }
  const ctx = tile.ctx;
  ctx.drawImage(bitmap, 0, 0);
  bitmap.close();
  drawPath(ctx, info.executed || [], EXECUTED_COLOUR, 2, []);
  const chunk = info.chunk || [];
  const committed = Math.min(info.committed || 0, chunk.length);
  drawPath(ctx, chunk.slice(committed ? committed - 1 : 0), CHUNK_COLOUR, 2, [5, 4]);
  drawPath(ctx, chunk.slice(0, committed), CHUNK_COLOUR, 4, []);
  for (const [x, y] of chunk) { ctx.fillStyle = CHUNK_COLOUR; ctx.fillRect(x - 1.5, y - 1.5, 3, 3); }
  const now = Date.now();
  const g = window.robolearnGui;
  g.frames[robot] = (g.frames[robot] || 0) + 1;
  g.firstFrameAt[robot] = g.firstFrameAt[robot] || now;
  g.lastFrameAt[robot] = now;
  g.lastInfo[robot] = info;
  g.latenciesMs.push(now - info.t_capture * 1000);   // capture (actor) to display (here), same clock on loopback
  if (g.latenciesMs.length > 5000) g.latenciesMs.splice(0, 1000);
  tile.fpsWindow.push(now);
  while (tile.fpsWindow.length && now - tile.fpsWindow[0] > 2000) tile.fpsWindow.shift();
  set(tile, "fps", (tile.fpsWindow.length / 2).toFixed(1));
  set(tile, "episode", info.episode);
  set(tile, "step", info.step);
  set(tile, "classifier", info.classifier_p == null ? "–" : info.classifier_p.toFixed(2));
  set(tile, "uncertainty", info.uncertainty == null ? "–" : info.uncertainty.toFixed(3));
  set(tile, "joints", info.joints && info.joints.length
    ? "joints " + info.joints.map((j) => j.toFixed(1)).join("  ") +
      (info.joint_speed == null ? "" : `  ·  fastest ${info.joint_speed.toFixed(1)}/s`) : "");
  tile.node.querySelector(".prompt").textContent = info.prompt || "";
  tile.node.querySelector(".help-flag").hidden = !info.help;
  tile.node.querySelector(".dismiss").hidden = !info.help;
  tile.node.classList.toggle("help", !!info.help);
  setControl(tile, info.control);
}

function drawPath(ctx, points, colour, width, dash) {
  if (points.length < 2) return;
  ctx.save();
  ctx.strokeStyle = colour;
  ctx.lineWidth = width;
  ctx.setLineDash(dash);
  ctx.beginPath();
  ctx.moveTo(points[0][0], points[0][1]);
  for (const [x, y] of points.slice(1)) ctx.lineTo(x, y);
  ctx.stroke();
  ctx.restore();
}

function showStatus(status) {
  window.robolearnGui.status = status;
  const learner = status.learner || {};
  for (const [robot, s] of Object.entries(status.robots || {})) {
    const tile = tileFor(robot);
    set(tile, "version", s.version == null ? "–" : "v" + s.version);
    set(tile, "lag", learner.version == null || s.version == null ? "–" : String(learner.version - s.version));
    set(tile, "queue", s.planned_delay_ticks == null ? "–" : s.planned_delay_ticks + " ticks");
    set(tile, "delay", medianDelay(s.delay_histogram));
    set(tile, "stalls", s.stalled_ticks == null ? "–" : String(s.stalled_ticks));
    if (s.estop && s.estop.latched) setControl(tile, "estop");   // the latch file, even when no frame comes
  }
  document.body.classList.toggle("estop-all", !!status.estop_all);
  if (status.series) { series = status.series; drawPlots(); }
}

function medianDelay(histogram) {
  if (!histogram) return "–";
  const entries = Object.entries(histogram).map(([k, v]) => [Number(k), v]).sort((a, b) => a[0] - b[0]);
  const total = entries.reduce((n, [, v]) => n + v, 0);
  let seen = 0;
  for (const [k, v] of entries) { seen += v; if (seen * 2 >= total) return k + " ticks"; }
  return "–";
}

function drawPlots() {
  for (const key of ["success_rate", "intervention_rate", "return", "updates_per_s"]) {
    const canvas = document.getElementById("plot-" + key);
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (canvas.width !== w) canvas.width = w;
    if (canvas.height !== h) canvas.height = h;
    const ctx = canvas.getContext("2d");
    ctx.clearRect(0, 0, w, h);
    const points = series.filter((p) => p[key] != null);
    if (points.length < 2) continue;
    const t0 = points[0].time, t1 = points[points.length - 1].time;
    const values = points.map((p) => p[key]);
    let lo = Math.min(...values), hi = Math.max(...values);
    if (key.endsWith("rate")) { lo = 0; hi = Math.max(1, hi); }
    if (hi - lo < 1e-9) hi = lo + 1;
    ctx.strokeStyle = "#8fb8ff";
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    points.forEach((p, i) => {
      const x = ((p.time - t0) / Math.max(t1 - t0, 1e-9)) * (w - 40) + 36;
      const y = h - 6 - ((p[key] - lo) / (hi - lo)) * (h - 12);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
    ctx.fillStyle = "#9aa3b2";
    ctx.font = "10px system-ui";
    ctx.fillText(fmt(hi), 2, 10);
    ctx.fillText(fmt(lo), 2, h - 4);
  }
}

function fmt(v) { return Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(2); }

// --- the person's acts ---------------------------------------------------------------------------------
function axes() {
  const a = [0, 0, 0, 0];
  for (const code of keysDown) {
    const m = KEY_AXES[code];
    if (m) a[m[0]] = Math.max(-1, Math.min(1, a[m[0]] + m[1]));
  }
  const pad = gamepad();
  if (pad) {
    const dz = (v) => (Math.abs(v) < 0.15 ? 0 : v);
    a[0] = clamp(a[0] - dz(pad.axes[1] || 0));
    a[1] = clamp(a[1] - dz(pad.axes[0] || 0));
    a[2] = clamp(a[2] - dz(pad.axes[3] || 0));
    a[3] = clamp(a[3] + ((pad.buttons[6] && pad.buttons[6].value) || 0) - ((pad.buttons[5] && pad.buttons[5].pressed) ? 1 : 0));
  }
  return a;
}

function clamp(v) { return Math.max(-1, Math.min(1, v)); }

function gamepad() {
  const pads = navigator.getGamepads ? navigator.getGamepads() : [];
  for (const p of pads) if (p && p.connected) return p;
  return null;
}

function startHold(robot, by) {
  if (!robot) return;
  if (holding && holding.robot !== robot) stopHold();
  holding = { robot, by };
  tiles.get(robot) && tiles.get(robot).node.querySelector(".takeover").classList.add("held");
  const tick = () => {
    if (!holding) return;
    send({ t: "hold", robot: holding.robot, axes: axes(), t_key: Date.now() / 1000 });
    window.robolearnGui.holdsSent += 1;
  };
  tick();
  clearInterval(holdTimer);
  holdTimer = setInterval(tick, HOLD_EVERY_MS);
}

function stopHold() {
  if (!holding) return;
  const robot = holding.robot;
  holding = null;
  clearInterval(holdTimer);
  holdTimer = null;
  send({ t: "release", robot });
  tiles.get(robot) && tiles.get(robot).node.querySelector(".takeover").classList.remove("held");
}

function label(robot, which) { send({ t: "label", robot, label: which, t_key: Date.now() / 1000 }); }

function estopAll(reason) { send({ t: "estop", robot: "all", reason }); }

const HANDLED_KEYS = new Set(["Space", "Enter", "KeyY", "KeyN", "KeyR", ...Object.keys(KEY_AXES)]);
document.addEventListener("keydown", (e) => {
  if (e.code === "Escape") { estopAll("Esc key"); e.preventDefault(); return; }
  // the page's keys do only what they say here: never also "click" a focused button (Enter on re-arm)
  if (HANDLED_KEYS.has(e.code) || /^Digit[1-9]$/.test(e.code)) e.preventDefault();
  if (e.repeat && e.code === "Space") { e.preventDefault(); return; }
  keysDown.add(e.code);
  if (e.code === "Space") { e.preventDefault(); startHold(selected, "key"); return; }
  if (holding && holding.by !== "gamepad" && KEY_AXES[e.code]) {   // an axis pressed: send it now, not in 50 ms
    const tKey = Date.now() / 1000;
    window.robolearnGui.lastAxisKeyAt = tKey;
    send({ t: "hold", robot: holding.robot, axes: axes(), t_key: tKey });
    return;
  }
  if (e.repeat || !selected) return;
  if (e.code === "KeyY") label(selected, "success");
  else if (e.code === "KeyN") label(selected, "failure");
  else if (e.code === "KeyR") label(selected, "rerecord");
  else if (e.code === "Enter") send({ t: "ready", robot: selected, t_key: Date.now() / 1000 });
  else if (/^Digit[1-9]$/.test(e.code)) {                          // 1..9 select a tile
    const robot = [...tiles.keys()][Number(e.code.slice(5)) - 1];
    if (robot) select(robot);
  }
});
document.addEventListener("keyup", (e) => {
  if (HANDLED_KEYS.has(e.code)) e.preventDefault();   // space's keyup would "click" a focused button
  keysDown.delete(e.code);
  if (e.code === "Space" && holding && holding.by === "key") stopHold();
});
// a clicked button keeps no focus, so no key of the page's ever presses it again
document.addEventListener("click", () => {
  if (document.activeElement instanceof HTMLButtonElement) document.activeElement.blur();
}, true);
// the dead-man: losing focus or hiding the page hands control back
window.addEventListener("blur", () => { keysDown.clear(); stopHold(); });
document.addEventListener("visibilitychange", () => { if (document.hidden) stopHold(); });

// a gamepad's right trigger held takes over the selected robot (polled: the Gamepad API has no events). Only a
// fresh press, in a focused and visible page, takes over: a trigger still held after the page lost focus (the
// dead-man let go) must be released and pressed again.
let triggerWas = false;
setInterval(() => {
  const pad = gamepad();
  if (!pad) return;
  const trigger = !!(pad.buttons[7] && pad.buttons[7].value > 0.5);
  const attended = document.hasFocus() && !document.hidden;
  if (trigger && !triggerWas && !holding && attended) startHold(selected, "gamepad");
  else if ((!trigger || !attended) && holding && holding.by === "gamepad") stopHold();
  triggerWas = trigger;
  if (pad.buttons[8] && pad.buttons[8].pressed) estopAll("gamepad select");
}, 30);

document.getElementById("estop-all").addEventListener("click", () => estopAll("page button"));
document.getElementById("rearm-all").addEventListener("click", () => send({ t: "rearm", robot: "all" }));

// --- the websocket ---------------------------------------------------------------------------------------
function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const url = `${scheme}://${location.host}/ws` + (token ? `?token=${encodeURIComponent(token)}` : "");
  socket = new WebSocket(url);
  socket.binaryType = "arraybuffer";
  const conn = document.getElementById("connection");
  socket.onopen = () => { conn.textContent = "connected"; conn.className = "conn up"; window.robolearnGui.connected = true; };
  socket.onclose = () => {
    conn.textContent = "disconnected: reconnecting…";
    conn.className = "conn down";
    window.robolearnGui.connected = false;
    holding = null;                // the server released what this page held
    clearInterval(holdTimer);
    setTimeout(connect, 1000);
  };
  socket.onmessage = (event) => {
    const msg = msgpackDecode(event.data);
    if (msg.t === "hello") {
      document.getElementById("run").textContent = msg.run;
      for (const robot of msg.robots) tileFor(robot);
    } else if (msg.t === "frame") {
      drawFrame(msg.robot, msg.jpeg, msg.info);
    } else if (msg.t === "status") {
      showStatus(msg);
    } else if (msg.t === "error") {
      window.robolearnGui.errors.push(msg.error);
      console.warn("gui:", msg.error);
    }
  };
}
connect();
