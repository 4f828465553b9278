"""Versioned migrations of longtask's own tables (beside LangGraph's checkpoint tables).

Each migration is applied once, in order, inside one transaction, and bumps
``longtask_schema.version``. Add a migration by appending to ``MIGRATIONS``; never edit one
that has shipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from longtask.store._order import Execute, number_stored


@dataclass(frozen=True)
class Dialect:
    name: str
    serial_pk: str
    blob: str
    real: str


#: marks a statement of a migration that only PostgreSQL runs
POSTGRES_ONLY = "-- postgresql only\n"
#: marks a statement of a migration that only SQLite runs
SQLITE_ONLY = "-- sqlite only\n"

#: how a step's usage row follows its step.started/completed/failed events (NEW): a start
#: opens a run, an end adds the run's time to ``wall_time`` (a run cut off by a crash, whose
#: end was never recorded, counts nothing); ``attempts`` is the highest attempt number seen.
#: Every right-hand side reads the row as it was before the update.
USAGE_STEP_SET = """wall_time = wall_time + CASE WHEN NEW.kind <> 'step.started'
                AND running_since IS NOT NULL THEN {greatest}(NEW.ts - running_since, 0)
                ELSE 0 END,
            running_since = CASE WHEN NEW.kind = 'step.started' THEN NEW.ts ELSE NULL END,
            started_at = COALESCE(started_at,
                CASE WHEN NEW.kind = 'step.started' THEN NEW.ts ELSE NULL END),
            finished_at = CASE WHEN NEW.kind = 'step.started' THEN finished_at ELSE NEW.ts END,
            attempts = {greatest}(attempts, COALESCE(NEW.attempt, 0)),
            updated_at = NEW.ts"""

#: the same in one statement (migration 14): the row is made with what the update would
#: give a fresh one, or updated; the trigger runs for two events of every step, and two
#: statements each cost a quarter of a trivial step's time on PostgreSQL
USAGE_UPSERT = """INSERT INTO longtask_usage (thread_id, step, wall_time, attempts,
                started_at, finished_at, running_since, updated_at)
            VALUES (NEW.thread_id, NEW.step, 0, {greatest}(COALESCE(NEW.attempt, 0), 0),
                CASE WHEN NEW.kind = 'step.started' THEN NEW.ts ELSE NULL END,
                CASE WHEN NEW.kind = 'step.started' THEN NULL ELSE NEW.ts END,
                CASE WHEN NEW.kind = 'step.started' THEN NEW.ts ELSE NULL END,
                NEW.ts)
            ON CONFLICT (thread_id, step) DO UPDATE SET
                wall_time = longtask_usage.wall_time + CASE WHEN NEW.kind <> 'step.started'
                    AND longtask_usage.running_since IS NOT NULL
                    THEN {greatest}(NEW.ts - longtask_usage.running_since, 0) ELSE 0 END,
                running_since = CASE WHEN NEW.kind = 'step.started' THEN NEW.ts ELSE NULL END,
                started_at = COALESCE(longtask_usage.started_at,
                    CASE WHEN NEW.kind = 'step.started' THEN NEW.ts ELSE NULL END),
                finished_at = CASE WHEN NEW.kind = 'step.started' THEN longtask_usage.finished_at
                    ELSE NEW.ts END,
                attempts = {greatest}(longtask_usage.attempts, COALESCE(NEW.attempt, 0)),
                updated_at = NEW.ts"""

#: the head of SQLite's usage trigger (migrations 13 and 14), up to its body
_SQLITE_USAGE_TRIGGER = """CREATE TRIGGER longtask_usage_steps AFTER INSERT ON longtask_events
        WHEN NEW.step IS NOT NULL
            AND NEW.kind IN ('step.started', 'step.completed', 'step.failed')
            AND json_extract(NEW.data, '$.item') IS NULL
        BEGIN
            """

#: PostgreSQL's function that stores a saver batch in one statement (migration 16; the
#: checkpoint's own insert is the part migration 17 changed)
_CP_WRITE_FUNCTION = (
    "CREATE OR REPLACE FUNCTION longtask_cp_write(t text, wanted bigint, doc text,"
    + """
            bin bytea[]) RETURNS void AS $$
        DECLARE
            d jsonb := doc::jsonb;
        BEGIN
            IF wanted IS NOT NULL THEN
                PERFORM longtask_fence_check(t, wanted);
            END IF;
            IF d ? 'b' THEN
                -- stored again: a fresh created_at tells a concurrent prune to keep it
                INSERT INTO longtask_blobs (digest, data, size, created_at)
                    SELECT r->>0, bin[(r->>3)::int], (r->>1)::bigint, (r->>2)::float8
                    FROM jsonb_array_elements(d->'b') r
                    ON CONFLICT (digest) DO UPDATE SET created_at = excluded.created_at;
            END IF;
{events}            IF d ? 'w' THEN
                INSERT INTO longtask_cp_writes (thread_id, checkpoint_ns, checkpoint_id,
                        task_id, idx, channel, type, value, task_path)
                    SELECT t, r->>0, r->>1, r->>2, (r->>3)::int, r->>4, r->>5,
                        bin[(r->>7)::int], r->>6
                    FROM jsonb_array_elements(d->'w') r
                    ON CONFLICT DO NOTHING;
            END IF;
            IF d ? 'u' THEN
                -- special writes (an error, an interrupt) replace an earlier one of the
                -- task; the writes above are kept as first stored (a retried task's are
                -- the same): one conflict action per statement
                INSERT INTO longtask_cp_writes (thread_id, checkpoint_ns, checkpoint_id,
                        task_id, idx, channel, type, value, task_path)
                    SELECT t, r->>0, r->>1, r->>2, (r->>3)::int, r->>4, r->>5,
                        bin[(r->>7)::int], r->>6
                    FROM jsonb_array_elements(d->'u') r
                    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
                    DO UPDATE SET channel = excluded.channel, type = excluded.type,
                        value = excluded.value, task_path = excluded.task_path;
            END IF;
            IF d ? 'v' THEN
                INSERT INTO longtask_cp_values (thread_id, checkpoint_ns, channel, version,
                        type, value)
                    SELECT t, r->>0, r->>1, r->>2, r->>3, bin[(r->>4)::int]
                    FROM jsonb_array_elements(d->'v') r
                    ON CONFLICT DO NOTHING;
            END IF;
{checkpoint}        END
        $$ LANGUAGE plpgsql"""
)

#: migration 16's insert of the checkpoint row
_CHECKPOINT_16 = """            IF d ? 'c' THEN
                INSERT INTO longtask_cp_checkpoints (thread_id, checkpoint_ns, checkpoint_id,
                        parent_id, base_id, depth, state, metadata, run_id)
                    SELECT t, r->>0, r->>1, r->>2, r->>3, (r->>4)::int, bin[(r->>7)::int],
                        r->>5, r->>6
                    FROM (SELECT d->'c' AS r) c
                    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
                        parent_id = excluded.parent_id, base_id = excluded.base_id,
                        depth = excluded.depth, state = excluded.state,
                        metadata = excluded.metadata, run_id = excluded.run_id;
            END IF;
"""


#: migration 17's: its sequence number is the thread's next (a checkpoint stored again
#: keeps its own)
_CHECKPOINT_17 = """            IF d ? 'c' THEN
                INSERT INTO longtask_cp_checkpoints (thread_id, checkpoint_ns, checkpoint_id,
                        parent_id, base_id, depth, state, metadata, run_id, seq)
                    SELECT t, r->>0, r->>1, r->>2, r->>3, (r->>4)::int, bin[(r->>7)::int],
                        r->>5, r->>6, (SELECT COALESCE(MAX(seq), 0) + 1
                            FROM longtask_cp_checkpoints WHERE thread_id = t)
                    FROM (SELECT d->'c' AS r) c
                    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
                        parent_id = excluded.parent_id, base_id = excluded.base_id,
                        depth = excluded.depth, state = excluded.state,
                        metadata = excluded.metadata, run_id = excluded.run_id;
            END IF;
"""


#: migration 16's insert of the events
_EVENTS_16 = """            IF d ? 'e' THEN
                -- in emission order: event ids follow it
                INSERT INTO longtask_events (thread_id, kind, stage, step, attempt, data, ts,
                        dedupe_key)
                    SELECT t, r->>0, r->>1, r->>2, (r->>3)::int, r->>4, (r->>5)::float8, r->>6
                    FROM jsonb_array_elements(d->'e') WITH ORDINALITY AS x(r, n) ORDER BY n
                    ON CONFLICT (dedupe_key) DO NOTHING;
                PERFORM pg_notify('longtask_events', t);
            END IF;
"""

#: migration 28's: the charges the events carry (``Charge``: a model call's tokens and
#: cost) go to the budgets and the steps' usage rows in the same statement, and only for
#: the events this write stored (a write repeated after its answer was lost, or an event
#: stored before, charges nothing twice). Rows of ``g``: [event key, owners, step,
#: tokens, cost, tool_calls, model_calls, wall_time, now].
_EVENTS_28 = """            IF d ? 'g' THEN
                WITH e AS (
                    INSERT INTO longtask_events (thread_id, kind, stage, step, attempt, data,
                            ts, dedupe_key)
                        SELECT t, r->>0, r->>1, r->>2, (r->>3)::int, r->>4, (r->>5)::float8,
                            r->>6
                        FROM jsonb_array_elements(d->'e') WITH ORDINALITY AS x(r, n)
                        ORDER BY n
                        ON CONFLICT (dedupe_key) DO NOTHING
                        RETURNING dedupe_key
                ), g AS (
                    SELECT r FROM jsonb_array_elements(d->'g') r
                        JOIN e ON e.dedupe_key = r->>0
                ), b AS (
                    INSERT INTO longtask_budgets (thread_id, tokens, cost, tool_calls,
                            wall_time, updated_at)
                        SELECT o, SUM((r->>3)::float8)::bigint, SUM((r->>4)::float8),
                            SUM((r->>5)::float8)::bigint, SUM((r->>7)::float8),
                            MAX((r->>8)::float8)
                        FROM g, jsonb_array_elements_text(r->1) o GROUP BY o
                        ON CONFLICT (thread_id) DO UPDATE SET
                            tokens = longtask_budgets.tokens + excluded.tokens,
                            cost = longtask_budgets.cost + excluded.cost,
                            tool_calls = longtask_budgets.tool_calls + excluded.tool_calls,
                            wall_time = longtask_budgets.wall_time + excluded.wall_time,
                            updated_at = excluded.updated_at
                )
                INSERT INTO longtask_usage (thread_id, step, tokens, cost, tool_calls,
                        model_calls, updated_at)
                    SELECT r->1->>0, r->>2, SUM((r->>3)::float8)::bigint, SUM((r->>4)::float8),
                        SUM((r->>5)::float8)::bigint, SUM((r->>6)::int),
                        MAX((r->>8)::float8)
                    FROM g WHERE r->>2 IS NOT NULL GROUP BY r->1->>0, r->>2
                    ON CONFLICT (thread_id, step) DO UPDATE SET
                        tokens = longtask_usage.tokens + excluded.tokens,
                        cost = longtask_usage.cost + excluded.cost,
                        tool_calls = longtask_usage.tool_calls + excluded.tool_calls,
                        model_calls = longtask_usage.model_calls + excluded.model_calls,
                        updated_at = excluded.updated_at;
                PERFORM pg_notify('longtask_events', t);
            ELS""" + _EVENTS_16.lstrip()  # events that carry no charge: as migration 16


def _cp_write_function(checkpoint: str, events: str = _EVENTS_16) -> str:
    return _CP_WRITE_FUNCTION.replace("{checkpoint}", checkpoint).replace("{events}", events)


#: the events that make a notification (store._notify): a pause of each kind, a thread's
#: failure and its end
NOTIFY_EVENT_KINDS: tuple[str, ...] = (
    "approval.required",
    "wait.started",
    "interrupt.required",
    "budget.exceeded",
    "fix.exhausted",
    "effect.unknown",
    "longtask.failed",
    "longtask.completed",
)
_NOTIFY_WHEN = "NEW.kind IN (" + ", ".join(f"'{k}'" for k in NOTIFY_EVENT_KINDS) + ")"
#: the outbox row an event makes, if its thread's run said notifications are configured
_NOTIFY_INSERT = """INSERT INTO longtask_notifications (event_id, reminder, thread_id, kind,
                step, created_at)
            SELECT NEW.id, 0, NEW.thread_id, NEW.kind, NEW.step, NEW.ts
            WHERE EXISTS (SELECT 1 FROM longtask_threads
                WHERE thread_id = NEW.thread_id AND notify = 1)"""

#: the outbox row (migration 27): with the receivers the thread's run recorded
_NOTIFY_INSERT_27 = """INSERT INTO longtask_notifications (event_id, reminder, thread_id, kind,
                step, created_at, receivers)
            SELECT NEW.id, 0, NEW.thread_id, NEW.kind, NEW.step, NEW.ts, t.notify_to
            FROM longtask_threads t WHERE t.thread_id = NEW.thread_id AND t.notify = 1"""

SQLITE = Dialect("sqlite", "INTEGER PRIMARY KEY AUTOINCREMENT", "BLOB", "REAL")
POSTGRES = Dialect("postgresql", "BIGSERIAL PRIMARY KEY", "BYTEA", "DOUBLE PRECISION")

#: a migration step in Python, run in the migration's transaction
Step = Callable[[Execute, "Dialect"], None]

MIGRATIONS: list[list[str | Step]] = [
    # 1: threads, events, blobs
    [
        """CREATE TABLE longtask_threads (
            thread_id TEXT PRIMARY KEY,
            task_ref TEXT,
            task_name TEXT NOT NULL,
            task_version TEXT NOT NULL,
            definition_hash TEXT NOT NULL,
            definition TEXT NOT NULL,
            inputs TEXT,
            status TEXT NOT NULL,
            error TEXT,
            runs INTEGER NOT NULL DEFAULT 0,
            created_at {real} NOT NULL,
            updated_at {real} NOT NULL
        )""",
        "CREATE INDEX longtask_threads_updated ON longtask_threads (updated_at)",
        """CREATE TABLE longtask_events (
            id {serial_pk},
            thread_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            stage TEXT,
            step TEXT,
            attempt INTEGER,
            data TEXT NOT NULL,
            ts {real} NOT NULL,
            dedupe_key TEXT NOT NULL UNIQUE
        )""",
        "CREATE INDEX longtask_events_thread ON longtask_events (thread_id, id)",
        """CREATE TABLE longtask_blobs (
            digest TEXT PRIMARY KEY,
            data {blob} NOT NULL,
            size INTEGER NOT NULL,
            created_at {real} NOT NULL
        )""",
    ],
    # 2: map steps: one row per map run (keyed by a digest of its inputs) and per item
    [
        """CREATE TABLE longtask_maps (
            thread_id TEXT NOT NULL,
            step TEXT NOT NULL,
            digest TEXT NOT NULL,
            total INTEGER NOT NULL,
            created_at {real} NOT NULL,
            PRIMARY KEY (thread_id, step, digest)
        )""",
        """CREATE TABLE longtask_map_items (
            thread_id TEXT NOT NULL,
            step TEXT NOT NULL,
            digest TEXT NOT NULL,
            idx INTEGER NOT NULL,
            status TEXT NOT NULL,
            result TEXT,
            model TEXT,
            error TEXT,
            updated_at {real} NOT NULL,
            PRIMARY KEY (thread_id, step, digest, idx)
        )""",
    ],
    # 3: pauses: what a paused thread waits for, and the deadlines `tick` acts on
    [
        "ALTER TABLE longtask_threads ADD COLUMN waiting TEXT",
        """CREATE TABLE longtask_timers (
            thread_id TEXT NOT NULL,
            step TEXT NOT NULL,
            due_at {real} NOT NULL,
            PRIMARY KEY (thread_id, step)
        )""",
        "CREATE INDEX longtask_timers_due ON longtask_timers (due_at)",
    ],
    # 4: the side-effect ledger: one row per idempotency key
    [
        """CREATE TABLE longtask_effects (
            key TEXT PRIMARY KEY,
            thread_id TEXT NOT NULL,
            step TEXT NOT NULL,
            name TEXT NOT NULL,
            args_hash TEXT NOT NULL,
            status TEXT NOT NULL,
            result TEXT,
            error TEXT,
            calls INTEGER NOT NULL DEFAULT 0,
            created_at {real} NOT NULL,
            updated_at {real} NOT NULL
        )""",
        "CREATE INDEX longtask_effects_thread ON longtask_effects (thread_id, created_at)",
    ],
    # 5: durable attempt counts, budgets and deadlines, cancel requests
    [
        """CREATE TABLE longtask_attempts (
            thread_id TEXT NOT NULL,
            step TEXT NOT NULL,
            item INTEGER NOT NULL,
            failed INTEGER NOT NULL,
            window_start INTEGER NOT NULL,
            retry_at {real},
            updated_at {real} NOT NULL,
            PRIMARY KEY (thread_id, step, item)
        )""",
        """CREATE TABLE longtask_budgets (
            thread_id TEXT PRIMARY KEY,
            tokens_limit INTEGER,
            cost_limit {real},
            tool_calls_limit INTEGER,
            wall_time_limit {real},
            deadline_at {real},
            tokens INTEGER NOT NULL DEFAULT 0,
            cost {real} NOT NULL DEFAULT 0,
            tool_calls INTEGER NOT NULL DEFAULT 0,
            wall_time {real} NOT NULL DEFAULT 0,
            updated_at {real} NOT NULL
        )""",
        "ALTER TABLE longtask_threads ADD COLUMN cancel TEXT",
    ],
    # 6: artifacts (the content: files beside an SQLite database, longtask_blobs on
    # PostgreSQL), and an index for following a thread's recent events by time
    [
        """CREATE TABLE longtask_artifacts (
            thread_id TEXT NOT NULL,
            name TEXT NOT NULL,
            step TEXT,
            digest TEXT NOT NULL,
            size INTEGER NOT NULL,
            media_type TEXT,
            created_at {real} NOT NULL,
            PRIMARY KEY (thread_id, name)
        )""",
    ],
    # 7: workers: who holds a thread (lease epochs for fencing), continuations waiting for a
    # worker, live workers; on PostgreSQL a trigger rejects checkpoint and ledger writes of a
    # worker whose lease epoch is no longer the thread's
    [
        "ALTER TABLE longtask_threads ADD COLUMN mode TEXT",
        """CREATE TABLE longtask_leases (
            thread_id TEXT PRIMARY KEY,
            epoch BIGINT NOT NULL,
            holder TEXT,
            acquired_at {real} NOT NULL,
            released_at {real}
        )""",
        """CREATE TABLE longtask_inbox (
            id {serial_pk},
            thread_id TEXT NOT NULL,
            command TEXT NOT NULL,
            created_at {real} NOT NULL
        )""",
        "CREATE INDEX longtask_inbox_thread ON longtask_inbox (thread_id, id)",
        """CREATE TABLE longtask_workers (
            name TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started_at {real} NOT NULL,
            heartbeat_at {real} NOT NULL,
            jobs INTEGER NOT NULL DEFAULT 0,
            current TEXT,
            stopped_at {real}
        )""",
        POSTGRES_ONLY
        + """CREATE OR REPLACE FUNCTION longtask_fence() RETURNS trigger AS $$
        DECLARE
            fence text := current_setting('longtask.fence', true);
            wanted bigint;
            current_epoch bigint;
        BEGIN
            IF fence IS NULL OR fence = '' THEN
                RETURN NEW;
            END IF;
            SELECT split_part(item, '=', 2)::bigint INTO wanted
                FROM unnest(string_to_array(fence, ',')) AS item
                WHERE split_part(item, '=', 1) = NEW.thread_id
                LIMIT 1;
            IF wanted IS NULL THEN
                RETURN NEW;
            END IF;
            -- FOR SHARE: a takeover (which bumps the epoch) waits for this write's commit
            SELECT epoch INTO current_epoch FROM longtask_leases
                WHERE thread_id = NEW.thread_id FOR SHARE;
            IF current_epoch IS DISTINCT FROM wanted THEN
                RAISE EXCEPTION 'longtask lease lost: thread % is at lease epoch %, this '
                    'writer holds epoch %', NEW.thread_id, current_epoch, wanted;
            END IF;
            RETURN NEW;
        END
        $$ LANGUAGE plpgsql""",
        # LangGraph's tables exist only in databases made before longtask had its own saver
        # (migration 9): a database created since has nothing of theirs to fence.
        POSTGRES_ONLY
        + """DO $$
        DECLARE
            t text;
        BEGIN
            FOREACH t IN ARRAY ARRAY['checkpoints', 'checkpoint_writes', 'checkpoint_blobs'] LOOP
                IF to_regclass(t) IS NOT NULL THEN
                    EXECUTE format('CREATE TRIGGER longtask_fence BEFORE INSERT OR UPDATE ON %I '
                        'FOR EACH ROW EXECUTE FUNCTION longtask_fence()', t);
                END IF;
            END LOOP;
        END
        $$""",
        POSTGRES_ONLY + "CREATE TRIGGER longtask_fence BEFORE INSERT OR UPDATE ON longtask_effects "
        "FOR EACH ROW EXECUTE FUNCTION longtask_fence()",
    ],
    # 8: each worker's stalled-after threshold: a worker is judged dead by the largest
    # threshold of the live workers, never by a stricter one than its own heartbeat allows
    [
        "ALTER TABLE longtask_workers ADD COLUMN stalled_after {real}",
    ],
    # 9: longtask's own checkpoint saver (longtask.checkpointers._saver): checkpoints whose
    # version maps are deltas against their parent, each channel value stored once, pending
    # writes; and the lease check every checkpoint transaction makes on PostgreSQL. Threads
    # in LangGraph's tables are copied over by `Database.upgrade` (see _legacy).
    [
        """CREATE TABLE longtask_cp_checkpoints (
            thread_id TEXT NOT NULL,
            checkpoint_ns TEXT NOT NULL DEFAULT '',
            checkpoint_id TEXT NOT NULL,
            parent_id TEXT,
            base_id TEXT NOT NULL,
            depth INTEGER NOT NULL,
            state {blob} NOT NULL,
            metadata TEXT NOT NULL,
            run_id TEXT,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
        )""",
        "CREATE INDEX longtask_cp_checkpoints_base ON longtask_cp_checkpoints "
        "(thread_id, checkpoint_ns, base_id, checkpoint_id)",
        "CREATE INDEX longtask_cp_checkpoints_run ON longtask_cp_checkpoints (run_id) "
        "WHERE run_id IS NOT NULL",
        """CREATE TABLE longtask_cp_values (
            thread_id TEXT NOT NULL,
            checkpoint_ns TEXT NOT NULL DEFAULT '',
            channel TEXT NOT NULL,
            version TEXT NOT NULL,
            type TEXT NOT NULL,
            value {blob},
            PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
        )""",
        """CREATE TABLE longtask_cp_writes (
            thread_id TEXT NOT NULL,
            checkpoint_ns TEXT NOT NULL DEFAULT '',
            checkpoint_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            channel TEXT NOT NULL,
            type TEXT,
            value {blob},
            task_path TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
        )""",
        POSTGRES_ONLY
        + """CREATE OR REPLACE FUNCTION longtask_fence_check(t text, wanted bigint)
        RETURNS void AS $$
        DECLARE
            current_epoch bigint;
        BEGIN
            -- FOR SHARE: a takeover (which bumps the epoch) waits for this transaction
            SELECT epoch INTO current_epoch FROM longtask_leases WHERE thread_id = t FOR SHARE;
            IF current_epoch IS DISTINCT FROM wanted THEN
                RAISE EXCEPTION 'longtask lease lost: thread % is at lease epoch %, this '
                    'writer holds epoch %', t, current_epoch, wanted;
            END IF;
        END
        $$ LANGUAGE plpgsql""",
    ],
    # 10: the items of a map run, stored with the run: the map step's node runs every item
    # itself (no cursor in the checkpoint), so a resume reads the items here instead of
    # calling over() again
    [
        "ALTER TABLE longtask_maps ADD COLUMN items TEXT",
    ],
    # 11: the LangGraph Server API of `longtask serve`: its runs (a command recorded by a
    # request and carried out by serve's executor, with the status the SDK reads), and the
    # threads it created that have no run yet (no longtask thread record exists before one)
    [
        """CREATE TABLE longtask_api_runs (
            run_id TEXT PRIMARY KEY,
            thread_id TEXT NOT NULL,
            assistant_id TEXT NOT NULL,
            status TEXT NOT NULL,
            request TEXT NOT NULL,
            actor TEXT,
            metadata TEXT,
            error TEXT,
            created_at {real} NOT NULL,
            updated_at {real} NOT NULL
        )""",
        "CREATE INDEX longtask_api_runs_thread ON longtask_api_runs (thread_id, created_at)",
        "CREATE INDEX longtask_api_runs_status ON longtask_api_runs (status)",
        """CREATE TABLE longtask_api_threads (
            thread_id TEXT PRIMARY KEY,
            metadata TEXT,
            created_at {real} NOT NULL
        )""",
    ],
    # 12: schedules (cron, timezone, inputs of a task to start on its own; the next tick to
    # fire) and their fires: one row per tick that started a thread, so a thread knows its
    # schedule and a thread fired but never started (a crash in between) is started later
    [
        """CREATE TABLE longtask_schedules (
            name TEXT PRIMARY KEY,
            task_ref TEXT NOT NULL,
            task_name TEXT NOT NULL,
            cron TEXT NOT NULL,
            timezone TEXT NOT NULL,
            inputs TEXT NOT NULL,
            catch_up TEXT NOT NULL,
            origin TEXT NOT NULL,
            paused INTEGER NOT NULL DEFAULT 0,
            next_fire_at {real} NOT NULL,
            last_tick_at {real},
            last_thread TEXT,
            last_error TEXT,
            created_at {real} NOT NULL,
            updated_at {real} NOT NULL
        )""",
        "CREATE INDEX longtask_schedules_due ON longtask_schedules (next_fire_at)",
        """CREATE TABLE longtask_schedule_fires (
            schedule TEXT NOT NULL,
            tick_at {real} NOT NULL,
            thread_id TEXT NOT NULL,
            started INTEGER NOT NULL DEFAULT 0,
            fired_at {real} NOT NULL,
            PRIMARY KEY (schedule, tick_at)
        )""",
        "CREATE INDEX longtask_schedule_fires_thread ON longtask_schedule_fires (thread_id)",
        "CREATE INDEX longtask_schedule_fires_unstarted ON longtask_schedule_fires (fired_at) "
        "WHERE started = 0",
    ],
    # 13: what each step of a thread used (tokens, cost, tool and model calls: charged in
    # the same transaction as the thread's budget) and how long it ran, kept up to date as
    # its step.started/completed/failed events are stored (a trigger: no writer has to
    # remember it), so `status` reads one row per step instead of the event log
    [
        """CREATE TABLE longtask_usage (
            thread_id TEXT NOT NULL,
            step TEXT NOT NULL,
            tokens INTEGER NOT NULL DEFAULT 0,
            cost {real} NOT NULL DEFAULT 0,
            tool_calls INTEGER NOT NULL DEFAULT 0,
            model_calls INTEGER NOT NULL DEFAULT 0,
            wall_time {real} NOT NULL DEFAULT 0,
            attempts INTEGER NOT NULL DEFAULT 0,
            started_at {real},
            finished_at {real},
            running_since {real},
            updated_at {real} NOT NULL,
            PRIMARY KEY (thread_id, step)
        )""",
        SQLITE_ONLY
        + _SQLITE_USAGE_TRIGGER
        + """INSERT INTO longtask_usage (thread_id, step, updated_at)
                VALUES (NEW.thread_id, NEW.step, NEW.ts)
                ON CONFLICT (thread_id, step) DO NOTHING;
            UPDATE longtask_usage SET """
        + USAGE_STEP_SET.format(greatest="MAX")
        + """ WHERE thread_id = NEW.thread_id AND step = NEW.step;
        END""",
        POSTGRES_ONLY
        + """CREATE OR REPLACE FUNCTION longtask_usage_step() RETURNS trigger AS $$
        BEGIN
            INSERT INTO longtask_usage (thread_id, step, updated_at)
                VALUES (NEW.thread_id, NEW.step, NEW.ts)
                ON CONFLICT (thread_id, step) DO NOTHING;
            UPDATE longtask_usage SET """
        + USAGE_STEP_SET.format(greatest="GREATEST")
        + """ WHERE thread_id = NEW.thread_id AND step = NEW.step;
            RETURN NULL;
        END
        $$ LANGUAGE plpgsql""",
        POSTGRES_ONLY
        + """CREATE TRIGGER longtask_usage_steps AFTER INSERT ON longtask_events
        FOR EACH ROW WHEN (NEW.step IS NOT NULL
            AND NEW.kind IN ('step.started', 'step.completed', 'step.failed')
            AND (NEW.data::jsonb -> 'item') IS NULL)
        EXECUTE FUNCTION longtask_usage_step()""",
    ],
    # 14: the usage trigger in one statement (USAGE_UPSERT)
    [
        SQLITE_ONLY + "DROP TRIGGER longtask_usage_steps",
        SQLITE_ONLY
        + _SQLITE_USAGE_TRIGGER
        + USAGE_UPSERT.format(greatest="MAX")
        + """;
        END""",
        POSTGRES_ONLY
        + """CREATE OR REPLACE FUNCTION longtask_usage_step() RETURNS trigger AS $$
        BEGIN
            """
        + USAGE_UPSERT.format(greatest="GREATEST")
        + """;
            RETURN NULL;
        END
        $$ LANGUAGE plpgsql""",
    ],
    # 15: the channel values that hold a skip's mark (store._values.SKIP_MARK, b"skipped",
    # hex 736b6970706564), indexed apart: `status` finds a thread's skipped steps through
    # this index, without a scan of every result (the query's condition is the same text)
    [
        SQLITE_ONLY + "CREATE INDEX longtask_cp_values_marked ON longtask_cp_values "
        "(thread_id, checkpoint_ns) WHERE instr(value, X'736b6970706564') > 0",
        POSTGRES_ONLY + "CREATE INDEX longtask_cp_values_marked ON longtask_cp_values "
        "(thread_id, checkpoint_ns) WHERE position('\\x736b6970706564'::bytea in value) > 0",
    ],
    # 16: a checkpoint transaction in one statement on PostgreSQL (the saver's Batch, see
    # checkpointers._saver_sql._cp_write_params): the lease check, blobs, events and their
    # NOTIFY, pending writes, values and the checkpoint row. Sent as separate statements,
    # psycopg's pipeline cost the client ~0.5 ms of CPU per step and the server a round of
    # parse, bind and execute for each.
    [
        POSTGRES_ONLY + _cp_write_function(_CHECKPOINT_16),
    ],
    # 17: the order of a thread's checkpoints by a sequence number, not by their ids (made
    # from the writer's clock: a clock behind the thread's made a head that sorted below
    # the old one, and finished steps ran again). Each checkpoint stored gets one more than
    # the highest of its thread; those stored before are numbered from their parent links
    # (store._order).
    [
        "ALTER TABLE longtask_cp_checkpoints ADD COLUMN seq BIGINT NOT NULL DEFAULT 0",
        lambda execute, dialect: number_stored(execute, postgres=dialect is POSTGRES),
        "CREATE INDEX longtask_cp_checkpoints_seq ON longtask_cp_checkpoints "
        "(thread_id, seq, checkpoint_id)",
        POSTGRES_ONLY + _cp_write_function(_CHECKPOINT_17),
    ],
    # 18: what each worker serves — the task definitions its code has loaded, as JSON
    # [{"task", "version", "hash"}] (hash in short form) — and how many jobs it handed back
    # for lack of a thread's definition (runtime._routing), for `longtask workers`
    [
        "ALTER TABLE longtask_workers ADD COLUMN serves TEXT",
        "ALTER TABLE longtask_workers ADD COLUMN handed_back INTEGER NOT NULL DEFAULT 0",
    ],
    # 19: run webhooks of the LangGraph Server API: the URL a run is POSTed to when it ends,
    # when the run was taken (the payload's run_started_at), the thread's values at its end
    # (read before the end is recorded, so a later run cannot change them), and the
    # delivery: attempts so far, when the next one is due (or a claim's expiry), and its
    # outcome ('sent' or 'failed'; NULL while it is owed). A partial index finds the
    # deliveries owed without reading every run.
    [
        "ALTER TABLE longtask_api_runs ADD COLUMN webhook TEXT",
        "ALTER TABLE longtask_api_runs ADD COLUMN started_at {real}",
        "ALTER TABLE longtask_api_runs ADD COLUMN webhook_values TEXT",
        "ALTER TABLE longtask_api_runs ADD COLUMN webhook_attempts INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE longtask_api_runs ADD COLUMN webhook_due {real}",
        "ALTER TABLE longtask_api_runs ADD COLUMN webhook_state TEXT",
        "CREATE INDEX longtask_api_runs_webhooks ON longtask_api_runs (webhook_due) "
        "WHERE webhook IS NOT NULL AND webhook_state IS NULL",
    ],
    # 20 (issue 42): notifications at a pause, a failure and a thread's end. An event of a
    # kind that tells of one (NOTIFY_EVENT_KINDS) makes an outbox row by a trigger, so the
    # row commits in the transaction of the event (and the checkpoint it describes) on every
    # path that stores events; only for a thread whose run found notifications configured
    # (``notify`` = 1, set at the start of each run). ``reminder`` 0 is the first notice, n
    # the n-th reminder; ``due``: when the next attempt may be made (or a claim's expiry);
    # ``state``: NULL while owed, 'sent', 'failed' (given up) or 'none' (no target);
    # ``sent``: digests of the URLs it reached (a retry skips them).
    [
        "ALTER TABLE longtask_threads ADD COLUMN notify INTEGER",
        """CREATE TABLE longtask_notifications (
            event_id BIGINT NOT NULL,
            reminder INTEGER NOT NULL,
            thread_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            step TEXT,
            created_at {real} NOT NULL,
            due {real} NOT NULL DEFAULT 0,
            attempts INTEGER NOT NULL DEFAULT 0,
            state TEXT,
            sent TEXT,
            settled_at {real},
            PRIMARY KEY (event_id, reminder)
        )""",
        "CREATE INDEX longtask_notifications_owed ON longtask_notifications (due) "
        "WHERE state IS NULL",
        "CREATE INDEX longtask_notifications_thread ON longtask_notifications (thread_id)",
        SQLITE_ONLY
        + "CREATE TRIGGER longtask_notify_outbox AFTER INSERT ON longtask_events WHEN "
        + _NOTIFY_WHEN
        + "\n        BEGIN\n            "
        + _NOTIFY_INSERT
        + ";\n        END",
        POSTGRES_ONLY
        + """CREATE OR REPLACE FUNCTION longtask_notify_outbox() RETURNS trigger AS $$
        BEGIN
            """
        + _NOTIFY_INSERT
        + """;
            RETURN NULL;
        END
        $$ LANGUAGE plpgsql""",
        POSTGRES_ONLY
        + "CREATE TRIGGER longtask_notify_outbox AFTER INSERT ON longtask_events "
        + f"FOR EACH ROW WHEN ({_NOTIFY_WHEN}) EXECUTE FUNCTION longtask_notify_outbox()",
    ],
    # 21: sub-tasks (issue 44): by parent thread (thread_id), the child thread a sub-task
    # step started for each item and attempt, its id derived from the four (so starting it
    # is idempotent), and its inputs; written before the child's record, so a parent
    # entering the step again adopts it.
    [
        """CREATE TABLE longtask_subtasks (
            thread_id TEXT NOT NULL,
            step TEXT NOT NULL,
            idx INTEGER NOT NULL,
            attempt INTEGER NOT NULL,
            child_thread_id TEXT NOT NULL UNIQUE,
            inputs TEXT,
            created_at {real} NOT NULL,
            PRIMARY KEY (thread_id, step, idx, attempt)
        )""",
    ],
    # 22 (issue 41): who owns a thread: whoever started it (a token's name over HTTP, --by or
    # the OS user from the CLI and Python, a schedule's owner for a fired tick). serve's
    # authorization shows a thread to its owner (serve.access). Threads stored before have
    # none: only admins and viewers (and everyone in open mode) see them. A thread created
    # through the Server API has its owner on its API row until its first run; a schedule
    # records who added it.
    [
        "ALTER TABLE longtask_threads ADD COLUMN owner TEXT",
        "ALTER TABLE longtask_api_threads ADD COLUMN owner TEXT",
        "ALTER TABLE longtask_schedules ADD COLUMN owner TEXT",
    ],
    # 23 (issue 43): assistants created through the LangGraph Server API, versioned
    # configurations of a registered task (graph_id): the assistant with the version it
    # runs now, and every version made (create is 1, each update the next). ``owner``:
    # who created it (may update and delete it). config, context and metadata are JSON.
    [
        """CREATE TABLE longtask_assistants (
            assistant_id TEXT PRIMARY KEY,
            graph_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            name TEXT NOT NULL,
            description TEXT,
            config TEXT NOT NULL,
            context TEXT NOT NULL,
            metadata TEXT NOT NULL,
            owner TEXT,
            created_at {real} NOT NULL,
            updated_at {real} NOT NULL
        )""",
        """CREATE TABLE longtask_assistant_versions (
            assistant_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            graph_id TEXT NOT NULL,
            name TEXT NOT NULL,
            description TEXT,
            config TEXT NOT NULL,
            context TEXT NOT NULL,
            metadata TEXT NOT NULL,
            created_at {real} NOT NULL,
            PRIMARY KEY (assistant_id, version)
        )""",
    ],
    # 24 (issue 43): crons of the LangGraph Server API are schedules (origin "api") whose
    # firing records a run of the API instead of starting a thread: ``api`` holds what
    # the cron asks (assistant, the thread of a thread cron, the run request each tick
    # records, metadata, end time), as JSON; NULL for longtask's own schedules.
    [
        "ALTER TABLE longtask_schedules ADD COLUMN api TEXT",
    ],
    # 25: the run context a thread was started with (LangGraph's runtime context, which a
    # graph step's graph reads as ``runtime.context``), JSON, kept beside the inputs so a
    # worker's first run, or a run that died before its first checkpoint, starts with it;
    # from the first checkpoint on the context is in the thread's state (``lt.context``).
    # NULL: started without one.
    [
        "ALTER TABLE longtask_threads ADD COLUMN context TEXT",
    ],
    # 26 (issue 50): who answered an approval of a thread, one row per person and thread,
    # made by a trigger from each ``approval.resolved`` event (its ``by``), so it commits
    # with the event, on every path that stores one (a run, a worker, an import, a copy).
    # serve's authorization lets a person who answered a thread's approval go on reading
    # that thread once the pause is answered (serve.access); the key makes that an indexed
    # lookup, and the index on the name a list's. Filled from the events stored before.
    [
        """CREATE TABLE longtask_answerers (
            thread_id TEXT NOT NULL,
            name TEXT NOT NULL,
            PRIMARY KEY (thread_id, name)
        )""",
        "CREATE INDEX longtask_answerers_name ON longtask_answerers (name, thread_id)",
        SQLITE_ONLY
        + "CREATE TRIGGER longtask_answerers_add AFTER INSERT ON longtask_events WHEN "
        + "NEW.kind = 'approval.resolved' AND json_valid(NEW.data) "
        + "AND json_type(NEW.data, '$.by') = 'text'"
        + "\n        BEGIN\n            "
        + "INSERT OR IGNORE INTO longtask_answerers (thread_id, name) "
        + "VALUES (NEW.thread_id, json_extract(NEW.data, '$.by'));\n        END",
        SQLITE_ONLY
        + "INSERT OR IGNORE INTO longtask_answerers (thread_id, name) "
        + "SELECT DISTINCT thread_id, json_extract(data, '$.by') FROM longtask_events "
        + "WHERE kind = 'approval.resolved' AND json_valid(data) "
        + "AND json_type(data, '$.by') = 'text'",
        POSTGRES_ONLY
        + """CREATE OR REPLACE FUNCTION longtask_answerers_add() RETURNS trigger AS $$
        BEGIN
            IF jsonb_typeof(CAST(NEW.data AS jsonb) -> 'by') = 'string' THEN
                INSERT INTO longtask_answerers (thread_id, name)
                VALUES (NEW.thread_id, CAST(NEW.data AS jsonb) ->> 'by')
                ON CONFLICT DO NOTHING;
            END IF;
            RETURN NULL;
        END
        $$ LANGUAGE plpgsql""",
        POSTGRES_ONLY
        + "CREATE TRIGGER longtask_answerers_add AFTER INSERT ON longtask_events "
        + "FOR EACH ROW WHEN (NEW.kind = 'approval.resolved') "
        + "EXECUTE FUNCTION longtask_answerers_add()",
        POSTGRES_ONLY
        + "INSERT INTO longtask_answerers (thread_id, name) "
        + "SELECT DISTINCT thread_id, CAST(data AS jsonb) ->> 'by' FROM longtask_events "
        + "WHERE kind = 'approval.resolved' "
        + "AND jsonb_typeof(CAST(data AS jsonb) -> 'by') = 'string' ON CONFLICT DO NOTHING",
    ],
    # 27 (issue 50, notice receivers): the receivers a thread's notices go to, recorded by
    # each run that finds some configured (``notify_to``: JSON, the task's and steps'
    # ``notify`` and that process's ``$LONGTASK_NOTIFY``; the name of the signing key's
    # variable if it was set, never the key), and copied by the trigger into each notice
    # (``receivers``), so the process that delivers it sends it there rather than to its
    # own configuration. Rows stored before keep NULL: delivered as before, to the
    # delivering process's configuration.
    [
        "ALTER TABLE longtask_threads ADD COLUMN notify_to TEXT",
        "ALTER TABLE longtask_notifications ADD COLUMN receivers TEXT",
        SQLITE_ONLY + "DROP TRIGGER longtask_notify_outbox",
        SQLITE_ONLY
        + "CREATE TRIGGER longtask_notify_outbox AFTER INSERT ON longtask_events WHEN "
        + _NOTIFY_WHEN
        + "\n        BEGIN\n            "
        + _NOTIFY_INSERT_27
        + ";\n        END",
        POSTGRES_ONLY
        + """CREATE OR REPLACE FUNCTION longtask_notify_outbox() RETURNS trigger AS $$
        BEGIN
            """
        + _NOTIFY_INSERT_27
        + """;
            RETURN NULL;
        END
        $$ LANGUAGE plpgsql""",
    ],
    # 28 (issue 51): a model call is paid for by the write that stores its event (the
    # saver's batch: its checkpoint's, or the live events' own), not by a transaction of its
    # own; on SQLite the saver runs the same upserts in the batch's transaction
    [
        POSTGRES_ONLY + _cp_write_function(_CHECKPOINT_17, _EVENTS_28),
    ],
    # 29 (issue 52, streams): a served run's stream parts as LangGraph yields them (tokens
    # included), written by the process that advances the thread (serve or a worker) and
    # read by any serve: one stream across processes, with ids a client resumes from. Not
    # history: kept an hour (``longtask.store._parts``); a run's first and last rows name it.
    [
        """CREATE TABLE longtask_run_parts (
            seq {serial_pk},
            thread_id TEXT NOT NULL,
            run_id TEXT,
            ns TEXT NOT NULL,
            mode TEXT NOT NULL,
            type TEXT,
            body {blob},
            created_at {real} NOT NULL
        )""",
        "CREATE INDEX longtask_run_parts_thread ON longtask_run_parts (thread_id, seq)",
        "CREATE INDEX longtask_run_parts_time ON longtask_run_parts (created_at)",
    ],
]

SCHEMA_VERSION = len(MIGRATIONS)


def statements(dialect: Dialect, version: int) -> list[str | Step]:
    """SQL (and Python steps) of migration ``version`` (1-based) for ``dialect``."""
    out: list[str | Step] = []
    for s in MIGRATIONS[version - 1]:
        if not isinstance(s, str):
            out.append(s)
            continue
        if s.startswith(SQLITE_ONLY):
            if dialect is POSTGRES:
                continue
            out.append(s[len(SQLITE_ONLY) :])
            continue
        if s.startswith(POSTGRES_ONLY):
            if dialect is not POSTGRES:
                continue
            out.append(s[len(POSTGRES_ONLY) :])  # PL/pgSQL braces are not placeholders
            continue
        out.append(s.format(serial_pk=dialect.serial_pk, blob=dialect.blob, real=dialect.real))
    return out
