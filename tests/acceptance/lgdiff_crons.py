"""The differential test's crons (``lgdiff_drive.drive`` calls ``drive_crons``; the JS
driver has the same calls in ``lgdiff_crons.mjs``): a cron of an assistant and one of a
thread, search (by metadata, sorted, selected fields, paged), count, update (a new
schedule, disabled), delete. Their schedules name the first of January at 03:00, so no
server fires one while the script runs: what is compared is what the calls answer."""

from __future__ import annotations

from typing import Any

#: once a year: nothing fires during a test
YEARLY = "0 3 1 1 *"


async def drive_crons(
    t: Any, lg: Any, graph: str, chat: dict[str, Any], tag: dict[str, str]
) -> None:
    cron = await t.call(
        "crons.create",
        lg.crons.create(graph, schedule=YEARLY, input=chat, metadata=tag, on_run_completed="keep"),
    )
    thread = await t.call("threads.create crons", lg.threads.create(metadata=tag))
    await t.call(
        "crons.create_for_thread",
        lg.crons.create_for_thread(
            thread["thread_id"], graph, schedule=YEARLY, input=chat, metadata=tag
        ),
    )
    await t.call("crons.search", lg.crons.search(metadata=tag))
    await t.call(
        "crons.search sorted, selected, paged",
        lg.crons.search(
            metadata=tag,
            sort_by="created_at",
            sort_order="asc",
            select=["cron_id", "schedule", "enabled"],
            limit=1,
            offset=1,
        ),
    )
    await t.call(
        "crons.search thread",
        lg.crons.search(thread_id=thread["thread_id"], metadata=tag),
    )
    await t.call("crons.count", lg.crons.count(metadata=tag))
    cron_id = cron.get("cron_id") if isinstance(cron, dict) else None
    if cron_id:
        await t.call(
            "crons.update",
            lg.crons.update(cron_id, schedule="0 4 1 1 *", enabled=False, timezone="Europe/Paris"),
        )
        await t.call("crons.search disabled", lg.crons.search(metadata=tag, enabled=False))
        await t.call("crons.delete", lg.crons.delete(cron_id))
    await t.call("crons.count after delete", lg.crons.count(metadata=tag))
