-- Migration 2 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- a decision that ends the run records why (`failure`), as a
-- commit that ends one does.
    DROP FUNCTION tollgate_decide(
        text, bigint, text, text, text, bigint, integer, text, bigint, text, bigint
    );

    CREATE FUNCTION tollgate_decide(
        p_run text, p_expected bigint, p_interrupt text, p_decision text, p_status text,
        p_first_seq bigint, p_count integer, p_lines text, p_at bigint, p_owner text,
        p_lease bigint, p_failure text
    ) RETURNS bigint LANGUAGE plpgsql AS $$
    DECLARE r runs; answer text;
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
        SELECT decision INTO answer FROM interrupts
        WHERE run = p_run AND id = p_interrupt AND step = r.step + 1;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'TG008', MESSAGE = 'interrupt not found';
        END IF;
        IF answer IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'TG009', MESSAGE = 'interrupt answered';
        END IF;
        IF p_count > 0 AND p_first_seq <> r.last_seq + 1 THEN
            RAISE EXCEPTION USING ERRCODE = 'TG005', MESSAGE = 'event gap',
                DETAIL = (r.last_seq + 1)::text;
        END IF;
        UPDATE interrupts SET decision = p_decision WHERE run = p_run AND id = p_interrupt;
        IF p_count > 0 THEN
            INSERT INTO events (run, first_seq, count, lines)
            VALUES (p_run, p_first_seq, p_count, p_lines);
        END IF;
        UPDATE runs SET epoch = epoch + 1, status = p_status, updated_at_ms = p_at,
                        last_seq = last_seq + p_count, owner = p_owner, lease_until_ms = p_lease,
                        failure = p_failure
        WHERE id = p_run;
        IF p_status <> r.status THEN
            PERFORM pg_notify('tollgate_runs', p_run || ' ' || p_status);
        END IF;
        RETURN r.epoch + 1;
    END $$;
    
