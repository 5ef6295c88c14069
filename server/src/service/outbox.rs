//! Deferred work, done by every server of the database: pending runs
//! started once their thread is free and their time has come
//! (`pending.rs`), webhooks sent once their run settled (`webhooks.rs`).
//! Both live in the store's outbox, so what one server did not get to,
//! another (or the same, restarted) does. The API that made the work
//! starts a pending run and words a webhook's body ([`OutboxWork`]); the
//! dispatcher (`dispatch.rs`) decides when. Here: that trait, and reading
//! and gating the outbox's ready entries.

use std::net::SocketAddr;

use async_trait::async_trait;
use serde_json::Value;
use tollgate_checkpoint::{OutboxEntry, OutboxGate, OutboxQuery, RunId};

use super::pending::Pending;
use super::Runs;
use crate::error::ServiceError;

/// Ready pending runs (and webhooks) read at once (a page).
const BATCH: u64 = 64;
/// Pages of ready entries one look reads, at most.
pub(super) const PAGES: usize = 16;

/// What the API that made the outbox's work does with it.
#[async_trait]
pub(crate) trait OutboxWork: Send + Sync + 'static {
    /// Whether the API is still served: the dispatcher ends once not.
    fn alive(&self) -> bool;
    /// The addresses this server listens on (no webhook goes there).
    fn own_addrs(&self) -> Vec<SocketAddr>;
    /// Whether this server can start `pending` (it serves its assistant;
    /// servers of one database may serve other graphs).
    async fn can_start(&self, pending: &Pending) -> bool;
    /// Starts `pending` as run `run`, its leg driven here.
    async fn start(&self, pending: &Pending, run: RunId) -> Result<(), StartRefused>;
    /// What a webhook posts of run `run` of `assistant`, settled.
    async fn outcome(&self, run: RunId, assistant: &str) -> Result<Value, ServiceError>;
}

/// Why a pending run did not start.
#[derive(Debug)]
pub(crate) struct StartRefused {
    /// Whether trying again later may work.
    pub(crate) retry: Retry,
    /// What went wrong.
    pub(crate) message: String,
    /// What is kept with the pending run if it never starts (the API's
    /// words).
    pub(crate) why: Value,
}

/// Whether a start that failed is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// The thread (or the run) took another run meanwhile: again, a few
    /// times.
    Conflict,
    /// The database is away: again, as long as it takes.
    Unavailable,
    /// Never: the pending run is kept as failed.
    Never,
}

/// The next page of ready entries of `kind` after `cursor` (and moves
/// it: to the last entry read, or back to the start past the end).
pub(super) async fn next_page(
    runs: &Runs,
    kind: &str,
    now: i64,
    cursor: &mut Option<OutboxEntry>,
) -> Result<Vec<OutboxEntry>, ServiceError> {
    let mut query = OutboxQuery::new(kind, BATCH).ready(now);
    if let Some(last) = cursor.as_ref() {
        query = query.after(last);
    }
    let page = runs.store().list_outbox(query).await?;
    *cursor = if page.len() < usize::try_from(BATCH).unwrap_or(usize::MAX) {
        None
    } else {
        page.last().cloned()
    };
    Ok(page)
}

/// Gates outbox entry `id` on `gate`: out of sight until it opens (if it
/// opened meanwhile, the next look sees the entry again).
pub(super) async fn gate(runs: &Runs, id: &str, gate: OutboxGate) -> Result<(), ServiceError> {
    runs.store().gate_outbox(&[id.to_owned()], gate).await?;
    Ok(())
}
