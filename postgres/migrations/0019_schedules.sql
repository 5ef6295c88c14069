-- Migration 19 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- schedules (`schedules.rs`).
--
-- Schema version 19: schedules. What their runs start from (the input's
-- snapshot and frontier, encoded once), their timing as a versioned JSON
-- spec, and the next tick.
    CREATE TABLE schedules (
        id               text PRIMARY KEY,
        graph            text NOT NULL,
        graph_version    bigint NOT NULL,
        spec             text NOT NULL,       -- JSON: {v, timing, missed, grace_ms}
        input            text NOT NULL,       -- JSON
        snapshot         bytea NOT NULL,
        frontier         bytea NOT NULL,
        attachment       text,
        created_at_ms    bigint NOT NULL,
        next_at_ms       bigint,
        last_run         text,
        last_fired_at_ms bigint,
        runs_started     bigint NOT NULL,
        ticks_skipped    bigint NOT NULL
    );
    CREATE INDEX schedules_due ON schedules (next_at_ms) WHERE next_at_ms IS NOT NULL;
