// The differential test's calls of runs.cancelMany and an assistant's subgraphs by
// namespace through the JS SDK, with the same labels as lgdiff_more.py (which says why a
// cancel by status is not called). lgdiff_drive.mjs calls driveMore.
const GRAPH = "chat";
const CHAT = { messages: [{ role: "user", content: "What is the weather?" }] };

const ok = (answer) => !(answer && typeof answer === "object" && "__error__" in answer);

export async function driveMore(client, call, trace, tag) {
  const found = await call("assistants.search (more)", client.assistants.search({ graphId: GRAPH }));
  const assistant = ok(found) && found.length ? found[0].assistant_id : GRAPH;
  for (const namespace of ["answer", "approve"]) {
    await call(`assistants.get_subgraphs ${namespace}`, client.assistants.getSubgraphs(assistant, { namespace }));
  }
  await call(
    "assistants.get_subgraphs recurse",
    client.assistants.getSubgraphs(assistant, { namespace: "answer", recurse: true }),
  );

  const thread = await call("threads.create (more)", client.threads.create({ metadata: tag }));
  const tid = thread.thread_id;
  await call("runs.wait to pause (more)", client.runs.wait(tid, GRAPH, { input: CHAT }));
  const runs = await call("runs.list (more)", client.runs.list(tid));
  if (ok(runs) && runs.length) {
    const rid = runs[0].run_id;
    await call("runs.cancel_many ended", client.runs.cancelMany({ threadId: tid, runIds: [rid] }));
    await call("runs.cancel ended", client.runs.cancel(tid, rid));
    await call("runs.get after cancel_many", client.runs.get(tid, rid));
    await call(
      "runs.cancel_many both forms",
      client.runs.cancelMany({ threadId: tid, runIds: [rid], status: "all" }),
    );
  }
  await call(
    "runs.cancel_many missing",
    client.runs.cancelMany({ threadId: tid, runIds: [crypto.randomUUID()] }),
  );
  await call("threads.get_state after cancel_many", client.threads.getState(tid));
}
