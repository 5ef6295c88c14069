-- Migration 20 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- the outbox (`outbox.rs`).
--
-- Schema version 20: the outbox, work a server owes to later (runs
-- waiting for their thread or time, webhooks waiting for their run).
    CREATE TABLE outbox (
        id             text PRIMARY KEY,
        kind           text NOT NULL,
        thread         text,
        created_at_ms  bigint NOT NULL,
        due_ms         bigint NOT NULL,
        lease_until_ms bigint NOT NULL,
        attempts       bigint NOT NULL,
        body           text NOT NULL           -- JSON, the kind's own record
    );
    CREATE INDEX outbox_due ON outbox (kind, due_ms, id);
    CREATE INDEX outbox_by_thread ON outbox (thread, kind) WHERE thread IS NOT NULL;
