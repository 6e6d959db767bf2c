// gpufleet dashboard charts: SVG line and stacked-bar charts with a time
// axis, a value axis with units, grid lines and a legend. Plain DOM, no
// libraries. Each axis is a <g class="x-axis"> or <g class="y-axis"> whose
// <g class="tick"> children carry a line and a label.
"use strict";

const Charts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#db2777", "#65a30d"];
  const W = 560, H = 230, L = 58, R = 26, T = 22, B = 28;

  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text != null) e.textContent = text;
    return e;
  }

  // Time ticks: the first step from this list giving at most 6 ticks.
  const STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800, 2592000].map((s) => s * 1000);
  function timeTicks(t0, t1) {
    const span = Math.max(1, t1 - t0);
    const step = STEPS.find((s) => span / s <= 6) || STEPS[STEPS.length - 1];
    // Align to the step in local time for steps of a day or more.
    const off = step >= 86400000 ? new Date(t0).getTimezoneOffset() * 60000 : 0;
    const out = [];
    for (let t = Math.ceil((t0 - off) / step) * step + off; t <= t1; t += step) out.push(t);
    return { ticks: out, step };
  }
  const pad2 = (n) => String(n).padStart(2, "0");
  function timeLabel(t, step, span) {
    const d = new Date(t);
    const hm = pad2(d.getHours()) + ":" + pad2(d.getMinutes());
    if (step >= 86400000) return d.toLocaleDateString(undefined, { month: "short", day: "numeric" });
    const day = span > 86400000 ? d.toLocaleDateString(undefined, { month: "short", day: "numeric" }) + " " : "";
    return day + (step < 60000 ? hm + ":" + pad2(d.getSeconds()) : hm);
  }

  // Value ticks: 0 and round steps (1, 2, 2.5, 5 × 10^k) up to max.
  function valueTicks(max) {
    if (!(max > 0)) max = 1;
    const raw = max / 4, p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= raw);
    const top = Math.ceil(max / step - 1e-9) * step;
    const out = [];
    for (let v = 0; v <= top + step / 2; v += step) out.push(v);
    return { ticks: out, top };
  }

  function frame(title, unit, x0, x1, yTop, yFmt, yTicks) {
    const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "aria-label": title + " (" + unit + ")", class: "chart" });
    const sx = (t) => L + (W - L - R) * (x1 === x0 ? 0.5 : (t - x0) / (x1 - x0));
    const sy = (v) => H - B - (H - B - T) * (v / yTop);
    const ya = svgEl("g", { class: "y-axis" });
    for (const v of yTicks) {
      const g = svgEl("g", { class: "tick" });
      g.append(svgEl("line", { x1: L, x2: W - R, y1: sy(v), y2: sy(v), class: "grid" }));
      g.append(svgEl("text", { x: L - 6, y: sy(v) + 3, "text-anchor": "end" }, yFmt(v)));
      ya.append(g);
    }
    ya.append(svgEl("text", { x: 4, y: 11, class: "unit", "text-anchor": "start" }, unit));
    svg.append(ya);
    const xa = svgEl("g", { class: "x-axis" });
    xa.append(svgEl("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }));
    const { ticks, step } = timeTicks(x0, x1);
    for (const t of ticks) {
      const g = svgEl("g", { class: "tick" });
      g.append(svgEl("line", { x1: sx(t), x2: sx(t), y1: H - B, y2: H - B + 4, class: "axis" }));
      g.append(svgEl("text", { x: sx(t), y: H - B + 16, "text-anchor": "middle" }, timeLabel(t, step, x1 - x0)));
      xa.append(g);
    }
    svg.append(xa);
    return { svg, sx, sy };
  }

  function legend(labels) {
    const ul = document.createElement("ul");
    ul.className = "legend";
    labels.forEach((l, k) => {
      const li = document.createElement("li");
      const sw = document.createElement("span");
      sw.className = "swatch"; sw.style.background = COLORS[k % COLORS.length];
      li.append(sw, document.createTextNode(l));
      ul.append(li);
    });
    return ul;
  }

  function figure(title, svg, labels) {
    const fig = document.createElement("figure");
    fig.className = "chart-figure";
    const cap = document.createElement("figcaption");
    cap.textContent = title;
    fig.append(cap, svg, legend(labels));
    return fig;
  }

  // line draws series [{label, points: [[ms, value], …]}] over time.
  // opts: unit (axis title), fmt (tick label), max (fixed top), step
  // (true: hold each value until the next point).
  function line(title, series, opts) {
    const o = Object.assign({ unit: "", fmt: (v) => String(v) }, opts);
    const all = series.flatMap((s) => s.points);
    if (all.length === 0) return null;
    let x0 = Math.min(...all.map((p) => p[0])), x1 = Math.max(...all.map((p) => p[0]));
    if (x1 - x0 < 10000) { x1 = x0 + 10000; }
    const { ticks, top } = valueTicks(o.max || Math.max(...all.map((p) => p[1])));
    const f = frame(title, o.unit, x0, x1, o.max && o.max >= top ? o.max : top, o.fmt, ticks);
    series.forEach((s, k) => {
      if (s.points.length === 0) return;
      let d = "";
      s.points.forEach((p, i) => {
        const x = f.sx(p[0]).toFixed(1), y = f.sy(p[1]).toFixed(1);
        if (i === 0) d += `M${x},${y}`;
        else if (o.step) d += `H${x}V${y}`;
        else d += `L${x},${y}`;
      });
      const path = svgEl("path", { d, class: "series", stroke: COLORS[k % COLORS.length], fill: "none", "data-label": s.label });
      path.append(svgEl("title", {}, s.label));
      f.svg.append(path);
      if (s.points.length === 1) {
        f.svg.append(svgEl("circle", { cx: f.sx(s.points[0][0]), cy: f.sy(s.points[0][1]), r: 3, fill: COLORS[k % COLORS.length] }));
      }
    });
    return figure(title, f.svg, series.map((s) => s.label));
  }

  // bars draws stacked bars: buckets [ms start], width ms, series
  // [{label, values: [v per bucket]}].
  function bars(title, buckets, width, series, opts) {
    const o = Object.assign({ unit: "", fmt: (v) => String(v) }, opts);
    if (buckets.length === 0) return null;
    const x0 = Math.min(...buckets), x1 = Math.max(...buckets) + width;
    const totals = buckets.map((_, i) => series.reduce((t, s) => t + (s.values[i] || 0), 0));
    const { ticks, top } = valueTicks(Math.max(...totals));
    const f = frame(title, o.unit, x0, x1, top, o.fmt, ticks);
    const bw = Math.max(1, f.sx(x0 + width) - f.sx(x0) - 2);
    buckets.forEach((b, i) => {
      let acc = 0;
      series.forEach((s, k) => {
        const v = s.values[i] || 0;
        if (v <= 0) return;
        const y1 = f.sy(acc), y2 = f.sy(acc + v);
        const r = svgEl("rect", { x: f.sx(b) + 1, y: y2, width: bw, height: Math.max(0.5, y1 - y2), fill: COLORS[k % COLORS.length], class: "bar" });
        r.append(svgEl("title", {}, `${s.label} ${new Date(b).toLocaleString()}: ${o.fmt(v)}`));
        f.svg.append(r);
        acc += v;
      });
    });
    return figure(title, f.svg, series.map((s) => s.label));
  }

  return { line, bars, valueTicks, timeTicks };
})();
