// The script of the differential test of plain LangGraph apps (test_lg_plain_diff.py)
// through the JS SDK: the same calls, with the same labels, as lgdiff_plain_drive.py (but
// RemoteGraph, which is Python's). Prints the trace as JSON, as lgdiff_drive.mjs does.
//
//   node lgdiff_plain_drive.mjs URL API_KEY      (run where node_modules holds the SDK)
import { createRequire } from "node:module";
import path from "node:path";
import { secondMessage } from "./lgdiff_plain_turns.mjs";

// The SDK is installed by the test outside the repository: resolve it from the directory
// the test runs this in.
const require = createRequire(path.join(process.cwd(), "noop.js"));
const { Client } = require("@langchain/langgraph-sdk");

const [url, apiKey] = process.argv.slice(2);

const CHAT = { messages: [{ role: "user", content: "What is the weather in Paris?" }] };

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
const TOPIC = { topic: "rain" };
const REVIEW = "fine";
const MODES = ["values", "updates", "messages-tuple"];
const ok = (answer) => !(answer && typeof answer === "object" && "__error__" in answer);
const tag = { lgdiff_plain: `js-${Date.now()}-${Math.random()}` };

const found = await call("assistants.search agent", client.assistants.search({ graphId: "agent" }));
const agent = ok(found) && found.length ? found[0].assistant_id : "agent";
await call("assistants.get agent", client.assistants.get(agent));

// -- agent: a streamed run, then the thread read back
let thread = await call("threads.create agent", client.threads.create({ metadata: tag }));
let tid = thread.thread_id;
await stream("runs.stream agent", client.runs.stream(tid, "agent", { input: CHAT, streamMode: MODES }));
await call("threads.get agent done", client.threads.get(tid));
await call("threads.get_state agent done", client.threads.getState(tid));
await call("threads.get_history agent", client.threads.getHistory(tid, { limit: 10 }));
await call("runs.list agent", client.runs.list(tid));
const agentThread = tid;

// -- ask: to the pause, read it, resume with a command
thread = await call("threads.create ask", client.threads.create({ metadata: tag }));
tid = thread.thread_id;
await stream("runs.stream ask to pause", client.runs.stream(tid, "ask", { input: TOPIC, streamMode: MODES }));
await call("threads.get ask paused", client.threads.get(tid));
await call("threads.get_state ask paused", client.threads.getState(tid));
await call("threads.get_history ask paused", client.threads.getHistory(tid, { limit: 10 }));
await stream(
  "runs.stream ask resume",
  client.runs.stream(tid, "ask", { command: { resume: REVIEW }, streamMode: MODES }),
);
await call("threads.get_state ask done", client.threads.getState(tid));
await call("threads.get_history ask done", client.threads.getHistory(tid, { limit: 10 }));

// -- ask: runs.wait to the pause and on
thread = await call("threads.create ask wait", client.threads.create({ metadata: tag }));
tid = thread.thread_id;
await call("runs.wait ask to pause", client.runs.wait(tid, "ask", { input: TOPIC }));
await call("runs.wait ask resume", client.runs.wait(tid, "ask", { command: { resume: REVIEW } }));
await call("threads.get ask wait done", client.threads.get(tid));

// -- a second message on the agent's thread (and a new input at a pause)
await secondMessage({ client, call, stream, tid: agentThread, tag });

process.stdout.write(JSON.stringify(trace));
