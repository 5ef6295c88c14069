//! `LISTEN`: wake-ups when a run is queued or changes status
//! (`tollgate_runs`), and when a watched run commits (`tollgate_events`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{broadcast, Notify};
use tokio_postgres::AsyncMessage;
use tollgate_checkpoint::{RunId, StoreError};

use crate::conn::client_error;
use crate::sql::Sql;
use crate::store::PostgresStore;

/// The channel status changes are announced on (payload `RUN STATUS`).
const RUNS: &str = "LISTEN tollgate_runs";
/// The channel commits of watched runs are announced on (payload `RUN`).
const EVENTS: &str = "LISTEN tollgate_events";
/// How often listeners look again when they cannot `LISTEN` (through a
/// transaction pooler).
const POLL: Duration = Duration::from_secs(1);

impl PostgresStore {
    /// A [`Notify`] woken whenever any process queues a run (creates it
    /// queued, leaves it queued with a decision, releases it at shutdown):
    /// for workers that would otherwise poll (`Worker::wake_on`). Other
    /// changes of status (claims, pauses, ends) make no work for a worker
    /// and do not wake it: a fleet of workers each woken by every claim and
    /// every end would each look for runs two more times per run.
    ///
    /// A task of its own holds one connection outside the pool with
    /// `LISTEN tollgate_runs`, and reconnects with back-off (100 ms
    /// doubling to 5 s) when it breaks, waking once after each reconnect
    /// since notifications sent meanwhile are lost. It stops when the last
    /// clone of the returned `Arc` is dropped.
    pub fn run_notifications(&self) -> Arc<Notify> {
        self.wake(RUNS, false, true)
    }

    /// Like [`PostgresStore::run_notifications`], but every waiter wakes
    /// (not one): for readers that each refresh a listing of runs, such as
    /// a page showing the runs waiting for a decision.
    pub fn status_notifications(&self) -> Arc<Notify> {
        self.wake(RUNS, true, false)
    }

    /// A [`Notify`] whose waiters all wake whenever a watched run
    /// ([`PostgresStore::watch`]) commits a transition in any process, and
    /// after each reconnect of the listening connection (notifications sent
    /// meanwhile are lost). A stream reader registers the run, then waits
    /// on this instead of polling.
    pub fn event_notifications(&self) -> Arc<Notify> {
        self.wake(EVENTS, true, false)
    }

    /// A [`Notify`] that `statement`'s notifications wake (one waiter, or
    /// all), or only those that say a run was queued (`queued`).
    fn wake(&self, statement: &'static str, all: bool, queued: bool) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        self.listen(statement, Wake { notify: Arc::downgrade(&notify), all, queued });
        notify
    }

    /// Registers `run` as streamed for `lasting` from now (pushed forward,
    /// never back): each of its writes that commits from then on (a step,
    /// a task's progress, a pause, a decision, an end; its creation, if it
    /// is watched before it exists) is then announced to
    /// [`PostgresStore::event_notifications`], by the process that wrote
    /// it, once committed. Call again before it lapses
    /// to keep watching. Registrations that lapsed are removed.
    pub async fn watch(&self, run: RunId, lasting: Duration) -> Result<(), StoreError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as i64);
        let until = now.saturating_add(lasting.as_millis() as i64);
        let (client, register) = self
            .prepared(
                "INSERT INTO watchers (run, until_ms) VALUES ($1, $2) ON CONFLICT (run) \
                 DO UPDATE SET until_ms = greatest(watchers.until_ms, EXCLUDED.until_ms)",
            )
            .await?;
        client.exec(&register, &[&run.to_string(), &until]).await.map_err(client_error)?;
        let lapsed = client
            .statement("DELETE FROM watchers WHERE until_ms < $1", self.unnamed)
            .await
            .map_err(client_error)?;
        client.exec(&lapsed, &[&now]).await.map_err(client_error)?;
        Ok(())
    }

    /// The runs whose status any process changes, as they change: queued,
    /// claimed when not running, paused, decided, ended, cancelled (a
    /// cancel takes a running run over and ends it `interrupted`). `None`
    /// after the listening connection connects again, since notifications
    /// sent meanwhile are lost: any run may have changed. A receiver that
    /// falls more than 1,024 behind is told it lagged. For a worker that
    /// has the legs of changed runs renew their leases at once
    /// (`Worker::wake_legs_on`), so that a cancelled run's leg stops at once.
    ///
    /// A task of its own holds one connection outside the pool with
    /// `LISTEN tollgate_runs`, reconnecting as
    /// [`PostgresStore::run_notifications`]'s does; it stops once every
    /// receiver is dropped.
    pub fn run_changes(&self) -> broadcast::Receiver<Option<RunId>> {
        let (changes, receiver) = broadcast::channel(1_024);
        self.listen(RUNS, changes);
        receiver
    }

    /// The watched runs that commit, as [`PostgresStore::run_changes`]
    /// gives the runs that change status.
    #[cfg(test)]
    pub(crate) fn event_changes(&self) -> broadcast::Receiver<Option<RunId>> {
        let (changes, receiver) = broadcast::channel(1_024);
        self.listen(EVENTS, changes);
        receiver
    }

    /// `LISTEN`s with `statement` on a connection of its own, handing each
    /// notification to `listener`, until no one listens; reconnects after
    /// a jittered back-off (100 ms doubling to 5 s, each wait between
    /// half and all of it).
    ///
    /// Through a transaction pooler, where a `LISTEN` would hold on a
    /// server connection that goes back to the pool after it (and its
    /// notifications to no one), `listener` is told every [`POLL`] that
    /// anything may have changed, instead: its reader looks again.
    pub(crate) fn listen(&self, statement: &'static str, listener: impl Listener) {
        if self.unnamed {
            tokio::spawn(async move {
                while listener.alive() {
                    listener.notified(None);
                    tokio::time::sleep(POLL).await;
                }
            });
            return;
        }
        let (config, tls) = (self.config.clone(), self.tls.clone());
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(100);
            while listener.alive() {
                match config.connect(tls.clone()).await {
                    Ok((client, mut connection)) => {
                        let listen = client.batch_execute(statement);
                        tokio::pin!(listen);
                        let mut listening = false;
                        loop {
                            tokio::select! {
                                done = &mut listen, if !listening => {
                                    if done.is_err() {
                                        break;
                                    }
                                    listening = true;
                                    backoff = Duration::from_millis(100);
                                    // Anything sent while not listening is lost.
                                    listener.notified(None);
                                }
                                message = std::future::poll_fn(|cx| connection.poll_message(cx)) => {
                                    match message {
                                        Some(Ok(AsyncMessage::Notification(notification))) => {
                                            if !listener.alive() {
                                                return;
                                            }
                                            listener.notified(Some(notification.payload()));
                                        }
                                        Some(Ok(_)) => {}
                                        Some(Err(error)) => {
                                            tracing::warn!(error = %crate::conn::Chain::of(&error), statement, "notifications: connection lost");
                                            break;
                                        }
                                        None => break,
                                    }
                                }
                                () = tokio::time::sleep(Duration::from_secs(5)) => {
                                    if !listener.alive() {
                                        return;
                                    }
                                }
                            }
                        }
                    }
                    Err(error) => {
                        tracing::warn!(error = %crate::conn::Chain::of(&error), ?backoff, statement, "notifications: cannot connect");
                    }
                }
                // Jittered (half to all of it), so that many processes
                // that lost the database together reconnect apart.
                let draw = std::hash::BuildHasher::hash_one(
                    &std::collections::hash_map::RandomState::new(),
                    0u8,
                );
                tokio::time::sleep(backoff.mul_f64(0.5 + (draw % 1_000) as f64 / 2_000.0)).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        });
    }
}

/// Where a listening connection's notifications go.
pub(crate) trait Listener: Send + Sync + 'static {
    /// Whether anyone still listens.
    fn alive(&self) -> bool;
    /// A notification's payload; `None` once listening (again): anything
    /// sent before was lost.
    fn notified(&self, payload: Option<&str>);
}

/// Wakes one waiter of a [`Notify`], or all (`all`); with `queued`, only
/// for a `RUN queued` payload (and on listening, again).
struct Wake {
    notify: Weak<Notify>,
    all: bool,
    queued: bool,
}

impl Listener for Wake {
    fn alive(&self) -> bool {
        self.notify.strong_count() > 0
    }

    fn notified(&self, payload: Option<&str>) {
        let status = payload.and_then(|payload| payload.split_once(' ')).map(|(_, status)| status);
        if self.queued && payload.is_some() && status != Some("queued") {
            return;
        }
        if let Some(notify) = self.notify.upgrade() {
            if self.all {
                notify.notify_waiters();
            } else {
                notify.notify_one();
            }
        }
    }
}

/// Sends the run a payload names (`RUN STATUS`, or `RUN`).
impl Listener for broadcast::Sender<Option<RunId>> {
    fn alive(&self) -> bool {
        self.receiver_count() > 0
    }

    fn notified(&self, payload: Option<&str>) {
        let run = match payload {
            None => None,
            Some(payload) => match payload.split(' ').next().map(str::parse::<RunId>) {
                Some(Ok(run)) => Some(run),
                _ => {
                    tracing::debug!(payload, "notifications: not a run's change");
                    return;
                }
            },
        };
        // No receiver left: the task ends at its next look.
        let _ = self.send(run);
    }
}
