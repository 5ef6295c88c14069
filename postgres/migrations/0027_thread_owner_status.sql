-- Migration 27 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- A user's threads are found by owner and tenant together, newest first,
-- and of one status (a user's inbox: `status: interrupted`) from one index
-- range too. A plan made for any owner (a prepared statement's generic
-- plan) otherwise combined the owner's index with the tenant's, reading
-- every thread of the tenant, or took the status's index and read every
-- thread of that status.
    DROP INDEX threads_by_owner;
    CREATE INDEX threads_by_owner ON threads (owner, tenant, created_at_ms DESC, id DESC)
        WHERE owner IS NOT NULL;
    CREATE INDEX threads_by_owner_status
        ON threads (owner, tenant, status, created_at_ms DESC, id DESC) WHERE owner IS NOT NULL;
