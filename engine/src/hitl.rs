//! Human in the loop: interrupts nodes raise and the decisions people make.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tollgate_checkpoint::{InterruptRecord, RunId};

/// Ordinal of a breakpoint before a node runs.
pub(crate) const BEFORE: u32 = u32::MAX - 1;
/// Ordinal of a breakpoint after a node ran.
pub(crate) const AFTER: u32 = u32::MAX;

/// A decision a person can make on an interrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// Go ahead as proposed.
    Approve,
    /// Go ahead with an edited value.
    Edit,
    /// Answer a question.
    Respond,
    /// Refuse.
    Reject,
}

/// `approve`, `edit` and `reject`, as the CLI and JSON spell them.
fn kinds(kinds: &[DecisionKind]) -> String {
    let names: Vec<String> = kinds.iter().map(|kind| format!("`{}`", kind.as_str())).collect();
    names.join(", ")
}

impl fmt::Display for DecisionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl DecisionKind {
    /// Every kind.
    pub const ALL: [DecisionKind; 4] =
        [DecisionKind::Approve, DecisionKind::Edit, DecisionKind::Respond, DecisionKind::Reject];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Approve => "approve",
            DecisionKind::Edit => "edit",
            DecisionKind::Respond => "respond",
            DecisionKind::Reject => "reject",
        }
    }
}

/// A person's decision on an interrupt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Go ahead as proposed.
    Approve,
    /// Go ahead with this value instead.
    Edit {
        /// The edited value.
        value: Value,
    },
    /// The answer to a question.
    Respond {
        /// The answer.
        value: Value,
    },
    /// Refuse, with an optional reason.
    Reject {
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl Decision {
    /// Which kind of decision this is.
    pub fn kind(&self) -> DecisionKind {
        match self {
            Decision::Approve => DecisionKind::Approve,
            Decision::Edit { .. } => DecisionKind::Edit,
            Decision::Respond { .. } => DecisionKind::Respond,
            Decision::Reject { .. } => DecisionKind::Reject,
        }
    }

    /// The value of an `edit` or `respond`.
    pub fn value(&self) -> Option<&Value> {
        match self {
            Decision::Edit { value } | Decision::Respond { value } => Some(value),
            _ => None,
        }
    }
}

/// What a node asks a person: raise it with
/// [`NodeContext::interrupt`](crate::NodeContext::interrupt).
#[derive(Debug, Clone, PartialEq)]
pub struct Interrupt {
    pub(crate) kind: String,
    pub(crate) payload: Value,
    pub(crate) decisions: Vec<DecisionKind>,
    pub(crate) schema: Option<Value>,
    pub(crate) handles_rejection: bool,
}

impl Interrupt {
    /// The request a stored interrupt made (a subgraph's, raised again in
    /// its parent).
    pub(crate) fn from_record(record: &InterruptRecord) -> Self {
        Self {
            kind: record.kind.clone(),
            payload: record.payload.clone(),
            decisions: PendingInterrupt::from_record(record).decisions,
            schema: record.schema.clone(),
            handles_rejection: record.rejection_routed,
        }
    }

    /// An interrupt of `kind` (`approval`, `question`, ...) showing
    /// `payload`; every decision is accepted until [`Interrupt::allow`]
    /// narrows them.
    pub fn new(kind: impl Into<String>, payload: Value) -> Self {
        Self {
            kind: kind.into(),
            payload,
            decisions: DecisionKind::ALL.to_vec(),
            schema: None,
            handles_rejection: false,
        }
    }

    /// Accepts only these decisions.
    pub fn allow(mut self, decisions: impl IntoIterator<Item = DecisionKind>) -> Self {
        self.decisions = decisions.into_iter().collect();
        self
    }

    /// Hands a rejection back to the node: the node runs again and this
    /// interrupt's `interrupt` call returns [`Decision::Reject`] (an agent
    /// tells its model that a person refused a tool call). Without it a
    /// rejection ends the run `rejected`. A node the graph routes
    /// rejections of ([`StateGraph::on_reject`](crate::StateGraph::on_reject))
    /// follows that route either way.
    pub fn handle_rejection(mut self) -> Self {
        self.handles_rejection = true;
        self
    }

    /// The JSON Schema an `edit` or `respond` value must satisfy.
    pub fn schema(mut self, schema: Value) -> Self {
        self.schema = Some(schema);
        self
    }
}

/// An interrupt a task raised, on its way to the store.
#[derive(Debug, Clone)]
pub(crate) struct Raised {
    pub(crate) ordinal: u32,
    pub(crate) request: Interrupt,
    /// Raised inside a subgraph: the (path, id) of the node that asked.
    pub(crate) origin: Option<(String, String)>,
}

/// The stable id of an interrupt: `RUN.STEP.TASK.ORDINAL` (ordinals of
/// breakpoints read `before` / `after`).
pub(crate) fn interrupt_id(run: RunId, step: u64, task: u32, ordinal: u32) -> String {
    match ordinal {
        BEFORE => format!("{run}.{step}.{task}.before"),
        AFTER => format!("{run}.{step}.{task}.after"),
        n => format!("{run}.{step}.{task}.{n}"),
    }
}

/// An interrupt waiting for (or holding) a decision, as callers see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingInterrupt {
    /// Stable id: `RUN.STEP.TASK.ORDINAL`.
    pub id: String,
    /// The node that raised it.
    pub node: String,
    /// The step in flight.
    pub step: u64,
    /// The task's position in the step.
    pub task: u32,
    /// What is asked.
    pub kind: String,
    /// What the person is shown.
    pub payload: Value,
    /// Decisions accepted.
    pub decisions: Vec<DecisionKind>,
    /// JSON Schema of an `edit` or `respond` value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// The decision, once made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// Who made it ([`DecisionRequest::by`]): the authenticated caller on
    /// a server with named tokens, else as the decider named themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// The note beside the decision ([`DecisionRequest::note`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_note: Option<String>,
}

impl PendingInterrupt {
    pub(crate) fn from_record(record: &InterruptRecord) -> Self {
        let decisions = record
            .decisions
            .iter()
            .filter_map(|name| DecisionKind::ALL.into_iter().find(|kind| kind.as_str() == name))
            .collect();
        Self {
            id: record.id.clone(),
            node: record.node.clone(),
            step: record.step,
            task: record.task,
            kind: record.kind.clone(),
            payload: record.payload.clone(),
            decisions,
            schema: record.schema.clone(),
            decision: record.decision.clone().and_then(|value| serde_json::from_value(value).ok()),
            decided_by: stored_text(record, DECIDED_BY),
            decision_note: stored_text(record, DECISION_NOTE),
        }
    }
}

/// A text stored beside a record's decision under `key`.
fn stored_text(record: &InterruptRecord, key: &str) -> Option<String> {
    record
        .decision
        .as_ref()
        .and_then(|value| value.get(key))
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

/// The kind of the executor's breakpoints (`interrupt_before` /
/// `interrupt_after`); a node may not raise an interrupt of this kind, so
/// [`PendingInterrupt::breakpoint`] tells breakpoints apart for certain.
pub const BREAKPOINT: &str = "breakpoint";

/// Which side of its node a breakpoint paused on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakpointSide {
    /// Before the node ran (`RunConfig::interrupt_before`).
    Before,
    /// After the node ran, its update kept (`RunConfig::interrupt_after`).
    After,
}

/// A breakpoint a run paused on, typed (see [`PendingInterrupt::breakpoint`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breakpoint {
    /// The node.
    pub node: String,
    /// Before or after it.
    pub side: BreakpointSide,
}

impl PendingInterrupt {
    /// The breakpoint this interrupt is, or `None` for an interrupt a node
    /// raised: no string to compare. The node is the interrupt's (a path
    /// inside a subgraph: `review/draft`).
    pub fn breakpoint(&self) -> Option<Breakpoint> {
        if self.kind != BREAKPOINT {
            return None;
        }
        // The executor's own payload says which side (only the executor
        // raises this kind); the run's own breakpoints' ids also end in
        // `.before` or `.after` (a subgraph's are numbered in its parent).
        let when = self.payload.get("when").and_then(Value::as_str);
        let side = match when.or_else(|| self.id.rsplit('.').next())? {
            "before" => BreakpointSide::Before,
            "after" => BreakpointSide::After,
            _ => return None,
        };
        Some(Breakpoint { node: self.node.clone(), side })
    }
}

/// Which interrupt a decision answers and what it is.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRequest {
    /// The interrupt; `None` addresses the only pending one.
    pub interrupt: Option<String>,
    /// The decision.
    pub decision: Decision,
    /// The run version (`RunRecord::epoch`) the decider saw; when set, a
    /// run that changed since is a [`DecisionError::Conflict`].
    pub expected_version: Option<u64>,
    /// Who decides (a name or an address, as the caller knows them),
    /// recorded with the decision and shown in `run_resumed` events as
    /// `decided_by`, so a reviewer who lost a race sees who won. A server
    /// with named tokens sets it to the authenticated caller; otherwise
    /// it is what the caller says.
    pub by: Option<String>,
    /// A free-text note beside the decision (what a reviewer typed as
    /// their name where the server knows who they are), shown as
    /// `decision_note`.
    pub note: Option<String>,
    /// Further interrupts of the same pause answered in the same call:
    /// all are recorded in one write, or none (an unknown, already
    /// answered, refused or invalid one refuses the whole request).
    pub more: Vec<(String, Decision)>,
}

/// The key under which the decider's name is stored beside the decision.
pub(crate) const DECIDED_BY: &str = "by";

/// The key under which a decision's note is stored beside it.
pub(crate) const DECISION_NOTE: &str = "note";

impl DecisionRequest {
    /// A decision on the run's only pending interrupt.
    pub fn new(decision: Decision) -> Self {
        Self {
            interrupt: None,
            decision,
            expected_version: None,
            by: None,
            note: None,
            more: Vec::new(),
        }
    }

    /// A decision on the interrupt `id`.
    pub fn on(id: impl Into<String>, decision: Decision) -> Self {
        Self {
            interrupt: Some(id.into()),
            decision,
            expected_version: None,
            by: None,
            note: None,
            more: Vec::new(),
        }
    }

    /// Refuses the decision if the run moved past `version` (another
    /// reviewer decided first).
    pub fn at_version(mut self, version: u64) -> Self {
        self.expected_version = Some(version);
        self
    }

    /// Decisions on several interrupts of one pause, in one call (a map
    /// from interrupt id to decision): recorded together, or not at all.
    /// `None` when `answers` is empty.
    pub fn all(answers: impl IntoIterator<Item = (String, Decision)>) -> Option<Self> {
        let mut answers = answers.into_iter();
        let (id, decision) = answers.next()?;
        Some(Self { more: answers.collect(), ..Self::on(id, decision) })
    }

    /// Records who decides (see [`DecisionRequest::by`](Self#structfield.by)).
    pub fn by(mut self, who: impl Into<String>) -> Self {
        self.by = Some(who.into());
        self
    }

    /// Records a note beside the decision (see
    /// [`DecisionRequest::note`](Self#structfield.note)).
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// A refused decision. Nothing was recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// The run is not waiting for a decision.
    #[error("run {run} is {status}, not awaiting a decision")]
    NotPaused {
        /// The run.
        run: RunId,
        /// Its status.
        status: tollgate_checkpoint::RunStatus,
    },
    /// No open interrupt has this id.
    #[error("run {run} has no interrupt `{interrupt}` waiting; pending: {}", if pending.is_empty() { "none".to_owned() } else { pending.join(", ") })]
    InterruptNotFound {
        /// The run.
        run: RunId,
        /// The id given.
        interrupt: String,
        /// The ids still waiting.
        pending: Vec<String>,
    },
    /// The interrupt is answered already.
    #[error("interrupt `{interrupt}` of run {run} is already answered")]
    AlreadyAnswered {
        /// The run.
        run: RunId,
        /// The interrupt.
        interrupt: String,
    },
    /// No id was given and several interrupts are waiting.
    #[error("run {run} has {} interrupts waiting; name one of {}", pending.len(), pending.join(", "))]
    Ambiguous {
        /// The run.
        run: RunId,
        /// The ids waiting.
        pending: Vec<String>,
    },
    /// The interrupt does not accept this kind of decision.
    #[error("interrupt `{interrupt}` accepts {}, not `{}`", kinds(allowed), decision.as_str())]
    NotAllowed {
        /// The interrupt.
        interrupt: String,
        /// The decision given.
        decision: DecisionKind,
        /// The decisions accepted.
        allowed: Vec<DecisionKind>,
    },
    /// The value of an `edit` or `respond` does not satisfy the schema.
    #[error("the answer to `{interrupt}` does not match its schema: {}", errors.join("; "))]
    InvalidValue {
        /// The interrupt.
        interrupt: String,
        /// What the validator reported.
        errors: Vec<String>,
    },
    /// Another decision (or a claim) changed the run since it was read:
    /// of two concurrent decisions, this one lost.
    #[error("run {run} changed (version {expected} -> {found}); reload it and decide again")]
    Conflict {
        /// The run.
        run: RunId,
        /// The version this decision was based on.
        expected: u64,
        /// The version found.
        found: u64,
    },
    /// The store refused or failed.
    #[error(transparent)]
    Store(tollgate_checkpoint::StoreError),
}

/// Checks an `edit` / `respond` value against the interrupt's schema.
pub(crate) fn validate(
    interrupt: &str,
    schema: &Value,
    value: &Value,
) -> Result<(), DecisionError> {
    let invalid = |errors| DecisionError::InvalidValue { interrupt: interrupt.to_owned(), errors };
    let validator = jsonschema::validator_for(schema)
        .map_err(|error| invalid(vec![format!("the interrupt's schema is invalid: {error}")]))?;
    let errors: Vec<String> = validator.iter_errors(value).map(|error| error.to_string()).collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(invalid(errors))
    }
}
