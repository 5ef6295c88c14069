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
//! when someone watches it. Such a transaction writes no WAL before its
//! commit, so its commit is not flushed (measured: 100 of them made one
//! WAL sync, against 100 for 100 one-row inserts) and it holds the lock
//! for microseconds. The write returns once the notification is sent, so
//! that a process that exits right after it (a CLI queueing a run) has
//! announced it. Listeners see it after the change is visible, as before;
//! one lost with its process (a crash between the commit and the send) or
//! its connection is a wake-up missed, which every listener makes up for
//! by polling, as it does for a connection lost.
//!
//! A write that changes a run's status ([`announced`]: a pause, an end, a
//! decision, a claim, a run queued) has its announcement pipelined behind
//! it: both go in one round trip, and the server runs the announcement
//! once the write's transaction has ended. The announcement reads the run
//! and names it only if the run is then of the status the write gave it
//! (and names it to its watchers, read from `watchers` then), so a write
//! refused announces nothing, short of a run that already had that
//! status (a wake-up that finds nothing new). A write that leaves the
//! status as it was (a step of a running run) reads its run's watchers in
//! its own statement ([`watched_sql`]) and announces, one more round trip,
//! only when someone watches.

use std::future::Future;

use deadpool_postgres::Client;

use crate::sql::Sql;
use tokio_postgres::types::ToSql;
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

/// Runs `write`, a statement on `client` (sent unnamed with `unnamed`)
/// whose transaction leaves `run` of `status`, and, pipelined behind it in
/// the same round trip, a transaction that names `run` on `tollgate_runs`
/// and to its watchers on `tollgate_events` if the run is of `status` by
/// then. Returns `write`'s answer once both are answered. The announcement
/// failing is logged, not returned: the write stands, and listeners poll.
pub(crate) async fn announced<T, E>(
    client: &Client,
    unnamed: bool,
    (run, status): (RunId, RunStatus),
    write: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    const ANNOUNCE_IF: &str = "SELECT pg_notify(n.channel, n.payload) \
         FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async, \
         runs r CROSS JOIN LATERAL ( \
             SELECT 'tollgate_runs' AS channel, r.id || ' ' || r.status AS payload \
             UNION ALL SELECT 'tollgate_events', w.run FROM watchers w WHERE w.run = r.id \
             AND w.until_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS n \
         WHERE r.id = $1 AND r.status = $2";
    let statement = match client.statement(ANNOUNCE_IF, unnamed).await {
        Ok(statement) => statement,
        Err(error) => {
            tracing::warn!(%run, %error, "a change will not be announced");
            return write.await;
        }
    };
    let (id, status) = (run.to_string(), status.as_str());
    let params: [&(dyn ToSql + Sync); 2] = [&id, &status];
    // `biased`: the write is polled first, so it is sent and run first.
    let (written, sent) = tokio::join!(biased; write, client.exec(&statement, &params));
    if let Err(error) = sent {
        tracing::warn!(%run, status, %error, "a change was not announced");
    }
    written
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

#[cfg(test)]
#[path = "announce_tests.rs"]
mod tests;
