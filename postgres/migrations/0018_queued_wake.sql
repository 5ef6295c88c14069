-- Migration 18 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- wake-ups of queued runs (`commit.rs`).
--
-- Schema version 18: a run committed back to the queue may carry a wake-up (a
-- sleeping workflow, `Transition::lease_until_ms` of a `queued`
-- transition): kept in `lease_until_ms`, in the commit's one
-- statement, and claimable runs are only the queued ones that are due.
-- `tollgate_commit` as version 13 left it but for that column.
    CREATE OR REPLACE FUNCTION tollgate_commit(
        p_run text, p_epoch bigint, p_step bigint, p_at bigint, p_frontier bytea,
        p_tasks integer[], p_nodes text[], p_updates bytea[], p_snapshot bytea,
        p_status text, p_failure text, p_first_seq bigint, p_count integer, p_lines text,
        p_lease bigint, p_interrupts text
    ) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE r runs;
    BEGIN
        UPDATE runs SET
            status = p_status,
            step = coalesce(p_step, step),
            failure = p_failure,
            updated_at_ms = p_at,
            last_seq = last_seq + p_count,
            lease_until_ms = CASE WHEN p_status = 'running'
                                  THEN coalesce(p_lease, lease_until_ms)
                                  WHEN p_status = 'queued' THEN p_lease END,
            owner = CASE WHEN p_status = 'running' THEN owner END,
            lease_losses = CASE WHEN p_status = 'running' THEN lease_losses ELSE 0 END
        WHERE id = p_run AND epoch = p_epoch AND status NOT IN ('completed', 'rejected')
          AND (p_step IS NULL OR step = p_step - 1)
          AND (p_count = 0 OR last_seq = p_first_seq - 1);
        IF NOT FOUND THEN
            r := tollgate_writer(p_run, p_epoch);
            IF p_step IS NOT NULL AND p_step <> r.step + 1 THEN
                RAISE EXCEPTION USING ERRCODE = 'TG004', MESSAGE = 'step out of order',
                    DETAIL = r.step::text;
            END IF;
            RAISE EXCEPTION USING ERRCODE = 'TG005', MESSAGE = 'event gap',
                DETAIL = (r.last_seq + 1)::text;
        END IF;
        IF p_step IS NOT NULL THEN
            INSERT INTO steps (run, step, at_ms, frontier, tasks, nodes, updates, first_seq,
                               event_count, events)
            VALUES (p_run, p_step, p_at, p_frontier, p_tasks, p_nodes, p_updates,
                    p_first_seq, p_count, p_lines);
            IF p_snapshot IS NOT NULL THEN
                INSERT INTO snapshots (run, step, payload) VALUES (p_run, p_step, p_snapshot);
            END IF;
            DELETE FROM pending_writes WHERE run = p_run AND step = p_step;
        ELSIF p_count > 0 THEN
            INSERT INTO events (run, first_seq, count, lines)
            VALUES (p_run, p_first_seq, p_count, p_lines);
        END IF;
        IF p_interrupts IS NOT NULL THEN
            PERFORM tollgate_insert_interrupts(p_run, p_interrupts);
        END IF;
    END $$;
    
