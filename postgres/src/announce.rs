//! Changes announced after their commits: a run's new status on
//! `tollgate_runs`, and the commits of watched runs on `tollgate_events`.
//!
//! PostgreSQL serialises every transaction that sends a notification: from
//! the moment it starts to commit until its commit is flushed, it holds one
//! lock for the whole database. Sent from inside the transitions (as the
//! schema's functions did up to version 12), every creation of a queued
//! run, claim, pause, decision and end of every process waited its turn
//! for that lock and kept it through its WAL flush: in the `workers`
//! benchmark 57% of the samples of the store's active server processes
//! were waiting on it. Up to version 13, so did every commit of a run
//! someone streams (triggers on `steps` and `events` notified
//! `tollgate_events`): with every run of the `workers` benchmark watched,
//! as by a server streaming them all, 69% of the samples waited on it and
//! workers drained 131-156 runs/s (medians of 1, 2 and 4 workers) against
//! 222-250 with nobody watching.
//!
//! So no transition notifies. Once one has committed, its store sends what
//! it changed on the same connection, in a transaction of its own that
//! does nothing else: the run's new status when it changed, and the run
//! when someone watches it (the write's own statement reads that from
//! `watchers`, [`watched_sql`], at no extra round trip). Such a
//! transaction writes no WAL before its commit, so its commit is not
//! flushed (measured: 100 of them made one WAL sync, against 100 for 100
//! one-row inserts) and it holds the lock for microseconds. The write
//! returns once the notification is sent (one more round trip, only for a
//! write that has something to announce), so that a process that exits
//! right after it (a CLI queueing a run) has announced it. Listeners see
//! it after the change is visible, as before; one lost with its process (a
//! crash between the commit and the send) or its connection is a wake-up
//! missed, which every listener makes up for by polling, as it does for a
//! connection lost.

use deadpool_postgres::Client;

use crate::sql::Sql;
use tokio_postgres::Row;
use tollgate_checkpoint::{RunId, RunStatus};

/// Announces, on `client` (the connection that committed the write; its
/// statement sent unnamed with `unnamed`), that
/// `changed`'s run is now of its status, and that each run of `watched`
/// committed: one round trip, a transaction of its own that only
/// notifies; nothing when there is nothing to announce. A failure is
/// logged, not returned: the write stands, and listeners poll.
pub(crate) async fn announce(
    client: &Client,
    unnamed: bool,
    changed: Option<(RunId, RunStatus)>,
    watched: &[String],
) {
    const ANNOUNCE: &str = "SELECT pg_notify(n.channel, n.payload) FROM ( \
         SELECT 'tollgate_runs' AS channel, $1::text AS payload WHERE $1::text IS NOT NULL \
         UNION ALL SELECT 'tollgate_events', run FROM unnest($2::text[]) AS run) AS n";
    if changed.is_none() && watched.is_empty() {
        return;
    }
    let status = changed.map(|(run, status)| format!("{run} {}", status.as_str()));
    let sent = match client.statement(ANNOUNCE, unnamed).await {
        Ok(statement) => client.exec(&statement, &[&status, &watched]).await.map(drop),
        Err(error) => Err(error),
    };
    if let Err(error) = sent {
        tracing::warn!(status, ?watched, %error, "a change was not announced");
    }
}

/// The column a write's statement ends with: the watched ones among its
/// runs (`$runs` completes `run …`: `= $1`, `= ANY ($1)`), read in the
/// write's round trip. Written into the statement rather than called as a
/// function: a call of a SQL or PL/pgSQL function doing this read added
/// about 100 us a statement (`pgbench -M prepared`), this subquery of the
/// prepared statement's plan 0-20 us.
macro_rules! watched_sql {
    ($runs:literal) => {
        concat!(
            ", ARRAY(SELECT run FROM watchers WHERE run ",
            $runs,
            " AND until_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint)"
        )
    };
}
pub(crate) use watched_sql;

/// The watched runs a write's row names in its column `index` (its
/// statement ends with [`watched_sql`]); none, logged, when it does not
/// read.
pub(crate) fn watched(row: &Row, index: usize) -> Vec<String> {
    row.try_get(index).unwrap_or_else(|error| {
        tracing::warn!(%error, "the watched runs of a write did not read: not announced");
        Vec::new()
    })
}

/// Schema version 13: the functions of the transitions that announced a
/// status change (`tollgate_create_run` of a queued run, `tollgate_commit`
/// to a status other than `running`, `tollgate_claim`, `tollgate_decide`)
/// as they were, without the notification, which the store now sends
/// after the commit ([`announce`]) on the same channel with the same
/// payload.
pub(crate) const STATUS_MIGRATION: &str = r#"
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
"#;

/// Schema version 14: commits of watched runs no longer notify
/// `tollgate_events` inside their transactions. The triggers on `steps`
/// and `events` and their function go, `tollgate_commit_steps` is as it
/// was without its notification (nor the setting that kept the steps
/// trigger aside). Each write's statement reads which of its runs are
/// watched ([`watched_sql`]), for the store to announce once the write
/// committed.
pub(crate) const STREAMS_MIGRATION: &str = r#"
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
"#;

#[cfg(test)]
#[path = "announce_tests.rs"]
mod tests;
