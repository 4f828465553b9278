"""The two web pages: a list of threads, and one thread's live view.

Plain HTML with inline CSS and a little vanilla JavaScript: no build step and nothing loaded
from elsewhere. Data reaches the DOM only through ``textContent`` (never ``innerHTML``), and
the pages run under a nonce Content-Security-Policy, so a step's output cannot become script.
"""

from __future__ import annotations

import html
import json
import secrets
from typing import Any

from longtask.runtime._control import STEP_PAUSES
from longtask.serve._stream import FINAL_KINDS
from longtask.store import FINAL_STATUSES, THREAD_STATUSES
from longtask.store._kinds import EVENT_KINDS as ALL_EVENT_KINDS

#: every event kind the Runner writes; EventSource only delivers named events to listeners
#: registered for that name, so the page subscribes to each
EVENT_KINDS = list(ALL_EVENT_KINDS)

#: the pages' icon (also served at /favicon.ico, which browsers ask for by themselves)
FAVICON = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    b'<rect width="16" height="16" rx="3" fill="#1d2330"/>'
    b'<path d="M4 4v8h7" stroke="#9cc3ff" stroke-width="2" fill="none"/></svg>'
)

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:12px 20px;display:flex;gap:16px;align-items:center}
header h1{font-size:17px;margin:0;flex:1}header a{color:#9cc3ff}
main{max-width:1000px;margin:0 auto;padding:16px 20px}
section{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:12px 16px;
margin:0 0 14px}
h2{font-size:15px;margin:0 0 8px}h3{font-size:14px;margin:0 0 6px}
.badge{display:inline-block;padding:2px 8px;border-radius:10px;background:#dde1e8;font-weight:600}
.s-completed{background:#cdeccf}.s-failed,.s-cancelled{background:#f6cccc}
.s-running,.s-cancelling{background:#cfe0fa}.s-waiting_user,.s-waiting_external{background:#fbe7b5}
.bar{height:8px;background:#e6e9ee;border-radius:4px;overflow:hidden;margin:6px 0}
.bar div{height:100%;width:0;background:#3f8f4f;transition:width .3s}
ul.tree,ul.tree ul{list-style:none;margin:0;padding-left:18px}ul.tree{padding-left:0}
.mark{display:inline-block;width:1.4em;text-align:center}.kind,.extra,.muted{color:#6b7383}
.st-completed>.mark{color:#3f8f4f}.st-failed>.mark{color:#c03b3b}.st-waiting>.mark{color:#b7791f}
.st-running>.mark{color:#2f6fd0}.st-skipped{color:#8a91a0}
pre{background:#f1f3f6;padding:8px;border-radius:4px;overflow:auto;max-height:360px}
.mark svg{width:.8em;height:.8em;vertical-align:-.05em;fill:currentColor}
dl.fields{margin:0 0 8px}dl.fields dt{font-weight:600;margin-top:6px}
dl.fields dd{margin:2px 0 0 14px}
dl.fields pre{margin:2px 0;white-space:pre-wrap;overflow-wrap:anywhere}
dl.fields pre.text{white-space:pre;overflow-wrap:normal}
dl.fields pre.line{background:none;padding:0}
#not-found{font-size:16px}ul#artifacts{margin:0;padding-left:18px}
textarea,input{font:inherit;padding:4px 6px;border:1px solid #c5cbd6;border-radius:4px}
textarea{width:100%;box-sizing:border-box;min-height:48px}
button{font:inherit;padding:5px 14px;border-radius:4px;border:1px solid #8a91a0;cursor:pointer}
button.ok{background:#3f8f4f;color:#fff;border-color:#3f8f4f}
button.no{background:#c03b3b;color:#fff;border-color:#c03b3b}button:disabled{opacity:.5}
#message.error,#error,#not-found{color:#8b1f1f}ol#events{margin:0;padding-left:0;list-style:none}
ol#events li{border-bottom:1px solid #eef0f3;padding:2px 0;font-family:ui-monospace,monospace;
font-size:12px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.actions p{margin:6px 0}.signal-command{display:block;white-space:pre-wrap;overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:4px 8px;
border-bottom:1px solid #eef0f3}.num{text-align:right;font-variant-numeric:tabular-nums}
"""

COMMON_JS = r"""
"use strict";
const CONFIG = JSON.parse(document.getElementById("config").textContent);
const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "longtask.token";
function token() { return (sessionStorage.getItem(TOKEN_KEY) || "").trim(); }
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
async function api(path, init) {
  const headers = {"Accept": "application/json"};
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (init && init.body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, Object.assign({}, init || {}, {headers}));
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  if (!r.ok) {
    const err = new Error((data && data.error) || (r.status + " " + r.statusText));
    err.status = r.status;
    throw err;
  }
  return data;
}
function money(v) { return v ? String(Number(v.toFixed(6))) : "0"; }
function age(s) {
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (s >= size) return Math.floor(s / size) + unit;
  }
  return Math.floor(s) + "s";
}
function seconds(v) {
  if (v < 1) return Math.round(v * 1000) + " ms";
  if (v < 60) return v.toFixed(1) + " s";
  const two = (n) => String(n).padStart(2, "0");
  if (v < 3600) return Math.floor(v / 60) + " min " + two(Math.round(v % 60)) + " s";
  return Math.floor(v / 3600) + " h " + two(Math.floor((v % 3600) / 60)) + " min";
}
// A word as a POSIX shell reads it back (as Python's shlex.quote writes it).
function shq(s) {
  s = String(s);
  if (s && /^[A-Za-z0-9_@%+=:,.\/-]+$/.test(s)) return s;
  return "'" + s.replace(/'/g, "'\"'\"'") + "'";
}
// A command for a shell here: the server's --db goes after the command's arguments.
function command(words, options) {
  return words.map(shq).concat(CONFIG.dbOption ? [CONFIG.dbOption] : [], options || [])
    .join(" ");
}
function bindToken(onChange) {
  const input = $("token");
  input.value = token();
  input.addEventListener("input", () => sessionStorage.setItem(TOKEN_KEY, input.value.trim()));
  input.addEventListener("change", () => { if (onChange) onChange(); });
}
"""

INDEX_JS = r"""
const WAIT_WORDS = {approval: "approval of", wait: "event", effect: "effect settled in",
  budget: "budget for", deadline: "deadline for", permission: "permission for",
  fix: "decision on"};
function filterLinks() {
  // The sort links keep the status filter, and the filter keeps the sort.
  const status = new URLSearchParams(location.search).get("status") || "";
  for (const a of document.querySelectorAll("a[data-sort]")) {
    const q = new URLSearchParams();
    if (a.dataset.sort) q.set("sort", a.dataset.sort);
    if (status) q.set("status", status);
    a.href = "?" + q.toString();
  }
}
function bindFilter() {
  const select = $("status-filter");
  for (const s of CONFIG.statuses) select.append(el("option", null, s));
  select.value = new URLSearchParams(location.search).get("status") || "";
  select.addEventListener("change", () => {
    const q = new URLSearchParams(location.search);
    if (select.value) q.set("status", select.value); else q.delete("status");
    const text = q.toString();
    history.replaceState(null, "", location.pathname + (text ? "?" + text : ""));
    filterLinks();
    load();
  });
  filterLinks();
}
async function load() {
  const params = new URLSearchParams(location.search);
  const status = params.get("status") || "", sort = params.get("sort") || "";
  try {
    const q = "?limit=200" + (status ? "&status=" + encodeURIComponent(status) : "") +
      (sort ? "&sort=" + encodeURIComponent(sort) : "");
    const rows = await api("/api/threads" + q);
    const body = $("threads");
    body.replaceChildren();
    for (const t of rows) {
      const tr = el("tr");
      const link = el("a", null, t.thread_id);
      link.href = "/threads/" + encodeURIComponent(t.thread_id);
      const cell = el("td"); cell.append(link); tr.append(cell);
      tr.append(el("td", null, t.task_name + " v" + t.task_version));
      const st = el("td"); st.append(el("span", "badge s-" + t.status, t.status)); tr.append(st);
      // what a paused thread waits for: who must act, without opening it
      const waits = (t.waiting || []).map((w) => (WAIT_WORDS[w.kind] || w.kind) + " " + w.step);
      if (waits.length) st.append(" ", el("span", "muted waits", "for " + waits.join(", ")));
      tr.append(el("td", "num", money(t.cost)));
      tr.append(el("td", "num muted", age(t.age)));
      tr.append(el("td", "muted", new Date(t.updated_at).toLocaleString()));
      body.append(tr);
    }
    $("empty").textContent = status ? "no " + status + " threads" : "no threads";
    $("empty").hidden = rows.length > 0;
    $("message").textContent = "";
  } catch (e) { $("message").textContent = e.message; }
}
// Schedules: when each fires next, in its own timezone and in UTC.
async function loadSchedules() {
  try {
    const rows = await api("/api/schedules");
    const body = $("schedules");
    body.replaceChildren();
    for (const s of rows) {
      const tr = el("tr");
      tr.append(el("td", null, s.name), el("td", null, s.task_name));
      tr.append(el("td", null, s.cron + " · " + s.timezone));
      const next = s.paused ? "paused" : s.next_fire_local.slice(0, 16).replace("T", " ") +
        " (" + new Date(s.next_fire_at).toISOString().slice(0, 16).replace("T", " ") + " UTC)";
      tr.append(el("td", s.paused ? "muted" : null, next));
      const last = el("td");
      if (s.last_thread) {
        const a = el("a", null, s.last_thread);
        a.href = "/threads/" + encodeURIComponent(s.last_thread);
        last.append(a);
      }
      tr.append(last);
      body.append(tr);
    }
    $("schedules-section").hidden = rows.length === 0;
  } catch (e) { $("schedules-section").hidden = true; }
}
bindToken(() => { load(); loadSchedules(); });
bindFilter();
load();
loadSchedules();
setInterval(() => { load(); loadSchedules(); }, 5000);
"""

THREAD_JS = r"""
const THREAD = CONFIG.thread;
const BASE = "/api/threads/" + encodeURIComponent(THREAD);
// Glyphs every stock system's fonts have (DejaVu); the pause sign is not among them, so it
// is drawn as an inline SVG (two bars).
const MARKS = {completed: "✓", running: "●", failed: "✗", pending: "○", skipped: "↷"};
const SVG = "http://www.w3.org/2000/svg";
function mark(state) {
  const span = el("span", "mark");
  span.dataset.state = state;
  if (state !== "waiting") { span.textContent = MARKS[state] || "?"; return span; }
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 10 10");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "waiting");
  for (const x of [1.5, 6]) {
    const bar = document.createElementNS(SVG, "rect");
    const box = {x, y: 1, width: 2.5, height: 8};
    for (const [k, v] of Object.entries(box)) bar.setAttribute(k, v);
    svg.append(bar);
  }
  span.append(svg);
  return span;
}
const CLOSED = CONFIG.finalStatuses;
let lastId = 0, source = null, current = null, pendingKey = null, events = [];
let missing = false, artifactsShown = false, resultsShown = false;
let actionsKey = null, notice = null;
// a retry asked from this page (its step, and the last event before it), and how it ended
let retried = null, retryOutcome = null;
// After an action on a finished thread (a retry of a failed one): the id of the last event
// seen then, until an event says the thread has finished again, and how often the ended
// stream was found with the thread still finished meanwhile (the run may never start).
let awaiting = null, awaitingRounds = 0;
let refreshing = false, again = false;

function stageState(steps) {
  const states = steps.map((s) => s.state);
  if (states.every((s) => s === "completed" || s === "skipped")) return "completed";
  for (const s of ["failed", "waiting", "running"]) if (states.includes(s)) return s;
  return "pending";
}
function stepLine(s, children) {
  const li = el("li", "step st-" + s.state);
  li.dataset.step = s.name;
  li.append(mark(s.state), s.name + " ", el("span", "kind", s.kind));
  const extra = [];
  if (s.items_total !== null && s.items_total !== undefined) {
    extra.push("items " + s.items_done + "/" + s.items_total);
    if (s.items_failed && s.items_failed.length) extra.push(s.items_failed.length + " failed");
  }
  if (s.fix_rounds) extra.push("fix round " + s.fix_rounds);
  if (s.progress && s.state === "running") {
    const p = s.progress;
    extra.push(p.done + (p.total !== null && p.total !== undefined ? "/" + p.total : "") +
      (p.message ? " " + p.message : ""));
  }
  if (extra.length) li.append(" ", el("span", "extra", "· " + extra.join(" · ")));
  // A sub-task step's children (the latest attempt of each item), each a link to its page.
  const latest = new Map();
  for (const c of children || []) latest.set(c.index, c);
  if (latest.size) {
    const sub = el("ul", "children");
    for (const c of latest.values()) {
      const link = el("a", null, c.thread_id);
      link.href = "/threads/" + encodeURIComponent(c.thread_id);
      const item = el("li", "step");
      item.append(link, " ", el("span", "badge s-" + c.status, c.status));
      sub.append(item);
    }
    li.append(sub);
  }
  return li;
}
function renderStatus(st) {
  current = st;
  document.title = st.task_name + " · " + st.thread_id;
  $("task").textContent = st.task_name + " v" + st.task_version;
  const badge = $("status");
  badge.textContent = st.status;
  badge.className = "badge s-" + st.status;
  const done = st.steps.filter((s) => s.state === "completed" || s.state === "skipped").length;
  $("bar").style.width = Math.round(st.progress * 100) + "%";
  $("progress").textContent = done + "/" + st.steps.length + " steps (" +
    Math.round(st.progress * 100) + "%)" + (st.current_stage ? " · stage " + st.current_stage : "");
  const tree = $("tree");
  tree.replaceChildren();
  const stages = new Map();
  for (const s of st.steps) {
    if (!stages.has(s.stage)) stages.set(s.stage, []);
    stages.get(s.stage).push(s);
  }
  for (const [name, steps] of stages) {
    const state = stageState(steps);
    const li = el("li", "stage st-" + state);
    li.append(mark(state), el("strong", null, name));
    const ul = el("ul");
    for (const s of steps) ul.append(stepLine(s, (st.subtasks || {})[s.name]));
    li.append(ul);
    tree.append(li);
  }
  if (st.parent) {
    // A sub-task links back to the thread whose step started it.
    const up = el("li", "stage");
    const link = el("a", null, st.parent.thread_id);
    link.href = "/threads/" + encodeURIComponent(st.parent.thread_id);
    up.append("sub-task of ", link, " (step " + st.parent.step + ", item " + st.parent.item + ")");
    tree.prepend(up);
  }
  const err = $("error");
  err.hidden = !st.error;
  err.textContent = st.error ? "error in " + (st.error.step || "?") + ": " + st.error.message : "";
  const sched = st.schedule;
  $("schedule").hidden = !sched;
  $("schedule").textContent = !sched ? "" : "started by schedule " + sched.name + (
    !sched.registered ? " (since removed)" : sched.paused ? " (paused)" :
    " · next fire " + sched.next_fire_local.slice(0, 16).replace("T", " ") + " " +
    sched.timezone);
}
function planView(value) {
  // An object as labelled rows; a multi-line string (a diff stat, a plan in prose) as a text
  // block, not one escaped JSON line; anything else as indented JSON.
  if (typeof value === "string") return el("pre", value.includes("\n") ? "text" : "line", value);
  if (value && typeof value === "object" && !Array.isArray(value)) {
    const dl = el("dl", "fields");
    for (const [k, v] of Object.entries(value)) {
      const dd = el("dd");
      dd.dataset.key = k;
      dd.append(planView(v));
      dl.append(el("dt", null, k), dd);
    }
    return dl;
  }
  if (value === null || typeof value !== "object") return el("pre", "line", JSON.stringify(value));
  return el("pre", "json", JSON.stringify(value, null, 2));
}
function pendingCard(p) {
  const card = el("div", "pending");
  card.dataset.step = p.step;
  const r = p.request || {};
  if (p.kind === "approval") {
    card.append(el("h3", null, "Approval: " + p.step));
    if (r.approvers) card.append(el("div", "muted", "approvers: " + r.approvers.join(", ")));
    if (r.deadline) card.append(el("div", "muted", "deadline: " + r.deadline));
    const plan = el("div", "plan");
    plan.append(planView(r.plan));
    card.append(plan);
    const hash = el("div", null, "plan hash: ");
    hash.append(el("code", "plan-hash", r.plan_hash));
    card.append(hash);
    const comment = el("textarea", "comment");
    comment.placeholder = "comment (optional)";
    const yes = el("button", "ok", "Approve"), no = el("button", "no", "Reject");
    yes.addEventListener("click", () => decide(p, true, comment, [yes, no]));
    no.addEventListener("click", () => decide(p, false, comment, [yes, no]));
    const row = el("p");
    row.append(yes, " ", no);
    card.append(comment, row);
  } else if (p.kind === "wait") {
    signalForm(card, p);
  } else if (p.kind === "interrupt") {
    answerForm(card, p);
  } else {
    card.append(el("h3", null, "Waiting for a person: " + p.step));
    card.append(el("div", null, r.reason || JSON.stringify(r)));
  }
  return card;
}
function example(schema) {
  // A value of the shape a (pydantic) JSON schema describes: what the payload looks like.
  const defs = (schema && schema.$defs) || {};
  const of = (node, depth) => {
    if (!node || typeof node !== "object" || depth > 8) return null;
    if (node.$ref) return of(defs[node.$ref.split("/").pop()], depth + 1);
    if ("default" in node) return node.default;
    if (node.examples && node.examples.length) return node.examples[0];
    if (node.enum && node.enum.length) return node.enum[0];
    if ("const" in node) return node.const;
    for (const key of ["anyOf", "oneOf", "allOf"]) {
      if (node[key] && node[key].length) return of(node[key][0], depth + 1);
    }
    const kind = Array.isArray(node.type) ? node.type[0] : node.type;
    if (kind === "object" || node.properties) {
      const out = {};
      for (const [k, v] of Object.entries(node.properties || {})) out[k] = of(v, depth + 1);
      return out;
    }
    if (kind === "array") return node.items ? [of(node.items, depth + 1)] : [];
    return {string: "...", integer: 0, number: 0, boolean: true}[kind] ?? null;
  };
  return schema ? of(schema, 0) : {};
}
function payloadText(text) {
  // The payload on one line for a shell, when it is JSON; else as typed.
  try { return JSON.stringify(JSON.parse(text)); } catch (e) { return text.trim(); }
}
function signalForm(card, p) {
  const schema = (p.request || {}).schema || null;
  card.append(el("h3", null, "Waiting for outside event: " + p.step));
  if (schema) {
    card.append(el("div", "muted", "payload schema:"));
    card.append(el("pre", "schema", JSON.stringify(schema, null, 2)));
  } else {
    card.append(el("div", "muted", "any JSON payload (the step has no schema)"));
  }
  const payload = el("textarea", "payload");
  payload.setAttribute("aria-label", "payload (JSON)");
  payload.value = JSON.stringify(example(schema), null, 2);
  // as high as the example (a two-line box hid most of it), up to 16 lines
  payload.rows = Math.min(Math.max(payload.value.split("\n").length + 1, 4), 16);
  const send = el("button", "ok", "Send signal");
  send.addEventListener("click", () => sendSignal(p, payload, send));
  const row = el("p");
  row.append(send);
  const shell = el("code", "signal-command");
  const update = () => {
    shell.textContent = command(["longtask", "signal", THREAD, p.step],
      ["--payload", shq(payloadText(payload.value))]);
  };
  payload.addEventListener("input", update);
  update();
  const or = el("div", "muted", "or from a shell: ");
  or.append(shell);
  card.append(payload, row, or);
}
function answerForm(card, p) {
  // The graph of a graph step asks (its own interrupt()) or stopped before a node: any JSON
  // answer, which its interrupt() returns as it is.
  const r = p.request || {};
  card.append(el("h3", null, "Graph asks: " + p.step));
  if (r.stop) {
    card.append(el("div", "muted", "stopped before: " + (r.next || []).join(", ")));
  } else {
    const asks = el("div", "plan");
    asks.append(planView(r.value));
    card.append(asks);
  }
  const value = el("textarea", "answer");
  value.setAttribute("aria-label", "answer (JSON)");
  value.value = "{}";
  const send = el("button", "ok", "Answer");
  send.addEventListener("click", () => {
    const answer = parsed(value, "the answer");
    if (!answer.ok) return;
    act("/answer", {interrupt: p.interrupt_id, value: answer.value}, "answering " + p.step,
      "answered " + p.step + "; the thread goes on", [send]);
  });
  const row = el("p");
  row.append(send);
  const shell = el("code", "answer-command");
  const update = () => {
    shell.textContent = command(["longtask", "resume", THREAD],
      ["--interrupt", p.interrupt_id, "--resume", shq(payloadText(value.value))]);
  };
  value.addEventListener("input", update);
  update();
  const or = el("div", "muted", "or from a shell: ");
  or.append(shell);
  card.append(value, row, or);
}
function say(text, error) {
  const msg = $("message");
  msg.className = error ? "error" : "";
  msg.textContent = text;
  notice = null;
}
function noted(text, st) {
  // A notice that holds until the thread moves on (its status or what it waits for).
  say(text, false);
  notice = {status: st.status, key: pendingKey, actions: actionsKey};
}
async function act(path, body, doing, done, buttons) {
  if (!token()) { say("enter your API token first", true); return; }
  buttons.forEach((b) => { b.disabled = true; });
  say(doing + "…", false);
  try {
    const st = await api(BASE + path, {method: "POST", body: JSON.stringify(body)});
    // 202: recorded; the thread goes on in the background (events follow).
    renderStatus(st);
    noted(done, st);
    // The stream of a finished thread has ended: listen again for what the action starts.
    awaiting = lastId;
    awaitingRounds = 0;
    if (!source || source.readyState === EventSource.CLOSED) connect();
    refresh();
  } catch (e) {
    say(e.message, true);
    buttons.forEach((b) => { b.disabled = false; });
  }
}
function parsed(textarea, what) {
  try { return {ok: true, value: JSON.parse(textarea.value)}; } catch (e) {
    say(what + " is not JSON: " + e.message, true);
    return {ok: false};
  }
}
function sendSignal(p, payload, button) {
  const value = parsed(payload, "the payload");
  if (!value.ok) return;
  act("/signal", {name: p.step, payload: value.value}, "sending " + p.step,
    "sent " + p.step + "; the thread goes on", [button]);
}
function retryTarget(st) {
  // As the Runner decides what `retry` runs again (its _failing_step).
  const e = st.error || {};
  if (e.compensated) return null;
  if (st.status === "failed") return e.step || null;
  if (st.status === "waiting_user") {
    for (const w of st.waiting || []) if (CONFIG.stepPauses.includes(w.kind)) return w.step;
  }
  return null;
}
function renderActions(st) {
  // Offered where the CLI's retry, skip and cancel would be accepted; the API checks again.
  const failing = retryTarget(st);
  const step = st.steps.find((s) => s.name === failing);
  const skippable = failing && step && !["approval", "wait"].includes(step.kind);
  const closed = ["completed", "cancelled"].includes(st.status) ||
    Boolean((st.error || {}).compensated);
  const key = JSON.stringify([failing, skippable, closed]);
  if (key === actionsKey) return;
  actionsKey = key;
  const box = $("actions");
  box.replaceChildren();
  if (failing) {
    const row = el("p");
    const retry = el("button", "ok retry", "Retry " + failing);
    retry.addEventListener("click", () => {
      retried = {step: failing, since: lastId};
      act("/retry", {step: failing}, "retrying " + failing,
        "retrying " + failing + "; the thread goes on", [retry]);
    });
    row.append(retry, " ", el("span", "muted", "runs the step again, with fresh attempts"));
    box.append(row);
  }
  if (skippable) {
    const result = el("textarea", "skip-result");
    result.setAttribute("aria-label", "result of " + failing);
    result.value = "null";
    const skip = el("button", "skip", "Skip " + failing);
    skip.addEventListener("click", () => {
      const value = parsed(result, "the result");
      if (!value.ok) return;
      act("/skip", {step: failing, result: value.value}, "skipping " + failing,
        "skipped " + failing + "; the thread goes on", [skip]);
    });
    const row = el("p");
    row.append(skip, " ", el("span", "muted", "marks it done with this result (JSON):"));
    box.append(row, result);
  }
  if (!closed) {
    const reason = el("input", "cancel-reason");
    reason.placeholder = "reason (optional)";
    const cancel = el("button", "no cancel", "Cancel thread");
    cancel.addEventListener("click", () => {
      if (!confirm("Cancel " + THREAD + "? No further step starts, and the compensations " +
        "of its completed steps run.")) return;
      const body = reason.value.trim() ? {reason: reason.value.trim()} : {};
      act("/cancel", body, "cancelling", "cancel recorded; the thread stops", [cancel]);
    });
    const row = el("p");
    row.append(cancel, " ", reason);
    box.append(row);
  }
  $("actions-section").hidden = !failing && closed;
}
async function loadResults() {
  const found = await api(BASE + "/results");
  resultsShown = true;
  const box = $("results");
  box.replaceChildren(planView(found.results));
  box.dataset.final = found.final;
  $("results-section").hidden = Object.keys(found.results).length === 0;
}
function renderPending(items) {
  // Rebuilt only when what is pending changes, so a comment being typed survives events.
  const key = JSON.stringify(items.map((p) => [p.interrupt_id, (p.request || {}).plan_hash]));
  if (key === pendingKey) return;
  pendingKey = key;
  const box = $("pending");
  box.replaceChildren(...items.map(pendingCard));
  $("pending-section").hidden = items.length === 0;
}
function decide(p, approved, comment, buttons) {
  const body = {step: p.step, plan_hash: p.request.plan_hash};
  if (comment.value.trim()) body.comment = comment.value.trim();
  act(approved ? "/approve" : "/reject", body, (approved ? "approving " : "rejecting ") + p.step,
    (approved ? "approved " : "rejected ") + p.step + "; the thread goes on", buttons);
}
const LIMIT_NAMES = {tokens: "tokens", cost: "cost", tool_calls: "tool calls",
  wall_time: "running time (s)"};
function renderUsage(st) {
  // What each step used and the totals (ThreadStatus.usage): text only, like the rest.
  const u = st.usage;
  $("cost-section").hidden = !u;
  if (!u) return;
  const link = $("report");
  if (!link.href) {
    link.href = BASE + "/report";
    link.download = THREAD.replace(/[^A-Za-z0-9._-]+/g, "_") + "-report.html";
    link.addEventListener("click", (event) => download(link, event));
  }
  $("cost-total").textContent = "wall time " + seconds(u.wall_time) + " · cost " +
    money(u.cost) + " · " + u.tokens + " tokens · " + u.model_calls + " model calls · " +
    u.tool_calls + " tool calls";
  const limited = Object.keys(u.limits).filter((n) => u.limits[n] !== null);
  $("budget-left").textContent = limited.length ? "budget left: " + limited.map((n) =>
    LIMIT_NAMES[n] + " " + Number((u.left[n] || 0).toFixed(6)) + " of " + u.limits[n]
  ).join(", ") : "no budget limits";
  const rows = st.steps.filter((s) => s.usage).map((s) => [s.name, s.usage]);
  for (const [name, v] of Object.entries(u.other || {})) {
    const fixer = (u.fix_agents || []).includes(name);
    rows.push([name + (fixer ? " (fix agent)" : " (removed step)"), v]);
  }
  $("cost-steps").replaceChildren(...rows.map(([name, v]) => {
    const tr = el("tr");
    tr.dataset.step = name;
    tr.append(el("td", null, name));
    for (const text of [seconds(v.wall_time), v.attempts, v.tokens, money(v.cost),
      v.model_calls, v.tool_calls]) tr.append(el("td", "num", text));
    return tr;
  }));
}
async function refresh() {
  if (refreshing) { again = true; return; }
  refreshing = true;
  try {
    const [st, items] = await Promise.all([api(BASE), api(BASE + "/pending")]);
    renderStatus(st);
    renderUsage(st);
    renderPending(items);
    renderActions(st);
    if (notice && (st.status !== notice.status || pendingKey !== notice.key ||
        actionsKey !== notice.actions)) {
      say("", false);  // the thread has moved on: the notice of what was done is old news
    }
    if (retryOutcome) {
      say(retryOutcome.text, retryOutcome.error);  // stays until the next action
      retryOutcome = null;
    }
    $("load-error").textContent = "";
    if (CLOSED.includes(st.status) && !artifactsShown) await loadArtifacts();
    if (st.status === "completed" && !resultsShown) await loadResults();
  } catch (e) {
    if (e.status === 404) notFound();
    else $("load-error").textContent = e.message;
  } finally {
    refreshing = false;
    if (again) { again = false; refresh(); }
  }
}
function notFound() {
  // Nothing will ever appear: stop the stream rather than reconnect forever.
  missing = true;
  if (source) source.close();
  $("status").textContent = "no such thread";
  $("status").className = "badge s-failed";
  $("task").textContent = "";
  $("live").textContent = "";
  $("not-found").hidden = false;
}
async function download(a, event) {
  // Reads that need a token: a plain link would go without it, so fetch with the header.
  if (!CONFIG.readsNeedToken) return;
  event.preventDefault();
  const r = await fetch(a.href, {headers: {"Authorization": "Bearer " + token()}});
  if (!r.ok) { $("load-error").textContent = "download failed: " + r.status; return; }
  const url = URL.createObjectURL(await r.blob());
  const tmp = el("a");
  tmp.href = url;
  tmp.download = a.download;
  tmp.click();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
async function loadArtifacts() {
  const found = await api(BASE + "/artifacts");
  artifactsShown = true;
  const list = $("artifacts");
  list.replaceChildren(...found.map((f) => {
    const li = el("li");
    li.dataset.name = f.name;
    const a = el("a", null, f.name);
    a.href = BASE + "/artifacts/" + f.name.split("/").map(encodeURIComponent).join("/");
    a.download = f.name.split("/").pop();
    a.addEventListener("click", (event) => download(a, event));
    li.append(a, " ", el("span", "muted", (f.media_type || "") + " · " + f.size + " bytes" +
      (f.step ? " · from " + f.step : "")));
    return li;
  }));
  $("artifacts-section").hidden = found.length === 0;
}
function addEvent(ev) {
  events.unshift(ev);
  events = events.slice(0, 20);
  $("events").replaceChildren(...events.map((e) => {
    const data = JSON.stringify(e.data || {});
    const text = "#" + e.id + " " + new Date(e.ts).toLocaleTimeString() + " " + e.kind +
      (e.step ? " " + e.step : e.stage ? " stage " + e.stage : "") +
      (data !== "{}" ? " " + data : "");
    const li = el("li", null, text);
    li.dataset.kind = e.kind;
    li.title = text;
    return li;
  }));
}
function onEvent(msg) {
  const ev = JSON.parse(msg.data);
  if (ev.id <= lastId) return;
  lastId = ev.id;
  // The end of a retry from this page, said where the retry was (its notice would just
  // vanish when the thread fails again).
  if (retried && ev.id > retried.since && ev.step === retried.step) {
    if (ev.kind === "step.failed") {
      const why = String((ev.data || {}).error || "").split("\n")[0].slice(0, 300);
      retryOutcome = {text: "the retry of " + ev.step + " failed again" + (why ? ": " + why : ""),
        error: true};
      retried = null;
    } else if (ev.kind === "step.completed") {
      retryOutcome = {text: "the retry of " + ev.step + " succeeded", error: false};
      retried = null;
    }
  }
  if (awaiting !== null && CONFIG.finalKinds.includes(ev.kind)) awaiting = null;
  addEvent(ev);
  refresh();
}
function connect() {
  if (source) source.close();
  if (missing) return;
  const params = new URLSearchParams();
  if (lastId) params.set("since", lastId);
  if (CONFIG.readsNeedToken && token()) params.set("access_token", token());
  const q = params.toString();
  source = new EventSource(BASE + "/events/stream" + (q ? "?" + q : ""));
  for (const kind of CONFIG.kinds) source.addEventListener(kind, onEvent);
  source.addEventListener("message", onEvent);
  source.onopen = () => { $("live").textContent = "● live"; };
  source.onerror = async () => {
    // The server ends the stream once the thread is finished; the browser would reconnect.
    await refresh();
    if (missing) return;
    const finished = current && CLOSED.includes(current.status);
    if (finished && awaiting !== null && ++awaitingRounds > 5) awaiting = null;
    if (finished && awaiting === null) {
      source.close();
      $("live").textContent = "finished";
    } else {
      $("live").textContent = "reconnecting…";
    }
  };
}
bindToken(() => { if (CONFIG.readsNeedToken && !missing) { refresh(); connect(); } });
if (CONFIG.missing) notFound();
else { refresh(); connect(); }
"""


def _config_json(config: dict[str, Any]) -> str:
    # Inside <script>, "</" would end the element: escape what HTML could read as markup.
    text = json.dumps(config, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _document(title: str, body: str, script: str, config: dict[str, Any]) -> tuple[str, str]:
    nonce = secrets.token_urlsafe(16)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<link rel="icon" href="/favicon.ico" type="image/svg+xml">
<style nonce="{nonce}">{CSS}</style></head>
<body>{body}
<script type="application/json" id="config">{_config_json(config)}</script>
<script nonce="{nonce}">{COMMON_JS}{script}</script>
</body></html>
"""
    return page, nonce


TOKEN_FIELD = """<label>API token <input id="token" type="password" autocomplete="off"
 placeholder="bearer token" size="18"></label>"""


def index_page(*, reads_need_token: bool, db_option: str = "") -> tuple[str, str]:
    """The list of threads; returns the HTML and its CSP nonce. ``db_option``: the
    ``--db URL`` the commands a page shows carry (see ``_hints``)."""
    body = f"""<header><h1>longtask threads</h1>{TOKEN_FIELD}</header>
<main><section><p id="message" class="error"></p>
<p><label>status <select id="status-filter"><option value="">all</option></select></label></p>
<table><thead><tr><th>thread</th><th>task</th><th>status</th>
<th><a href="?sort=cost" data-sort="cost" title="most expensive first">cost</a></th>
<th><a href="?sort=age" data-sort="age" title="oldest first">age</a></th>
<th><a href="?" data-sort="" title="most recently updated first">updated</a></th></tr></thead>
<tbody id="threads"></tbody></table><p id="empty" class="muted" hidden>no threads</p>
</section>
<section id="schedules-section" hidden><h2>Schedules</h2>
<table><thead><tr><th>schedule</th><th>task</th><th>cron</th><th>next fire</th>
<th>last thread</th></tr></thead><tbody id="schedules"></tbody></table></section>
</main>"""
    config = {
        "readsNeedToken": reads_need_token,
        "statuses": list(THREAD_STATUSES),
        "dbOption": db_option,
    }
    return _document("longtask", body, INDEX_JS, config)


def _not_found(name: str, reads_need_token: bool) -> str:
    """What the page says of a thread the API answered 404 for: where reads need a token,
    that answer is the same for a thread that exists and the token may not see, so the page
    does not say it is missing from the database."""
    if reads_need_token:
        return f"no thread {name} for this token: there is none, or it may not see it."
    return f"no such thread: {name} is not in this database."


def thread_page(
    thread_id: str, reads_need_token: bool, missing: bool = False, db_option: str = ""
) -> tuple[str, str]:
    """The live view of one thread (``missing``: say there is no such thread); returns the
    HTML and its CSP nonce. ``db_option`` as for ``index_page``."""
    name = html.escape(thread_id)
    body = f"""<header><h1><a href="/">threads</a> / {name}</h1>
<span id="live" class="muted">connecting…</span>{TOKEN_FIELD}</header>
<main>
<section><h2><span id="task">…</span> <span id="status" class="badge">loading</span></h2>
<div class="bar"><div id="bar"></div></div><div id="progress" class="muted"></div>
<div id="schedule" class="muted" hidden></div>
<p id="not-found" hidden>{_not_found(name, reads_need_token)}
<a href="/">See the threads</a>.</p>
<p id="error" hidden></p><p id="load-error" class="error"></p>
<p id="message" role="status"></p></section>
<section id="pending-section" hidden><h2>Waiting for</h2><div id="pending"></div></section>
<section id="actions-section" class="actions" hidden><h2>Take over</h2><div id="actions"></div>
</section>
<section id="results-section" hidden><h2>Results</h2><div id="results"></div></section>
<section id="artifacts-section" hidden><h2>Artifacts</h2><ul id="artifacts"></ul></section>
<section><h2>Steps</h2><ul id="tree" class="tree"></ul></section>
<section id="cost-section" hidden><h2>Cost</h2><p id="cost-total"></p>
<p><a id="report" download>report (HTML, one file to attach to a ticket)</a></p>
<p id="budget-left" class="muted"></p>
<table><thead><tr><th>step</th><th class="num">wall time</th><th class="num">attempts</th>
<th class="num">tokens</th><th class="num">cost</th><th class="num">model calls</th>
<th class="num">tool calls</th></tr></thead><tbody id="cost-steps"></tbody></table></section>
<section><h2>Latest events</h2><ol id="events"></ol></section>
</main>"""
    config = {
        "thread": thread_id,
        "readsNeedToken": reads_need_token,
        "kinds": EVENT_KINDS,
        "missing": missing,
        "finalStatuses": list(FINAL_STATUSES),
        "stepPauses": list(STEP_PAUSES),
        "finalKinds": sorted(FINAL_KINDS),
        "dbOption": db_option,
    }
    return _document(f"longtask · {thread_id}", body, THREAD_JS, config)
