// mainboard dashboard: each page polls a cheap /version endpoint every second and fetches
// its data only when that changed. Text goes into the DOM through textContent only.
"use strict";

const PAGE = document.body.dataset.page;
const REF = document.body.dataset.ref;
// every link and fetch is under the base path the server was given (`--base-path`), so the
// dashboard also works behind a reverse proxy that serves it under a prefix
const BASE = document.body.dataset.base || "/";
const at = (path) => BASE + path;
const POLL_MS = 1000;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const GROUPED = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });  // made once: 1,000 rows

function num(v, digits = 6) {
  if (v === null || v === undefined) return "-";
  if (typeof v === "object" && "real" in v) return `${num(v.real, digits)} + ${num(v.imag, digits)}i`;
  if (Array.isArray(v)) return "[" + v.map((x) => num(x, digits)).join(", ") + "]";
  if (typeof v !== "number") return String(v);
  if (Math.abs(v) >= 1000 && Math.abs(v) < 1e15) return GROUPED.format(Math.round(v));
  return Number(v.toPrecision(digits)).toString();
}
const pm = (e, s) => (e === null || e === undefined ? "-" : `${num(e, 8)} ± ${num(s, 2)}`);
const when = (ts) => (ts ? new Date(ts * 1000).toLocaleString() : "-");
function ago(ts) {
  if (!ts) return "-";
  const s = Math.max(0, Date.now() / 1000 - ts);
  if (s < 60) return `${s.toFixed(0)} s ago`;
  if (s < 3600) return `${(s / 60).toFixed(0)} min ago`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h ago`;
  return when(ts);
}
const status = (s) => el("span", { class: `status ${s}`, text: s });

function table(columns, rows, rowAttrs) {
  const head = el("tr", {}, columns.map(([label, , cls]) => el("th", { class: cls, text: label })));
  const body = rows.map((r) => el("tr", rowAttrs ? rowAttrs(r) : {},
    columns.map(([, cell, cls]) => {
      const v = cell(r);
      return el("td", { class: cls }, v instanceof Node ? v : String(v ?? "-"));
    })));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, body));
}

function banner(broker) {
  const b = document.getElementById("banner");
  if (broker && !broker.ok) { b.textContent = broker.message; b.hidden = false; }
  else b.hidden = true;
}

async function getJSON(url) {
  const reply = await fetch(url, { credentials: "same-origin", cache: "no-store" });
  if (reply.status === 401) throw new Error("401: the token is missing or wrong");
  const data = await reply.json();
  if (!reply.ok) throw new Error(data.error || reply.statusText);
  return data;
}

// Poll `versionUrl` every second; on a change fetch `dataUrl` and render it. The first
// time, the data comes at once: when it carries its `version`, no version round trip first.
function poll(versionUrl, dataUrl, render) {
  let seen = null;
  const fresh = document.getElementById("fresh");
  async function tick() {
    try {
      const at = (u) => (typeof u === "function" ? u() : u);
      const opening = seen === null;
      const v = !versionUrl ? Date.now() : opening ? null : (await getJSON(at(versionUrl))).version;
      if (opening || v !== seen) {
        const data = await getJSON(at(dataUrl));
        render(data);
        banner(data.broker);
        seen = opening && versionUrl ? (data.version ?? "") : v;
      }
      fresh.textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      fresh.textContent = `dashboard not answering: ${err.message}`;
    }
    setTimeout(tick, POLL_MS);
  }
  tick();
}

function section(title, ...children) {
  return el("section", {}, el("h2", { text: title }), ...children);
}

// ---------------------------------------------------------------- runs list
function renderRuns(data) {
  const main = document.getElementById("main");
  const cols = [
    ["name", (r) => el("a", { href: at(`run/${r.run_id}`), text: r.name })],
    ["id", (r) => shortId(r.run_id)],
    ["status", (r) => status(r.status)],
    ["samples", (r) => num(r.samples), "num"],
    ["estimate ± error", (r) => pm(r.estimate, r.error), "num"],
    ["chi2/dof", (r) => num(r.chi2_dof, 3), "num"],
    ["updated", (r) => ago(r.updated)],
  ];
  const shown = data.runs.length;
  const nav = [];
  if (data.offset > 0) nav.push(el("a", { href: at(`?offset=${Math.max(0, data.offset - data.limit)}`), text: "« newer" }), " ");
  if (data.offset + shown < data.total) nav.push(el("a", { href: at(`?offset=${data.offset + data.limit}`), text: "older »" }));
  main.replaceChildren(
    el("h1", { text: "Runs" }),
    el("p", { class: "muted", id: "runs-count" },
      data.total ? `${data.offset + 1}–${data.offset + shown} of ${data.total} runs, live ones first ` : "no runs yet in this workspace ", ...nav),
    table(cols, data.runs, (r) => ({ "data-run-id": r.run_id, "data-status": r.status })));
}

// ---------------------------------------------------------------- plots (sized in layout.js)
const ITER_AXIS = { label: "iteration", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] };
const yAxis = (extra) => ({ size: axisSize(50), values: (u, vals) => vals.map((v) => num(v, 5)), ...extra });

function plotBox(id, title) {
  return el("div", { class: "plot", id }, el("div", { class: "t", text: title }));
}

function drawConvergence(run) {
  const s = run.series;
  const box = document.getElementById("plot-convergence");
  const x = s.map((p) => p.iteration);
  const est = s.map((p) => p.estimate);
  const hi = s.map((p) => (p.estimate === null || p.error === null ? null : p.estimate + p.error));
  const lo = s.map((p) => (p.estimate === null || p.error === null ? null : p.estimate - p.error));
  const own = s.map((p) => p.own);
  const exact = s.map(() => run.exact);
  const series = [{ label: "iteration" },
    { label: "cumulative", stroke: "#2563eb", width: 2 },
    { label: "+1σ", stroke: "rgba(37,99,235,0.3)" },
    { label: "-1σ", stroke: "rgba(37,99,235,0.3)" },
    { label: "per iteration", stroke: "#f59e0b", width: 0, points: { show: true, size: 6, fill: "#f59e0b" } }];
  const data = [x, est, hi, lo, own];
  if (run.exact !== null) { series.push({ label: "exact", stroke: "#16a34a", dash: [6, 4] }); data.push(exact); }
  plotInto("convergence", box, {
    series, bands: [{ series: [2, 3], fill: "rgba(37,99,235,0.12)" }],
    scales: { x: { time: false } }, axes: [ITER_AXIS, yAxis()], height: 440,
  }, data);
  box.dataset.points = String(x.length);
}

function drawSmall(key, title, run, pick, label2, pick2) {
  const box = document.getElementById(`plot-${key}`);
  const x = run.series.map((p) => p.iteration);
  const series = [{ label: "iteration" }, { label: title, stroke: "#7c3aed", width: 2, points: { show: true } }];
  const data = [x, run.series.map(pick)];
  const axes = [ITER_AXIS, yAxis()];
  const scales = { x: { time: false } };
  if (label2) {
    series.push({ label: label2, stroke: "#0891b2", scale: "q", points: { show: true } });
    data.push(run.series.map(pick2));
    axes.push(yAxis({ scale: "q", side: 1, size: 50, grid: { show: false } }));
    scales.q = { range: [0, 1] };
  }
  plotInto(key, box, { series, axes, scales, height: 200 }, data);
  box.dataset.points = String(x.length);
}

function drawGrid(diag) {
  const box = document.getElementById("plot-grid");
  if (!box || !diag.grid) return;
  const dims = diag.grid.slice(0, 8);
  const bins = dims[0].length - 1;
  // the VEGAS map: grid coordinate (bins of equal probability) -> bin edge per dimension;
  // a diagonal is a uniform grid, flat stretches are where the sampler puts its points
  const x = Array.from({ length: bins + 1 }, (_, i) => i / bins);
  const colors = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];
  const series = [{ label: "grid" }, ...dims.map((_, d) => ({ label: `x${d + 1}`, stroke: colors[d % colors.length] }))];
  plotInto("grid", box, { series, scales: { x: { time: false } }, axes: [{ label: "grid coordinate (equal-probability bins)" }, yAxis({ label: "edge", size: 60 })], height: 240 }, [x, ...dims]);
  box.dataset.points = String(bins);
}

// ---------------------------------------------------------------- run page
function card(k, v) { return el("div", { class: "card" }, el("div", { class: "k", text: k }), el("div", { class: "v", text: v })); }

function skeleton() {
  const main = document.getElementById("main");
  main.replaceChildren(
    el("h1", { id: "run-title" }),
    el("div", { class: "cards", id: "run-cards" }),
    el("div", { class: "muted", id: "run-forecast" }),
    el("div", { class: "plots" },
      plotBox("plot-convergence", "convergence: cumulative estimate ± error, per-iteration estimates, exact value"),
      el("div", {}, plotBox("plot-chi2", "chi2/dof and Q"), plotBox("plot-rate", "samples/s per iteration"))),
    el("section", { id: "tasks-section", hidden: "" }, el("h2", { text: "Tasks" }),
      el("p", { class: "muted", id: "tasks-note" }), el("div", { id: "tasks" }),
      el("div", { class: "plots", id: "task-plots" })),
    section("Iterations", el("div", { id: "iterations" })),
    el("div", { class: "two" },
      section("Workers", el("p", { class: "muted", id: "workers-note" }), el("div", { id: "workers" })),
      section("Timeline", el("div", { id: "timeline" }))),
    section("Logs", el("p", { class: "muted", id: "logs-note" }), el("div", { id: "logs" })),
    section("Histograms", el("p", { class: "muted", id: "hist-note" }), el("div", { class: "plots", id: "histograms" })),
    el("div", { class: "two" },
      section("Sampler diagnostics", el("p", { class: "muted", id: "diag-note" }), el("div", { id: "diagnostics" })),
      section("Snapshots and lineage", el("div", { id: "lineage" }), el("div", { id: "snapshots" }))),
    section("Settings (the run definition)", el("pre", { id: "settings" })));
}

let runRef = REF;  // the name or prefix in the URL until the first answer names the id

function renderRun(run) {
  if (run.parent) { renderParent(run); return; }  // a scan, tune or campaign: parents.js
  if (!document.getElementById("run-title")) skeleton();
  const sum = run.summary;
  runRef = sum.run_id;
  const last = run.series[run.series.length - 1] || {};
  document.title = `${sum.name} · mainboard`;
  document.getElementById("run-title").replaceChildren(`${sum.name} `, el("span", { class: "muted", text: sum.run_id }), " ", status(sum.status));
  document.getElementById("run-cards").replaceChildren(
    card("estimate", pm(sum.estimate, sum.error)), card("exact", num(run.exact, 10)),
    card("chi2/dof", num(last.chi2_dof ?? sum.chi2_dof, 3)), card("Q", num(last.q, 3)),
    card("samples", num(sum.samples)), card("iterations", num(sum.iterations)),
    card("samples/s (last)", num(last.samples_per_s, 3)),
    ...(run.failure ? [card("failure", run.failure.error)] : []));
  document.getElementById("run-forecast").replaceChildren(...(run.forecast_lines || []).map((l) => el("div", { text: l.trim() })));
  drawConvergence(run);
  drawSmall("chi2", "chi2/dof", run, (p) => p.chi2_dof, "Q", (p) => p.q);
  drawSmall("rate", "samples/s", run, (p) => p.samples_per_s);
  document.getElementById("iterations").replaceChildren(table([
    ["iteration", (p) => p.iteration, "num"], ["samples", (p) => num(p.samples), "num"],
    ["cumulative", (p) => pm(p.estimate, p.error), "num"], ["this iteration", (p) => pm(p.own, p.own_error), "num"],
    ["chi2/dof", (p) => num(p.chi2_dof, 3), "num"], ["Q", (p) => num(p.q, 3), "num"],
    ["samples/s", (p) => num(p.samples_per_s, 3), "num"], ["recorded", (p) => when(p.time)],
  ], run.series.slice().reverse(), (p) => ({ "data-iteration": p.iteration })));
  document.getElementById("workers-note").textContent = run.workers_note || "";
  document.getElementById("workers").replaceChildren(table([
    ["worker", (w) => w.worker, "wrap"], ["host", (w) => w.host], ["kind", (w) => w.kind], ["job", (w) => shortId(w.job_id, { tail: true })],
    ["batches", (w) => num(w.batches), "num"], ["samples/s", (w) => num(w.samples_per_s, 3), "num"],
    ["last heartbeat", (w) => ago(w.last_heartbeat)],
  ], run.workers));
  document.getElementById("timeline").replaceChildren(table([
    ["time", (e) => when(e.time)], ["event", (e) => e.kind], ["iteration", (e) => e.iteration ?? "", "num"], ["detail", (e) => e.detail || "", "wrap"],
  ], run.timeline.slice(-200)));
  document.getElementById("logs-note").textContent = run.logs_note || "";
  document.getElementById("logs").replaceChildren(table([
    ["time", (l) => when(l.ts)], ["level", (l) => el("span", { class: `level-${String(l.level).toLowerCase()}`, text: l.level })],
    ["worker", (l) => l.worker, "wrap"], ["source", (l) => l.source || ""], ["host", (l) => l.host], ["message", (l) => l.message, "msg"],
  ], run.logs.slice().reverse()));
  renderDiagnostics(run.diagnostics);
  renderObservables(run.observables);
  renderLineage(run);
  document.getElementById("settings").textContent = JSON.stringify(run.settings, null, 2);
  renderTasks(sum.run_id);  // tasks.js: the task table, line plots and heat maps
}

function renderDiagnostics(diag) {
  const box = document.getElementById("diagnostics");
  const note = document.getElementById("diag-note");
  const reported = diag.reported ? JSON.stringify(diag.reported, null, 2) : null;
  if (diag.grid) {
    note.textContent = `${diag.kind} grid map: ${Math.min(diag.grid.length, 8)} of ${diag.grid.length} dimensions`;
    if (!document.getElementById("plot-grid")) box.replaceChildren(plotBox("plot-grid", "VEGAS grid"), el("pre", { id: "diag-reported" }));
    drawGrid(diag);
    document.getElementById("diag-reported").textContent = reported || "";
    document.getElementById("diag-reported").hidden = !reported;
  } else if (reported) {
    note.textContent = `${diag.kind} sampler: its diagnostics in the latest snapshot (get_diagnostics of a process sampler)`;
    box.replaceChildren(el("pre", { id: "diag-reported", text: reported }));
  } else {
    note.textContent = diag.kind ? `${diag.kind} sampler: no diagnostics in its snapshots` : "no snapshot yet";
    box.replaceChildren();
  }
}

// Each histogram as steps over its bin edges with a ±1σ band, one line per component;
// the moments of f as a table under them.
function renderObservables(obs) {
  const box = document.getElementById("histograms");
  const note = document.getElementById("hist-note");
  if (!obs) {
    note.textContent = "no [[accumulator.histograms]] or moments in this run (or no iteration yet)";
    box.replaceChildren();
    return;
  }
  note.textContent = `${obs.histograms.length} histogram(s); bin integrals ± error, per component (${obs.components.join(", ")})`;
  const ids = obs.histograms.map((_, i) => `plot-hist-${i}`);
  if (ids.some((id) => !document.getElementById(id)) || box.children.length !== ids.length + (obs.moments ? 1 : 0)) {
    box.replaceChildren(...obs.histograms.map((h, i) => plotBox(ids[i], `${h.name}: ${h.of}, ${h.bins} bins`)),
      ...(obs.moments ? [el("div", { id: "moments" })] : []));
  }
  const colors = ["#2563eb", "#dc2626", "#16a34a", "#9333ea"];
  const step = uPlot.paths.stepped({ align: 1 });
  obs.histograms.forEach((h, i) => {
    const series = [{ label: h.of }];
    const data = [h.edges];
    const bands = [];
    h.estimate.forEach((est, c) => {
      const color = colors[c % colors.length];
      const last = (a) => [...a, a[a.length - 1]];  // the last bin's step reaches the high edge
      const err = h.error[c];
      series.push({ label: obs.components[c], stroke: color, width: 2, paths: step },
        { label: "+1σ", stroke: "rgba(0,0,0,0.15)", paths: step }, { label: "-1σ", stroke: "rgba(0,0,0,0.15)", paths: step });
      data.push(last(est), last(est.map((v, b) => v + err[b])), last(est.map((v, b) => v - err[b])));
      bands.push({ series: [series.length - 2, series.length - 1], fill: "rgba(37,99,235,0.15)" });
    });
    const plotBoxEl = document.getElementById(ids[i]);
    plotInto(`hist-${i}`, plotBoxEl, { series, bands, scales: { x: { time: false } }, axes: [{ label: h.of }, yAxis({ label: "bin integral" })], height: 240 }, data);
    plotBoxEl.dataset.points = String(h.bins);
  });
  if (obs.moments) {
    const m = obs.moments;
    document.getElementById("moments").replaceChildren(table([
      ["moment", (k) => `∫ f^${k} dx`], ...obs.components.map((label, c) => [label, (k) => pm(m.estimate[c][k - 1], m.error[c][k - 1]), "num"]),
    ], m.orders, (k) => ({ "data-moment": k })));
  }
}

function renderLineage(run) {
  const lin = run.lineage;
  const parts = [];
  if (lin.parent) parts.push(el("p", {}, "clone of ", el("a", { href: at(`run/${lin.parent}`), text: lin.parent }), ` from its snapshot after iteration ${lin.from_iteration}`));
  if (lin.resumed_from.length) parts.push(el("p", { text: `resumed from iteration ${lin.resumed_from.join(", ")}` }));
  if (lin.clones.length) parts.push(el("p", {}, "clones: ", lin.clones.map((c) => [el("a", { href: at(`run/${c.run_id}`), text: `${c.name} (${c.run_id})` }), ` from iteration ${c.from_iteration}, ${c.status}; `])));
  if (!parts.length) parts.push(el("p", { class: "muted", text: "an original run: no parent, no clones, never resumed" }));
  document.getElementById("lineage").replaceChildren(...parts);
  document.getElementById("snapshots").replaceChildren(table([
    ["after iteration", (s) => s.iteration, "num"], ["samples", (s) => num(s.samples), "num"],
    ["", (s) => (s.inherited ? "inherited from the parent" : "")],
    ["resume/clone", (s) => el("code", { text: `mainboard runs clone ${run.summary.run_id} --from-iteration ${s.iteration}` })],
  ], run.snapshots.slice().reverse()));
}

// ---------------------------------------------------------------- fleet and jobs
function renderFleet(data) {
  const main = document.getElementById("main");
  main.replaceChildren(
    el("h1", { text: "Fleet" }),
    el("p", { class: "muted", text: data.note || `${data.workers.length} fleet workers` }),
    table([
      ["worker", (w) => shortId(w.worker_id)], ["host", (w) => w.host], ["kind", (w) => w.kind], ["node", (w) => w.node, "wrap"],
      ["scheduler job", (w) => shortId(w.job_id, { tail: true })], ["state", (w) => status(w.state)], ["job state", (w) => w.job_state],
      ["tasks done", (w) => num(w.tasks_done), "num"], ["tasks/s", (w) => num(w.tasks_per_s, 3), "num"],
      ["last heartbeat", (w) => ago(w.last_heartbeat)], ["note", (w) => w.reason || "", "wrap"],
    ], data.workers, (w) => ({ "data-worker": w.worker_id })),
    section("Every worker beating on the broker",
      table([
        ["node", (w) => w.node, "wrap"], ["host", (w) => w.host || ""], ["job", (w) => (w.job_id ? shortId(w.job_id, { tail: true }) : "")],
        ["tasks done", (w) => num(Number(w.tasks_done || 0)), "num"], ["active", (w) => w.active || "0", "num"],
        ["tasks/s", (w) => num(w.tasks_per_s, 3), "num"], ["last beat", (w) => ago(w.beat)],
      ], data.registry)));
}

function renderJobs(data) {
  const main = document.getElementById("main");
  main.replaceChildren(
    el("h1", { text: "Jobs" }),
    el("p", { class: "muted", text: `${data.jobs.length} jobs in the job store; states as the hosts told them at ${when(data.checked_at)} (asked every few seconds while this page is open)` }),
    ...Object.entries(data.unreachable_hosts || {}).map(([host, why]) =>
      el("p", { class: "stale-host", text: `host ${host} did not answer (${why}): its unfinished jobs show their last recorded state, marked stale` })),
    table([
      ["id", (j) => shortId(j.id, { tail: true })], ["name", (j) => j.name, "wrap"], ["host", (j) => j.host], ["kind", (j) => j.kind],
      ["scheduler id", (j) => shortId(j.job_id, { tail: true })],
      ["state", (j) => j.stale ? el("span", {}, status(j.state), " ", el("span", { class: "stale", text: "stale" })) : status(j.state)],
      ["exit", (j) => j.exit_code ?? "", "num"],
      ["submitted", (j) => when(j.submitted_at)], ["state since", (j) => when(j.state_since)],
      ["logs", (j) => el("span", {}, el("a", { href: at(`jobs/${j.id}/logs?stream=stdout`), text: "stdout" }), " ", el("a", { href: at(`jobs/${j.id}/logs?stream=stderr`), text: "stderr" }))],
    ], data.jobs, (j) => ({ "data-job": j.id, "data-state": j.state, "data-stale": String(j.stale) })),
    ...(data.errors.length ? [section("Unreadable receipts", el("pre", { text: data.errors.join("\n") }))] : []));
}

// ---------------------------------------------------------------- start
const offset = new URLSearchParams(location.search).get("offset") || "0";
if (PAGE === "runs") poll(at("api/runs-version"), at(`api/runs?offset=${encodeURIComponent(offset)}`), renderRuns);
else if (PAGE === "run") poll(() => at(`api/run/${runRef}/version`), () => at(`api/run/${runRef}`), renderRun);
else if (PAGE === "fleet") poll(null, at("api/fleet"), renderFleet);
else if (PAGE === "jobs") poll(at("api/jobs-version"), at("api/jobs"), renderJobs);
