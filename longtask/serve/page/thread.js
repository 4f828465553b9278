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
  } else if (p.kind === "effect") {
    effectForm(card, p);  // effect_card.js
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
  // asked again: the graph raised on the last answer
  if (r.refused) card.append(el("div", "refused", "last answer failed: " + r.refused));
  if (r.stop) {
    card.append(el("div", "muted", "stopped before: " + (r.next || []).join(", ")));
  } else if (r.actions) {
    // a tool review of LangChain's HumanInTheLoopMiddleware: each call, what it allows
    for (const a of r.actions) {
      const call = el("div", "plan tool-call");
      call.append(el("div", null, "tool call: " + a.name));
      call.append(planView(a.args));
      call.append(el("div", "muted", "allowed: " + (a.allowed_decisions || []).join(", ")));
      card.append(call);
    }
    card.append(el("div", "muted answer-shape", "takes " + r.answer));
  } else {
    const asks = el("div", "plan");
    asks.append(planView(r.value));
    card.append(asks);
  }
  const value = el("textarea", "answer");
  value.setAttribute("aria-label", "answer (JSON)");
  value.value = "{}";
  if (r.actions) {
    // approving every call: edit it to reject, edit or respond
    const approve = r.actions.map(() => ({type: "approve"}));
    const perCall = (r.value || {}).type === "tool_approval";
    value.value = JSON.stringify(perCall ? approve[0] : {decisions: approve}, null, 2);
  }
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
