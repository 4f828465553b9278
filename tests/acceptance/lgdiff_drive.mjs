// The script of the differential test through the JS SDK (@langchain/langgraph-sdk), the
// client of useStream, Agent Chat UI and Studio: the same calls, with the same labels, as
// lgdiff_drive.py. Prints the trace as JSON: [[label, answer], ...], where a refused call
// is {"__error__": status, "detail": body} and a stream is [[event, data], ...].
//
//   node lgdiff_drive.mjs URL API_KEY      (run where node_modules holds the SDK)
import { createRequire } from "node:module";
import path from "node:path";

// The SDK is installed by the test outside the repository: resolve it from the directory
// the test runs this in.
const require = createRequire(path.join(process.cwd(), "noop.js"));
const { Client } = require("@langchain/langgraph-sdk");
const { driveAssistants } = await import(new URL("./lgdiff_assistants.mjs", import.meta.url));
const { driveCrons } = await import(new URL("./lgdiff_crons.mjs", import.meta.url));
const { driveMisc } = await import("./lgdiff_misc.mjs");
const { driveMore } = await import("./lgdiff_more.mjs");

const [url, apiKey] = process.argv.slice(2);
const GRAPH = "chat";
const CHAT = { messages: [{ role: "user", content: "What is the weather?" }] };
const APPROVE = { approved: true, comment: "ok" };
const ALL_MODES = ["values", "updates", "messages-tuple", "custom", "debug", "events", "tasks", "checkpoints"];
const USESTREAM_MODES = ["values", "messages-tuple", "updates", "custom"];

const client = new Client({ apiUrl: url, apiKey, callerOptions: { maxRetries: 0 } });
const trace = [];

function refused(err) {
  let detail = err.message;
  try {
    detail = JSON.parse(err.text ?? err.message);
  } catch {}
  return { __error__: err.status ?? err.name, detail };
}

async function call(label, promise) {
  let answer;
  try {
    answer = await promise;
  } catch (err) {
    answer = refused(err);
  }
  trace.push([label, answer ?? null]);
  if (process.env.LGDIFF_VERBOSE) console.error(label);
  return answer;
}

async function stream(label, parts) {
  const out = [];
  try {
    for await (const part of parts) out.push([part.event, part.data]);
  } catch (err) {
    const answer = refused(err);
    if (out.length === 0) {
      trace.push([label, answer]);
      return [["__error__", answer]];
    }
    out.push(["__error__", answer]);
  }
  trace.push([label, out]);
  return out;
}

const ok = (answer) => !(answer && typeof answer === "object" && "__error__" in answer);
const tag = { lgdiff: `js-${Date.now()}-${Math.random()}` };

const found = await call("assistants.search", client.assistants.search({ graphId: GRAPH }));
const assistant = ok(found) && found.length ? found[0].assistant_id : GRAPH;
await call("assistants.get", client.assistants.get(assistant));

// -- main: every stream mode to the pause
let thread = await call("threads.create", client.threads.create({ metadata: tag }));
let tid = thread.thread_id;
await call("threads.get new", client.threads.get(tid));
await call("threads.get_state new", client.threads.getState(tid));
const parts = await stream(
  "runs.stream all modes, subgraphs",
  client.runs.stream(tid, GRAPH, { input: CHAT, streamMode: ALL_MODES, streamSubgraphs: true }),
);
if (parts.length && parts[parts.length - 1][0] === "__error__") {
  await call("runs.wait (fallback)", client.runs.wait(tid, GRAPH, { input: CHAT }));
}
await call("threads.get paused", client.threads.get(tid));
await call("threads.get_state paused", client.threads.getState(tid));
await call("threads.get_state paused, subgraphs", client.threads.getState(tid, undefined, { subgraphs: true }));
await call("threads.get_history paused", client.threads.getHistory(tid, { limit: 5 }));
await call("threads.search interrupted", client.threads.search({ metadata: tag, status: "interrupted" }));
const run = await call("runs.create resume", client.runs.create(tid, GRAPH, { command: { resume: APPROVE } }));
if (ok(run)) {
  await call("runs.join", client.runs.join(tid, run.run_id));
  await call("runs.get done", client.runs.get(tid, run.run_id));
}
await call("runs.list", client.runs.list(tid));
await call("threads.get done", client.threads.get(tid));
await call("threads.get_state done", client.threads.getState(tid));
await call("threads.get_history done", client.threads.getHistory(tid, { limit: 3 }));

// -- usestream: what useStream sends, then submit({}, {command})
thread = await call("threads.create usestream", client.threads.create({ metadata: tag }));
tid = thread.thread_id;
await stream(
  "runs.stream usestream modes",
  client.runs.stream(tid, GRAPH, { input: CHAT, streamMode: USESTREAM_MODES }),
);
await stream(
  "runs.stream resume {} + command",
  client.runs.stream(tid, GRAPH, { input: {}, command: { resume: APPROVE }, streamMode: USESTREAM_MODES }),
);
await call("threads.get_state usestream done", client.threads.getState(tid));

// -- values only: __interrupt__ in the values stream at the pause
thread = await call("threads.create values", client.threads.create({ metadata: tag }));
tid = thread.thread_id;
await stream("runs.stream values", client.runs.stream(tid, GRAPH, { input: CHAT, streamMode: "values" }));
await call("runs.wait resume", client.runs.wait(tid, GRAPH, { command: { resume: APPROVE } }));

// -- edit: update_state during the pause, then continue
thread = await call("threads.create edit", client.threads.create({ metadata: tag }));
tid = thread.thread_id;
await call("runs.wait to pause", client.runs.wait(tid, GRAPH, { input: CHAT }));
await call("threads.update_state paused", client.threads.updateState(tid, { values: { answer: "It is raining." } }));
await call("threads.get_state after update", client.threads.getState(tid));
await call("threads.get after update", client.threads.get(tid));
await call("runs.wait resume after update", client.runs.wait(tid, GRAPH, { command: { resume: APPROVE } }));
await call("threads.get_state after update+resume", client.threads.getState(tid));

// -- resolve: Agent Chat UI's "Mark as resolved"
thread = await call("threads.create resolve", client.threads.create({ metadata: tag }));
tid = thread.thread_id;
await call("runs.wait to pause (resolve)", client.runs.wait(tid, GRAPH, { input: CHAT }));
await call("runs.wait goto __end__", client.runs.wait(tid, GRAPH, { command: { goto: "__end__" } }));
await call("threads.get after goto __end__", client.threads.get(tid));

// -- the store (LangGraph's BaseStore on each server)
// a user keeps to their own namespaces (the token is alice's)
const ns = ["alice", "lgdiff", tag.lgdiff.replace(/[^a-z0-9-]/g, "-")];
await call("store.put_item", client.store.putItem(ns, "prefs", { theme: "dark" }));
await call("store.put_item other", client.store.putItem(ns, "notes", { theme: "light" }));
await call("store.get_item", client.store.getItem(ns, "prefs"));
await call("store.search_items filter", client.store.searchItems(ns, { filter: { theme: "dark" }, limit: 5 }));
await call("store.list_namespaces", client.store.listNamespaces({ prefix: ns }));
await call("store.delete_item", client.store.deleteItem(ns, "prefs"));
await call("store.get_item deleted", client.store.getItem(ns, "prefs"));

// -- assistants: created, versioned, run, deleted (lgdiff_assistants.mjs)
await driveAssistants(client, call, ok, tag);
// -- copy, prune, a thread's stream, runs.delete, batches, history filters (issue 43)
await driveMisc(client, call, stream, trace, tag);
// -- runs.cancelMany, subgraphs by namespace (lgdiff_more.mjs)
await driveMore(client, call, trace, tag);

// -- crons (lgdiff_crons.mjs)
await driveCrons(client, call, GRAPH, CHAT, tag);

process.stdout.write(JSON.stringify(trace));
