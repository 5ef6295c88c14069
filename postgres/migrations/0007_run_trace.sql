-- Migration 7 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- the trace a run belongs to (W3C traceparent), written when it is
-- created, so that every leg joins it.
    ALTER TABLE runs ADD COLUMN trace text;
    DROP FUNCTION tollgate_create_run(text, text, bigint, text, text, bigint, bigint, bytea,
                                      bytea, integer, text, text);
    CREATE FUNCTION tollgate_create_run(
        p_run text, p_graph text, p_version bigint, p_thread text, p_owner text,
        p_lease bigint, p_at bigint, p_snapshot bytea, p_frontier bytea, p_count integer,
        p_lines text, p_attachment text, p_trace text
    ) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO runs (id, graph, graph_version, thread, status, step, epoch, owner,
                          lease_until_ms, created_at_ms, updated_at_ms, failure, last_seq,
                          trace)
        VALUES (p_run, p_graph, p_version, p_thread,
                CASE WHEN p_owner IS NULL THEN 'queued' ELSE 'running' END, 0, 1, p_owner,
                p_lease, p_at, p_at, NULL, p_count, p_trace)
        ON CONFLICT (id) DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'TG002', MESSAGE = 'run exists';
        END IF;
        INSERT INTO steps (run, step, at_ms, frontier, tasks, nodes, updates, first_seq,
                           event_count, events)
        VALUES (p_run, 0, p_at, p_frontier, '{}', '{}', '{}', 1, p_count, p_lines);
        INSERT INTO snapshots (run, step, payload) VALUES (p_run, 0, p_snapshot);
        IF p_attachment IS NOT NULL THEN
            INSERT INTO attachments (run, body) VALUES (p_run, p_attachment);
        END IF;
        IF p_owner IS NULL THEN
            PERFORM pg_notify('tollgate_runs', p_run || ' queued');
        END IF;
    END $$;
    
