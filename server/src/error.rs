//! What can go wrong in a command, and the exit code (and HTTP status) of
//! each.

use tollgate_checkpoint::{RunId, StoreError};
use tollgate_engine::{DecisionError, RunError};
use tollgate_nodes::{BlueprintError, HarnessError, McpError};

/// Exit codes, as docs/cli.md lists them.
pub mod code {
    /// Completed, or done.
    pub const OK: u8 = 0;
    /// The run failed (or was interrupted), or the database failed.
    pub const FAILED: u8 = 1;
    /// Bad usage or invalid input.
    pub const USAGE: u8 = 2;
    /// Not found (run, interrupt).
    pub const NOT_FOUND: u8 = 3;
    /// Another decision came first, or another live process owns the run.
    pub const CONFLICT: u8 = 4;
    /// The run waits for a decision.
    pub const AWAITING: u8 = 10;
    /// The run was rejected.
    pub const REJECTED: u8 = 11;
}

/// The error a [`ServiceError`] comes from.
pub type ErrorSource = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A command or a request failed before it could report a run's status.
/// Each kind has the exit code ([`ServiceError::exit_code`]) and the HTTP
/// status ([`ServiceError::http_status`]) of the same meaning.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The input is wrong (a bad blueprint, bad JSON, a refused decision).
    #[error("{message}")]
    Invalid {
        /// What is wrong, and what to do.
        message: String,
        /// The error it comes from, when it has one.
        #[source]
        source: Option<ErrorSource>,
    },
    /// No such run or interrupt.
    #[error("{message}")]
    NotFound {
        /// What was not found.
        message: String,
        /// The error it comes from, when it has one.
        #[source]
        source: Option<ErrorSource>,
    },
    /// Someone else changed the run first (a concurrent or stale decision,
    /// a run owned by a live process).
    #[error("{message}")]
    Conflict {
        /// What conflicts.
        message: String,
        /// The error it comes from, when it has one.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The run started on a version of its graph this process does not
    /// have (it has others of the same name): a process with that version
    /// continues it. Exit 4, HTTP 409, like any conflict with the run.
    #[error("run {run} started on graph `{graph}` version {version}, which this process does not have (it has version {}); a process that has version {version} continues it", available.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    MissingVersion {
        /// The run.
        run: RunId,
        /// Its graph's name.
        graph: String,
        /// The version it started on.
        version: u32,
        /// The versions of the graph this process has.
        available: Vec<u32>,
    },
    /// What the request names could not be used here: a blueprint's MCP
    /// server that does not start. The command fails (exit 1) as a run
    /// that failed would; over HTTP the request is refused (422), since
    /// the server itself is fine.
    #[error("{message}")]
    Unusable {
        /// What could not be used, and why.
        message: String,
        /// The error it comes from, when it has one.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The database cannot be reached (down, restarting, failing over) or
    /// stayed busy: try again shortly. Exit 1; HTTP 503 with
    /// `Retry-After`.
    #[error("{message}")]
    Unavailable {
        /// What is unavailable.
        message: String,
        /// The error it comes from, when it has one.
        #[source]
        source: Option<ErrorSource>,
    },
    /// Something the request needed did not finish in time (reading a
    /// blueprint's files): exit 1; HTTP 422, since the server itself is
    /// fine.
    #[error("{what} within {} s", after.as_secs_f64())]
    TimedOut {
        /// What did not finish.
        what: String,
        /// How long it was given.
        after: std::time::Duration,
    },
    /// A request key (`Idempotency-Key`) came again with another
    /// request: exit 2, HTTP 422.
    #[error("`Idempotency-Key` `{key}` was sent before with another request (which made {made}); send a new key for a new request")]
    KeyReused {
        /// The key.
        key: String,
        /// What the first request made (a run's or a thread's id).
        made: String,
    },
    /// The request with this key is still making what it makes: exit 4,
    /// HTTP 409 with `Retry-After`.
    #[error("a request with `Idempotency-Key` `{key}` is still in progress after {} s; retry shortly", after.as_secs_f64())]
    KeyInFlight {
        /// The key.
        key: String,
        /// How long this request waited for it.
        after: std::time::Duration,
    },
    /// A caller who only reviews a thread (a member of a group its
    /// approvals name) asked for more than to see it and decide what it
    /// waits for: exit 2, HTTP 403.
    #[error("`{who}` reviews thread `{thread}`: they may see it and decide what it waits for, not change it")]
    ReviewOnly {
        /// The caller's name.
        who: String,
        /// The thread.
        thread: String,
    },
    /// The store or the run failed.
    #[error("{message}")]
    Failed {
        /// What failed.
        message: String,
        /// The error it comes from, when it has one.
        #[source]
        source: Option<ErrorSource>,
    },
}

impl ServiceError {
    /// The exit code of the same meaning (docs/cli.md).
    pub fn exit_code(&self) -> u8 {
        match self {
            ServiceError::Invalid { .. }
            | ServiceError::KeyReused { .. }
            | ServiceError::ReviewOnly { .. } => code::USAGE,
            ServiceError::NotFound { .. } => code::NOT_FOUND,
            ServiceError::Conflict { .. }
            | ServiceError::MissingVersion { .. }
            | ServiceError::KeyInFlight { .. } => code::CONFLICT,
            ServiceError::Unusable { .. }
            | ServiceError::TimedOut { .. }
            | ServiceError::Unavailable { .. }
            | ServiceError::Failed { .. } => code::FAILED,
        }
    }

    /// The HTTP status with the same meaning.
    pub fn http_status(&self) -> u16 {
        match self {
            ServiceError::Invalid { .. } => 400,
            ServiceError::ReviewOnly { .. } => 403,
            ServiceError::NotFound { .. } => 404,
            ServiceError::Conflict { .. }
            | ServiceError::MissingVersion { .. }
            | ServiceError::KeyInFlight { .. } => 409,
            ServiceError::Unusable { .. }
            | ServiceError::TimedOut { .. }
            | ServiceError::KeyReused { .. } => 422,
            ServiceError::Unavailable { .. } => 503,
            ServiceError::Failed { .. } => 500,
        }
    }

    /// A stable name for JSON errors.
    pub fn kind(&self) -> &'static str {
        match self {
            ServiceError::Invalid { .. } => "invalid",
            ServiceError::NotFound { .. } => "not_found",
            ServiceError::Conflict { .. } => "conflict",
            ServiceError::MissingVersion { .. } => "missing_version",
            ServiceError::KeyReused { .. } => "key_reused",
            ServiceError::KeyInFlight { .. } => "key_in_flight",
            ServiceError::ReviewOnly { .. } => "forbidden",
            ServiceError::Unusable { .. } => "unusable",
            ServiceError::TimedOut { .. } => "timeout",
            ServiceError::Unavailable { .. } => "unavailable",
            ServiceError::Failed { .. } => "failed",
        }
    }

    /// Invalid input, saying `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ServiceError::Invalid { message: message.into(), source: None }
    }

    /// Not found, saying what.
    pub fn missing(message: impl Into<String>) -> Self {
        ServiceError::NotFound { message: message.into(), source: None }
    }

    /// A conflict with what is stored, saying what.
    pub fn conflict(message: impl Into<String>) -> Self {
        ServiceError::Conflict { message: message.into(), source: None }
    }

    /// Something the request names could not be used, saying why.
    pub fn unusable(message: impl Into<String>) -> Self {
        ServiceError::Unusable { message: message.into(), source: None }
    }

    /// The database is away, saying how.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ServiceError::Unavailable { message: message.into(), source: None }
    }

    /// The store or the run failed, saying how.
    pub fn failed(message: impl Into<String>) -> Self {
        ServiceError::Failed { message: message.into(), source: None }
    }

    /// The same error, coming from `error` (its
    /// [`source`](std::error::Error::source)); the message stays.
    pub fn with_source(mut self, error: impl Into<ErrorSource>) -> Self {
        match &mut self {
            ServiceError::Invalid { source, .. }
            | ServiceError::NotFound { source, .. }
            | ServiceError::Conflict { source, .. }
            | ServiceError::Unusable { source, .. }
            | ServiceError::Unavailable { source, .. }
            | ServiceError::Failed { source, .. } => *source = Some(error.into()),
            ServiceError::MissingVersion { .. }
            | ServiceError::TimedOut { .. }
            | ServiceError::KeyReused { .. }
            | ServiceError::KeyInFlight { .. }
            | ServiceError::ReviewOnly { .. } => {}
        }
        self
    }

    pub(crate) fn not_found(run: RunId) -> Self {
        ServiceError::missing(format!(
            "run {run} not found (check the id, and that this is its database)"
        ))
    }
}

impl From<StoreError> for ServiceError {
    fn from(error: StoreError) -> Self {
        let shown = match &error {
            StoreError::RunNotFound { run } => ServiceError::not_found(*run),
            StoreError::CheckpointNotFound { .. }
            | StoreError::ThreadNotFound { .. }
            | StoreError::ScheduleNotFound { .. } => ServiceError::missing(error.to_string()),
            StoreError::ScheduleExists { .. } | StoreError::ScheduleMoved { .. } => {
                ServiceError::conflict(error.to_string())
            }
            StoreError::Fenced { .. } => {
                ServiceError::conflict(format!("{error}; another process took the run over"))
            }
            StoreError::InvalidCursor { .. } => ServiceError::invalid(error.to_string()),
            StoreError::ThreadBusy { .. } | StoreError::ThreadMoved { .. } => {
                ServiceError::conflict(error.to_string())
            }
            StoreError::RunTerminal { .. } => ServiceError::conflict(format!(
                "{error}: it finished before this request took effect"
            )),
            StoreError::RunInFlight { run } => {
                ServiceError::conflict(format!("{error} (tollgate runs cancel {run})"))
            }
            StoreError::Unavailable { .. }
            | StoreError::Busy { .. }
            | StoreError::PoolExhausted { .. } => {
                ServiceError::unavailable(format!("{error}; try again shortly"))
            }
            other => ServiceError::failed(other.to_string()),
        };
        shown.with_source(error)
    }
}

impl From<tollgate_checkpoint::ItemError> for ServiceError {
    fn from(error: tollgate_checkpoint::ItemError) -> Self {
        match error {
            tollgate_checkpoint::ItemError::Store(error) => error.into(),
            error if error.is_invalid_input() => {
                ServiceError::invalid(error.to_string()).with_source(error)
            }
            error => ServiceError::failed(error.to_string()).with_source(error),
        }
    }
}

impl From<DecisionError> for ServiceError {
    fn from(error: DecisionError) -> Self {
        let message = error.to_string();
        match error {
            DecisionError::InterruptNotFound { .. } => {
                ServiceError::missing(message).with_source(error)
            }
            DecisionError::Conflict { .. }
            | DecisionError::AlreadyAnswered { .. }
            | DecisionError::NotPaused { .. } => ServiceError::conflict(format!(
                "{message} (someone decided first; `tollgate runs show` it)"
            ))
            .with_source(error),
            DecisionError::Store(store) => store.into(),
            _ => ServiceError::invalid(message).with_source(error),
        }
    }
}

impl From<RunError> for ServiceError {
    fn from(error: RunError) -> Self {
        match error {
            RunError::Decision(decision) => decision.into(),
            RunError::Store(store) => store.into(),
            RunError::Schedule(_) => ServiceError::invalid(error.to_string()).with_source(error),
            RunError::RunOwned { .. } => ServiceError::conflict(format!(
                "{error} (wait for its lease to expire, or let its owner finish)"
            ))
            .with_source(error),
            // Not cancellable; or a thread (or run) of another graph or
            // version: the request conflicts with what is stored.
            RunError::NotCancellable { .. } | RunError::GraphMismatch { .. } => {
                ServiceError::conflict(error.to_string()).with_source(error)
            }
            RunError::UnknownNode { .. } | RunError::AmbiguousWriter { .. } => {
                ServiceError::invalid(error.to_string()).with_source(error)
            }
            RunError::AwaitingDecision { run, .. } => ServiceError::conflict(format!(
                "{error}: decide it first (approve, edit, respond or reject; `tollgate runs show {run}` lists what it waits for)"
            ))
            .with_source(error),
            other => ServiceError::failed(other.to_failure().message).with_source(other),
        }
    }
}

impl From<HarnessError> for ServiceError {
    fn from(error: HarnessError) -> Self {
        match error {
            HarnessError::Run(run) => run.into(),
            HarnessError::MissingModel { .. }
            | HarnessError::MissingTool { .. }
            | HarnessError::InvalidToolSchema { .. }
            | HarnessError::Graph(_) => ServiceError::invalid(error.to_string()).with_source(error),
            HarnessError::Mcp(source) if source.is_start_failure() => {
                ServiceError::unusable(source.to_string()).with_source(source)
            }
            other => ServiceError::failed(other.to_string()).with_source(other),
        }
    }
}

impl From<BlueprintError> for ServiceError {
    fn from(error: BlueprintError) -> Self {
        match error {
            BlueprintError::Compile { source } => match source {
                HarnessError::MissingModel { .. } => {
                    ServiceError::invalid(format!("blueprint does not compile: {source}"))
                        .with_source(source)
                }
                other => other.into(),
            },
            // A server that does not start: the command fails as a run
            // would (exit 1); a request that named it is refused (422).
            BlueprintError::Mcp { source }
                if !matches!(
                    source,
                    McpError::UnknownTool { .. } | McpError::DuplicateTool { .. }
                ) =>
            {
                ServiceError::unusable(format!("blueprint's MCP servers: {source}"))
                    .with_source(source)
            }
            other => ServiceError::invalid(other.to_string()).with_source(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use tollgate_checkpoint::{RunId, StoreError};

    use super::ServiceError;

    #[test]
    fn a_converted_error_keeps_what_it_comes_from() {
        let run = RunId::new();
        let error = ServiceError::from(StoreError::RunInFlight { run });
        assert_eq!(error.kind(), "conflict");
        let source = error.source().expect("the store's error is the source");
        assert_eq!(
            source.downcast_ref::<StoreError>().map(ToString::to_string),
            Some(StoreError::RunInFlight { run }.to_string())
        );
        assert!(error.to_string().contains("tollgate runs cancel"), "{error}");
    }

    #[test]
    fn a_made_error_has_no_source_until_given_one() {
        let error = ServiceError::failed("it broke");
        assert!(error.source().is_none());
        let io = std::io::Error::other("disk gone");
        let error = error.with_source(io);
        assert_eq!(error.to_string(), "it broke");
        assert_eq!(error.source().map(ToString::to_string).as_deref(), Some("disk gone"));
    }
}
