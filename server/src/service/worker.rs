//! `tollgate worker`: driving the runs no process drives whose graph this
//! process has.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tollgate_checkpoint::{RunId, RunRecord, RunStatus, StoreError};
use tollgate_engine::{EventSink, Executor, RunConfig, RunError, Worker, WorkerReport, Workload};

use super::{Backend, Runs};

impl Runs {
    /// Drives runs no process drives whose graph this process has (blueprint
    /// runs, and runs of its registered graphs), `concurrency` legs at
    /// once, until `shutdown`; returns the worker's report.
    pub async fn work(
        &self,
        concurrency: usize,
        lease: Duration,
        max_lease_losses: u32,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> WorkerReport {
        let live = self.live_publisher();
        let mut worker = Worker::new((*self.executor).clone())
            .workload(Arc::new(KnownRuns { runs: self.clone(), lease, live }))
            .concurrency(concurrency)
            .max_lease_losses(max_lease_losses);
        if let Some(wake) = self.wake.clone() {
            worker = worker.wake_on(wake);
        }
        // A run cancelled elsewhere stops its leg here at once.
        if let Backend::Postgres(store) = &self.backend {
            worker = worker.wake_legs_on(store.run_changes());
        }
        worker.run(shutdown).await
    }
}

/// Runs whose graph this process has: blueprint runs, each rebuilt from
/// what it stored, and runs of its registered graphs (what `tollgate
/// worker` drives). Any other run, or one whose graph cannot be rebuilt
/// here (a model this build lacks, a version it does not have), is left
/// for other workers.
struct KnownRuns {
    runs: Runs,
    /// The lease of every leg.
    lease: Duration,
    /// On Postgres: where each leg's events go as they are emitted, for
    /// the servers that follow the run.
    live: Option<tollgate_postgres::LivePublisher>,
}

#[async_trait]
impl Workload for KnownRuns {
    async fn drive(
        &self,
        executor: &Executor,
        run: &RunRecord,
        given: RunConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Option<Result<RunStatus, RunError>> {
        let rebuilt = match self.runs.rebuild(run).await {
            Ok(Some(rebuilt)) => rebuilt,
            Ok(None) => return None,
            Err(error) => {
                tracing::warn!(run = %run.id, %error, "worker: cannot rebuild the run's graph");
                return None;
            }
        };
        // Each leg runs with its blueprint's settings, and the worker's
        // lease and token.
        let mut config = rebuilt.config.lease(self.lease);
        if let Some(token) = given.given_cancel_token() {
            config = config.cancel_token(token);
        }
        if let Some(publisher) = &self.live {
            config = config.events(published(run.id, publisher.clone()));
        }
        let driven = rebuilt.graph.drive(executor, run, config, shutdown).await?;
        // One line per leg for whoever watches the worker.
        match &driven {
            Ok(status) => eprintln!("tollgate worker: run {}: {status}", run.id),
            Err(RunError::Store(StoreError::Fenced { .. } | StoreError::RunTerminal { .. }))
            | Err(RunError::RunOwned { .. }) => {}
            Err(error) => eprintln!("tollgate worker: run {}: {error}", run.id),
        }
        Some(driven)
    }
}

/// A sink whose events are published live as they come
/// (`PostgresStore::live_publisher`), until the leg ends.
fn published(run: RunId, publisher: tollgate_postgres::LivePublisher) -> EventSink {
    let (sink, mut events) = EventSink::channel();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            let Ok(json) = serde_json::to_string(&event) else { continue };
            publisher.publish(tollgate_postgres::LiveEvent { run, seq: event.seq, json });
        }
    });
    sink
}
