-- Migration 6 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- progress of a task of the step in flight that runs a subgraph,
-- kept in `pending_writes` under a negative task number (task i is
-- -1 - i, replaced at each write) so that the step's commit and the
-- run's deletion drop it with the pending writes; the events emitted
-- since the run's last write go with it. TG004 step out of order
-- (detail: current step, found step), TG005 event gap (detail: next
-- seq).
    CREATE FUNCTION tollgate_put_task_progress(
        p_run text, p_epoch bigint, p_step bigint, p_task integer, p_node text,
        p_payload bytea, p_first_seq bigint, p_count integer, p_lines text
    ) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE r runs;
    BEGIN
        r := tollgate_writer(p_run, p_epoch);
        IF p_step <> r.step + 1 THEN
            RAISE EXCEPTION USING ERRCODE = 'TG004', MESSAGE = 'step out of order',
                DETAIL = r.step::text || ',' || p_step::text;
        END IF;
        IF p_count > 0 AND p_first_seq <> r.last_seq + 1 THEN
            RAISE EXCEPTION USING ERRCODE = 'TG005', MESSAGE = 'event gap',
                DETAIL = (r.last_seq + 1)::text;
        END IF;
        INSERT INTO pending_writes (run, step, task, node, payload)
        VALUES (p_run, p_step, -1 - p_task, p_node, p_payload)
        ON CONFLICT (run, step, task) DO UPDATE
            SET node = EXCLUDED.node, payload = EXCLUDED.payload;
        IF p_count > 0 THEN
            INSERT INTO events (run, first_seq, count, lines)
            VALUES (p_run, p_first_seq, p_count, p_lines);
            UPDATE runs SET last_seq = p_first_seq + p_count - 1 WHERE id = p_run;
        END IF;
    END $$;
    
