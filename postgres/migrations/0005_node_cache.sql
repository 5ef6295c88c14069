-- Migration 5 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- node outputs cached across runs and restarts (a graph's node
-- caching policy), by scope (graph@version:node) and key.
    CREATE TABLE IF NOT EXISTS node_cache (
        scope      text NOT NULL,
        key        text NOT NULL,
        expires_ms bigint NOT NULL,
        value      bytea NOT NULL,
        PRIMARY KEY (scope, key)
    );
    
