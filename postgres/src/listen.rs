//! `LISTEN tollgate_runs`: wake-ups when a run is queued or changes status.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;

use crate::store::PostgresStore;

/// The channel the schema's functions `NOTIFY` on (payload `RUN STATUS`).
const LISTEN: &str = "LISTEN tollgate_runs";

impl PostgresStore {
    /// A [`Notify`] woken whenever any process queues a run or changes a
    /// run's status to anything but `running` (a pause, a decision, an
    /// end), for workers that would otherwise poll (`Worker::wake_on`).
    ///
    /// A task of its own holds one connection outside the pool with
    /// `LISTEN tollgate_runs`, and reconnects with back-off (100 ms
    /// doubling to 5 s) when it breaks, waking once after each reconnect
    /// since notifications sent meanwhile are lost. It stops when the last
    /// clone of the returned `Arc` is dropped.
    pub fn run_notifications(&self) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        let weak = Arc::downgrade(&notify);
        let (config, tls) = (self.config.clone(), self.tls.clone());
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(100);
            while weak.strong_count() > 0 {
                match config.connect(tls.clone()).await {
                    Ok((client, mut connection)) => {
                        let listen = client.batch_execute(LISTEN);
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
                                    if let Some(notify) = weak.upgrade() {
                                        notify.notify_one();
                                    }
                                }
                                message = std::future::poll_fn(|cx| connection.poll_message(cx)) => {
                                    match message {
                                        Some(Ok(AsyncMessage::Notification(_))) => {
                                            match weak.upgrade() {
                                                Some(notify) => notify.notify_one(),
                                                None => return,
                                            }
                                        }
                                        Some(Ok(_)) => {}
                                        Some(Err(error)) => {
                                            tracing::warn!(%error, "run notifications: connection lost");
                                            break;
                                        }
                                        None => break,
                                    }
                                }
                                () = tokio::time::sleep(Duration::from_secs(5)) => {
                                    if weak.strong_count() == 0 {
                                        return;
                                    }
                                }
                            }
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, ?backoff, "run notifications: cannot connect");
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        });
        notify
    }
}
