-- Migration 23 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- Request keys (`Idempotency-Key`, `IdempotencyStore`): the first request
-- with a key claims it for the id of what it makes; the primary key
-- decides between requests at once, in any number of servers. An expired
-- key, or one held for the id a claim names as abandoned, is claimed
-- afresh by the same upsert.
    CREATE TABLE request_keys (
        scope         text   NOT NULL,
        key           text   NOT NULL,
        fingerprint   text   NOT NULL,
        made          text   NOT NULL,
        claimed_at_ms bigint NOT NULL,
        expires_at_ms bigint NOT NULL,
        PRIMARY KEY (scope, key)
    );
    CREATE INDEX request_keys_expiry ON request_keys (expires_at_ms);
