-- Migration 24 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- A thread's time to live (`ThreadRecord::ttl_ms`, LangGraph's `ttl`): the
-- sweeper reads the threads that have one through a partial index, each
-- one's latest run by its id.
    ALTER TABLE threads ADD COLUMN ttl_ms bigint;
    CREATE INDEX threads_with_ttl ON threads (ttl_ms) WHERE ttl_ms IS NOT NULL;
