// gpufleet dashboard: plain DOM, no libraries, nothing off this server.
"use strict";

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c == null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function csrf() {
  const m = document.cookie.match(/(?:^|;\s*)gpufleet_csrf=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}

async function api(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (method !== "GET") opts.headers["X-CSRF-Token"] = csrf();
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  if (r.status === 401) { showLogin(); throw new Error("logged out"); }
  if (!r.ok) {
    let msg = r.status + " " + r.statusText;
    try { const p = await r.json(); msg = p.detail || p.title || msg; } catch (e) { /* not JSON */ }
    const err = new Error(msg); err.status = r.status; throw err;
  }
  return r.status === 204 ? null : r.json();
}

// optional fetches an API another part of the server may not serve.
async function optional(path) {
  try { return await api("GET", path); } catch (e) { if (e.status === 404 || e.status === 501 || e.status === 403) return null; throw e; }
}

const pct = (x) => x == null ? "—" : (100 * x).toFixed(0) + "%";
const ago = (t) => t ? new Date(t).toLocaleTimeString() : "";

function showLogin() {
  $("#app").hidden = true; $("#logout").hidden = true; $("#who").textContent = "";
  $("#login-view").hidden = false;
}

async function start() {
  const r = await fetch("/ui/session", { credentials: "same-origin" });
  const s = await r.json();
  if (!s.loggedIn) { showLogin(); return; }
  $("#login-view").hidden = true; $("#app").hidden = false; $("#logout").hidden = false;
  $("#who").textContent = s.subject + (s.admin ? " (admin)" : "");
  refresh();
}

$("#login").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("#login-error").textContent = "";
  const r = await fetch("/ui/login", { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ token: $("#token").value }) });
  if (!r.ok) { $("#login-error").textContent = (await r.text()).trim(); return; }
  $("#token").value = "";
  start();
});

$("#logout").addEventListener("click", async () => {
  await fetch("/ui/logout", { method: "POST", credentials: "same-origin", headers: { "X-CSRF-Token": csrf() } });
  showLogin();
});

$("#submit").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const name = $("#job-name").value.trim();
  const manifest = {
    apiVersion: "gpufleet.dev/v1", kind: "Job", metadata: name ? { name } : {},
    spec: { resources: { gpus: Number($("#job-gpus").value || 0) }, run: { command: ["sh", "-c", $("#job-command").value] } },
  };
  try {
    const j = await api("POST", "/v1/jobs", manifest);
    $("#submit-result").textContent = "submitted " + j.id;
    $("#submit-result").className = "";
    $("#submit-result").dataset.job = j.id;
    refresh();
  } catch (e) {
    $("#submit-result").textContent = e.message; $("#submit-result").className = "error";
  }
});

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

async function renderJobs() {
  const list = await api("GET", "/v1/jobs?limit=30");
  const jobs = list.jobs || [];
  // Details (efficiency, cost, pending reasons) for the jobs shown.
  const views = await Promise.all(jobs.slice(0, 30).map((j) => api("GET", "/v1/jobs/" + encodeURIComponent(j.id)).catch(() => j)));
  fill($("#jobs tbody"), views.map((v) => {
    const eff = v.efficiency;
    const cls = eff ? eff.verdict.class : null;
    const why = v.pending ? (v.pending.reasons || []).map((r) => r.message).join("; ") : (v.reason || "");
    // Both columns cover the same attempts: the ledger's (every attempt,
    // effective cost where telemetry measured it) when the server meters
    // the job, else the live attempt's estimate.
    const cost = v.cost ? money(v.cost.total) : (eff && eff.costMicros != null ? eff.costMicros / 1e6 : null);
    const effCost = v.cost ? (v.cost.measuredCost ? money(v.cost.effectiveCost || 0) : null) : (eff && eff.effectiveCostMicros != null ? eff.effectiveCostMicros / 1e6 : null);
    const effText = eff ? [el("span", { class: "class-" + cls }, cls), " ", pct(eff.smActive), " SM", eff.source === "simulated" ? " (simulated)" : ""] : ["—"];
    return el("tr", { "data-job": v.id, "data-state": v.state },
      el("td", {}, v.id), el("td", {}, v.name || ""),
      el("td", {}, el("span", { class: "state state-" + v.state }, v.state)),
      el("td", {}, (v.spec && v.spec.queue) || ""), el("td", {}, v.spec ? v.spec.resources.gpus : ""),
      el("td", { class: "cost" }, usd(cost)), el("td", {}, usd(effCost)),
      el("td", {}, ...effText), el("td", { class: "muted" }, why));
  }));
}

async function renderQueues() {
  const q = await api("GET", "/v1/queues");
  fill($("#queues tbody"), (q.queues || []).map((x) => {
    const use = Object.entries(x.use || {}).map(([m, n]) => n + "×" + m).join(", ") || "0";
    return el("tr", {}, el("td", {}, x.name), el("td", {}, x.pending), el("td", {}, use), el("td", {}, (x.spec && x.spec.weight) || 1));
  }));
}

async function renderNodes() {
  const n = await api("GET", "/v1/nodes");
  $("#nodes").replaceChildren(...(n.nodes || []).map((node) => {
    const byIdx = {};
    for (const g of (node.telemetry && node.telemetry.gpus) || []) byIdx[g.index] = g.values || {};
    const src = node.telemetrySource === "simulated" ? "simulated telemetry" : node.telemetrySource === "none" ? "no GPU" : node.telemetrySource || "no telemetry yet";
    const gpus = (node.gpus || []).map((g) => {
      const holder = node.gpuHolders && node.gpuHolders[g.index];
      const sm = (byIdx[g.index] || {}).DCGM_FI_PROF_SM_ACTIVE;
      const bar = el("div", { class: "bar" }, el("div", {}));
      bar.firstChild.style.width = sm == null ? "0" : Math.round(100 * sm) + "%";
      return el("span", { class: "gpu" + (holder ? " held" : "") }, "GPU " + g.index + " " + g.model, el("br"),
        holder ? holder : "free", " · SM " + pct(sm), bar);
    });
    return el("div", { class: "node" }, el("strong", {}, node.name || node.id), " ",
      el("span", { class: "state state-" + node.state }, node.state), " ", el("span", { class: "muted" }, src), el("div", {}, ...gpus));
  }));
}

// chart draws stacked daily bars of series {label: {day: dollars}} as SVG.
function chart(title, series) {
  const ns = "http://www.w3.org/2000/svg";
  const days = [...new Set(Object.values(series).flatMap((s) => Object.keys(s)))].sort();
  const labels = Object.keys(series);
  const W = 420, H = 140, pad = 24;
  const totals = days.map((d) => labels.reduce((t, l) => t + (series[l][d] || 0), 0));
  const max = Math.max(1e-9, ...totals);
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H + 30}`); svg.setAttribute("width", "100%"); svg.setAttribute("role", "img"); svg.setAttribute("aria-label", title);
  const colors = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2"];
  const bw = Math.max(4, (W - pad) / Math.max(1, days.length) - 4);
  days.forEach((d, i) => {
    let y = H;
    labels.forEach((l, k) => {
      const v = series[l][d] || 0, h = (H - 10) * v / max;
      const r = document.createElementNS(ns, "rect");
      r.setAttribute("x", pad + i * (bw + 4)); r.setAttribute("y", y - h); r.setAttribute("width", bw); r.setAttribute("height", h);
      r.setAttribute("fill", colors[k % colors.length]);
      const t = document.createElementNS(ns, "title"); t.textContent = `${l} ${d}: $${v.toFixed(2)}`; r.append(t);
      svg.append(r); y -= h;
    });
  });
  const t = document.createElementNS(ns, "text"); t.setAttribute("x", 0); t.setAttribute("y", 10); t.textContent = "$" + max.toFixed(2); svg.append(t);
  labels.forEach((l, k) => {
    const lt = document.createElementNS(ns, "text"); lt.setAttribute("x", pad + k * 90); lt.setAttribute("y", H + 20);
    lt.setAttribute("fill", colors[k % colors.length]); lt.textContent = "■ " + l; svg.append(lt);
  });
  return el("figure", {}, el("figcaption", {}, title), svg);
}

// money reads the server's decimal-dollar strings ("12.345678").
const money = (m) => m == null || m === "" ? null : Number(m);
const usd = (d) => d == null ? "—" : "$" + d.toFixed(d < 1 ? 4 : 2);

// costSeries turns GET /v1/cost rows into chart series by one group field.
function costSeries(rows, key) {
  const s = {};
  for (const r of rows) {
    const k = (r.group && r.group[key]) || "other", d = String(r.start || "").slice(0, 10);
    (s[k] = s[k] || {})[d] = (s[k][d] || 0) + (money(r.cost) || 0);
  }
  return s;
}

async function renderCost() {
  const byProject = await optional("/v1/cost?window=14d&step=1d&by=project");
  const byCapacity = await optional("/v1/cost?window=14d&step=1d&by=capacityType");
  if (!byProject && !byCapacity) {
    $("#cost").replaceChildren(el("p", { class: "muted" }, "Cost reports are not available on this server."));
    return;
  }
  const total = byProject ? money(byProject.total) : null;
  $("#cost").replaceChildren(el("p", { class: "muted" }, "Last 14 days: " + usd(total)),
    chart("By project", costSeries((byProject && byProject.rows) || [], "project")),
    chart("By capacity type", costSeries((byCapacity && byCapacity.rows) || [], "capacityType")));
}

async function renderBudgets() {
  const b = await optional("/v1/budgets");
  if (!b) { $("#budgets").replaceChildren(el("p", { class: "muted" }, "Budgets are not available on this server.")); return; }
  const items = b.budgets || [];
  if (items.length === 0) { $("#budgets").replaceChildren(el("p", { class: "muted" }, "No budgets.")); return; }
  $("#budgets").replaceChildren(...items.map((x) => {
    const bud = x.budget || {};
    const bar = el("div", { class: "bar" }, el("div", {}));
    bar.firstChild.style.width = Math.min(100, Math.round(100 * (x.ratio || 0))) + "%";
    return el("div", { class: "budget" }, el("strong", {}, bud.name || "budget"), " ",
      usd(money(x.actual)) + " of " + usd(money(bud.amount)) + " (" + pct(x.ratio) + ", forecast " + usd(money(x.forecast)) + ")",
      x.blocked ? el("span", { class: "error" }, " blocked") : null, bar);
  }));
}

async function renderEvents() {
  const ev = await optional("/v1/events?limit=20");
  const al = await optional("/v1/alerts");
  const rows = [];
  for (const e of (ev && ev.events) || []) rows.push({ t: e.time, kind: e.kind, obj: e.object, msg: e.message });
  for (const a of (al && al.items) || []) rows.push({ t: a.at, kind: "alert: " + a.rule, obj: a.job ? "job/" + a.job : a.node ? "node/" + a.node : "queue/" + a.queue, msg: a.summary });
  rows.sort((a, b) => (a.t < b.t ? 1 : -1));
  fill($("#events tbody"), rows.slice(0, 25).map((r) => el("tr", {}, el("td", {}, ago(r.t)), el("td", {}, r.kind), el("td", {}, r.obj), el("td", {}, r.msg))));
}

let timer;
async function refresh() {
  clearTimeout(timer);
  const parts = [renderJobs, renderQueues, renderNodes, renderCost, renderBudgets, renderEvents];
  await Promise.all(parts.map((p) => p().catch((e) => console.warn(p.name, e.message))));
  document.body.dataset.refreshed = String(Date.now());
  if (!$("#app").hidden) timer = setTimeout(refresh, 2000);
}

start();
