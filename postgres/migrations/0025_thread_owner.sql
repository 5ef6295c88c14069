-- Migration 25 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- Who a thread belongs to (`ThreadRecord::owner`, `tenant`): a user's
-- searches and listings read their own threads, newest first, through
-- these indexes (partial: threads nobody owns are not in them).
    ALTER TABLE threads ADD COLUMN owner text, ADD COLUMN tenant text;
    CREATE INDEX threads_by_owner ON threads (owner, created_at_ms DESC, id DESC)
        WHERE owner IS NOT NULL;
    CREATE INDEX threads_by_tenant ON threads (tenant, created_at_ms DESC, id DESC)
        WHERE tenant IS NOT NULL;
