// gpufleet dashboard: plain DOM, no libraries, nothing off this server.
// Two pages: the fleet (/ui/) and a job's (/ui/jobs/ID). Each view is one
// request per refresh: the jobs table asks for its page of jobs with the
// columns it shows (?summary=true), never one request per job.
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
const clock = (t) => t ? new Date(t).toLocaleTimeString() : "";
const when = (t) => t ? new Date(t).toLocaleString() : "—";
// money reads the server's decimal-dollar strings ("12.345678").
const money = (m) => m == null || m === "" ? null : Number(m);
const usd = (d) => d == null ? "—" : "$" + d.toFixed(d < 1 ? 4 : 2);
const usdTick = (d) => "$" + (d >= 100 ? d.toFixed(0) : d >= 1 ? d.toFixed(2) : d.toFixed(d === 0 ? 0 : 4));

// span formats a duration in ms: 45s, 12m 3s, 5h 7m, 3d 4h.
function span(ms) {
  if (ms == null || ms < 0) return "—";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
}
const since = (t, until) => t ? span((until ? Date.parse(until) : Date.now()) - Date.parse(t)) : "—";
const jobLink = (id) => el("a", { href: "/ui/jobs/" + encodeURIComponent(id), class: "job-link" }, id);
const stateBadge = (s) => el("span", { class: "state state-" + s }, s);

const STATES = ["queued", "running", "succeeded", "failed", "cancelled", "lost"];
let session = null;
let projects = []; // [{name, role}]

function showLogin() {
  for (const id of ["#app", "#job-page", "#logout"]) $(id).hidden = true;
  $("#who").textContent = "";
  $("#login-view").hidden = false;
}

async function start() {
  const r = await fetch("/ui/session", { credentials: "same-origin" });
  const s = await r.json();
  if (!s.loggedIn) { showLogin(); return; }
  session = s;
  $("#login-view").hidden = true; $("#logout").hidden = false;
  $("#who").textContent = s.subject + (s.admin ? " (admin)" : "");
  const p = await optional("/v1/projects");
  projects = (p && p.projects) || [];
  const m = location.pathname.match(/^\/ui\/jobs\/([^/]+)$/);
  if (m) { $("#app").hidden = true; $("#job-page").hidden = false; JobPage.start(decodeURIComponent(m[1])); return; }
  $("#job-page").hidden = true; $("#app").hidden = false;
  Fleet.start();
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
  location.href = "/ui/";
});

// Budgets span every project: only global admins may read them, so only
// they see the panel (and nobody else's page asks for it).
const mayReadBudgets = () => session && (session.admin || projects.some((p) => p.role === "admin"));
const submitRoles = new Set(["member", "project-admin", "admin"]);

// ---- the fleet page ----
const Fleet = (() => {
  const PAGE = 25;
  let offset = 0, total = 0, timer = null, costTimer = null;

  function start() {
    const sel = $("#job-project");
    const mine = projects.filter((p) => submitRoles.has(p.role));
    sel.replaceChildren(...mine.map((p) => el("option", { value: p.name }, p.name)));
    if (mine.length === 0) { sel.append(el("option", { value: "" }, "no project you may submit to")); $("#submit-job").disabled = true; }
    $("#f-project").replaceChildren(el("option", { value: "" }, "all my projects"), ...projects.map((p) => el("option", { value: p.name }, p.name)));
    $("#f-state").replaceChildren(el("option", { value: "" }, "any state"), ...STATES.map((s) => el("option", { value: s }, s)));
    $("#budgets-section").hidden = !mayReadBudgets();
    for (const id of ["#f-state", "#f-project"]) $(id).addEventListener("change", () => { offset = 0; refresh(); });
    let typing;
    $("#f-search").addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(() => { offset = 0; refresh(); }, 250); });
    $("#job-filters").addEventListener("submit", (ev) => ev.preventDefault());
    $("#prev-page").addEventListener("click", () => { offset = Math.max(0, offset - PAGE); refresh(); });
    $("#next-page").addEventListener("click", () => { if (offset + PAGE < total) { offset += PAGE; refresh(); } });
    for (const id of ["#cost-window", "#cost-by"]) $(id).addEventListener("change", () => refreshCost());
    $("#submit").addEventListener("submit", submit);
    refresh();
    refreshCost();
  }

  async function submit(ev) {
    ev.preventDefault();
    const name = $("#job-name").value.trim();
    const metadata = { project: $("#job-project").value };
    if (name) metadata.name = name;
    const manifest = {
      apiVersion: "gpufleet.dev/v1", kind: "Job", metadata,
      spec: { resources: { gpus: Number($("#job-gpus").value || 0) }, run: { command: ["sh", "-c", $("#job-command").value] } },
    };
    const out = $("#submit-result");
    try {
      const j = await api("POST", "/v1/jobs", manifest);
      out.replaceChildren("submitted ", jobLink(j.id), " to " + j.project);
      out.className = "";
      out.dataset.job = j.id;
      refresh();
    } catch (e) {
      out.textContent = e.message; out.className = "error";
    }
  }

  async function renderJobs() {
    const q = new URLSearchParams({ summary: "true", limit: String(PAGE), offset: String(offset) });
    if ($("#f-search").value.trim()) q.set("q", $("#f-search").value.trim());
    if ($("#f-state").value) q.set("state", $("#f-state").value);
    if ($("#f-project").value) q.set("project", $("#f-project").value);
    const list = await api("GET", "/v1/jobs?" + q);
    const jobs = list.jobs || [], sums = list.summaries || {};
    total = list.total || 0;
    $("#page-info").textContent = total === 0 ? "no jobs" : `${offset + 1}–${offset + jobs.length} of ${total}`;
    $("#prev-page").disabled = offset === 0;
    $("#next-page").disabled = offset + PAGE >= total;
    $("#jobs tbody").replaceChildren(...jobs.map((j) => {
      const s = sums[j.id] || {};
      const eff = s.efficiency;
      const cls = eff ? eff.verdict.class : null;
      const effText = eff ? [el("span", { class: "class-" + cls }, cls), " ", pct(eff.smActive), " SM", eff.source === "simulated" ? " (simulated)" : ""] : ["—"];
      // Metered cost when the ledger has the job, else the live estimate.
      const cost = s.cost ? money(s.cost) : (eff && eff.costMicros != null ? eff.costMicros / 1e6 : null);
      const effCost = s.cost ? (s.measured ? money(s.effectiveCost || "0") : null) : (eff && eff.effectiveCostMicros != null ? eff.effectiveCostMicros / 1e6 : null);
      const end = j.finishedAt;
      return el("tr", { "data-job": j.id, "data-state": j.state },
        el("td", {}, jobLink(j.id)), el("td", {}, j.name || ""), el("td", {}, j.project), el("td", {}, j.user || ""),
        el("td", {}, stateBadge(j.state)),
        el("td", {}, j.spec.queue || "default"), el("td", {}, j.spec.resources.gpus),
        el("td", { title: when(j.submittedAt) }, since(j.submittedAt)),
        el("td", {}, j.startedAt ? since(j.startedAt, end) : "—"),
        el("td", { class: "cost" }, usd(cost)), el("td", {}, usd(effCost)),
        el("td", {}, ...effText), el("td", { class: "muted" }, j.reason || ""));
    }));
  }

  async function renderQueues() {
    const q = await api("GET", "/v1/queues");
    $("#queues tbody").replaceChildren(...(q.queues || []).map((x) => {
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
        // Holders of projects the caller may not read come redacted
        // (inUse only): the tile says "in use", never whose.
        const h = node.holders && node.holders[g.index];
        const sm = (byIdx[g.index] || {}).DCGM_FI_PROF_SM_ACTIVE;
        const bar = el("div", { class: "bar" }, el("div", {}));
        bar.firstChild.style.width = sm == null ? "0" : Math.round(100 * sm) + "%";
        const who = !h ? "free" : h.jobId ? jobLink(h.jobId) : "in use";
        return el("span", { class: "gpu" + (h ? " held" : "") }, "GPU " + g.index + " " + g.model, el("br"), who, " · SM " + pct(sm), bar);
      });
      return el("div", { class: "node" }, el("strong", {}, node.name || node.id), " ",
        stateBadge(node.state), " ", el("span", { class: "muted" }, src), el("div", {}, ...gpus));
    }));
  }

  async function renderBudgets() {
    if (!mayReadBudgets()) return;
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
    const [ev, al] = await Promise.all([optional("/v1/events?limit=20"), optional("/v1/alerts")]);
    const rows = [];
    for (const e of (ev && ev.events) || []) rows.push({ t: e.time, kind: e.kind, obj: e.object, job: e.job, msg: e.message });
    for (const a of (al && al.items) || []) rows.push({ t: a.at, kind: "alert: " + a.rule, obj: a.job ? "job/" + a.job : a.node ? "node/" + a.node : "queue/" + a.queue, job: a.job, msg: a.summary });
    rows.sort((a, b) => (a.t < b.t ? 1 : -1));
    $("#events tbody").replaceChildren(...rows.slice(0, 25).map((r) => el("tr", {}, el("td", {}, clock(r.t)), el("td", {}, r.kind),
      el("td", {}, r.job ? jobLink(r.job) : r.obj), el("td", {}, r.msg))));
  }

  // Cost by project, queue or capacity type over the chosen window: hourly
  // bars for a day, daily bars beyond.
  async function refreshCost() {
    clearTimeout(costTimer);
    const win = $("#cost-window").value, by = $("#cost-by").value;
    const hourly = win === "24h";
    try {
      const rep = await optional(`/v1/cost?window=${win}&step=${hourly ? "1h" : "1d"}&by=${by}`);
      if (!rep) { $("#cost").replaceChildren(el("p", { class: "muted" }, "Cost reports are not available to you.")); return; }
      const step = hourly ? 3600000 : 86400000;
      const starts = [], series = {};
      for (const r of rep.rows || []) {
        const t = Date.parse(r.start);
        if (!starts.includes(t)) starts.push(t);
        // Unattributed capacity is "idle capacity", not a raw key.
        const k = (r.group && r.group[by]) || (r.group && r.group.kind === "idle" ? "idle capacity" : "unattributed");
        (series[k] = series[k] || {})[t] = (series[k][t] || 0) + (money(r.cost) || 0);
      }
      // Every step of the window, empty ones too, so the axis is the window.
      const from = Date.parse(rep.from), to = Date.parse(rep.to);
      for (let t = Math.floor(from / step) * step; t < to; t += step) if (!starts.includes(t)) starts.push(t);
      starts.sort((a, b) => a - b);
      const fig = Charts.bars(`Cost by ${$("#cost-by").selectedOptions[0].text}, ${$("#cost-window").selectedOptions[0].text}`, starts, step,
        Object.keys(series).sort().map((k) => ({ label: k.replace(/^__idle__$/, "idle capacity"), values: starts.map((t) => series[k][t] || 0) })),
        { unit: "US$ per " + (hourly ? "hour" : "day"), fmt: usdTick });
      $("#cost").replaceChildren(el("p", { class: "muted" }, "Total: " + usd(money(rep.total))), fig || el("p", { class: "muted" }, "Nothing metered in this window."));
    } catch (e) {
      console.warn("cost", e.message);
    } finally {
      costTimer = setTimeout(refreshCost, 30000);
    }
  }

  let running = false;
  async function refresh() {
    clearTimeout(timer);
    if (running) return;
    running = true;
    const parts = [renderJobs, renderQueues, renderNodes, renderBudgets, renderEvents];
    await Promise.all(parts.map((p) => p().catch((e) => console.warn(p.name, e.message))));
    running = false;
    document.body.dataset.refreshed = String(Date.now());
    if (!$("#app").hidden) timer = setTimeout(refresh, 2000);
  }
  return { start };
})();

// ---- a job's page ----
const JobPage = (() => {
  let id, job, timer, logAbort, logKey = "";

  function start(jobID) {
    id = jobID;
    document.title = "gpufleet · " + id;
    $("#jp-title").replaceChildren("Job ", el("code", {}, id));
    $("#jp-cancel").addEventListener("click", cancel);
    $("#jp-log-attempt").addEventListener("change", () => followLogs(true));
    $("#jp-log-rank").addEventListener("change", () => followLogs(true));
    $("#jp-follow").addEventListener("change", () => followLogs(true));
    refresh();
  }

  async function cancel() {
    try { await api("POST", "/v1/jobs/" + encodeURIComponent(id) + "/cancel"); $("#jp-cancel-result").textContent = "cancelling"; refresh(); } catch (e) { $("#jp-cancel-result").textContent = e.message; }
  }

  function facts(v) {
    const end = v.finishedAt;
    const rows = [
      ["State", stateBadge(v.state)], ["Name", v.name || "—"], ["Project", v.project], ["User", v.user || "—"],
      ["Queue", v.spec.queue || "default"], ["GPUs", String(v.spec.resources.gpus) + (v.spec.resources.gpuModel ? " × " + v.spec.resources.gpuModel : "")],
      ["Submitted", when(v.submittedAt) + " (" + since(v.submittedAt) + " ago)"],
      ["Started", when(v.startedAt)], ["Finished", when(v.finishedAt)],
      ["Duration", v.startedAt ? since(v.startedAt, end) : "—"],
      ["Attempts", `${v.attempts} (failures ${v.failures}, preemptions ${v.preemptions})`],
      ["Cost", v.cost ? usd(money(v.cost.total)) + (v.cost.measuredCost ? " · effective " + usd(money(v.cost.effectiveCost || "0")) : "") + ` · ${v.cost.gpuHours.toFixed(3)} GPU-hours` : "not metered yet"],
    ];
    if (v.reason) rows.push(["Reason", v.reason]);
    if (v.exitCode != null) rows.push(["Exit code", String(v.exitCode)]);
    $("#jp-facts").replaceChildren(el("dl", {}, ...rows.flatMap(([k, x]) => [el("dt", {}, k), el("dd", {}, x)])));
  }

  // history is the job's state changes from its timestamps and attempts.
  function history(v) {
    const rows = [{ t: v.submittedAt, s: "queued", d: "submitted" + (v.user ? " by " + v.user : "") }];
    for (const a of v.attemptDetails || []) {
      const where = (a.replicas || []).map((r) => r.nodeId + (r.gpus && r.gpus.length ? " GPU " + r.gpus.join(",") : "")).join("; ");
      rows.push({ t: a.createdAt, s: "placed", d: `attempt ${a.number} on ${where || "—"}` });
      if (a.startedAt) rows.push({ t: a.startedAt, s: "running", d: `attempt ${a.number} started` });
      if (a.endedAt) rows.push({ t: a.endedAt, s: a.state, d: `attempt ${a.number} ${a.state}` + (a.reason ? ": " + a.reason : "") + (a.exitCode != null ? ` (exit ${a.exitCode})` : "") });
    }
    if (v.finishedAt) rows.push({ t: v.finishedAt, s: v.state, d: "job " + v.state });
    rows.sort((a, b) => Date.parse(a.t) - Date.parse(b.t));
    $("#jp-history tbody").replaceChildren(...rows.map((r) => el("tr", {}, el("td", {}, when(r.t)), el("td", {}, stateBadge(r.s)), el("td", {}, r.d))));
  }

  function attempts(v) {
    const byAttempt = (v.cost && v.cost.byAttempt) || {};
    $("#jp-attempts tbody").replaceChildren(...(v.attemptDetails || []).map((a) => el("tr", { "data-attempt": a.number },
      el("td", {}, a.number), el("td", {}, stateBadge(a.state)),
      el("td", {}, (a.replicas || []).map((r) => `rank ${r.rank}: ${r.nodeId}` + (r.gpus && r.gpus.length ? ` GPU ${r.gpus.join(",")}` : "")).join("; ")),
      el("td", {}, when(a.startedAt)), el("td", {}, when(a.endedAt)), el("td", {}, a.startedAt ? since(a.startedAt, a.endedAt) : "—"),
      el("td", {}, a.exitCode != null ? a.exitCode : "—"), el("td", {}, usd(money(byAttempt[a.number]))), el("td", { class: "muted" }, a.reason || ""))));
    const sel = $("#jp-log-attempt");
    const want = (v.attemptDetails || []).map((a) => String(a.number));
    if ([...sel.options].map((o) => o.value).join() !== want.join()) {
      const keep = sel.value;
      sel.replaceChildren(...want.map((n) => el("option", { value: n }, "attempt " + n)));
      sel.value = want.includes(keep) && keep !== want[want.length - 2] ? keep : want[want.length - 1] || "";
    }
  }

  async function explain(v) {
    const box = $("#jp-explain");
    if (v.state === "queued") {
      const x = await optional("/v1/jobs/" + encodeURIComponent(id) + "/explain");
      if (!x) { box.replaceChildren(el("p", { class: "muted" }, "No explanation yet.")); return; }
      const reasons = ((x.verdict && x.verdict.reasons) || []).map((r) => el("li", {}, r.message));
      box.replaceChildren(el("p", {}, x.reason || "Waiting for the next scheduling pass."), el("ul", {}, ...reasons),
        x.candidate ? el("p", { class: "muted" }, "New capacity: " + JSON.stringify(x.candidate)) : null);
      return;
    }
    const e = v.efficiency;
    if (!e) { box.replaceChildren(el("p", { class: "muted" }, v.state === "running" ? "No GPU telemetry yet." : "Not waiting: the job " + v.state + ".")); return; }
    const vd = e.verdict || {};
    box.replaceChildren(el("p", {}, "Efficiency: ", el("span", { class: "class-" + vd.class }, vd.class), ", SM active " + pct(e.smActive) + (e.source ? " (" + e.source + " telemetry)" : "")),
      el("ul", {}, ...((vd.reasons || []).map((r) => el("li", {}, typeof r === "string" ? r : r.message || JSON.stringify(r))))));
  }

  // plots: SM active, memory and power over time, one line per GPU.
  async function plots() {
    const tel = await optional("/v1/jobs/" + encodeURIComponent(id) + "/telemetry");
    const box = $("#jp-gpus");
    const gpus = [];
    for (const a of (tel && tel.attempts) || []) for (const g of a.gpus) gpus.push({ label: `attempt ${a.number} · ${g.node} GPU ${g.index}`, points: g.points });
    if (gpus.length === 0) { box.replaceChildren(el("p", { class: "muted" }, "No GPU telemetry for this job (yet).")); return; }
    const ser = (f) => gpus.map((g) => ({ label: g.label, points: g.points.filter((p) => p[f] != null).map((p) => [Date.parse(p.t), f === "smActive" ? 100 * p[f] : f === "memUsedMiB" ? p[f] / 1024 : p[f]]) }));
    const memTop = Math.max(0, ...gpus.flatMap((g) => g.points.map((p) => (p.memTotalMiB || 0) / 1024)));
    const figs = [
      Charts.line("SM active", ser("smActive"), { unit: "% of time", fmt: (v) => v.toFixed(0) + "%", max: 100 }),
      Charts.line("Memory used" + (memTop ? ` (of ${memTop.toFixed(0)} GiB)` : ""), ser("memUsedMiB"), { unit: "GiB", fmt: (v) => v.toFixed(v < 10 ? 1 : 0) + " GiB", max: memTop || undefined }),
      Charts.line("Power", ser("powerW"), { unit: "watts", fmt: (v) => v.toFixed(0) + " W" }),
    ].filter(Boolean);
    box.replaceChildren(...figs);
  }

  function costPlot(v) {
    const pts = (v.cost && v.cost.points) || [];
    const box = $("#jp-cost");
    if (pts.length === 0) { box.replaceChildren(el("p", { class: "muted" }, "Not metered yet: the meter charges running attempts every pass.")); return; }
    // The running total starts at zero at the first start.
    const first = v.startedAt ? Date.parse(v.startedAt) : Date.parse(pts[0].at);
    const series = [{ label: "cost", points: [[first, 0], ...pts.map((p) => [Date.parse(p.at), money(p.total)])] }];
    if (pts.some((p) => money(p.measuredCost) > 0)) {
      series.push({ label: "effective cost (the part that bought SM activity)", points: [[first, 0], ...pts.map((p) => [Date.parse(p.at), money(p.effectiveCost)])] });
    }
    box.replaceChildren(Charts.line("Cost so far", series, { unit: "US$", fmt: usdTick }));
  }

  async function events() {
    const ev = await optional("/v1/events?job=" + encodeURIComponent(id) + "&limit=100");
    $("#jp-events tbody").replaceChildren(...((ev && ev.events) || []).slice().reverse().map((e) =>
      el("tr", {}, el("td", {}, when(e.time)), el("td", {}, e.kind), el("td", {}, e.message))));
  }

  // followLogs streams the chosen attempt's log; with follow on, until
  // the attempt ends.
  async function followLogs(force) {
    const attempt = $("#jp-log-attempt").value, rank = $("#jp-log-rank").value || "0", follow = $("#jp-follow").checked;
    const key = [attempt, rank, follow].join("/");
    const pre = $("#jp-logs"), status = $("#jp-log-status");
    if (!attempt) {
      pre.textContent = ""; status.textContent = job && job.state === "queued" ? "The job is queued: it has no logs until an attempt starts." : "No attempts.";
      return;
    }
    if (!force && key === logKey) return;
    if (logAbort) logAbort.abort();
    logKey = key;
    const ctl = new AbortController();
    logAbort = ctl;
    pre.textContent = "";
    status.textContent = follow ? "following…" : "";
    const q = new URLSearchParams({ attempt, rank });
    if (follow) q.set("follow", "true");
    try {
      const r = await fetch("/v1/jobs/" + encodeURIComponent(id) + "/logs?" + q, { credentials: "same-origin", signal: ctl.signal });
      if (!r.ok) { status.textContent = r.status === 404 ? "No logs for this attempt yet." : (await r.text()).trim(); logKey = ""; return; }
      const reader = r.body.getReader(), dec = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.append(document.createTextNode(dec.decode(value, { stream: true })));
        if (follow && atBottom) pre.scrollTop = pre.scrollHeight;
      }
      status.textContent = follow ? "the attempt ended; end of log" : "";
    } catch (e) {
      if (e.name !== "AbortError") { status.textContent = e.message; logKey = ""; }
    }
  }

  let running = false;
  async function refresh() {
    clearTimeout(timer);
    if (running) return;
    running = true;
    try {
      job = await api("GET", "/v1/jobs/" + encodeURIComponent(id));
      facts(job); history(job); attempts(job); costPlot(job);
      $("#jp-spec").textContent = JSON.stringify({ spec: job.spec, tags: job.tags }, null, 2);
      $("#jp-cancel").hidden = ["succeeded", "failed", "cancelled", "lost"].includes(job.state);
      await Promise.all([explain(job), plots(), events()].map((p) => p.catch((e) => console.warn(e.message))));
      followLogs(false);
      document.body.dataset.refreshed = String(Date.now());
    } catch (e) {
      $("#jp-facts").replaceChildren(el("p", { class: "error" }, e.status === 404 ? "No job " + id + " (or not one of yours)." : e.message));
    } finally {
      running = false;
    }
    timer = setTimeout(refresh, 3000);
  }
  return { start };
})();

start();
