-- Migration 14 of tollgate's PostgreSQL schema (postgres/src/migrations.rs).
--
-- commits of watched runs no longer notify `tollgate_events`
-- themselves either (the triggers go); the store announces them after
-- the commit (`announce.rs`).
--
-- Schema version 14: commits of watched runs no longer notify
-- `tollgate_events` inside their transactions. The triggers on `steps`
-- and `events` and their function go, `tollgate_commit_steps` is as it
-- was without its notification (nor the setting that kept the steps
-- trigger aside). Each write's statement reads which of its runs are
-- watched ([`watched_sql`]), for the store to announce once the write
-- committed.
    DROP TRIGGER steps_announce ON steps;
    DROP TRIGGER events_announce ON events;
    DROP FUNCTION tollgate_announce();

    CREATE OR REPLACE FUNCTION tollgate_commit_steps(
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
