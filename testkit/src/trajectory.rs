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
/// let stored = executor.store().events(outcome.run_id, 0, u64::MAX).await.unwrap();
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

    /// The [`ModelFallback`](tollgate_nodes::ModelFallback) middleware
    /// switched to the model named `model`.
    pub fn fallback_selected(self, model: &str) -> Self {
        self.find(&format!("a fallback to `{model}`"), |event| {
            matches!(event, Event::Custom { name, payload } if name == "fallback_selected" && payload["model"] == model)
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

    fn count(&self, what: &str, expected: usize, matches: impl Fn(&Event) -> bool) {
        let found = self.events.iter().filter(|e| matches(&e.event)).count();
        assert!(
            found == expected,
            "expected {expected} {what}, found {found}; trajectory:\n{}",
            render(self.events)
        );
    }

    /// Exactly `n` model calls (attempts) in the whole log: no unexpected
    /// provider calls.
    pub fn model_calls(self, n: usize) -> Self {
        self.count("model calls", n, |e| matches!(e, Event::ModelStarted { .. }));
        self
    }

    /// Exactly `n` tool calls in the whole log.
    pub fn tool_calls(self, n: usize) -> Self {
        self.count("tool calls", n, |e| matches!(e, Event::ToolStarted { .. }));
        self
    }

    /// Exactly `n` retries of model calls in the whole log.
    pub fn retries(self, n: usize) -> Self {
        self.count("model-call retries", n, |e| {
            matches!(e, Event::RetryScheduled { call_id: Some(_), .. })
        });
        self
    }

    /// Exactly `n` model calls reporting token usage.
    pub fn usage_records(self, n: usize) -> Self {
        self.count("usage records", n, |e| {
            matches!(e, Event::ModelCompleted { usage: Some(_), .. })
        });
        self
    }

    /// Exactly `n` checkpoints.
    pub fn checkpoints(self, n: usize) -> Self {
        self.count("checkpoints", n, |e| matches!(e, Event::CheckpointSaved { .. }));
        self
    }

    /// These event kinds appear in this order (others may come between).
    pub fn kinds_in_order(self, kinds: &[&str]) -> Self {
        kinds.iter().fold(self, |trajectory, kind| trajectory.event(kind))
    }

    /// Nodes started in exactly this order, over the whole log.
    pub fn node_sequence(self, nodes: &[&str]) -> Self {
        let found: Vec<&str> = self
            .events
            .iter()
            .filter(|e| matches!(e.event, Event::NodeStarted { .. }))
            .filter_map(|e| e.node.as_deref())
            .collect();
        assert!(
            found == nodes,
            "expected node sequence {nodes:?}, found {found:?}; trajectory:\n{}",
            render(self.events)
        );
        self
    }

    /// The last model answer's text is `text`.
    pub fn final_message(self, text: &str) -> Self {
        let last = self.events.iter().rev().find_map(|e| match &e.event {
            Event::ModelCompleted { message, .. } => message["content"].as_str(),
            _ => None,
        });
        assert!(
            last == Some(text),
            "expected the final message {text:?}, found {last:?}; trajectory:\n{}",
            render(self.events)
        );
        self
    }

    /// The completed run's state holds `value` as `agent`'s structured
    /// answer.
    pub fn structured_output(self, agent: &str, value: &serde_json::Value) -> Self {
        let found = self.events.iter().rev().find_map(|e| match &e.event {
            Event::RunEnded { result: Some(result), .. } => {
                result["structured"].get(agent).cloned()
            }
            _ => None,
        });
        assert!(
            found.as_ref() == Some(value),
            "expected structured output {value} from `{agent}`, found {found:?}; trajectory:\n{}",
            render(self.events)
        );
        self
    }

    /// The completed run's final state holds `value` at the JSON pointer
    /// `pointer` (`/count`, `/messages/0/content`).
    pub fn final_state(self, pointer: &str, value: &serde_json::Value) -> Self {
        let found = self.events.iter().rev().find_map(|e| match &e.event {
            Event::RunEnded { result: Some(result), .. } => result.pointer(pointer).cloned(),
            _ => None,
        });
        assert!(
            found.as_ref() == Some(value),
            "expected {value} at `{pointer}` of the final state, found {found:?}; trajectory:\n{}",
            render(self.events)
        );
        self
    }

    /// The update `node` wrote at `step` holds `value` at `pointer` (for a
    /// whole checkpoint's state, use `Executor::state_at`).
    pub fn update_at(
        self,
        step: u64,
        node: &str,
        pointer: &str,
        value: &serde_json::Value,
    ) -> Self {
        let found = self.events.iter().find_map(|e| match &e.event {
            Event::NodeCompleted { step: s, update, .. }
                if *s == step && e.node.as_deref() == Some(node) =>
            {
                update.pointer(pointer).cloned()
            }
            _ => None,
        });
        assert!(
            found.as_ref() == Some(value),
            "expected `{node}` at step {step} to write {value} at `{pointer}`, found {found:?}; trajectory:\n{}",
            render(self.events)
        );
        self
    }

    /// An interrupt of `kind` accepting exactly `decisions` (`approve`,
    /// `edit`, `respond`, `reject`).
    pub fn interrupt_with_options(self, kind: &str, decisions: &[&str]) -> Self {
        self.find(&format!("an interrupt of kind `{kind}` accepting {decisions:?}"), |event| {
            matches!(event, Event::InterruptRaised { interrupt, .. }
                if interrupt.kind == kind
                    && interrupt.decisions.iter().map(|d| d.as_str()).eq(decisions.iter().copied()))
        })
    }

    /// After the next `run_resumed`, the first node to start is `node`.
    pub fn resumed_at(self, node: &str) -> Self {
        let after = self.event("run_resumed");
        let next = after.events[after.next..]
            .iter()
            .find(|e| matches!(e.event, Event::NodeStarted { .. }))
            .and_then(|e| e.node.as_deref());
        assert!(
            next == Some(node),
            "expected the run to resume at `{node}`, it resumed at {next:?}; trajectory:\n{}",
            render(after.events)
        );
        after
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
