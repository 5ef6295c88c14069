//! Ordered assertions over a run's events.

use tollgate_checkpoint::RunStatus;
use tollgate_engine::{Event, EventEnvelope};

/// Starts ordered assertions over `events`: each step finds the next
/// matching event after the previous match, and a miss panics with the
/// whole trajectory printed.
///
/// An agent's run reads `assert_trajectory(run.events()).model_called("default")
/// .tool_called("lookup_user").model_called("default").completed()`; any
/// run's stored events work:
///
/// ```
/// use std::sync::Arc;
/// use tollgate_checkpoint::MemoryStore;
/// use tollgate_engine::{DynState, Executor, RunConfig, StateGraph, END, START};
/// use tollgate_testkit::assert_trajectory;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let graph = StateGraph::<DynState>::new("one", 1)
///     .node("only", |_state: Arc<DynState>, _ctx| async { Ok(Default::default()) })
///     .edge(START, "only")
///     .edge("only", END)
///     .compile()
///     .unwrap();
/// let executor = Executor::new(MemoryStore::new());
/// let outcome = executor.run(&graph, DynState::default(), RunConfig::new()).await.unwrap();
/// let stored = executor.store().events(outcome.run_id, 0, usize::MAX).await.unwrap();
/// let events: Vec<_> = stored.iter().map(|e| serde_json::from_str(&e.json).unwrap()).collect();
/// assert_trajectory(&events).event("node_started").event("checkpoint_saved").completed();
/// # });
/// ```
pub fn assert_trajectory(events: &[EventEnvelope]) -> Trajectory<'_> {
    Trajectory { events, next: 0 }
}

/// Ordered assertions over events; see [`assert_trajectory`].
#[derive(Debug)]
pub struct Trajectory<'a> {
    events: &'a [EventEnvelope],
    next: usize,
}

impl<'a> Trajectory<'a> {
    fn find(mut self, what: &str, matches: impl Fn(&Event) -> bool) -> Self {
        match self.events[self.next..].iter().position(|e| matches(&e.event)) {
            Some(offset) => {
                self.next += offset + 1;
                self
            }
            None => panic!(
                "expected {what} after event {} but found none; trajectory:\n{}",
                self.next,
                render(self.events)
            ),
        }
    }

    /// A model call (attempt) of the model or agent named `name`.
    pub fn model_called(self, name: &str) -> Self {
        self.find(&format!("a call of model `{name}`"), |event| {
            matches!(event, Event::ModelStarted { model, agent, .. } if model == name || agent == name)
        })
    }

    /// A call of tool `name`.
    pub fn tool_called(self, name: &str) -> Self {
        self.find(
            &format!("a call of tool `{name}`"),
            |event| matches!(event, Event::ToolStarted { tool, .. } if tool == name),
        )
    }

    /// A call of tool `name` with exactly `args`.
    pub fn tool_called_with(self, name: &str, args: serde_json::Value) -> Self {
        self.find(&format!("a call of tool `{name}` with {args}"), |event| {
            matches!(event, Event::ToolStarted { tool, args: a, .. } if tool == name && *a == args)
        })
    }

    /// A completed call of tool `name` that succeeded (`ok`) or not.
    pub fn tool_completed(self, name: &str, ok: bool) -> Self {
        self.find(&format!("tool `{name}` completing with ok={ok}"), |event| {
            matches!(event, Event::ToolCompleted { tool, ok: o, .. } if tool == name && *o == ok)
        })
    }

    /// An event of this kind (`retry_scheduled`, `interrupt_raised`, ...).
    pub fn event(self, kind: &str) -> Self {
        self.find(&format!("a `{kind}` event"), |event| event.kind() == kind)
    }

    /// An interrupt of this kind.
    pub fn interrupted(self, kind: &str) -> Self {
        self.find(&format!("an interrupt of kind `{kind}`"), |event| {
            matches!(event, Event::InterruptRaised { interrupt, .. } if interrupt.kind == kind)
        })
    }

    /// No tool of this name is called from here on.
    pub fn no_tool_called(self, name: &str) -> Self {
        if let Some(event) = self.events[self.next..]
            .iter()
            .find(|e| matches!(&e.event, Event::ToolStarted { tool, .. } if tool == name))
        {
            panic!(
                "tool `{name}` was called (seq {}) but should not be; trajectory:\n{}",
                event.seq,
                render(self.events)
            );
        }
        self
    }

    /// The log ends with a leg that ended with `status`.
    pub fn ended(self, status: RunStatus) -> Self {
        match self.events.last().map(|e| &e.event) {
            Some(Event::RunEnded { status: found, .. }) if *found == status => self,
            _ => panic!("expected the run to end {status:?}; trajectory:\n{}", render(self.events)),
        }
    }

    /// The log ends with the run completed.
    pub fn completed(self) -> Self {
        self.ended(RunStatus::Completed)
    }
}

/// One line per event: `seq kind node details`.
pub fn render(events: &[EventEnvelope]) -> String {
    events
        .iter()
        .map(|e| {
            let detail = match &e.event {
                Event::ModelStarted { model, attempt, .. } => format!("{model} attempt {attempt}"),
                Event::ToolStarted { tool, args, .. } => format!("{tool} {args}"),
                Event::ToolCompleted { tool, ok, summary, .. } => {
                    format!("{tool} ok={ok} {summary}")
                }
                Event::RunEnded { status, .. } => format!("{status:?}"),
                Event::InterruptRaised { interrupt, .. } => interrupt.kind.clone(),
                Event::RetryScheduled { error, delay_ms, .. } => format!("{delay_ms} ms: {error}"),
                Event::Custom { name, payload } => format!("{name} {payload}"),
                _ => String::new(),
            };
            let node = e.node_id.as_deref().unwrap_or("-");
            format!("  {:>3} {:<20} {node:<16} {detail}", e.seq, e.event.kind())
        })
        .collect::<Vec<_>>()
        .join("\n")
}
