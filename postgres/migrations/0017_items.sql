-- Migration 17 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- long-term memory (`items.rs`).
--
-- Schema version 17: long-term memory (`ItemStore`): items by namespace (stored as
-- `part/part/`, byte-ordered so that a prefix is one range of the
-- unique index) and key; values as jsonb, embeddings as unit vectors of
-- little-endian f32s. `item_epoch` is raised by every transaction that
-- writes items: processes keep their copy of the vectors in step.
    CREATE TABLE items (
        id            bigserial PRIMARY KEY,
        namespace     text COLLATE "C" NOT NULL,
        key           text COLLATE "C" NOT NULL,
        value         jsonb NOT NULL,
        created_at_ms bigint NOT NULL,
        updated_at_ms bigint NOT NULL,
        ttl_ms        bigint,
        expires_at_ms bigint,
        vector        bytea,
        UNIQUE (namespace, key)
    );
    CREATE INDEX items_expiring ON items (expires_at_ms) WHERE expires_at_ms IS NOT NULL;
    CREATE TABLE item_epoch (
        id    integer PRIMARY KEY CHECK (id = 1),
        epoch bigint NOT NULL
    );
    INSERT INTO item_epoch (id, epoch) VALUES (1, 0);
    
