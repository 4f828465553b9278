// The card of an effect cut off mid-call (a pause of kind "effect"): the call as it was made
// (its name, arguments, tool call id and key) and what a person says became of it, sent to
// POST /api/threads/T/resolve: it happened (with its result), it did not (call it again), or
// it failed (with a reason). The shell command that does the same is shown beside them.
function calledWith(r) {
  // A tool call's pause holds {tool, args, tool_call_id}: its arguments are the args.
  const a = r.args;
  if (r.tool_call_id && a && typeof a === "object" && !Array.isArray(a) && "args" in a) {
    return a.args;
  }
  return a;
}
function effectForm(card, p) {
  const r = p.request || {};
  card.classList.add("effect");
  card.dataset.key = r.key || "";
  card.append(el("h3", null, "Call cut off: " + (r.name || "?") + " in " + p.step));
  card.append(el("div", "muted", (r.reason || "effect outcome unknown") +
    ": the process stopped before the call returned, so nobody knows whether it happened"));
  const call = el("dl", "fields effect-call");
  const row = (label, cls, value) => {
    const dd = el("dd", cls);
    dd.append(value);
    call.append(el("dt", null, label), dd);
  };
  row("call", "effect-name", el("code", null, r.name || "?"));
  row("arguments", "effect-args", planView(calledWith(r)));
  if (r.tool_call_id) row("tool call id", "effect-tool-call-id", el("code", null, r.tool_call_id));
  row("key", "effect-key", el("code", null, r.key || "?"));
  card.append(call);

  const result = el("textarea", "effect-result");
  result.setAttribute("aria-label", "its result (JSON)");
  result.value = r.result_schema ? JSON.stringify(example(r.result_schema), null, 2) : "";
  result.rows = Math.min(Math.max(result.value.split("\n").length + 1, 3), 12);
  const happened = el("button", "ok happened", "It happened: record this result");
  const again = el("button", "retry-call", "It did not happen: call it again");
  const reason = el("input", "effect-reason");
  reason.placeholder = "why it failed (optional)";
  reason.setAttribute("aria-label", "why it failed");
  const failed = el("button", "no failed", "It failed");
  const buttons = [happened, again, failed];
  const resolve = (outcome, extra, doing, done) => act("/resolve",
    Object.assign({key: r.key, outcome}, extra), doing + " " + r.name, done, buttons);
  happened.addEventListener("click", () => {
    if (!result.value.trim()) { say("give its result as JSON (text in quotes)", true); return; }
    const value = parsed(result, "the result");
    if (!value.ok) return;
    resolve("succeeded", {result: value.value}, "recording the result of",
      "recorded: " + r.name + " happened; the thread goes on");
  });
  again.addEventListener("click", () => resolve("retry", {}, "calling again",
    r.name + " is called again; the thread goes on"));
  failed.addEventListener("click", () => {
    const why = reason.value.trim();
    resolve("failed", why ? {reason: why} : {}, "failing",
      "recorded: " + r.name + " failed; its step fails");
  });
  const said = el("div", "muted", "it happened — its result (JSON):");
  const first = el("p");
  first.append(happened);
  const second = el("p");
  second.append(again);
  const third = el("p");
  third.append(failed, " ", reason);
  const shell = el("code", "effect-command");
  const update = () => {
    shell.textContent = command(["longtask", "effects", "resolve", THREAD, r.key || "KEY"],
      ["--succeeded", "--result", shq(payloadText(result.value) || "JSON")]);
  };
  result.addEventListener("input", update);
  update();
  const or = el("div", "muted", "or from a shell: ");
  or.append(shell, " (or --retry, or --failed --reason WHY)");
  card.append(said, result, first, second, third, or);
}
