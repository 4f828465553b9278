// The second message of a chat through the JS SDK, as lgdiff_plain_turns.py through the
// Python SDK (but RemoteGraph, which is Python's): the same calls, with the same labels.
// Called from lgdiff_plain_drive.mjs on the thread of its streamed agent run.
const AGAIN = { messages: [{ role: "user", content: "And tomorrow?" }] };
const THIRD = { messages: [{ role: "user", content: "Thanks!" }] };
const OTHER = { messages: [{ role: "user", content: "And in Oslo?" }] };
const MODES = ["values", "updates", "messages-tuple"];

export async function secondMessage({ client, call, stream, tid, tag }) {
  // -- agent: a second message streamed, a third by runs.wait, the thread read back
  await stream("runs.stream agent again", client.runs.stream(tid, "agent", { input: AGAIN, streamMode: MODES }));
  await call("threads.get agent again", client.threads.get(tid));
  await call("threads.get_state agent again", client.threads.getState(tid));
  await call("threads.get_history agent again", client.threads.getHistory(tid, { limit: 20 }));
  await call("runs.wait agent third", client.runs.wait(tid, "agent", { input: THIRD }));
  await call("runs.list agent again", client.runs.list(tid));
  await fromThePast({ client, call, tid });

  // -- ask: a new input while the graph waits at its interrupt()
  const thread = await call("threads.create ask again", client.threads.create({ metadata: tag }));
  const ask = thread.thread_id;
  await call("runs.wait ask again to pause", client.runs.wait(ask, "ask", { input: { topic: "rain" } }));
  await call("runs.wait ask new input while paused", client.runs.wait(ask, "ask", { input: { topic: "snow" } }));
  await call("threads.get_state ask new input", client.threads.getState(ask));
  await call("threads.get_history ask new input", client.threads.getHistory(ask, { limit: 20 }));
}

// A run with a new message from the checkpoint the first run ended at: a branch there.
async function fromThePast({ client, call, tid }) {
  const history = await client.threads.getHistory(tid, { limit: 50 });
  const ends = history.filter((h) => h.next.length === 0).map((h) => h.checkpoint_id);
  await call(
    "runs.wait agent from a past checkpoint",
    client.runs.wait(tid, "agent", { input: OTHER, checkpointId: ends[ends.length - 1] }),
  );
  await call("threads.get_state agent branch", client.threads.getState(tid));
  await call("threads.get_history agent branch", client.threads.getHistory(tid, { limit: 50 }));
}
