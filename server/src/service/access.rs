//! What a caller reaches ([`Caller`], [`Scope`]): whether a thread or a
//! run is in their scope, and a new thread made theirs before a run of
//! theirs starts on it.

use tollgate_checkpoint::{RunId, StoreError, ThreadRecord};

use crate::error::ServiceError;
use crate::identity::{Caller, Scope};

use super::threads::thread_not_found;
use super::Runs;

/// Whether a thread is in a caller's scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InScope {
    /// It is: they may see and change it.
    Yes,
    /// It is someone else's (or nobody's, to a restricted caller): to
    /// them it is not there.
    No,
    /// Nothing by that id exists yet: theirs to create.
    Unused,
}

impl Runs {
    /// Whether `thread` is in `scope`: its record's holder decides; a
    /// thread with runs but no record (named by runs of the native API)
    /// is nobody's, in the scope of those who reach everything only.
    pub(crate) async fn thread_in_scope(
        &self,
        scope: &Scope,
        thread: &str,
    ) -> Result<InScope, ServiceError> {
        if let Some(record) = self.store().thread_record(thread).await? {
            return Ok(if scope.admits(Some(&record)) { InScope::Yes } else { InScope::No });
        }
        if self.executor.thread_latest(thread).await?.is_some() {
            return Ok(if scope.admits(None) { InScope::Yes } else { InScope::No });
        }
        Ok(InScope::Unused)
    }

    /// Whether run `run` is in `scope` (through its thread); a run that
    /// does not exist is not.
    pub(crate) async fn run_in_scope(
        &self,
        scope: &Scope,
        run: RunId,
    ) -> Result<bool, ServiceError> {
        if *scope == Scope::All {
            return Ok(true);
        }
        let record = match self.store().run(run).await {
            Ok(record) => record,
            Err(StoreError::RunNotFound { .. }) => return Ok(false),
            Err(error) => return Err(error.into()),
        };
        let Some(thread) = record.thread else { return Ok(false) };
        let found = self.store().thread_record(&thread).await?;
        Ok(scope.admits(found.as_ref()))
    }

    /// Makes `thread` the caller's before a run of theirs starts on it: a
    /// new thread gets a record they own (made now); one in their
    /// scope is left as it is; another's is not found (also when another
    /// caller made it meanwhile). Nothing to do for a caller who reaches
    /// everything.
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
            InScope::No => Err(thread_not_found(thread)),
            InScope::Unused => {
                let fresh =
                    ThreadRecord::new(thread, super::pending::now_ms(), serde_json::json!({}))
                        .with_ttl(self.thread_ttl_ms(None));
                let (made, _) = self.store().create_thread(caller.stamp(fresh)).await?;
                match caller.scope().admits(Some(&made)) {
                    true => Ok(()),
                    false => Err(thread_not_found(thread)),
                }
            }
        }
    }
}
