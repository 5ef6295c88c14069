//! What a caller reaches ([`Caller`], [`Scope`]): whether a thread or a
//! run is in their scope (held, or only reviewed while it waits for a
//! decision), a new thread made theirs before a run of theirs starts on
//! it, and a thread given the reviewers of the blueprint that runs on it.

use tollgate_checkpoint::{RunId, RunStatus, StoreError, ThreadRecord};

use crate::error::ServiceError;
use crate::identity::{Caller, Scope};

use super::threads::thread_not_found;
use super::Runs;

/// Whether a thread (or a run) is in a caller's scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InScope {
    /// It is: they may see and change it.
    Yes,
    /// It waits for a decision one of their groups reviews: they may see
    /// it and decide, nothing else.
    Reviewing,
    /// It is someone else's (or nobody's, to a restricted caller): to
    /// them it is not there.
    No,
    /// Nothing by that id exists yet: theirs to create.
    Unused,
}

impl Runs {
    /// Whether `thread` is in `scope`: its record's holder decides, or
    /// its reviewers while its latest run waits for a decision; a thread
    /// with runs but no record (named by runs of the native API) is
    /// nobody's, in the scope of those who reach everything only.
    pub(crate) async fn thread_in_scope(
        &self,
        scope: &Scope,
        thread: &str,
    ) -> Result<InScope, ServiceError> {
        if *scope == Scope::All {
            return Ok(InScope::Yes);
        }
        let record = self.store().thread_record(thread).await?;
        if scope.holds(record.as_ref()) {
            return Ok(InScope::Yes);
        }
        let latest = self.executor.thread_latest(thread).await?;
        if scope.reviews(record.as_ref())
            && latest.as_ref().is_some_and(|run| run.status == RunStatus::AwaitingHitl)
        {
            return Ok(InScope::Reviewing);
        }
        Ok(match record.is_some() || latest.is_some() {
            true => InScope::No,
            false => InScope::Unused,
        })
    }

    /// Whether run `run` is in `scope`, through its thread (reviewed: the
    /// run waits for a decision and is the thread's latest, what the
    /// thread waits on); a run that does not exist is not
    /// ([`InScope::No`]).
    pub(crate) async fn run_in_scope(
        &self,
        scope: &Scope,
        run: RunId,
    ) -> Result<InScope, ServiceError> {
        if *scope == Scope::All {
            return Ok(InScope::Yes);
        }
        let record = match self.store().run(run).await {
            Ok(record) => record,
            Err(StoreError::RunNotFound { .. }) => return Ok(InScope::No),
            Err(error) => return Err(error.into()),
        };
        let Some(thread) = record.thread else { return Ok(InScope::No) };
        let found = self.store().thread_record(&thread).await?;
        if scope.holds(found.as_ref()) {
            return Ok(InScope::Yes);
        }
        if !scope.reviews(found.as_ref()) || record.status != RunStatus::AwaitingHitl {
            return Ok(InScope::No);
        }
        // What the thread waits on: its latest run (as listings show it).
        let latest = self.executor.thread_latest(&thread).await?;
        Ok(match latest.is_some_and(|latest| latest.id == run) {
            true => InScope::Reviewing,
            false => InScope::No,
        })
    }

    /// Makes `thread` the caller's before a run of theirs starts on it: a
    /// new thread gets a record they own (made now); one they hold is left
    /// as it is; another's is not found (also when another caller made it
    /// meanwhile). Nothing to do for a caller who reaches everything.
    pub(crate) async fn claim_thread(
        &self,
        caller: &Caller,
        thread: &str,
    ) -> Result<(), ServiceError> {
        if !caller.is_restricted() {
            return Ok(());
        }
        match self.thread_in_scope(caller.scope(), thread).await? {
            InScope::Yes => Ok(()),
            InScope::No | InScope::Reviewing => Err(thread_not_found(thread)),
            InScope::Unused => {
                let fresh =
                    ThreadRecord::new(thread, super::pending::now_ms(), serde_json::json!({}))
                        .with_ttl(self.thread_ttl_ms(None));
                let (made, _) = self.store().create_thread(caller.stamp(fresh)).await?;
                match caller.scope().holds(Some(&made)) {
                    true => Ok(()),
                    false => Err(thread_not_found(thread)),
                }
            }
        }
    }

    /// Gives `thread` the groups that review runs of `reviewers`' blueprint
    /// (`"approval": {"reviewers": [...]}`) before such a run starts on it:
    /// their members see the thread and decide while it waits. Nothing for
    /// a blueprint that names none, or a thread without a record (the
    /// team's, whom every reviewer group is not).
    pub(crate) async fn assign_reviewers(
        &self,
        thread: Option<&str>,
        reviewers: &[String],
    ) -> Result<(), ServiceError> {
        if let (Some(thread), false) = (thread, reviewers.is_empty()) {
            self.store().set_thread_reviewers(thread, reviewers).await?;
        }
        Ok(())
    }
}
