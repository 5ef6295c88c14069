//! Live events across processes: a process that drives a run publishes
//! each event as it is emitted (`NOTIFY tollgate_live`, payload `RUN SEQ
//! JSON`), for the runs some server watches ([`PostgresStore::watch`]);
//! servers listen and hand them to their subscribers before the step
//! commits. An event too large for a notification (PostgreSQL's limit is
//! 8,000 bytes) is not published: it reaches subscribers with its commit,
//! as every event does.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, mpsc};
use tollgate_checkpoint::RunId;

use crate::sql::Sql;
use crate::store::PostgresStore;

/// The channel live events are published on.
const LIVE: &str = "LISTEN tollgate_live";

/// The longest payload published (PostgreSQL refuses 8,000 bytes and
/// more).
const MAX_PAYLOAD: usize = 7_900;

/// Events sent in one statement at most.
const BATCH: usize = 256;

/// How long the set of watched runs is trusted before it is read again.
const WATCHED_FOR: Duration = Duration::from_millis(100);

/// One live event of a run, as published: its number and its JSON line.
#[derive(Debug, Clone)]
pub struct LiveEvent {
    /// The run.
    pub run: RunId,
    /// The event's sequence number.
    pub seq: u64,
    /// The event's JSON line (an `EventEnvelope`).
    pub json: String,
}

/// Publishes live events ([`PostgresStore::live_publisher`]). Cheap to
/// clone; the publishing task ends when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct LivePublisher {
    sender: mpsc::UnboundedSender<LiveEvent>,
}

impl LivePublisher {
    /// Queues `event` for publication; never waits. Events of runs no
    /// server watches, and events too large for a notification, are
    /// dropped (they reach followers with their commit).
    pub fn publish(&self, event: LiveEvent) {
        if event.json.len() + 64 > MAX_PAYLOAD {
            return;
        }
        let _ = self.sender.send(event);
    }
}

impl PostgresStore {
    /// A publisher of live events: a task of its own sends what it is
    /// given in order, in batches of what queued meanwhile (one statement
    /// each), for the runs that are watched (read again every 100 ms). A
    /// database that fails drops what is queued (it reaches followers with
    /// its commit) and is tried again with the next events.
    pub fn live_publisher(&self) -> LivePublisher {
        let (sender, mut queued) = mpsc::unbounded_channel::<LiveEvent>();
        let store = self.clone();
        tokio::spawn(async move {
            let mut watched: HashSet<String> = HashSet::new();
            let mut read: Option<Instant> = None;
            let mut batch = Vec::with_capacity(BATCH);
            while let Some(first) = queued.recv().await {
                batch.push(first);
                while batch.len() < BATCH {
                    match queued.try_recv() {
                        Ok(event) => batch.push(event),
                        Err(_) => break,
                    }
                }
                if read.is_none_or(|at| at.elapsed() >= WATCHED_FOR) {
                    match store.watched_runs().await {
                        Ok(runs) => {
                            watched = runs;
                            read = Some(Instant::now());
                        }
                        Err(error) => {
                            tracing::debug!(%error, "live events: cannot read the watched runs");
                        }
                    }
                }
                let payloads: Vec<String> = batch
                    .drain(..)
                    .filter_map(|event| {
                        let run = event.run.to_string();
                        watched
                            .contains(&run)
                            .then(|| format!("{run} {} {}", event.seq, event.json))
                    })
                    .collect();
                if payloads.is_empty() {
                    continue;
                }
                if let Err(error) = store.notify_live(&payloads).await {
                    tracing::debug!(%error, "live events: not published");
                }
            }
        });
        LivePublisher { sender }
    }

    /// The live events any process publishes, as they come: for a server
    /// that hands them to the followers of their runs. A task of its own
    /// holds one connection outside the pool with `LISTEN tollgate_live`,
    /// reconnecting as [`PostgresStore::run_notifications`]'s does (events
    /// published meanwhile are lost: they reach followers with their
    /// commits); it stops once every receiver is dropped. A receiver that
    /// falls more than 4,096 behind is told it lagged.
    pub fn live_events(&self) -> broadcast::Receiver<LiveEvent> {
        let (events, receiver) = broadcast::channel(4_096);
        self.listen(LIVE, events);
        receiver
    }

    async fn watched_runs(&self) -> Result<HashSet<String>, tollgate_checkpoint::StoreError> {
        let (client, statement) = self
            .prepared(
                "SELECT run FROM watchers \
                 WHERE until_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            )
            .await?;
        let rows = client.rows(&statement, &[]).await.map_err(crate::conn::client_error)?;
        Ok(rows.iter().filter_map(|row| row.try_get::<_, String>(0).ok()).collect())
    }

    async fn notify_live(
        &self,
        payloads: &[String],
    ) -> Result<(), tollgate_checkpoint::StoreError> {
        let (client, statement) = self
            .prepared("SELECT pg_notify('tollgate_live', p) FROM unnest($1::text[]) AS p")
            .await?;
        client.exec(&statement, &[&payloads]).await.map_err(crate::conn::client_error)?;
        Ok(())
    }
}

/// Parses `RUN SEQ JSON` payloads.
impl crate::listen::Listener for broadcast::Sender<LiveEvent> {
    fn alive(&self) -> bool {
        self.receiver_count() > 0
    }

    fn notified(&self, payload: Option<&str>) {
        let Some(payload) = payload else { return };
        let parsed = payload.split_once(' ').and_then(|(run, rest)| {
            let (seq, json) = rest.split_once(' ')?;
            Some(LiveEvent {
                run: run.parse().ok()?,
                seq: seq.parse().ok()?,
                json: json.to_owned(),
            })
        });
        match parsed {
            Some(event) => {
                let _ = self.send(event);
            }
            None => tracing::debug!(payload, "live events: not an event"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listen::Listener;

    #[test]
    fn payloads_read_back_as_events() {
        let (sender, mut receiver) = broadcast::channel::<LiveEvent>(4);
        let run = RunId::new();
        sender.notified(Some(&format!("{run} 7 {{\"seq\":7,\"text\":\"a b\"}}")));
        sender.notified(Some("not an event"));
        sender.notified(None);
        let event = receiver.try_recv().unwrap();
        assert_eq!(
            (event.run, event.seq, event.json.as_str()),
            (run, 7, "{\"seq\":7,\"text\":\"a b\"}")
        );
        assert!(receiver.try_recv().is_err());
    }
}
