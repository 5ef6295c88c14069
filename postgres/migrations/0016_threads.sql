-- Migration 16 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- thread records (`Store::create_thread`): a thread created before
-- any run on it, with its metadata, listed newest first.
    CREATE TABLE threads (
        id            text PRIMARY KEY,
        created_at_ms bigint NOT NULL,
        updated_at_ms bigint NOT NULL,
        metadata      text NOT NULL           -- JSON object
    );
    CREATE INDEX threads_by_creation ON threads (created_at_ms DESC, id DESC);
    
