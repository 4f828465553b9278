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
