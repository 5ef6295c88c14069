//! How a node fails: its error, what it tells the driver besides a
//! failure (a pause, a stop, a sleep), and the errors of its context.

use std::fmt;

use crate::exec::RunError;
use crate::hitl::Raised;

/// [`NodeContext::emit`](crate::NodeContext::emit) refused an event.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    /// Run, node, checkpoint and interrupt events are the executor's.
    #[error("nodes may not emit `{kind}` events; they belong to the executor")]
    Reserved {
        /// The refused event's kind.
        kind: &'static str,
    },
    /// The event did not serialize.
    #[error("could not encode the event: {source}")]
    Encode {
        /// What the encoder reported.
        #[source]
        source: serde_json::Error,
    },
}

impl From<EmitError> for NodeError {
    fn from(error: EmitError) -> Self {
        NodeError::fatal(error)
    }
}

/// A `Send` input was absent or had the wrong shape.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// The task was not started by a `Send`.
    #[error("node `{node}` expected a Send input, but was reached by an edge")]
    Missing {
        /// The node.
        node: String,
    },
    /// The input did not decode into the requested type.
    #[error("node `{node}` got a Send input of the wrong shape: {source}")]
    Malformed {
        /// The node.
        node: String,
        /// What the decoder reported.
        #[source]
        source: serde_json::Error,
    },
}

/// A node's failure: its cause, and whether trying again may help. (Also
/// how [`NodeContext::interrupt`](crate::NodeContext::interrupt) pauses a node: return it with `?`.)
#[derive(Debug)]
pub struct NodeError {
    source: Box<dyn std::error::Error + Send + Sync>,
    retryable: bool,
    class: Option<String>,
    pub(crate) signal: Option<Box<Signal>>,
}

/// What a [`NodeError`] tells the driver besides a failure.
#[derive(Debug)]
pub(crate) enum Signal {
    /// The node paused for decisions (a subgraph may raise several).
    Paused(Vec<Raised>),
    /// A subgraph stopped at a step boundary because the run was asked to
    /// (cancel, release): the run stops too, its step unfinished.
    Stopped,
    /// A subgraph's leg ended on an error the run reports as its own (the
    /// store refused a write: fenced, gone).
    Halted(RunError),
    /// A workflow sleeps until this time (ms since the Unix epoch): the
    /// run goes back to the queue, its step unfinished, not to be claimed
    /// before then.
    Sleep(i64),
}

/// The cause of a [`NodeError`] that parked its run until a time.
#[derive(Debug, thiserror::Error)]
#[error("the workflow sleeps until {until_ms} ms")]
struct Sleeping {
    until_ms: i64,
}

/// The cause of a [`NodeError`] that stopped a subgraph with its run.
#[derive(Debug, thiserror::Error)]
#[error("the subgraph stopped with its run")]
struct Stopped;

/// The cause of a [`NodeError`] that paused its node for a decision.
#[derive(Debug, thiserror::Error)]
#[error("the node paused for a decision (interrupt {ordinal})")]
pub struct Paused {
    ordinal: u32,
}

impl NodeError {
    /// A failure that retrying will not fix.
    pub fn fatal(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self { source: source.into(), retryable: false, class: None, signal: None }
    }

    pub(crate) fn paused(raised: Raised) -> Self {
        Self::signal(Signal::Paused(vec![raised]))
    }

    /// An error that carries `signal` to the driver.
    pub(crate) fn signal(signal: Signal) -> Self {
        let source: Box<dyn std::error::Error + Send + Sync> = match &signal {
            Signal::Paused(raised) => {
                Box::new(Paused { ordinal: raised.first().map_or(0, |raised| raised.ordinal) })
            }
            Signal::Stopped => Box::new(Stopped),
            Signal::Halted(error) => error.to_string().into(),
            Signal::Sleep(until_ms) => Box::new(Sleeping { until_ms: *until_ms }),
        };
        Self { source, retryable: false, class: None, signal: Some(Box::new(signal)) }
    }

    /// Whether this is a pause for a decision rather than a failure.
    pub fn is_pause(&self) -> bool {
        matches!(self.signal.as_deref(), Some(Signal::Paused(_)))
    }

    /// A failure the node's [`RetryPolicy`](crate::RetryPolicy) may retry (a timeout, a 503).
    pub fn retryable(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self { source: source.into(), retryable: true, class: None, signal: None }
    }

    /// Whether the retry policy may retry it.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The cause.
    pub fn cause(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }

    /// Names the failure's class (snake_case, such as `rate_limited` or
    /// `auth`), so that a run that fails of it says so as data
    /// ([`RunFailure::class`](tollgate_checkpoint::RunFailure::class))
    /// rather than only in its message. The agent harness sets it from its
    /// error classes.
    pub fn with_class(mut self, class: impl Into<String>) -> Self {
        self.class = Some(class.into());
        self
    }

    /// The failure's class, when one was named.
    pub fn class(&self) -> Option<&str> {
        self.class.as_deref()
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}

impl std::error::Error for NodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.source()
    }
}
