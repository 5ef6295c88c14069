//! What can go wrong in a command, and the exit code (and HTTP status) of
//! each.

use tollgate_checkpoint::{RunId, StoreError};
use tollgate_engine::{DecisionError, RunError};
use tollgate_nodes::{BlueprintError, HarnessError, McpError};

/// Exit codes, as docs/cli.md lists them.
pub(crate) mod code {
    pub(crate) const OK: u8 = 0;
    pub(crate) const FAILED: u8 = 1;
    pub(crate) const USAGE: u8 = 2;
    pub(crate) const NOT_FOUND: u8 = 3;
    pub(crate) const CONFLICT: u8 = 4;
    pub(crate) const AWAITING: u8 = 10;
    pub(crate) const REJECTED: u8 = 11;
}

/// A command failed before it could report a run's status.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// The input is wrong (a bad blueprint, bad JSON, a refused decision).
    #[error("{message}")]
    Invalid { message: String },
    /// No such run or interrupt.
    #[error("{message}")]
    NotFound { message: String },
    /// Someone else changed the run first (a concurrent or stale decision,
    /// a run owned by a live process).
    #[error("{message}")]
    Conflict { message: String },
    /// What the request names could not be used here: a blueprint's MCP
    /// server that does not start. The command fails (exit 1) as a run
    /// that failed would; over HTTP the request is refused (422), since
    /// the server itself is fine.
    #[error("{message}")]
    Unusable { message: String },
    /// The store or the run failed.
    #[error("{message}")]
    Failed { message: String },
}

impl CliError {
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            CliError::Invalid { .. } => code::USAGE,
            CliError::NotFound { .. } => code::NOT_FOUND,
            CliError::Conflict { .. } => code::CONFLICT,
            CliError::Unusable { .. } | CliError::Failed { .. } => code::FAILED,
        }
    }

    /// The HTTP status with the same meaning.
    pub(crate) fn http_status(&self) -> u16 {
        match self {
            CliError::Invalid { .. } => 400,
            CliError::NotFound { .. } => 404,
            CliError::Conflict { .. } => 409,
            CliError::Unusable { .. } => 422,
            CliError::Failed { .. } => 500,
        }
    }

    /// A stable name for JSON errors.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            CliError::Invalid { .. } => "invalid",
            CliError::NotFound { .. } => "not_found",
            CliError::Conflict { .. } => "conflict",
            CliError::Unusable { .. } => "unusable",
            CliError::Failed { .. } => "failed",
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        CliError::Invalid { message: message.into() }
    }

    pub(crate) fn not_found(run: RunId) -> Self {
        CliError::NotFound {
            message: format!("run {run} not found (check the id, and that this is its database)"),
        }
    }
}

impl From<StoreError> for CliError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::RunNotFound { run } => CliError::not_found(run),
            StoreError::CheckpointNotFound { .. } => {
                CliError::NotFound { message: error.to_string() }
            }
            StoreError::Fenced { .. } => CliError::Conflict {
                message: format!("{error}; another process took the run over"),
            },
            StoreError::InvalidCursor { .. } => CliError::invalid(error.to_string()),
            StoreError::ThreadBusy { .. } | StoreError::ThreadMoved { .. } => {
                CliError::Conflict { message: error.to_string() }
            }
            StoreError::RunTerminal { .. } => CliError::Conflict {
                message: format!("{error}: it finished before this request took effect"),
            },
            StoreError::RunInFlight { run } => {
                CliError::Conflict { message: format!("{error} (tollgate runs cancel {run})") }
            }
            other => CliError::Failed { message: other.to_string() },
        }
    }
}

impl From<DecisionError> for CliError {
    fn from(error: DecisionError) -> Self {
        let message = error.to_string();
        match error {
            DecisionError::InterruptNotFound { .. } => CliError::NotFound { message },
            DecisionError::Conflict { .. }
            | DecisionError::AlreadyAnswered { .. }
            | DecisionError::NotPaused { .. } => CliError::Conflict {
                message: format!("{message} (someone decided first; `tollgate runs show` it)"),
            },
            DecisionError::Store(store) => store.into(),
            _ => CliError::Invalid { message },
        }
    }
}

impl From<RunError> for CliError {
    fn from(error: RunError) -> Self {
        match error {
            RunError::Decision(decision) => decision.into(),
            RunError::Store(store) => store.into(),
            RunError::RunOwned { .. } => CliError::Conflict {
                message: format!("{error} (wait for its lease to expire, or let its owner finish)"),
            },
            RunError::NotCancellable { .. } => CliError::Conflict { message: error.to_string() },
            // A thread (or run) of another graph or version: the request
            // conflicts with what is stored.
            RunError::GraphMismatch { .. } => CliError::Conflict { message: error.to_string() },
            RunError::UnknownNode { .. } | RunError::AmbiguousWriter { .. } => {
                CliError::invalid(error.to_string())
            }
            RunError::AwaitingDecision { run, .. } => CliError::Conflict {
                message: format!(
                    "{error}: decide it first (approve, edit, respond or reject; `tollgate runs show {run}` lists what it waits for)"
                ),
            },
            other => CliError::Failed { message: other.to_failure().message },
        }
    }
}

impl From<HarnessError> for CliError {
    fn from(error: HarnessError) -> Self {
        match error {
            HarnessError::Run(run) => run.into(),
            HarnessError::MissingModel { .. }
            | HarnessError::MissingTool { .. }
            | HarnessError::InvalidToolSchema { .. }
            | HarnessError::Graph(_) => CliError::invalid(error.to_string()),
            HarnessError::Mcp(source) if source.is_start_failure() => {
                CliError::Unusable { message: source.to_string() }
            }
            other => CliError::Failed { message: other.to_string() },
        }
    }
}

impl From<BlueprintError> for CliError {
    fn from(error: BlueprintError) -> Self {
        match error {
            BlueprintError::Compile { source } => match source {
                HarnessError::MissingModel { .. } => {
                    CliError::invalid(format!("blueprint does not compile: {source}"))
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
                CliError::Unusable { message: format!("blueprint's MCP servers: {source}") }
            }
            other => CliError::invalid(other.to_string()),
        }
    }
}
