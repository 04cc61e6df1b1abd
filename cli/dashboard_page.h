// The page `actorflow dashboard` serves at / (cli/dashboard.cc): self-contained HTML and script.
// It loads Chart.js from the dashboard itself (/chart.js, the Debian package's file) and fetches
// /api/state every second; off loopback the browser sends the session cookie /login set.
// Text from the cluster (task names, errors, events) is inserted with textContent, never as HTML.
#pragma once

namespace actorflow {
namespace cli {

inline constexpr const char* kDashboardPage = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>actorflow dashboard</title>
<style>
  body { font: 13px/1.4 system-ui, sans-serif; margin: 16px; color: #222; background: #fafafa; }
  h1 { font-size: 18px; margin: 0 0 4px; }
  h2 { font-size: 15px; margin: 18px 0 6px; }
  #summary { margin-bottom: 10px; color: #444; }
  #error { color: #b00; font-weight: bold; }
  table { border-collapse: collapse; background: #fff; }
  th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; }
  th { background: #eee; }
  td.l, th.l { text-align: left; }
  tr.down td { background: #fde8e8; }
  td.state-up { color: #070; font-weight: bold; }
  td.state-down { color: #b00; font-weight: bold; }
  td.why { color: #b00; white-space: normal; max-width: 420px; text-align: left; }
  .charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(400px, 1fr)); gap: 10px; }
  .chart { background: #fff; border: 1px solid #ddd; padding: 6px; height: 230px; position: relative; }
  #events td { text-align: left; }
  #events tr.down td, #events tr.failure td, #events tr.fault td, #events tr.rollback td { background: #fde8e8; }
  #events tr.up td, #events tr.checkpoint td, #events tr.restore td { background: #eef8ee; }
  #events tr.restart td { background: #fff6dd; }
</style>
<script src="chart.js"></script>
</head>
<body>
<h1>actorflow cluster <span id="cluster"></span></h1>
<div id="summary">global step <b id="global-step">-</b> &middot; <span id="up-count">-</span> tasks up &middot;
  updated <span id="updated">never</span></div>
<div id="error"></div>
<h2>Tasks</h2>
<table id="tasks">
  <thead><tr><th class="l">task</th><th class="l">role</th><th class="l">state</th><th>global step</th><th>steps/s</th>
    <th>CPU %</th><th>RSS</th><th>net in/s</th><th>net out/s</th><th>failures</th><th>uptime</th><th>heartbeat ms</th>
    <th>loss</th><th>accuracy</th><th class="l">devices</th><th class="l">note</th></tr></thead>
  <tbody></tbody>
</table>
<h2>Waits</h2>
<div id="waits-end"></div>
<table id="waits">
  <thead><tr><th class="l">task</th><th class="l">kind</th><th class="l">on</th><th>age</th><th class="l">what</th></tr></thead>
  <tbody></tbody>
</table>
<h2>Training and resources</h2>
<div class="charts">
  <div class="chart"><canvas id="chart-loss"></canvas></div>
  <div class="chart"><canvas id="chart-accuracy"></canvas></div>
  <div class="chart"><canvas id="chart-steps_per_sec"></canvas></div>
  <div class="chart"><canvas id="chart-global_step"></canvas></div>
  <div class="chart"><canvas id="chart-cpu_percent"></canvas></div>
  <div class="chart"><canvas id="chart-net_in"></canvas></div>
  <div class="chart"><canvas id="chart-net_out"></canvas></div>
</div>
<h2>Events</h2>
<table id="events"><thead><tr><th class="l">time</th><th class="l">kind</th><th class="l">event</th></tr></thead>
  <tbody></tbody></table>
<script>
"use strict";
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
const TITLES = {
  loss: "loss (summary)", accuracy: "accuracy (summary)", steps_per_sec: "steps/s", global_step: "global step",
  cpu_percent: "CPU %", net_in: "network in (bytes/s)", net_out: "network out (bytes/s)"
};
const charts = {};
function bytes(b) {
  if (b === null || b === undefined) return "-";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b.toFixed(0)) + u[i];
}
function num(v, digits) { return v === null || v === undefined ? "-" : v.toFixed(digits); }
function chart(name) {
  if (charts[name] || typeof Chart === "undefined") return charts[name];
  const el = document.getElementById("chart-" + name);
  if (!el) return undefined;
  charts[name] = new Chart(el.getContext("2d"), {
    type: "line",
    data: { datasets: [] },
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false, normalized: true,
      elements: { point: { radius: 0 }, line: { borderWidth: 1.5, tension: 0 } },
      scales: {
        x: { type: "linear", title: { display: true, text: "seconds since the dashboard started" } },
        y: name.startsWith("net_") ? { ticks: { callback: v => bytes(v) + "/s" } } : {}
      },
      plugins: { title: { display: true, text: TITLES[name] || name }, legend: { labels: { boxWidth: 12 } } }
    }
  });
  return charts[name];
}
function updateChart(name, series) {
  const c = chart(name);
  if (!c) return;
  for (const label of Object.keys(series || {}).sort()) {
    let ds = c.data.datasets.find(d => d.label === label);
    if (!ds) {
      const color = COLORS[c.data.datasets.length % COLORS.length];
      ds = { label: label, data: [], borderColor: color, backgroundColor: color, fill: false };
      c.data.datasets.push(ds);
    }
    ds.data = series[label].map(p => ({ x: p[0], y: p[1] }));
  }
  c.update("none");
}
function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}
function render(s) {
  document.getElementById("cluster").textContent = s.cluster || "";
  document.getElementById("global-step").textContent = s.global_step === null || s.global_step === undefined ? "-" : String(s.global_step);
  document.getElementById("up-count").textContent = (s.up === undefined ? "-" : s.up) + "/" + (s.total === undefined ? "-" : s.total);
  document.getElementById("updated").textContent = s.time || "never";
  const body = document.querySelector("#tasks tbody");
  body.textContent = "";
  for (const t of s.tasks) {
    const tr = document.createElement("tr");
    tr.className = t.state;
    tr.dataset.task = t.task;
    cell(tr, t.task, "l task");
    cell(tr, t.role, "l");
    cell(tr, t.state.toUpperCase(), "l state-" + t.state);
    cell(tr, num(t.global_step, 0), "step");
    cell(tr, num(t.steps_per_sec, 1));
    cell(tr, num(t.cpu_percent, 0));
    cell(tr, bytes(t.rss_bytes));
    cell(tr, bytes(t.net_in_bytes_per_sec));
    cell(tr, bytes(t.net_out_bytes_per_sec));
    cell(tr, num(t.actor_failures, 0));
    cell(tr, t.uptime_secs === null ? "-" : num(t.uptime_secs, 0) + "s");
    cell(tr, num(t.heartbeat_rtt_ms, 2));
    cell(tr, num(t.loss, 4));
    cell(tr, num(t.accuracy, 3));
    cell(tr, t.devices || "-", "l");
    cell(tr, t.why || "", "why");
    body.appendChild(tr);
  }
  const wb = document.querySelector("#waits tbody");
  wb.textContent = "";
  const waits = s.waits || { tasks: [], waits_end_at: [] };
  for (const t of waits.tasks || []) {
    if (t.error) {
      const tr = document.createElement("tr");
      cell(tr, t.task, "l task");
      cell(tr, "?", "l");
      cell(tr, "-", "l");
      cell(tr, "-");
      cell(tr, "waits unknown: " + t.error, "l why");
      wb.appendChild(tr);
    }
    for (const w of t.waits || []) {
      const tr = document.createElement("tr");
      cell(tr, t.task, "l task");
      cell(tr, w.kind, "l");
      cell(tr, w.on || "-", "l");
      cell(tr, num(w.age_secs, 1) + "s");
      cell(tr, w.what, "l");
      wb.appendChild(tr);
    }
  }
  const ends = waits.waits_end_at || [];
  document.getElementById("waits-end").textContent = ends.length ? "waits end at: " + ends.join(" ") : "no task waits on another";
  for (const name of Object.keys(TITLES)) updateChart(name, (s.series || {})[name]);
  const ev = document.querySelector("#events tbody");
  ev.textContent = "";
  for (const e of (s.events || []).slice().reverse()) {
    const tr = document.createElement("tr");
    tr.className = e.kind;
    cell(tr, e.time, "l");
    cell(tr, e.kind, "l");
    cell(tr, e.text, "l");
    ev.appendChild(tr);
  }
}
async function tick() {
  try {
    // Off loopback the session cookie of /login goes with it (same origin); no credential in the page.
    const r = await fetch("api/state", { cache: "no-store", credentials: "same-origin" });
    if (!r.ok) throw new Error("HTTP " + r.status + ": " + (await r.text()));
    render(await r.json());
    document.getElementById("error").textContent = typeof Chart === "undefined" ? "Chart.js did not load: no charts" : "";
  } catch (e) {
    document.getElementById("error").textContent = "cannot read the dashboard's state: " + e.message;
  } finally {
    setTimeout(tick, 1000);
  }
}
tick();
</script>
</body>
</html>
)PAGE";

}  // namespace cli
}  // namespace actorflow
