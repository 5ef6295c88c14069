-- Migration 12 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- steps of many running runs committed in one call
-- (`commit.rs`): `tollgate_commit_steps` takes them as arrays, checks
-- every writer as `tollgate_commit` does (epoch, status, next step,
-- next event number) in one UPDATE of their runs rows, writes the steps
-- of those that passed, and returns their positions (from 1); the
-- others wrote nothing and the store commits them one by one, which
-- names each refusal. Set-based statements instead of a call per
-- step: 2,560 steps of 256 runs sent from psql with
-- `synchronous_commit = off` took 0.73-0.82 s as calls of
-- `tollgate_commit` and 0.10-0.14 s as ten set-based transactions.
-- The updates of all steps come as one array, each with the position
-- of its step (`p_update_of`), in task order. The call announces its
-- watched runs to streams itself, in one statement: the steps
-- trigger, which does it row by row (about 10 us a row, a fifth of a
-- call's server time), is told to stand aside for the call's INSERT
-- by a transaction-local setting its WHEN clause reads.
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
    
