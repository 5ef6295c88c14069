//! What a run is created with: LangGraph's `RunCreate` as tollgate reads
//! it, and LangGraph's `Command` as run input.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tollgate_engine::END;

use super::super::errors::{ApiError, ApiResult};
use crate::error::ServiceError;
use crate::service::Multitask;

/// What a run is created with (the fields of LangGraph's `RunCreate` that
/// tollgate reads; the others are accepted and ignored, or refused when
/// they would change what runs: see [`RunBody::refusal`]).
#[derive(Deserialize, Serialize, Default, Clone)]
pub(super) struct RunBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) assistant_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) command: Option<CommandBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stream_mode: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) interrupt_before: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) interrupt_after: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) webhook: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) multitask_strategy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) if_not_exists: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) after_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) checkpoint_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) checkpoint: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) config: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) context: Option<Value>,
    /// Who asked (the token's principal), recorded on decisions; never
    /// read from the body.
    #[serde(skip)]
    pub(super) by: Option<String>,
    /// Who asked, with their scope: the owner of a thread the run makes.
    /// Never read from the body, nor kept with a pending run (its thread
    /// was made when it was asked for).
    #[serde(skip)]
    pub(super) caller: Option<crate::identity::Caller>,
    /// Where its agents' memory lies (the caller's shelf; a pending run
    /// keeps it beside its request). Never read from the body.
    #[serde(skip)]
    pub(super) shelf: Vec<String>,
}

/// LangGraph's `Command` as run input.
#[derive(Deserialize, Serialize, Default, Clone)]
pub(super) struct CommandBody {
    pub(super) resume: Option<Value>,
    pub(super) update: Option<Value>,
    pub(super) goto: Option<Value>,
}

impl CommandBody {
    /// Whether it names where to go.
    pub(super) fn moves(&self) -> bool {
        self.goto.as_ref().is_some_and(|goto| !goto.is_null())
    }

    /// The nodes of `goto`: a node's name or a list of them (a `Send`,
    /// `{"node", "arg"}`, is refused), without `__end__`.
    pub(super) fn nodes(&self) -> ApiResult<Vec<String>> {
        let named = |value: &Value| match value {
            Value::String(node) => Ok(node.clone()),
            Value::Object(send) if send.contains_key("node") => {
                Err(super::unsupported_error("`Send` in `Command(goto=…)` (name the nodes)"))
            }
            _ => Err(ServiceError::invalid("`goto` must name a node or a list of nodes").into()),
        };
        let nodes = match &self.goto {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(nodes)) => nodes.iter().map(named).collect::<ApiResult<_>>()?,
            Some(node) => vec![named(node)?],
        };
        // `__end__` is no node: going there plans nothing, and the run
        // ends once continued.
        Ok(nodes.into_iter().filter(|node| node != END).collect())
    }

    /// The state update, an object.
    pub(super) fn state_update(&self) -> ApiResult<Option<Value>> {
        match &self.update {
            None | Some(Value::Null) => Ok(None),
            Some(update @ Value::Object(_)) => Ok(Some(update.clone())),
            Some(_) => {
                Err(ServiceError::invalid("`update` must be an object: the fields to write").into())
            }
        }
    }
}

impl RunBody {
    /// The body as `caller` sent it: decisions recorded as theirs, a
    /// thread the run makes owned by them.
    pub(super) fn asked_by(&mut self, caller: crate::identity::Caller) {
        self.by = caller.principal().map(|who| who.name.clone());
        self.shelf = caller.shelf();
        self.caller = Some(caller);
    }

    /// What of the body this server does not do (yet), as a 422.
    pub(super) fn refusal(&self) -> Option<ApiError> {
        if let Some(invalid) = self.invalid() {
            return Some(invalid);
        }
        let what = if self.interrupt_before.as_ref().is_some_and(|v| v.is_string())
            || self.interrupt_after.as_ref().is_some_and(|v| v.is_string())
        {
            "`interrupt_before`/`interrupt_after` as `\"*\"` (name the nodes)"
        } else if !matches!(
            self.multitask_strategy.as_deref(),
            None | Some("reject" | "interrupt" | "rollback" | "enqueue")
        ) {
            "a `multitask_strategy` other than `reject`, `interrupt`, `rollback` or `enqueue`"
        } else if (self.enqueues() || self.delay_ms().is_some())
            && (self.command.is_some() || self.checkpoint().is_some())
        {
            "an enqueued or delayed run (`enqueue`, `after_seconds`) with a `command` or a checkpoint"
        } else if self.delay_ms().is_some()
            && matches!(self.strategy(), Multitask::Interrupt | Multitask::Rollback)
        {
            "`after_seconds` with multitask strategy `interrupt` or `rollback`"
        } else if self.checkpoint().is_some() && self.command.is_some() {
            "a `command` together with a checkpoint to start from"
        } else if self.command.as_ref().is_some_and(|command| {
            command.resume.is_some() && (command.moves() || command.update.is_some())
        }) {
            "`Command(resume=…)` together with `update` or `goto`"
        } else {
            return None;
        };
        Some(super::unsupported_error(what))
    }

    /// What this run does about a run in flight on its thread
    /// (`multitask_strategy`, checked in `refusal`; `reject` by default).
    pub(super) fn strategy(&self) -> Multitask {
        match self.multitask_strategy.as_deref() {
            Some("interrupt") => Multitask::Interrupt,
            Some("rollback") => Multitask::Rollback,
            Some("enqueue") => Multitask::Enqueue,
            _ => Multitask::Reject,
        }
    }

    /// Whether a thread with a run in flight keeps this one for later
    /// (`multitask_strategy="enqueue"`).
    pub(super) fn enqueues(&self) -> bool {
        self.strategy() == Multitask::Enqueue
    }

    /// How long to wait before starting (`after_seconds`, when above 0),
    /// in milliseconds.
    pub(super) fn delay_ms(&self) -> Option<i64> {
        // Whole milliseconds, at most a year (checked in `invalid`).
        self.after_seconds
            .filter(|seconds| *seconds > 0.0)
            .map(|seconds| (seconds * 1000.0).ceil() as i64)
    }

    /// What of the body is wrong whatever the server does, as a 422.
    fn invalid(&self) -> Option<ApiError> {
        let seconds = self.after_seconds?;
        (!seconds.is_finite() || !(0.0..=YEAR_SECONDS).contains(&seconds)).then(|| {
            ServiceError::invalid(format!(
                "`after_seconds` must be a number of seconds from 0 to {YEAR_SECONDS}, not {seconds}"
            ))
            .into()
        })
    }

    /// The checkpoint to start from: `checkpoint_id`, or
    /// `checkpoint.checkpoint_id` (`checkpoint` is LangGraph's free-form
    /// checkpoint config, read by key: only that field matters here).
    pub(super) fn checkpoint(&self) -> Option<&str> {
        self.checkpoint_id
            .as_deref()
            .or_else(|| self.checkpoint.as_ref().and_then(|c| c["checkpoint_id"].as_str()))
    }

    /// The stream modes asked for (`values` when none).
    pub(super) fn modes(&self) -> ApiResult<Vec<String>> {
        let modes: Vec<String> = match &self.stream_mode {
            None | Some(Value::Null) => vec!["values".into()],
            Some(Value::String(mode)) => vec![mode.clone()],
            Some(Value::Array(modes)) => {
                modes.iter().filter_map(Value::as_str).map(str::to_owned).collect()
            }
            Some(_) => {
                return Err(
                    ServiceError::invalid("`stream_mode` must be a mode or a list of them").into()
                )
            }
        };
        for mode in &modes {
            if !STREAM_MODES.contains(&mode.as_str()) {
                return Err(ServiceError::invalid(format!(
                    "unknown stream mode `{mode}` (values, updates, messages-tuple, messages, custom, events, debug)"
                ))
                .into());
            }
        }
        Ok(modes)
    }
}

/// The longest `after_seconds`: a year.
const YEAR_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

const STREAM_MODES: [&str; 7] =
    ["values", "updates", "messages-tuple", "messages", "custom", "events", "debug"];
