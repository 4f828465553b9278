// The differential test's crons through the JS SDK: the same calls, with the same labels,
// as lgdiff_crons.py (called from lgdiff_drive.mjs). Schedules name the first of January
// at 03:00, so no server fires one while the script runs.
const YEARLY = "0 3 1 1 *";

export async function driveCrons(client, call, graph, chat, tag) {
  const cron = await call(
    "crons.create",
    client.crons.create(graph, { schedule: YEARLY, input: chat, metadata: tag, onRunCompleted: "keep" }),
  );
  const thread = await call("threads.create crons", client.threads.create({ metadata: tag }));
  await call(
    "crons.create_for_thread",
    client.crons.createForThread(thread.thread_id, graph, { schedule: YEARLY, input: chat, metadata: tag }),
  );
  await call("crons.search", client.crons.search({ metadata: tag }));
  await call(
    "crons.search sorted, selected, paged",
    client.crons.search({
      metadata: tag,
      sortBy: "created_at",
      sortOrder: "asc",
      select: ["cron_id", "schedule", "enabled"],
      limit: 1,
      offset: 1,
    }),
  );
  await call("crons.search thread", client.crons.search({ threadId: thread.thread_id, metadata: tag }));
  await call("crons.count", client.crons.count({ metadata: tag }));
  if (cron && cron.cron_id) {
    await call(
      "crons.update",
      client.crons.update(cron.cron_id, { schedule: "0 4 1 1 *", enabled: false, timezone: "Europe/Paris" }),
    );
    await call("crons.search disabled", client.crons.search({ metadata: tag, enabled: false }));
    await call("crons.delete", client.crons.delete(cron.cron_id));
  }
  await call("crons.count after delete", client.crons.count({ metadata: tag }));
}
