// mainboard dashboard: what keeps a page within the window (a 1,280 px laptop screen):
// long ids shortened and copyable, plots as wide as their box, y axes as wide as their
// labels. Loaded first; app.js and parents.js call these (they call app.js's el()).
"use strict";

const plots = {};

// A long id in a table cell: up to 8 characters and an ellipsis (the head of a hex run id;
// the tail of a job or scheduler id: its hex suffix, which `mainboard jobs` takes, as its
// head is a date), the whole value on hover (title) and in data-full, copied by a click.
const ID_CHARS = 8;
function shortId(value, { tail = false } = {}) {
  if (value === null || value === undefined || value === "") return "-";
  const full = String(value);
  if (full.length <= ID_CHARS + 2) return full;
  const suffix = full.slice(full.lastIndexOf("-") + 1);  // a job id's hex suffix
  const end = suffix.length >= 4 && suffix.length <= ID_CHARS ? suffix : full.slice(-ID_CHARS);
  const text = tail ? `…${end}` : `${full.slice(0, ID_CHARS)}…`;
  return el("button", { type: "button", class: "id", title: full, "data-full": full, text });
}

// navigator.clipboard exists only in a secure context (https, or localhost); elsewhere
// (the dashboard on a cluster's login node over http) a selected textarea and execCommand
function copyId(button) {
  const full = button.dataset.full;
  const done = () => { button.classList.add("copied"); button.title = `${full} (copied)`; };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(full).then(done, () => copyByTextarea(full) && done());
  } else if (copyByTextarea(full)) done();
}

function copyByTextarea(text) {
  const area = el("textarea", { readonly: "", style: "position:fixed;top:0;left:0;opacity:0" });
  area.value = text;
  document.body.append(area);
  area.select();
  let ok = false;
  try { ok = document.execCommand("copy"); } catch (_) { ok = false; }
  area.remove();
  return ok;
}

document.addEventListener("click", (event) => {
  const button = event.target.closest && event.target.closest("button.id[data-full]");
  if (button) copyId(button);
});

// A plot is as wide as its box (less the box's padding): drawn so, and redrawn so when the
// window is resized or the page's layout moves the box (fitPlots).
const plotWidth = (container) => Math.max(160, container.clientWidth - 12);

function plotInto(key, container, opts, data) {
  const existing = plots[key];
  if (existing && existing.root.isConnected && existing.series.length === opts.series.length) {
    existing.setData(data);
    fitPlots();
    return existing;
  }
  container.querySelectorAll(".uplot").forEach((n) => n.remove());
  plots[key] = new uPlot({ width: plotWidth(container), height: opts.height || 260, ...opts },
    data, container);
  return plots[key];
}

function fitPlots() {
  for (const [key, plot] of Object.entries(plots)) {
    if (!plot.root.isConnected) { delete plots[key]; continue; }
    const width = plotWidth(plot.root.parentElement);
    if (Math.abs(width - plot.width) >= 1) plot.setSize({ width, height: plot.height });
  }
}

let fitting = 0;
window.addEventListener("resize", () => {
  cancelAnimationFrame(fitting);
  fitting = requestAnimationFrame(fitPlots);
});

// a y axis as wide as its longest tick label (1,000,000 samples/s was cut at a fixed 70 px);
// uPlot asks again while the labels change, and takes the last size after two rounds
function axisSize(least) {
  return (u, values, axisIdx, cycleNum) => {
    const axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size;
    const longest = (values || []).reduce((a, v) => (String(v).length > a.length ? String(v) : a), "");
    u.ctx.font = axis.font[0];
    const text = longest ? u.ctx.measureText(longest).width / devicePixelRatio : 0;
    return Math.max(least, Math.ceil(axis.ticks.size + axis.gap + text + 4));
  };
}
