-- Migration 13 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- the transitions no longer notify `tollgate_runs` themselves;
-- the store announces a status change after its commit (`announce.rs`;
-- the functions as they now are are below).
--
-- Schema version 13: the functions of the transitions that announced a
-- status change (`tollgate_create_run` of a queued run, `tollgate_commit`
-- to a status other than `running`, `tollgate_claim`, `tollgate_decide`)
-- as they were, without the notification, which the store now sends
-- after the commit ([`announce`]) on the same channel with the same
-- payload.
    CREATE OR REPLACE FUNCTION tollgate_create_run(
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
    END $$;

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
                                  THEN coalesce(p_lease, lease_until_ms) END,
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

    CREATE OR REPLACE FUNCTION tollgate_claim(
        p_run text, p_expected bigint, p_owner text, p_lease bigint
    ) RETURNS bigint LANGUAGE plpgsql AS $$
    DECLARE r runs;
    BEGIN
        r := tollgate_writer(p_run, p_expected);
        UPDATE runs SET epoch = epoch + 1, status = 'running', owner = p_owner,
                        lease_until_ms = p_lease, failure = NULL,
                        lease_losses = lease_losses
                            + CASE WHEN r.status = 'running' THEN 1 ELSE 0 END
        WHERE id = p_run;
        RETURN r.epoch + 1;
    END $$;

    CREATE OR REPLACE FUNCTION tollgate_decide(
        p_run text, p_expected bigint, p_interrupts text[], p_decisions text[], p_status text,
        p_first_seq bigint, p_count integer, p_lines text, p_at bigint, p_owner text,
        p_lease bigint, p_failure text
    ) RETURNS bigint LANGUAGE plpgsql AS $$
    DECLARE r runs; answer text; i integer;
    BEGIN
        SELECT * INTO r FROM runs WHERE id = p_run FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'TG001', MESSAGE = 'run not found';
        END IF;
        IF r.epoch <> p_expected THEN
            RAISE EXCEPTION USING ERRCODE = 'TG003', MESSAGE = 'fenced', DETAIL = r.epoch::text;
        END IF;
        IF r.status <> 'awaiting_hitl' THEN
            RAISE EXCEPTION USING ERRCODE = 'TG007', MESSAGE = 'not awaiting a decision',
                DETAIL = r.status;
        END IF;
        FOR i IN 1 .. coalesce(array_length(p_interrupts, 1), 0) LOOP
            SELECT decision INTO answer FROM interrupts
            WHERE run = p_run AND id = p_interrupts[i] AND step = r.step + 1;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'TG008', MESSAGE = 'interrupt not found',
                    DETAIL = p_interrupts[i];
            END IF;
            IF answer IS NOT NULL OR p_interrupts[i] = ANY (p_interrupts[1:i - 1]) THEN
                RAISE EXCEPTION USING ERRCODE = 'TG009', MESSAGE = 'interrupt answered',
                    DETAIL = p_interrupts[i];
            END IF;
        END LOOP;
        IF p_count > 0 AND p_first_seq <> r.last_seq + 1 THEN
            RAISE EXCEPTION USING ERRCODE = 'TG005', MESSAGE = 'event gap',
                DETAIL = (r.last_seq + 1)::text;
        END IF;
        FOR i IN 1 .. coalesce(array_length(p_interrupts, 1), 0) LOOP
            UPDATE interrupts SET decision = p_decisions[i]
            WHERE run = p_run AND id = p_interrupts[i];
        END LOOP;
        IF p_count > 0 THEN
            INSERT INTO events (run, first_seq, count, lines)
            VALUES (p_run, p_first_seq, p_count, p_lines);
        END IF;
        UPDATE runs SET epoch = epoch + 1, status = p_status, updated_at_ms = p_at,
                        last_seq = last_seq + p_count, owner = p_owner, lease_until_ms = p_lease,
                        failure = p_failure
        WHERE id = p_run;
        RETURN r.epoch + 1;
    END $$;
