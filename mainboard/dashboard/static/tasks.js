// mainboard dashboard: a run's task views. Loaded before app.js, whose helpers (el, table,
// num, pm, status, getJSON, at, plotBox, yAxis) it calls, as layout.js's plotInto, when
// the run page renders: the task table (as `runs tasks` lists it), a line plot per
// plot_line task (uPlot) and a heat map per image task (a canvas), from api/run/ID/tasks.
"use strict";

const TASK_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
// viridis at five stops, interpolated linearly: low values dark blue, high values yellow
const HEAT_STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
const HEAT_MAX_H = 360;

function heatColor(t) {
  const x = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0.5)) * (HEAT_STOPS.length - 1);
  const i = Math.min(HEAT_STOPS.length - 2, Math.floor(x));
  const f = x - i;
  return HEAT_STOPS[i].map((c, k) => Math.round(c + f * (HEAT_STOPS[i + 1][k] - c)));
}

function taskKind(t) {
  return t.kind + (t.frozen ? " frozen" : "");
}

function taskValue(t) {
  if (t.points !== undefined) return `${num(t.points)} points`;
  return pm(t.estimate, t.error);
}

function drawLine(view, box) {
  const data = [view.x, ...view.y];
  const series = [{ label: "t" }, ...view.columns.map((c, j) => ({
    label: c, stroke: TASK_COLORS[j % TASK_COLORS.length], width: 1.5,
    points: { show: true, size: 6, fill: TASK_COLORS[j % TASK_COLORS.length] },
  }))];
  plotInto(`task-${view.index}`, box, {
    series, scales: { x: { time: false } },
    axes: [{ label: "t (along the direction)" }, yAxis({ label: "integrand" })],
  }, data);
}

function drawHeat(view, box) {
  const nu = view.u.length, nv = view.v.length;
  const width = Math.max(160, box.clientWidth - 12);
  const height = Math.max(40, Math.min(HEAT_MAX_H, Math.round(width * nv / Math.max(1, nu))));
  const dpr = window.devicePixelRatio || 1;
  const canvas = el("canvas", { class: "heat", "data-task": view.index, "data-nu": nu, "data-nv": nv,
    style: `width:${width}px;height:${height}px` });
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  const ctx = canvas.getContext("2d");
  const span = view.zmax - view.zmin;
  // v grows upwards, as on a plot: row 0 (the first v) is at the bottom
  for (let j = 0; j < nv; j++) {
    const y0 = Math.round((nv - 1 - j) * canvas.height / nv), y1 = Math.round((nv - j) * canvas.height / nv);
    for (let i = 0; i < nu; i++) {
      const x0 = Math.round(i * canvas.width / nu), x1 = Math.round((i + 1) * canvas.width / nu);
      const [r, g, b] = heatColor(span > 0 ? (view.z[j][i] - view.zmin) / span : 0.5);
      ctx.fillStyle = `rgb(${r}, ${g}, ${b})`;
      ctx.fillRect(x0, y0, x1 - x0, y1 - y0);
    }
  }
  const range = (xs) => (xs.length ? `${num(xs[0], 4)} … ${num(xs[xs.length - 1], 4)}` : "-");
  box.querySelectorAll("canvas, .muted").forEach((n) => n.remove());
  box.append(canvas, el("p", { class: "muted",
    text: `${view.shown ?? "value"}: ${num(view.zmin, 4)} (dark) … ${num(view.zmax, 4)} (bright); ` +
      `u ${range(view.u)} (${nu}, left to right), v ${range(view.v)} (${nv}, bottom to top)` }));
}

function renderTaskViews(data) {
  const section = document.getElementById("tasks-section");
  if (!section) return;
  section.hidden = !data.tasks.length;
  document.getElementById("tasks").replaceChildren(table([
    ["#", (t) => t.index, "num"], ["task", (t) => t.name, "wrap"], ["kind", taskKind],
    ["state", (t) => status(t.state)], ["from", (t) => t.from ?? ""],
    ["samples", (t) => num(t.samples), "num"], ["estimate ± error", taskValue, "num"],
  ], data.tasks, (t) => ({ "data-task": t.index, "data-state": t.state })));
  const plotsBox = document.getElementById("task-plots");
  const wanted = new Set(data.rasters.map((v) => `task-view-${v.index}`));
  plotsBox.querySelectorAll(":scope > .plot").forEach((n) => { if (!wanted.has(n.id)) n.remove(); });
  for (const view of data.rasters) {
    let box = document.getElementById(`task-view-${view.index}`);
    if (!box) {
      const what = view.kind === "plot_line" ? "line plot" : "heat map";
      box = plotBox(`task-view-${view.index}`, `${view.name}: ${view.kind} (${what})`);
      box.dataset.kind = view.kind;
      plotsBox.append(box);
    }
    if (view.kind === "plot_line") drawLine(view, box);
    else drawHeat(view, box);
  }
}

async function renderTasks(runId) {
  try {
    renderTaskViews(await getJSON(at(`api/run/${runId}/tasks`)));
  } catch (err) {
    const note = document.getElementById("tasks-note");
    if (note) note.textContent = `tasks not shown: ${err.message}`;
  }
}
