// The differential test's assistants calls (issue 43) through the JS SDK: the same calls,
// with the same labels, as lgdiff_assistants.py. lgdiff_drive.mjs calls driveAssistants.
const GRAPH = "chat";
const CHAT = { messages: [{ role: "user", content: "What is the weather?" }] };
const APPROVE = { approved: true, comment: "ok" };

export async function driveAssistants(client, call, ok, tag) {
  const made = await call(
    "assistants.create",
    client.assistants.create({
      graphId: GRAPH,
      config: { tags: ["lgdiff"] },
      context: { tone: "brief" },
      metadata: { ...tag, kind: "made" },
      name: "lgdiff assistant",
      description: "made by the differential test",
    }),
  );
  if (!ok(made)) return;
  const aid = made.assistant_id;
  await call("assistants.get created", client.assistants.get(aid));
  await call("assistants.update", client.assistants.update(aid, { context: { tone: "long" }, metadata: { step: "two" } }));
  await call("assistants.get_versions", client.assistants.getVersions(aid));
  await call("assistants.get_versions metadata", client.assistants.getVersions(aid, { metadata: { step: "two" }, limit: 5 }));
  await call("assistants.set_latest", client.assistants.setLatest(aid, 1));
  await call("assistants.search metadata", client.assistants.search({ metadata: tag, sortBy: "name", sortOrder: "asc" }));
  await call("assistants.search select", client.assistants.search({ metadata: tag, select: ["assistant_id", "name", "version"] }));
  await call("assistants.search object", client.assistants.search({ graphId: GRAPH, limit: 1, includePagination: true }));
  await call("assistants.count metadata", client.assistants.count({ metadata: tag }));

  const thread = await call("threads.create assistant", client.threads.create({ metadata: tag }));
  if (ok(thread)) {
    const tid = thread.thread_id;
    await call("runs.wait created assistant", client.runs.wait(tid, aid, { input: CHAT }));
    await call("runs.wait created assistant resume", client.runs.wait(tid, aid, { command: { resume: APPROVE } }));
  }

  await call("assistants.create again", client.assistants.create({ graphId: GRAPH, assistantId: aid, metadata: tag }));
  await call("assistants.create do_nothing", client.assistants.create({ graphId: GRAPH, assistantId: aid, ifExists: "do_nothing" }));
  await call("assistants.delete", client.assistants.delete(aid));
  await call("assistants.get deleted", client.assistants.get(aid));

  const found = await call("assistants.search graph", client.assistants.search({ graphId: GRAPH }));
  const system = ok(found) ? found.filter((a) => a.metadata?.created_by === "system") : [];
  if (system.length) {
    await call("assistants.update the graph's own", client.assistants.update(system[0].assistant_id, { metadata: {} }));
  }
}
