-- Migration 15 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- interrupt ordinals are unsigned 32-bit numbers; `integer` held
-- only half of them, so the pause of a breakpoint (its ordinals are
-- the two highest) and of a graph called from a node (`(call + 1) <<
-- 20` up) were refused with "out of range for type integer".
    ALTER TABLE interrupts ALTER COLUMN ordinal TYPE bigint;
    CREATE OR REPLACE FUNCTION tollgate_insert_interrupts(p_run text, p_interrupts text)
    RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO interrupts (run, id, step, task, ordinal, node, kind, payload, decisions,
                                schema, rejection_routed, decision, raised_at_ms)
        SELECT p_run, x.id, x.step, x.task, x.ordinal, x.node, x.kind, x.payload, x.decisions,
               x.schema, x.rejection_routed, x.decision, x.raised_at_ms
        FROM json_to_recordset(p_interrupts::json) AS x(
            id text, step bigint, task integer, ordinal bigint, node text, kind text,
            payload text, decisions text, schema text, rejection_routed boolean,
            decision text, raised_at_ms bigint);
    END $$;
    
