// The differential test's calls of issue 43's thread and run endpoints through the JS SDK,
// with the same labels as lgdiff_misc.py: threads.copy (of a paused thread, resumed),
// the history's filters, threads.joinStream (a resumable run replayed from
// Last-Event-ID "-"), runs.delete, threads.prune and runs.createBatch.
// lgdiff_drive.mjs calls driveMisc.
const GRAPH = "chat";
const CHAT = { messages: [{ role: "user", content: "What is the weather?" }] };
const APPROVE = { approved: true, comment: "ok" };
const JOIN_LIMIT_MS = 60000;

const ok = (answer) => !(answer && typeof answer === "object" && "__error__" in answer);

// A thread's stream up to its first run's end (metadata run_done): LangGraph's server keeps
// the stream open for the thread's next runs.
async function* untilDone(client, threadId, options) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), JOIN_LIMIT_MS);
  try {
    for await (const part of client.threads.joinStream(threadId, { ...options, signal: controller.signal })) {
      yield part;
      if (part.event === "metadata" && part.data && part.data.status === "run_done") return;
    }
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
}

export async function driveMisc(client, call, stream, trace, tag) {
  const thread = await call("threads.create misc", client.threads.create({ metadata: tag }));
  const tid = thread.thread_id;
  await call("runs.wait to pause (misc)", client.runs.wait(tid, GRAPH, { input: CHAT }));

  // -- copy: the paused thread's copy waits at the same pause, and is resumed
  const copy = await call("threads.copy paused", client.threads.copy(tid));
  const cid = ok(copy) && copy ? copy.thread_id : null;
  if (cid) {
    await call("threads.get_state copy", client.threads.getState(cid));
    await call("runs.wait resume copy", client.runs.wait(cid, GRAPH, { command: { resume: APPROVE } }));
    await call("threads.get_state copy done", client.threads.getState(cid));
  }

  // -- the history's filters, on the paused source
  const every = await call("threads.get_history misc all", client.threads.getHistory(tid, { limit: 20 }));
  await call(
    "threads.get_history misc metadata",
    client.threads.getHistory(tid, { limit: 20, metadata: { source: "input" } }),
  );
  if (ok(every) && every.length > 1) {
    const last = every[every.length - 1].checkpoint.checkpoint_id;
    await call(
      "threads.get_history misc checkpoint",
      client.threads.getHistory(tid, { limit: 5, checkpoint: { checkpoint_id: last } }),
    );
    const first = every[0].checkpoint.checkpoint_id;
    const older = await call(
      "threads.get_history misc before",
      client.threads.getHistory(tid, { limit: 20, before: { configurable: { checkpoint_id: first } } }),
    );
    if (ok(older)) {
      const ids = older.map((h) => h.checkpoint.checkpoint_id);
      const rest = every.slice(1).map((h) => h.checkpoint.checkpoint_id);
      trace.push(["threads.get_history misc before: the rest", { status: String(JSON.stringify(ids) === JSON.stringify(rest)) }]);
    }
  }

  // -- join the thread's stream: a resumable run, replayed from its start
  const run = await call(
    "runs.create resume resumable",
    client.runs.create(tid, GRAPH, { command: { resume: APPROVE }, streamResumable: true }),
  );
  if (ok(run)) {
    await call("runs.join (misc)", client.runs.join(tid, run.run_id));
    await stream("threads.join_stream replay", untilDone(client, tid, { lastEventId: "-" }));
    await call("runs.delete", client.runs.delete(tid, run.run_id));
    await call("runs.get deleted", client.runs.get(tid, run.run_id));
  }

  // -- prune: the copy (delete), the source (keep_latest)
  if (cid) {
    await call("threads.prune delete", client.threads.prune([cid]));
    await call("threads.get pruned", client.threads.get(cid));
  }
  await call("threads.prune keep_latest", client.threads.prune([tid], { strategy: "keep_latest" }));

  // -- a batch of stateless runs
  const batch = await call(
    "runs.create_batch",
    client.runs.createBatch([0, 1].map(() => ({ assistantId: GRAPH, input: CHAT }))),
  );
  if (ok(batch)) trace.push(["runs.create_batch: runs", { status: `${batch.length} runs` }]);
}
