//! The PostgreSQL schema, as the migrations that build it.
//!
//! Every write of the [`Store`](tollgate_checkpoint::Store) contract is one
//! SQL function call: one round trip, one transaction (steps of running
//! runs committing at the same moment share one: `commit.rs`). A function
//! checks the writer (row lock, status, epoch, step, event sequence) before
//! it writes anything and raises one of the `TG...` SQLSTATEs (mapped by
//! `store::Refusal`) when it refuses, so a refused call changes nothing
//! (`tollgate_commit_steps` instead leaves the steps it refuses unwritten
//! and says which it wrote).

/// Migrations in order: `MIGRATIONS[i]` takes the schema from version `i`
/// to `i + 1`. Never edit one that has shipped; append a new one.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: runs, steps (the step's updates as arrays in task order), snapshots
    // every few steps, pending writes, interrupts, events grouped by
    // transition, attachments; the write functions.
    r#"
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
    "#,
    // 2: a decision that ends the run records why (`failure`), as a
    // commit that ends one does.
    r#"
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
    "#,
    // 3: runs someone streams. A server streaming a run's events registers
    // it here (with an expiry it keeps pushing forward); each transition of
    // a registered run announces itself on `tollgate_events` (payload: the
    // run), so streams wake at once rather than polling. Transitions of
    // runs nobody watches pay one index probe of this small table.
    r#"
    CREATE TABLE watchers (
        run      text PRIMARY KEY,
        until_ms bigint NOT NULL
    );
    CREATE FUNCTION tollgate_announce() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM watchers WHERE run = NEW.run
                   AND until_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint) THEN
            PERFORM pg_notify('tollgate_events', NEW.run);
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER steps_announce AFTER INSERT ON steps
        FOR EACH ROW EXECUTE FUNCTION tollgate_announce();
    CREATE TRIGGER events_announce AFTER INSERT ON events
        FOR EACH ROW EXECUTE FUNCTION tollgate_announce();
    "#,
    // 4: one decision write answers several interrupts of a pause, all or
    // none (`p_interrupts[i]` takes `p_decisions[i]`).
    r#"
    DROP FUNCTION tollgate_decide(
        text, bigint, text, text, text, bigint, integer, text, bigint, text, bigint, text
    );

    CREATE FUNCTION tollgate_decide(
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
        IF p_status <> r.status THEN
            PERFORM pg_notify('tollgate_runs', p_run || ' ' || p_status);
        END IF;
        RETURN r.epoch + 1;
    END $$;
    "#,
    // 5: node outputs cached across runs and restarts (a graph's node
    // caching policy), by scope (graph@version:node) and key.
    r#"
    CREATE TABLE IF NOT EXISTS node_cache (
        scope      text NOT NULL,
        key        text NOT NULL,
        expires_ms bigint NOT NULL,
        value      bytea NOT NULL,
        PRIMARY KEY (scope, key)
    );
    "#,
    // 6: progress of a task of the step in flight that runs a subgraph,
    // kept in `pending_writes` under a negative task number (task i is
    // -1 - i, replaced at each write) so that the step's commit and the
    // run's deletion drop it with the pending writes; the events emitted
    // since the run's last write go with it. TG004 step out of order
    // (detail: current step, found step), TG005 event gap (detail: next
    // seq).
    r#"
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
    "#,
    // 7: the trace a run belongs to (W3C traceparent), written when it is
    // created, so that every leg joins it.
    r#"
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
    "#,
    // 8: the interrupts of a pause inserted by a PL/pgSQL function, whose
    // statement plan each connection keeps; as a SQL function its INSERT
    // was planned again at every pause (~0.1 ms of a pause's commit).
    r#"
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
    "#,
    // 9: event lines written compact (`EventRecord::join_compact`: without
    // the head every line of a run repeats, and without a time equal to the
    // line before's). The tables do not change; the version does, so that
    // an older build, which would read such lines as broken JSON, refuses
    // the schema instead. Lines written before are read as they are.
    "SELECT 1;",
    // 10: engine event lines may be stored by fields (`~1|TIME|NODE|…`:
    // without their sequence number, a time shared with the line before,
    // or a node instance named after the node, step and task). No table
    // changes, as in 9; lines written before are read as they are.
    "SELECT 1;",
    // 11: a step's frontier that its run stored lately in full (a node
    // looping on itself, two nodes taking turns) may be stored as a
    // reference to the step that holds it: a zero byte, which no blob
    // starts with, then that step, little-endian (nine bytes instead of
    // about eighty), as in the SQLite store. The store decides from what
    // it committed itself (`frontiers.rs`); reads follow one reference
    // (`tollgate_referred`). The version keeps older builds, which would
    // take a reference for a damaged frontier, from opening the schema;
    // frontiers written before read the same.
    r#"
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
    "#,
    // 12: steps of many running runs committed in one call
    // (`commit.rs`): `tollgate_commit_steps` takes them as arrays, checks
    // every writer as `tollgate_commit` does (epoch, status, next step,
    // next event number) in one UPDATE of their runs rows, writes the steps
    // of those that passed, and returns their positions (from 1); the
    // others wrote nothing and the store commits them one by one, which
    // names each refusal. Set-based statements instead of a call per
    // step: 2,560 steps of 256 runs sent from psql with
    // `synchronous_commit = off` took 0.73-0.82 s as calls of
    // `tollgate_commit` and 0.10-0.14 s as ten set-based transactions.
    // The updates of all steps come as one array, each with the position
    // of its step (`p_update_of`), in task order. The call announces its
    // watched runs to streams itself, in one statement: the steps
    // trigger, which does it row by row (about 10 us a row, a fifth of a
    // call's server time), is told to stand aside for the call's INSERT
    // by a transaction-local setting its WHEN clause reads.
    r#"
    DROP TRIGGER steps_announce ON steps;
    CREATE TRIGGER steps_announce AFTER INSERT ON steps
        FOR EACH ROW
        WHEN (current_setting('tollgate.announced', true) IS DISTINCT FROM 'on')
        EXECUTE FUNCTION tollgate_announce();
    CREATE FUNCTION tollgate_commit_steps(
        p_runs text[], p_epochs bigint[], p_steps bigint[], p_at bigint[], p_frontiers bytea[],
        p_first_seqs bigint[], p_counts integer[], p_lines text[], p_leases bigint[],
        p_snapshots bytea[], p_update_of integer[], p_tasks integer[], p_nodes text[],
        p_updates bytea[]
    ) RETURNS integer[] LANGUAGE plpgsql AS $$
    DECLARE accepted integer[];
    BEGIN
        WITH passed AS (
            UPDATE runs r SET
                status = 'running',
                step = i.step,
                failure = NULL,
                updated_at_ms = i.at_ms,
                last_seq = r.last_seq + i.count,
                lease_until_ms = coalesce(i.lease, r.lease_until_ms)
            FROM unnest(p_runs, p_epochs, p_steps, p_at, p_first_seqs, p_counts, p_leases)
                 WITH ORDINALITY AS i(run, epoch, step, at_ms, first_seq, count, lease, n)
            WHERE r.id = i.run AND r.epoch = i.epoch AND r.status NOT IN ('completed', 'rejected')
              AND r.step = i.step - 1 AND (i.count = 0 OR r.last_seq = i.first_seq - 1)
            RETURNING i.n::integer AS n
        )
        SELECT coalesce(array_agg(n ORDER BY n), '{}') INTO accepted FROM passed;
        PERFORM set_config('tollgate.announced', 'on', true);
        INSERT INTO steps (run, step, at_ms, frontier, tasks, nodes, updates, first_seq,
                           event_count, events)
        SELECT i.run, i.step, i.at_ms, i.frontier, coalesce(u.tasks, '{}'),
               coalesce(u.nodes, '{}'), coalesce(u.updates, '{}'), i.first_seq, i.count, i.lines
        FROM unnest(p_runs, p_steps, p_at, p_frontiers, p_first_seqs, p_counts, p_lines)
             WITH ORDINALITY AS i(run, step, at_ms, frontier, first_seq, count, lines, n)
        JOIN unnest(accepted) AS a(n) ON a.n = i.n
        LEFT JOIN (
            SELECT x.of, array_agg(x.task ORDER BY x.k) AS tasks,
                   array_agg(x.node ORDER BY x.k) AS nodes,
                   array_agg(x.upd ORDER BY x.k) AS updates
            FROM unnest(p_update_of, p_tasks, p_nodes, p_updates)
                 WITH ORDINALITY AS x(of, task, node, upd, k)
            GROUP BY x.of
        ) u ON u.of = i.n;
        PERFORM set_config('tollgate.announced', 'off', true);
        PERFORM pg_notify('tollgate_events', w.run)
        FROM unnest(p_runs) WITH ORDINALITY AS i(run, n)
        JOIN unnest(accepted) AS a(n) ON a.n = i.n
        JOIN watchers w ON w.run = i.run
        WHERE w.until_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
        INSERT INTO snapshots (run, step, payload)
        SELECT i.run, i.step, i.snapshot
        FROM unnest(p_runs, p_steps, p_snapshots) WITH ORDINALITY AS i(run, step, snapshot, n)
        JOIN unnest(accepted) AS a(n) ON a.n = i.n
        WHERE i.snapshot IS NOT NULL;
        DELETE FROM pending_writes p
        USING unnest(p_runs, p_steps) WITH ORDINALITY AS i(run, step, n)
        JOIN unnest(accepted) AS a(n) ON a.n = i.n
        WHERE p.run = i.run AND p.step = i.step;
        RETURN accepted;
    END $$;
    "#,
    // 13: the transitions no longer notify `tollgate_runs` themselves;
    // the store announces a status change after its commit (see
    // `announce.rs`, which holds the functions as they now are).
    crate::announce::STATUS_MIGRATION,
    // 14: commits of watched runs no longer notify `tollgate_events`
    // themselves either (the triggers go); the store announces them after
    // the commit (`announce.rs`).
    crate::announce::STREAMS_MIGRATION,
    // 15: interrupt ordinals are unsigned 32-bit numbers; `integer` held
    // only half of them, so the pause of a breakpoint (its ordinals are
    // the two highest) and of a graph called from a node (`(call + 1) <<
    // 20` up) were refused with "out of range for type integer".
    r#"
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
    "#,
    // 16: thread records (`Store::create_thread`): a thread created before
    // any run on it, with its metadata, listed newest first.
    r#"
    CREATE TABLE threads (
        id            text PRIMARY KEY,
        created_at_ms bigint NOT NULL,
        updated_at_ms bigint NOT NULL,
        metadata      text NOT NULL           -- JSON object
    );
    CREATE INDEX threads_by_creation ON threads (created_at_ms DESC, id DESC);
    "#,
    // 17: long-term memory (`items.rs`).
    crate::items::ITEMS_MIGRATION,
    // 18: wake-ups of queued runs (`commit.rs`).
    crate::commit::QUEUED_WAKE_MIGRATION,
    // 19: schedules (`schedules.rs`).
    crate::schedules::SCHEDULES_MIGRATION,
    // 20: the outbox (`outbox.rs`).
    crate::outbox::OUTBOX_MIGRATION,
    // 21: outbox gates (`outbox.rs`).
    crate::outbox::OUTBOX_GATES_MIGRATION,
];
