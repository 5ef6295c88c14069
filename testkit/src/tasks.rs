//! Scripted results for a durable workflow's tasks: unit-test a workflow's
//! logic without the services its tasks call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde_json::Value;
use tollgate_engine::{NodeError, RunConfig, TaskScript};

/// What a scripted task does at an attempt.
#[derive(Debug, Clone)]
enum Scripted {
    /// Returns this (JSON of the task's result type).
    Returns(Value),
    /// Fails: retryable or fatal, with a message.
    Fails { message: String, retryable: bool },
}

#[derive(Debug, Default)]
struct Inner {
    /// Per task name: what each attempt does; past the last, the last
    /// again, unless it is a retryable failure (then the task runs).
    script: HashMap<String, Vec<Scripted>>,
    /// Every attempt the script answered: (name, attempt).
    answered: Vec<(String, u32)>,
}

/// Results given to a workflow's tasks instead of running them: hand it to
/// the run ([`ScriptedTasks::config`], or `RunConfig::task_script`), and
/// each task the script names takes its result from it (stored as a real
/// result is, so a continued run replays it), while the others run. Names
/// are as the run's events show them (`charge/capture` inside a workflow
/// the run calls).
///
/// ```
/// use tollgate_checkpoint::MemoryStore;
/// use tollgate_engine::{Executor, RunConfig, Workflow};
/// use tollgate_testkit::ScriptedTasks;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let quote = Workflow::new("quote", 1, |ctx, item: String| async move {
///     let price: u32 = ctx.task("price", || async { unreachable!("scripted") }).await?;
///     let tax: u32 = ctx.task("tax", move || async move { Ok(price / 5) }).await?;
///     Ok(format!("{item}: {}", price + tax))
/// })
/// .unwrap();
/// let tasks = ScriptedTasks::new().returns("price", 100);
/// let executor = Executor::new(MemoryStore::new());
/// let config = tasks.config(RunConfig::new());
/// let done = executor.run(quote.graph(), quote.input(&"lamp".into()).unwrap(), config).await.unwrap();
/// assert_eq!(quote.output(&done.state).unwrap().unwrap(), "lamp: 120");
/// assert_eq!(tasks.answered(), [("price".to_owned(), 1)]);
/// # });
/// ```
#[derive(Debug, Clone, Default)]
pub struct ScriptedTasks {
    inner: Arc<Mutex<Inner>>,
}

impl ScriptedTasks {
    /// No task scripted: every task runs.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(self, name: &str, scripted: Scripted) -> Self {
        self.lock().script.entry(name.to_owned()).or_default().push(scripted);
        self
    }

    /// Task `name` returns `result` (at its next scripted attempt, and at
    /// every attempt after the last one scripted).
    ///
    /// # Panics
    ///
    /// When `result` does not serialize to JSON (a test's mistake).
    pub fn returns(self, name: &str, result: impl Serialize) -> Self {
        let value = serde_json::to_value(result).expect("a scripted result serializes to JSON");
        self.push(name, Scripted::Returns(value))
    }

    /// Task `name` fails fatally with `message`.
    pub fn fails(self, name: &str, message: &str) -> Self {
        self.push(name, Scripted::Fails { message: message.to_owned(), retryable: false })
    }

    /// Task `name` fails retryably with `message` at its next scripted
    /// attempt; once the script has no more for it, the task runs (its
    /// retry policy decides whether there is another attempt).
    pub fn fails_retryably(self, name: &str, message: &str) -> Self {
        self.push(name, Scripted::Fails { message: message.to_owned(), retryable: true })
    }

    /// `config` with this script.
    pub fn config(&self, config: RunConfig) -> RunConfig {
        config.task_script(Arc::new(self.clone()))
    }

    /// Every attempt the script answered so far, in order: (task name,
    /// attempt). A task that returned its stored result on a continued
    /// run asks nothing and is not listed.
    pub fn answered(&self) -> Vec<(String, u32)> {
        self.lock().answered.clone()
    }
}

impl TaskScript for ScriptedTasks {
    fn result(&self, name: &str, attempt: u32) -> Option<Result<Value, NodeError>> {
        let mut inner = self.lock();
        let steps = inner.script.get(name)?;
        let index = usize::try_from(attempt.saturating_sub(1)).unwrap_or(usize::MAX);
        let step = match steps.get(index) {
            Some(step) => step.clone(),
            None => match steps.last()? {
                Scripted::Fails { retryable: true, .. } => return None,
                last => last.clone(),
            },
        };
        inner.answered.push((name.to_owned(), attempt));
        Some(match step {
            Scripted::Returns(value) => Ok(value),
            Scripted::Fails { message, retryable: true } => Err(NodeError::retryable(message)),
            Scripted::Fails { message, retryable: false } => Err(NodeError::fatal(message)),
        })
    }
}
