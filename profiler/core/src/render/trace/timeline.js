// tprof timeline: draws the lanes of the embedded data on one canvas.
// Times are µs since the recording started; counter values are hundredths.
"use strict";

const D = JSON.parse(document.getElementById("tprof-data").textContent);
const COLORS = {
  running: "#2f9e44", runnable: "#f08c00", IO: "#e03131", futex: "#7048e8",
  sleep: "#dee2e6", "sleep (D)": "#a07850",
};
const STATE_COLOR = D.states.map((s) => COLORS[s] || "#999");
const SERIES_COLOR = { running: "#2f9e44", runnable: "#f08c00", util: "#1971c2" };
const HEIGHT = { group: 18, note: 18, level: 36, states: 16, counter: 30, steps: 14, stalls: 16, phases: 14 };
// The step anatomy's phases: the trainer's own work in greens and teals,
// the waits for a batch in reds and oranges, the rest in greys.
const PHASE_COLORS = {
  compute: "#2b8a3e", loading: "#e8590c", worker_start: "#862e9c", worker_busy: "#c92a2a",
  worker_cpu_wait: "#f08c00", worker_io: "#a61e4d", worker_sleep: "#ced4da", worker_idle: "#e9ecef",
  sending: "#d6336c", wait_other: "#adb5bd", receiving: "#0c8599", pin_memory: "#5c940d",
  copies: "#fab005", gil: "#5f3dc4", cpu_wait: "#ffa94d", other: "#868e96",
};
const LABEL_W = 240, AXIS_H = 22, GAP = 2;

const canvas = document.getElementById("timeline");
const ctx = canvas.getContext("2d");
const tip = document.getElementById("tip");
const lanes = D.lanes;
let height = AXIS_H;
for (const lane of lanes) {
  lane.y = height;
  lane.h = HEIGHT[lane.kind] || 16;
  height += lane.h + GAP;
}
const laneOfTid = {};
lanes.forEach((lane, i) => { if (lane.kind === "states") laneOfTid[lane.tid] = i; });

// The canvas fills the window and stays at its top while the page scrolls
// through the lanes (a spacer as tall as all lanes); yOff is how far.
const wrap = document.getElementById("lanes");
wrap.style.height = height + "px";
let view = { t0: 0, t1: Math.max(D.duration_us, 1) };
let width = 0, viewH = 0, yOff = 0;
const plotW = () => Math.max(width - LABEL_W - 10, 10);
const xOf = (t) => LABEL_W + ((t - view.t0) / (view.t1 - view.t0)) * plotW();
const tOf = (x) => view.t0 + ((x - LABEL_W) / plotW()) * (view.t1 - view.t0);

function fmtTime(us) {
  const a = Math.abs(us);
  if (a >= 1e6) return (us / 1e6).toFixed(a >= 1e7 ? 1 : 3) + " s";
  if (a >= 1e3) return (us / 1e3).toFixed(a >= 1e4 ? 1 : 2) + " ms";
  return us.toFixed(0) + " µs";
}

// First index i (a multiple of `stride`) whose slice [a[i], a[i] + len(i))
// ends after t; `len` of the flattened record, 0 for points.
function firstEndingAfter(a, stride, t, endOf) {
  let lo = 0, hi = a.length / stride;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (endOf(a, mid * stride) <= t) lo = mid + 1; else hi = mid;
  }
  return lo * stride;
}

function axisTicks() {
  const raw = (view.t1 - view.t0) / (plotW() / 100);
  const pow = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * pow).find((s) => s >= raw);
  const ticks = [];
  for (let t = Math.ceil(view.t0 / step) * step; t <= view.t1; t += step) ticks.push(t);
  return ticks;
}

function drawGrid(ticks) {
  ctx.strokeStyle = "#e9ecef";
  ctx.beginPath();
  for (const t of ticks) {
    const x = Math.round(xOf(t)) + 0.5;
    ctx.moveTo(x, AXIS_H);
    ctx.lineTo(x, viewH);
  }
  ctx.stroke();
}

function drawAxis(ticks) {
  ctx.fillStyle = "#f8f9fa";
  ctx.fillRect(0, 0, width, AXIS_H);
  ctx.fillStyle = "#495057";
  ctx.strokeStyle = "#adb5bd";
  ctx.font = "11px system-ui, sans-serif";
  ctx.beginPath();
  for (const t of ticks) {
    const x = Math.round(xOf(t)) + 0.5;
    ctx.moveTo(x, AXIS_H - 6);
    ctx.lineTo(x, AXIS_H);
    ctx.fillText(fmtTime(t), x + 3, 14);
  }
  ctx.stroke();
}

function drawStates(lane) {
  const s = lane.s, y = lane.y, h = lane.h;
  let i = firstEndingAfter(s, 3, view.t0, (a, j) => a[j] + a[j + 1]);
  let col = -1, best = 0, bestW = 0;
  const flush = () => {
    if (col >= 0) { ctx.fillStyle = STATE_COLOR[best]; ctx.fillRect(col, y, 1, h); }
    col = -1; bestW = 0;
  };
  for (; i < s.length && s[i] <= view.t1; i += 3) {
    const x0 = xOf(s[i]), x1 = xOf(s[i] + s[i + 1]), code = s[i + 2] & 7;
    if (x1 - x0 >= 1) {
      flush();
      ctx.fillStyle = STATE_COLOR[code];
      ctx.fillRect(x0, y, x1 - x0, h);
      continue;
    }
    const c = Math.floor(x0);
    if (c !== col) { flush(); col = c; }
    if (x1 - x0 >= bestW) { bestW = x1 - x0; best = code; }
  }
  flush();
}

// Mean of each series over the bins under each pixel column.
function drawCounter(lane) {
  const bin = lane.bin_us, n = lane.series[0].v.length, y = lane.y, h = lane.h;
  const x0 = Math.max(LABEL_W, xOf(0)), x1 = Math.min(LABEL_W + plotW(), xOf(n * bin));
  for (let x = Math.floor(x0); x < x1; x++) {
    const b0 = Math.max(0, Math.floor(tOf(x) / bin));
    const b1 = Math.min(n, Math.max(b0 + 1, Math.ceil(tOf(x + 1) / bin)));
    let top = y + h;
    for (const series of lane.series) {
      let sum = 0;
      for (let b = b0; b < b1; b++) sum += series.v[b];
      const value = sum / (b1 - b0) / 100;
      const bar = Math.min(h, (value / lane.max) * h);
      ctx.fillStyle = SERIES_COLOR[series.name] || "#555";
      ctx.fillRect(x, top - bar, 1, bar);
      top -= bar;
    }
  }
}

function drawLevel(lane) {
  const s = lane.s, y = lane.y, h = lane.h;
  ctx.fillStyle = "#1971c2";
  let i = firstEndingAfter(s, 3, view.t0, (a, j) => a[j + 1]);
  for (; i < s.length && s[i] <= view.t1; i += 3) {
    const x0 = xOf(s[i]), x1 = Math.max(xOf(s[i + 1]), x0 + 1);
    const bar = (Math.min(s[i + 2], lane.max) / lane.max) * h;
    ctx.fillRect(x0, y + h - bar, x1 - x0, bar);
  }
}

function drawSteps(lane) {
  const s = D.steps;
  ctx.font = "10px system-ui, sans-serif";
  for (let i = firstEndingAfter(s, 2, view.t0, (a, j) => a[j + 1]); i < s.length && s[i] <= view.t1; i += 2) {
    const x0 = xOf(s[i]), x1 = xOf(s[i + 1]);
    ctx.fillStyle = (i / 2) % 2 ? "#d0ebff" : "#a5d8ff";
    ctx.fillRect(x0, lane.y, Math.max(x1 - x0, 1), lane.h);
    const label = D.step_labels[i / 2], left = Math.max(x0, LABEL_W);
    if (ctx.measureText(label).width + 4 <= x1 - left) {
      ctx.fillStyle = "#1c3d5a";
      ctx.fillText(label, left + 2, lane.y + lane.h - 3);
    }
  }
}

function drawPhases(lane) {
  const s = lane.s;
  for (let i = firstEndingAfter(s, 4, view.t0, (a, j) => a[j] + a[j + 1]); i < s.length && s[i] <= view.t1; i += 4) {
    const x0 = xOf(s[i]), x1 = Math.max(xOf(s[i] + s[i + 1]), x0 + 1);
    ctx.fillStyle = PHASE_COLORS[D.phases[s[i + 2]]] || "#999";
    ctx.fillRect(x0, lane.y, x1 - x0, lane.h);
  }
}

function drawStalls(lane) {
  ctx.font = "11px system-ui, sans-serif";
  D.stalls.forEach((st, rank) => {
    if (st.tid !== lane.tid || st.end < view.t0 || st.start > view.t1) return;
    const x0 = xOf(st.start), x1 = Math.max(xOf(st.end), x0 + 2);
    ctx.fillStyle = "#c92a2a";
    ctx.fillRect(x0, lane.y, x1 - x0, lane.h);
    // Outline the stall on the thread's own lane too.
    const own = lanes[laneOfTid[st.tid]];
    if (own) {
      ctx.strokeStyle = "#c92a2a";
      ctx.lineWidth = 2;
      ctx.strokeRect(x0, own.y + 1, x1 - x0, own.h - 2);
      ctx.lineWidth = 1;
    }
    // The blame inside the box where it fits, else the rank alone; the
    // tooltip and the list below have the rest.
    const left = Math.max(x0, LABEL_W), room = x1 - left - 6;
    const full = "#" + (rank + 1) + " " + fmtTime(st.end - st.start) + ": " + st.text;
    const text = ctx.measureText(full).width <= room ? full : "#" + (rank + 1);
    if (ctx.measureText(text).width > room) return;
    ctx.fillStyle = "#fff";
    ctx.fillText(text, left + 3, lane.y + lane.h - 4);
  });
}

function drawStepBoundaries() {
  const s = D.steps;
  let i = firstEndingAfter(s, 2, view.t0, (a, j) => a[j + 1]);
  let last = -1e9;
  ctx.strokeStyle = "rgba(25, 113, 194, 0.35)";
  ctx.beginPath();
  for (; i < s.length && s[i] <= view.t1; i += 2) {
    const x = Math.round(xOf(s[i])) + 0.5;
    if (x - last < 4) continue;
    last = x;
    ctx.moveTo(x, AXIS_H);
    ctx.lineTo(x, height);
  }
  ctx.stroke();
}

// Arrows from producer to consumer, once few enough are in view.
function drawDeliveries() {
  const d = D.deliveries;
  let i = firstEndingAfter(d, 3, view.t0, (a, j) => a[j] + 1);
  let end = i;
  while (end < d.length && d[end] <= view.t1) end += 3;
  if ((end - i) / 3 > 300) return;
  ctx.strokeStyle = "rgba(16, 40, 120, 0.7)";
  ctx.fillStyle = "rgba(16, 40, 120, 0.7)";
  for (; i < end; i += 3) {
    const from = lanes[laneOfTid[d[i + 1]]], to = lanes[laneOfTid[d[i + 2]]];
    if (!from || !to) continue;
    const x = xOf(d[i]);
    const y0 = from.y + from.h / 2, y1 = to.y + to.h / 2;
    ctx.beginPath();
    ctx.moveTo(x, y0);
    ctx.lineTo(x, y1);
    ctx.stroke();
    const dir = y1 > y0 ? -1 : 1;
    ctx.beginPath();
    ctx.moveTo(x, y1);
    ctx.lineTo(x - 3, y1 + dir * 6);
    ctx.lineTo(x + 3, y1 + dir * 6);
    ctx.fill();
  }
}

function drawLabels() {
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, AXIS_H + yOff, LABEL_W - 4, viewH);
  ctx.font = "11px system-ui, sans-serif";
  for (const lane of lanes) {
    if (lane.kind === "group") {
      ctx.fillStyle = "#f1f3f5";
      ctx.fillRect(0, lane.y, LABEL_W - 4, lane.h);
      continue;
    }
    ctx.fillStyle = "#212529";
    const label = lane.label.length > 34 ? lane.label.slice(0, 33) + "…" : lane.label;
    ctx.fillText(label, 14, lane.y + Math.min(lane.h, 16) - 4);
  }
}

// Process headers and notes run across the whole width.
function drawHeaders() {
  for (const lane of lanes) {
    if (lane.kind === "group") {
      ctx.fillStyle = "#212529";
      ctx.font = "bold 12px system-ui, sans-serif";
      ctx.fillText(lane.label, 6, lane.y + 13);
    } else if (lane.kind === "note") {
      ctx.fillStyle = "#868e96";
      ctx.font = "11px system-ui, sans-serif";
      ctx.fillText(lane.text, LABEL_W + 4, lane.y + 13);
    }
  }
}

function draw() {
  yOff = Math.min(Math.max(window.scrollY - wrap.offsetTop, 0), Math.max(height - viewH, 0));
  ctx.clearRect(0, 0, width, viewH);
  const ticks = axisTicks();
  ctx.save();
  ctx.beginPath();
  ctx.rect(0, AXIS_H, width, viewH - AXIS_H);
  ctx.clip();
  for (const lane of lanes) {
    if (lane.kind === "group") {
      ctx.fillStyle = "#f1f3f5";
      ctx.fillRect(0, lane.y - yOff, width, lane.h);
    }
  }
  drawGrid(ticks);
  ctx.beginPath();
  ctx.rect(LABEL_W, AXIS_H, plotW(), viewH - AXIS_H);
  ctx.clip();
  ctx.translate(0, -yOff);
  for (const lane of lanes) {
    if (lane.y + lane.h < yOff || lane.y > yOff + viewH) continue;
    if (lane.kind === "states") drawStates(lane);
    else if (lane.kind === "counter") drawCounter(lane);
    else if (lane.kind === "level") drawLevel(lane);
    else if (lane.kind === "steps") drawSteps(lane);
    else if (lane.kind === "phases") drawPhases(lane);
  }
  drawStepBoundaries();
  for (const lane of lanes) if (lane.kind === "stalls") drawStalls(lane);
  drawDeliveries();
  ctx.restore();
  ctx.save();
  ctx.beginPath();
  ctx.rect(0, AXIS_H, LABEL_W, viewH - AXIS_H);
  ctx.clip();
  ctx.translate(0, -yOff);
  drawLabels();
  ctx.restore();
  ctx.save();
  ctx.beginPath();
  ctx.rect(0, AXIS_H, width, viewH - AXIS_H);
  ctx.clip();
  ctx.translate(0, -yOff);
  drawHeaders();
  ctx.restore();
  drawAxis(ticks);
}

let drawPending = false;
function redraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => { drawPending = false; draw(); });
}

function resize() {
  width = document.documentElement.clientWidth;
  viewH = Math.min(height, window.innerHeight);
  const dpr = window.devicePixelRatio || 1;
  canvas.width = width * dpr;
  canvas.height = viewH * dpr;
  canvas.style.width = width + "px";
  canvas.style.height = viewH + "px";
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  draw();
}

function setView(t0, t1) {
  const full = Math.max(D.duration_us, 1);
  const span = Math.min(Math.max(t1 - t0, 10), full);
  t0 = Math.min(Math.max(t0, 0), full - span);
  view = { t0, t1: t0 + span };
  redraw();
}

// ---- hover ----

function laneAt(y) {
  return lanes.find((l) => y >= l.y && y < l.y + l.h + GAP);
}

function describe(lane, t) {
  if (lane.kind === "states") {
    const s = lane.s;
    const i = firstEndingAfter(s, 3, t, (a, j) => a[j] + a[j + 1]);
    if (i >= s.length || s[i] > t) return null;
    const merged = s[i + 2] >> 3;
    return lane.label + " (" + lane.sub + ")\n" + D.states[s[i + 2] & 7] + " for " +
      fmtTime(s[i + 1]) + " from " + fmtTime(s[i]) +
      (merged ? "\n" + merged + " shorter slices merged; the state that dominated is shown" : "");
  }
  if (lane.kind === "counter") {
    const b = Math.floor(t / lane.bin_us);
    if (b < 0 || b >= lane.series[0].v.length) return null;
    return lane.label + " (" + lane.sub + ")\n" + fmtTime(b * lane.bin_us) + " +" +
      fmtTime(lane.bin_us) + ": " +
      lane.series.map((s) => s.name + " " + (s.v[b] / 100).toFixed(2)).join(", ") + " " + lane.unit;
  }
  if (lane.kind === "level") {
    const s = lane.s;
    const i = firstEndingAfter(s, 3, t, (a, j) => a[j + 1]);
    if (i >= s.length || s[i] > t) return lane.label + ": no sample";
    return lane.label + " " + lane.sub + "\n" + s[i + 2] + lane.unit + " from " + fmtTime(s[i]) +
      " to " + fmtTime(s[i + 1]);
  }
  if (lane.kind === "steps") {
    const s = D.steps;
    const i = firstEndingAfter(s, 2, t, (a, j) => a[j + 1]);
    if (i >= s.length || s[i] > t) return null;
    return D.step_labels[i / 2] + ": " + fmtTime(s[i + 1] - s[i]) + "\n" + D.step_info[i / 2];
  }
  if (lane.kind === "phases") {
    const s = lane.s;
    const i = firstEndingAfter(s, 4, t, (a, j) => a[j] + a[j + 1]);
    if (i >= s.length || s[i] > t) return null;
    return D.phase_texts[s[i + 3]] + "\n" + fmtTime(s[i + 1]) + " from " + fmtTime(s[i]);
  }
  if (lane.kind === "stalls") {
    const k = D.stalls.findIndex((st) => st.tid === lane.tid && st.start <= t && t < st.end);
    if (k < 0) return null;
    const st = D.stalls[k];
    return "stall #" + (k + 1) + ": " + fmtTime(st.end - st.start) + "\n" + st.text;
  }
  if (lane.kind === "note") return lane.text;
  return lane.label;
}

let drag = null;
canvas.addEventListener("mousedown", (e) => {
  drag = { x: e.clientX, t0: view.t0, t1: view.t1 };
  canvas.style.cursor = "grabbing";
});
window.addEventListener("mouseup", () => { drag = null; canvas.style.cursor = "grab"; });
canvas.addEventListener("mousemove", (e) => {
  const rect = canvas.getBoundingClientRect();
  const x = e.clientX - rect.left, y = e.clientY - rect.top;
  if (drag) {
    const dt = ((e.clientX - drag.x) / plotW()) * (drag.t1 - drag.t0);
    setView(drag.t0 - dt, drag.t1 - dt);
  }
  const lane = y >= AXIS_H ? laneAt(y + yOff) : null;
  const text = lane && x >= LABEL_W ? describe(lane, tOf(x)) : lane ? lane.label + (lane.sub ? "\n" + lane.sub : "") : null;
  if (!text) { tip.style.display = "none"; return; }
  tip.textContent = (x >= LABEL_W ? "@ " + fmtTime(tOf(x)) + "\n" : "") + text;
  tip.style.display = "block";
  tip.style.left = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 4) + "px";
  tip.style.top = e.clientY + 14 + "px";
});
canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; });
// The wheel zooms over the lanes and scrolls the page over their names.
canvas.addEventListener("wheel", (e) => {
  const rect = canvas.getBoundingClientRect();
  if (e.clientX - rect.left < LABEL_W) return;
  e.preventDefault();
  const t = tOf(e.clientX - rect.left);
  const f = Math.exp(e.deltaY * 0.002);
  setView(t - (t - view.t0) * f, t + (view.t1 - t) * f);
}, { passive: false });
canvas.addEventListener("dblclick", () => setView(0, D.duration_us));
window.addEventListener("resize", resize);
window.addEventListener("scroll", redraw);

// ---- header, legend, stall list ----

document.getElementById("title").textContent = D.title;
document.getElementById("meta").textContent = "duration " + fmtTime(D.duration_us) +
  " · slices shorter than " + fmtTime(D.min_slice_us) + " merged into their neighbours" +
  (D.steps.length ? " · " + D.steps.length / 2 + " steps" : "");
const legend = document.getElementById("legend");
for (const [name, color] of Object.entries(COLORS)) {
  const span = document.createElement("span");
  const box = document.createElement("i");
  box.style.background = color;
  span.append(box, name);
  legend.append(span);
}
if (D.stalls.length) {
  const section = document.getElementById("stalls");
  const h = document.createElement("h2");
  h.style.fontSize = "13px";
  h.textContent = "Worst stalls";
  const list = document.createElement("ol");
  for (const st of D.stalls) {
    const li = document.createElement("li");
    li.textContent = fmtTime(st.end - st.start) + " at " + fmtTime(st.start) + ": " + st.text;
    const pad = (st.end - st.start) * 2 + 1000;
    li.addEventListener("click", () => setView(st.start - pad, st.end + pad));
    list.append(li);
  }
  section.append(h, list);
}

// page.html#zoom=START_US,END_US opens on that stretch.
const zoom = /zoom=([\d.]+),([\d.]+)/.exec(location.hash);
if (zoom) view = { t0: +zoom[1], t1: Math.max(+zoom[2], +zoom[1] + 10) };
resize();
console.log("tprof-timeline: drawn " + lanes.length + " tracks");
