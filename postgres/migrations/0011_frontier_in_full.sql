-- Migration 11 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- a step's frontier that its run stored lately in full (a node
-- looping on itself, two nodes taking turns) may be stored as a
-- reference to the step that holds it: a zero byte, which no blob
-- starts with, then that step, little-endian (nine bytes instead of
-- about eighty), as in the SQLite store. The store decides from what
-- it committed itself (`frontiers.rs`); reads follow one reference
-- (`tollgate_referred`). The version keeps older builds, which would
-- take a reference for a damaged frontier, from opening the schema;
-- frontiers written before read the same.
    -- The step a stored frontier refers to, or NULL (not strict, so that
    -- it is inlined into the queries that call it).
    CREATE FUNCTION tollgate_referred(p_frontier bytea) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
        SELECT CASE WHEN length(p_frontier) = 9 AND get_byte(p_frontier, 0) = 0 THEN
            -- (`|` and `<<` bind alike in SQL: every shift in brackets)
            get_byte(p_frontier, 1)::bigint | (get_byte(p_frontier, 2)::bigint << 8)
            | (get_byte(p_frontier, 3)::bigint << 16) | (get_byte(p_frontier, 4)::bigint << 24)
            | (get_byte(p_frontier, 5)::bigint << 32) | (get_byte(p_frontier, 6)::bigint << 40)
            | (get_byte(p_frontier, 7)::bigint << 48) | (get_byte(p_frontier, 8)::bigint << 56)
        END
    $$;
    
