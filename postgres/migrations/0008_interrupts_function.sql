-- Migration 8 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- the interrupts of a pause inserted by a PL/pgSQL function, whose
-- statement plan each connection keeps; as a SQL function its INSERT
-- was planned again at every pause (~0.1 ms of a pause's commit).
    CREATE OR REPLACE FUNCTION tollgate_insert_interrupts(p_run text, p_interrupts text)
    RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO interrupts (run, id, step, task, ordinal, node, kind, payload, decisions,
                                schema, rejection_routed, decision, raised_at_ms)
        SELECT p_run, x.id, x.step, x.task, x.ordinal, x.node, x.kind, x.payload, x.decisions,
               x.schema, x.rejection_routed, x.decision, x.raised_at_ms
        FROM json_to_recordset(p_interrupts::json) AS x(
            id text, step bigint, task integer, ordinal integer, node text, kind text,
            payload text, decisions text, schema text, rejection_routed boolean,
            decision text, raised_at_ms bigint);
    END $$;
    
