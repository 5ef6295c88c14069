-- Migration 1 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- runs, steps (the step's updates as arrays in task order), snapshots
-- every few steps, pending writes, interrupts, events grouped by
-- transition, attachments; the write functions.
    CREATE TABLE runs (
        id             text PRIMARY KEY,      -- ULID: sorts by creation time
        graph          text NOT NULL,
        graph_version  bigint NOT NULL,
        thread         text,
        status         text NOT NULL,
        step           bigint NOT NULL,       -- last committed step
        epoch          bigint NOT NULL,       -- ownership epoch (fencing)
        owner          text,                  -- host|pid|start while running
        lease_until_ms bigint,
        created_at_ms  bigint NOT NULL,
        updated_at_ms  bigint NOT NULL,
        failure        text,                  -- JSON RunFailure
        last_seq       bigint NOT NULL,       -- last stored event
        lease_losses   integer NOT NULL DEFAULT 0 -- takeovers since a leg last ended
    );
    CREATE INDEX runs_by_status ON runs (status, id);
    CREATE INDEX runs_by_graph ON runs (graph, id);
    CREATE INDEX runs_by_thread ON runs (thread, id) WHERE thread IS NOT NULL;

    -- One row per committed step (step 0 is the input): the next frontier,
    -- the step's updates in merge order, and the step's events (seq
    -- first_seq .., one JSON line each, newline-joined): one row written
    -- per step.
    CREATE TABLE steps (
        run         text NOT NULL,
        step        bigint NOT NULL,
        at_ms       bigint NOT NULL,
        frontier    bytea NOT NULL,
        tasks       integer[] NOT NULL,
        nodes       text[] NOT NULL,
        updates     bytea[] NOT NULL,
        first_seq   bigint NOT NULL,
        event_count integer NOT NULL,
        events      text NOT NULL,
        PRIMARY KEY (run, step)
    );
    CREATE TABLE snapshots (
        run     text NOT NULL,
        step    bigint NOT NULL,
        payload bytea NOT NULL,
        PRIMARY KEY (run, step)
    );
    -- Outputs of finished tasks of the step in flight.
    CREATE TABLE pending_writes (
        run     text NOT NULL,
        step    bigint NOT NULL,
        task    integer NOT NULL,
        node    text NOT NULL,
        payload bytea NOT NULL,
        PRIMARY KEY (run, step, task)
    );
    CREATE TABLE interrupts (
        run              text NOT NULL,
        id               text NOT NULL,       -- RUN.STEP.TASK.ORDINAL
        step             bigint NOT NULL,
        task             integer NOT NULL,
        ordinal          integer NOT NULL,
        node             text NOT NULL,
        kind             text NOT NULL,
        payload          text NOT NULL,       -- JSON, verbatim
        decisions        text NOT NULL,       -- JSON array of accepted kinds
        schema           text,                -- JSON Schema of the answer
        rejection_routed boolean NOT NULL,
        decision         text,                -- JSON, once decided
        raised_at_ms     bigint NOT NULL,
        PRIMARY KEY (run, id)
    );
    -- The events of a transition that committed no step (a status change,
    -- a decision), as in `steps`.
    CREATE TABLE events (
        run       text NOT NULL,
        first_seq bigint NOT NULL,
        count     integer NOT NULL,
        lines     text NOT NULL,
        PRIMARY KEY (run, first_seq)
    );
    -- What a run was created with besides its input (a blueprint).
    CREATE TABLE attachments (
        run  text PRIMARY KEY,
        body text NOT NULL
    );

    -- Locks the run's row and checks its writer: TG001 no such run, TG006
    -- terminal (detail: status), TG003 fenced (detail: current epoch).
    CREATE FUNCTION tollgate_writer(p_run text, p_epoch bigint) RETURNS runs
    LANGUAGE plpgsql AS $$
    DECLARE r runs;
    BEGIN
        SELECT * INTO r FROM runs WHERE id = p_run FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'TG001', MESSAGE = 'run not found';
        END IF;
        IF r.status IN ('completed', 'rejected') THEN
            RAISE EXCEPTION USING ERRCODE = 'TG006', MESSAGE = 'run terminal', DETAIL = r.status;
        END IF;
        IF r.epoch <> p_epoch THEN
            RAISE EXCEPTION USING ERRCODE = 'TG003', MESSAGE = 'fenced', DETAIL = r.epoch::text;
        END IF;
        RETURN r;
    END $$;

    -- Interrupts from a JSON array of objects whose JSON-valued fields are
    -- strings holding the JSON text (kept verbatim).
    CREATE FUNCTION tollgate_insert_interrupts(p_run text, p_interrupts text) RETURNS void
    LANGUAGE sql AS $$
        INSERT INTO interrupts (run, id, step, task, ordinal, node, kind, payload, decisions,
                                schema, rejection_routed, decision, raised_at_ms)
        SELECT p_run, x.id, x.step, x.task, x.ordinal, x.node, x.kind, x.payload, x.decisions,
               x.schema, x.rejection_routed, x.decision, x.raised_at_ms
        FROM json_to_recordset(p_interrupts::json) AS x(
            id text, step bigint, task integer, ordinal integer, node text, kind text,
            payload text, decisions text, schema text, rejection_routed boolean,
            decision text, raised_at_ms bigint)
    $$;

    -- A run owned by its creator (p_owner set: `running`) or queued for a
    -- worker (p_owner NULL: `queued`, announced).
    CREATE FUNCTION tollgate_create_run(
        p_run text, p_graph text, p_version bigint, p_thread text, p_owner text,
        p_lease bigint, p_at bigint, p_snapshot bytea, p_frontier bytea, p_count integer,
        p_lines text, p_attachment text
    ) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO runs (id, graph, graph_version, thread, status, step, epoch, owner,
                          lease_until_ms, created_at_ms, updated_at_ms, failure, last_seq)
        VALUES (p_run, p_graph, p_version, p_thread,
                CASE WHEN p_owner IS NULL THEN 'queued' ELSE 'running' END, 0, 1, p_owner,
                p_lease, p_at, p_at, NULL, p_count)
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

    -- One transition. TG004 step out of order (detail: current step),
    -- TG005 event gap (detail: the next seq). The run's row is updated
    -- first, by a statement whose conditions are the writer's checks (it
    -- takes the row lock); only when it matches nothing is the refusal
    -- worked out. Changes to a status other than `running` are announced.
    CREATE FUNCTION tollgate_commit(
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
        IF p_status <> 'running' THEN
            PERFORM pg_notify('tollgate_runs', p_run || ' ' || p_status);
        END IF;
    END $$;

    -- Pending writes of the step after the last committed one: TG004
    -- (detail: current step, found step) when one is of another step.
    CREATE FUNCTION tollgate_put_task_writes(
        p_run text, p_epoch bigint, p_steps bigint[], p_tasks integer[], p_nodes text[],
        p_payloads bytea[]
    ) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE r runs; bad bigint;
    BEGIN
        r := tollgate_writer(p_run, p_epoch);
        SELECT s INTO bad FROM unnest(p_steps) AS s WHERE s <> r.step + 1 LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'TG004', MESSAGE = 'step out of order',
                DETAIL = r.step::text || ',' || bad::text;
        END IF;
        INSERT INTO pending_writes (run, step, task, node, payload)
        SELECT p_run, u.s, u.t, u.n, u.p FROM unnest(p_steps, p_tasks, p_nodes, p_payloads)
            AS u(s, t, n, p)
        ON CONFLICT DO NOTHING;
    END $$;

    CREATE FUNCTION tollgate_claim(p_run text, p_expected bigint, p_owner text, p_lease bigint)
    RETURNS bigint LANGUAGE plpgsql AS $$
    DECLARE r runs;
    BEGIN
        r := tollgate_writer(p_run, p_expected);
        UPDATE runs SET epoch = epoch + 1, status = 'running', owner = p_owner,
                        lease_until_ms = p_lease, failure = NULL,
                        lease_losses = lease_losses
                            + CASE WHEN r.status = 'running' THEN 1 ELSE 0 END
        WHERE id = p_run;
        IF r.status <> 'running' THEN
            PERFORM pg_notify('tollgate_runs', p_run || ' running');
        END IF;
        RETURN r.epoch + 1;
    END $$;

    CREATE FUNCTION tollgate_renew(p_run text, p_epoch bigint, p_lease bigint)
    RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM tollgate_writer(p_run, p_epoch);
        UPDATE runs SET lease_until_ms = p_lease WHERE id = p_run AND status = 'running';
    END $$;

    -- A decision: TG007 not awaiting (detail: status), TG008 no such open
    -- interrupt, TG009 answered already; fencing and gaps as above.
    CREATE FUNCTION tollgate_decide(
        p_run text, p_expected bigint, p_interrupt text, p_decision text, p_status text,
        p_first_seq bigint, p_count integer, p_lines text, p_at bigint, p_owner text,
        p_lease bigint
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
                        last_seq = last_seq + p_count, owner = p_owner, lease_until_ms = p_lease
        WHERE id = p_run;
        IF p_status <> r.status THEN
            PERFORM pg_notify('tollgate_runs', p_run || ' ' || p_status);
        END IF;
        RETURN r.epoch + 1;
    END $$;
    
