// mainboard dashboard: the page of a parent run (scan, tune, campaign). Loaded before
// app.js, whose helpers (el, table, num, pm, card, section, plotBox, yAxis, status) it
// calls, as layout.js's plotInto, when a run page's data carries a "parent" table.
"use strict";

// a number for the x axis: a number, or the first number of a list (integrand.a = [a, a])
function parentX(v) {
  if (typeof v === "number") return v;
  if (Array.isArray(v) && typeof v[0] === "number") return v[0];
  return null;
}

// uPlot has no error bars: a draw hook strokes estimate ± error at each point
function errorBars(lo, hi, colors) {
  return {
    hooks: {
      draw: [(u) => {
        const ctx = u.ctx;
        ctx.save();
        ctx.lineWidth = 1.5 * devicePixelRatio;
        for (let s = 1; s < u.series.length; s++) {
          ctx.strokeStyle = colors[(s - 1) % colors.length];
          const xs = u.data[0];
          for (let i = 0; i < xs.length; i++) {
            if (lo[s - 1][i] === null || hi[s - 1][i] === null) continue;
            const x = u.valToPos(xs[i], "x", true);
            const y0 = u.valToPos(lo[s - 1][i], "y", true);
            const y1 = u.valToPos(hi[s - 1][i], "y", true);
            const cap = 4 * devicePixelRatio;
            ctx.beginPath();
            ctx.moveTo(x, y0); ctx.lineTo(x, y1);
            ctx.moveTo(x - cap, y0); ctx.lineTo(x + cap, y0);
            ctx.moveTo(x - cap, y1); ctx.lineTo(x + cap, y1);
            ctx.stroke();
          }
        }
        ctx.restore();
      }],
    },
  };
}

// (x label, x values, one series per combination of the other parameters)
function parentSeries(p) {
  const rows = p.rows.filter((r) => r.estimate !== null && r.estimate !== undefined);
  const names = p.parameters || [];
  const axis = names.find((n) => rows.length && rows.every((r) => parentX(r.point[n]) !== null));
  const xOf = (r, i) => (axis ? parentX(r.point[axis]) : i);
  const xs = [...new Set(rows.map(xOf))].sort((a, b) => a - b);
  const groups = new Map();
  rows.forEach((r, i) => {
    // a scan: one series per combination of its other parameters; a study: one series
    const others = p.kind === "scan" ? names.filter((n) => n !== axis) : [];
    const key = others.map((n) => `${n}=${JSON.stringify(r.point[n])}`).join(" ")
      || (p.kind === "campaign" ? "children" : p.kind === "tune" ? "trials" : "estimate");
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push([xOf(r, i), r]);
  });
  const series = [...groups.entries()].map(([label, pts]) => {
    const at = new Map(pts.map(([x, r]) => [x, r]));
    const pick = (f) => xs.map((x) => (at.has(x) ? f(at.get(x)) : null));
    return { label, est: pick((r) => r.estimate), lo: pick((r) => r.estimate - (r.error || 0)),
      hi: pick((r) => r.estimate + (r.error || 0)) };
  });
  const label = axis || (p.kind === "campaign" ? "child (in start order)" : "child");
  return { label, xs, series, points: rows.length };
}

function renderParent(run) {
  const p = run.parent;
  const main = document.getElementById("main");
  if (!document.getElementById("parent-title")) {
    main.replaceChildren(
      el("h1", { id: "parent-title" }),
      el("div", { class: "cards", id: "parent-cards" }),
      el("div", { class: "plots" }, plotBox("plot-parent", "estimate ± error of each child run")),
      section("Child runs", el("div", { id: "parent-rows" })),
      section("Settings (the parent definition)", el("pre", { id: "settings" })));
  }
  document.title = `${p.name} · mainboard`;
  document.getElementById("parent-title").replaceChildren(`${p.name} `,
    el("span", { class: "muted", text: `${p.kind} ${p.run_id}` }), " ", status(p.status));
  const cards = [card("kind", p.kind), card("children", num(p.rows.length))];
  if (p.kind === "tune") cards.push(card(`best ${p.metric}`, p.best ? `${p.best.label}: ${num(p.best.objective, 4)}` : "-"));
  if (p.kind === "campaign") cards.push(card("total", pm(p.total.estimate, p.total.error)), card("samples", num(p.total.samples)));
  if (p.failure) cards.push(card("failure", p.failure));
  document.getElementById("parent-cards").replaceChildren(...cards);

  const s = parentSeries(p);
  const colors = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];
  const box = document.getElementById("plot-parent");
  const series = [{ label: s.label }, ...s.series.map((g, i) => ({
    label: g.label, stroke: colors[i % colors.length], width: 1,
    points: { show: true, size: 7, fill: colors[i % colors.length] } }))];
  plotInto("parent", box, {
    series, scales: { x: { time: false } }, axes: [{ label: s.label }, yAxis({ label: "estimate" })],
    plugins: [errorBars(s.series.map((g) => g.lo), s.series.map((g) => g.hi), colors)], height: 360,
  }, [s.xs, ...s.series.map((g) => g.est)]);
  box.dataset.points = String(s.points);

  const names = p.kind === "campaign" ? [] : (p.parameters || []);
  const cols = [["child", (r) => el("a", { href: at(`run/${r.child}`), text: r.label })],
    ...names.map((n) => [n, (r) => JSON.stringify(r.point[n]), "wrap"]),
    ...(p.kind === "campaign" ? [["coefficient", (r) => num(r.coefficient), "num"]] : []),
    ["estimate ± error", (r) => pm(r.estimate, r.error), "num"], ["chi2/dof", (r) => num(r.chi2_dof, 3), "num"],
    ["samples", (r) => num(r.samples), "num"], ["wall s", (r) => num(r.wall_s, 3), "num"],
    ...(p.kind === "tune" ? [[p.metric, (r) => num(r.objective, 4), "num"]] : []),
    ["status", (r) => status(r.status)], ["failure", (r) => r.failure || "", "wrap"]];
  document.getElementById("parent-rows").replaceChildren(table(cols, p.rows, (r) => ({ "data-child": r.label })));
  document.getElementById("settings").textContent = JSON.stringify(run.settings, null, 2);
}
