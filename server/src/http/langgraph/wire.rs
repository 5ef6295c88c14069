//! The shapes LangGraph's clients read: assistant ids, threads, runs,
//! thread states, checkpoints and messages, made from tollgate's.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use tollgate_checkpoint::{RunId, RunStatus, ThreadRecord, ThreadStatus, ThreadStorage};
use tollgate_engine::{format_rfc3339, PendingInterrupt};
use tollgate_nodes::ToolApproval;

use crate::error::ServiceError;
use crate::service::{InterruptView, Outline, RunSummary, UserInput};

/// A stable UUID for assistant `name` (SHA-256 of it, version 8 and the
/// RFC 4122 variant set), so that clients that keep assistant ids as
/// UUIDs get the same one from every server.
pub(super) fn assistant_uuid(name: &str) -> String {
    uuid_of(&format!("tollgate-assistant:{name}"))
}

/// A UUID (version 8, RFC 4122 variant) made of the SHA-256 of `seed`.
pub(super) fn uuid_of(seed: &str) -> String {
    let digest = Sha256::digest(seed.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// A run's status as LangGraph names it.
pub(super) fn run_status(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Queued => "pending",
        RunStatus::Running => "running",
        RunStatus::Completed => "success",
        RunStatus::AwaitingHitl | RunStatus::Interrupted => "interrupted",
        RunStatus::Failed | RunStatus::Rejected => "error",
        _ => "error",
    }
}

/// A run as LangGraph's `Run`.
pub(super) fn run(summary: &RunSummary, assistant: &str) -> Value {
    json!({
        "run_id": summary.id,
        "thread_id": summary.thread,
        "assistant_id": assistant_uuid(assistant),
        "created_at": format_rfc3339(summary.created_at_ms),
        "updated_at": format_rfc3339(summary.updated_at_ms),
        "status": run_status(summary.status),
        "metadata": {"graph_id": summary.graph, "tollgate_status": summary.status},
        "multitask_strategy": "reject",
        "kwargs": {},
    })
}

/// LangGraph's `Thread`.
#[derive(Serialize)]
pub(super) struct Thread {
    thread_id: String,
    created_at: String,
    updated_at: String,
    metadata: Value,
    /// `idle`, `busy`, `interrupted` or `error`.
    pub(super) status: &'static str,
    config: Value,
    /// The state the next run starts from.
    pub(super) values: Value,
    interrupts: Map<String, Value>,
}

/// A thread as LangGraph's `Thread`: its record (or, for a thread only
/// runs name, times taken from them), the status of its latest run, its
/// values and open interrupts.
pub(super) fn thread(
    id: &str,
    record: Option<&ThreadRecord>,
    latest: Option<&RunSummary>,
    values: Value,
    interrupts: &[Value],
) -> Thread {
    let (created, updated, metadata) = match (record, latest) {
        (Some(record), _) => (
            format_rfc3339(record.created_at_ms),
            format_rfc3339(latest.map_or(record.updated_at_ms, |l| l.updated_at_ms)),
            record.metadata.clone(),
        ),
        (None, Some(latest)) => {
            (format_rfc3339(latest.created_at_ms), format_rfc3339(latest.updated_at_ms), json!({}))
        }
        (None, None) => (String::new(), String::new(), json!({})),
    };
    let by_task: Map<String, Value> = match interrupts.is_empty() {
        true => Map::new(),
        false => Map::from_iter([(String::from("__interrupt__"), json!(interrupts))]),
    };
    Thread {
        thread_id: id.to_owned(),
        created_at: created,
        updated_at: updated,
        metadata,
        status: ThreadStatus::of(latest.map(|l| l.status)).as_str(),
        config: json!({}),
        values,
        interrupts: by_task,
    }
}

/// A checkpoint's id: its run and step (`RUN-STEP`), opaque to clients.
pub(super) fn checkpoint_id(run: impl std::fmt::Display, step: u64) -> String {
    format!("{run}-{step}")
}

/// The run and step a checkpoint id names.
pub(super) fn parse_checkpoint_id(id: &str) -> Option<(RunId, u64)> {
    let (run, step) = id.rsplit_once('-')?;
    Some((run.parse().ok()?, step.parse().ok()?))
}

/// A checkpoint reference: `{"thread_id", "checkpoint_ns": "",
/// "checkpoint_id"}`.
pub(super) fn checkpoint(thread: &str, run: impl std::fmt::Display, step: u64) -> Value {
    json!({"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": checkpoint_id(run, step),
           "checkpoint_map": null})
}

/// An interrupt as LangGraph's `Interrupt` (`{"value", "id"}`): a tool
/// approval in the shape of LangChain's human-in-the-loop middleware
/// (`action_requests`, `review_configs`), any other with its payload.
pub(super) fn interrupt<'a>(asked: impl Into<Asked<'a>>) -> Value {
    let asked = asked.into();
    let payload = asked.payload;
    let approval = (asked.kind == tollgate_nodes::TOOL_APPROVAL)
        .then(|| ToolApproval::deserialize(payload).ok())
        .flatten();
    let value = match approval {
        Some(approval) => json!({
            "action_requests": [{
                "name": approval.tool,
                "args": approval.args,
                // Agent Inbox reads `arguments`.
                "arguments": approval.args,
                "description": format!("Agent `{}` wants to call `{}`", approval.agent, approval.tool),
            }],
            "review_configs": [{
                "action_name": approval.tool,
                "allowed_decisions": asked.decisions,
            }],
        }),
        None => payload.clone(),
    };
    json!({"value": value, "id": asked.id})
}

/// What a LangGraph `Interrupt` is made of, from a summary's interrupt or
/// a state's.
pub(super) struct Asked<'a> {
    id: &'a str,
    kind: &'a str,
    payload: &'a Value,
    decisions: Vec<&'a str>,
}

impl<'a> From<&'a InterruptView> for Asked<'a> {
    fn from(view: &'a InterruptView) -> Self {
        Asked {
            id: &view.id,
            kind: &view.kind,
            payload: &view.payload,
            decisions: view.decisions.clone(),
        }
    }
}

impl<'a> From<&'a PendingInterrupt> for Asked<'a> {
    fn from(pending: &'a PendingInterrupt) -> Self {
        Asked {
            id: &pending.id,
            kind: &pending.kind,
            payload: &pending.payload,
            decisions: pending.decisions.iter().map(|kind| kind.as_str()).collect(),
        }
    }
}

/// State values with an agent's messages in LangGraph's shape.
pub(super) fn values(values: &Value) -> Value {
    match values {
        Value::Object(map) => {
            let mut out = map.clone();
            if let Some(Value::Array(messages)) = map.get("messages") {
                out.insert("messages".into(), Value::Array(messages.iter().map(message).collect()));
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// A node's update with its message operations (`{"upsert": MESSAGE}`,
/// `{"remove": {"id"}}`, `"remove_all"`) as LangChain's messages, as
/// LangGraph's `updates` stream carries them: the message itself, and a
/// removal as a `RemoveMessage` (`{"type": "remove", "id"}`;
/// `__remove_all__` for all).
pub(super) fn update(update: &Value) -> Value {
    let Value::Object(map) = update else { return update.clone() };
    let mut out = map.clone();
    if let Some(Value::Array(ops)) = map.get("messages") {
        let messages = ops
            .iter()
            .map(|op| match op {
                Value::String(all) if all == "remove_all" => {
                    json!({"type": "remove", "id": "__remove_all__", "content": ""})
                }
                Value::Object(op) if op.len() == 1 => match op.iter().next() {
                    Some((kind, inner)) if kind == "upsert" => message(inner),
                    Some((kind, inner)) if kind == "remove" => {
                        json!({"type": "remove", "id": inner["id"], "content": ""})
                    }
                    _ => message(&Value::Object(op.clone())),
                },
                other => message(other),
            })
            .collect();
        out.insert("messages".into(), Value::Array(messages));
    }
    Value::Object(out)
}

/// One tollgate message (`role`: system, user, assistant, tool) as
/// LangChain's (`type`: system, human, ai, tool), `role` kept beside.
/// Read by key, not as `tollgate_nodes::Message`: a graph's state is its
/// user's, and a Rust graph's messages may be any object with a `role`
/// (content as a list of parts, no id); what has no known role is shown
/// as it is.
pub(super) fn message(message: &Value) -> Value {
    let role = message["role"].as_str().unwrap_or("");
    let kind = match role {
        "user" => "human",
        "assistant" => "ai",
        "tool" => "tool",
        "system" => "system",
        _ => return message.clone(),
    };
    let mut out = json!({
        "type": kind,
        "role": role,
        "id": message["id"],
        "content": message["content"],
        "name": null,
        "additional_kwargs": {},
        "response_metadata": {},
    });
    match kind {
        "ai" => {
            let calls: Vec<Value> = message["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|call| {
                    json!({"name": call["name"], "args": call["args"], "id": call["id"],
                           "type": "tool_call"})
                })
                .collect();
            out["tool_calls"] = json!(calls);
            out["invalid_tool_calls"] = json!([]);
            out["name"] = message["agent"].clone();
            if let Some(usage) = message.get("usage") {
                out["usage_metadata"] = usage.clone();
            }
        }
        "tool" => {
            out["tool_call_id"] = message["call_id"].clone();
            out["name"] = message["name"].clone();
            let failed = message["is_error"] == true;
            out["status"] = json!(if failed { "error" } else { "success" });
        }
        _ => {}
    }
    out
}

/// A blueprint run's input from a LangGraph run's (or cron's) `input`,
/// `config` and `context`: the user's text of its messages, and as the
/// run's context LangGraph's `config.configurable` and `context` (both
/// free-form objects the caller chose; anything else is ignored).
pub(super) fn blueprint_input(
    input: &Value,
    config: Option<&Value>,
    context: Option<&Value>,
) -> UserInput {
    let mut given = UserInput::from_json(input);
    if let Some(text) = user_text(input) {
        given.message = text;
    }
    let configurable = config.and_then(|config| config.get("configurable"));
    for values in [configurable, context].into_iter().flatten() {
        if let Value::Object(values) = values {
            given = given.with_context(values.clone());
        }
    }
    given
}

/// The user's text of a LangGraph message input (`{"messages": [...]}`,
/// each `{"role"|"type", "content"}` or a `[role, content]` pair; the
/// last human message is the turn's), or `None` when it has none.
pub(super) fn user_text(input: &Value) -> Option<String> {
    let messages = input.get("messages")?.as_array()?;
    messages.iter().rev().find_map(|message| {
        let (role, content) = match message {
            Value::Array(pair) if pair.len() == 2 => (pair[0].as_str()?, &pair[1]),
            Value::Object(_) => (
                message.get("role").or_else(|| message.get("type")).and_then(Value::as_str)?,
                message.get("content")?,
            ),
            _ => return None,
        };
        if !matches!(role, "user" | "human") {
            return None;
        }
        match content {
            Value::String(text) => Some(text.clone()),
            // Content blocks: the text ones joined.
            Value::Array(blocks) => Some(
                blocks
                    .iter()
                    .filter_map(|block| block.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            _ => None,
        }
    })
}

/// Milliseconds since the Unix epoch.
pub(super) fn now_ms() -> i64 {
    use tollgate_engine::Clock as _;
    tollgate_engine::SystemClock.now_ms()
}

/// A graph as LangGraph draws it (`GET /assistants/{id}/graph`): nodes
/// `{"id", "type", "data"}` (`runnable`, or `schema` for the start and the
/// end) and edges `{"source", "target", "conditional"}`.
pub(super) fn drawing(outline: &Outline) -> Value {
    let nodes: Vec<Value> = outline
        .nodes
        .iter()
        .map(|node| {
            let kind = if node.kind == "node" { "runnable" } else { "schema" };
            json!({"id": node.name, "type": kind, "data": node.name})
        })
        .collect();
    let edges: Vec<Value> = outline
        .edges
        .iter()
        .map(|edge| {
            let conditional = edge.kind == "conditional" || edge.kind == "command";
            json!({"source": edge.from, "target": edge.to, "conditional": conditional})
        })
        .collect();
    json!({"nodes": nodes, "edges": edges})
}

/// A thread's time to live as LangGraph's clients send it (`ttl` of
/// `threads.create`): minutes, or `{"strategy": "delete", "ttl": MINUTES}`
/// (the Python SDK sends the object). `keep_latest` is refused: tollgate
/// keeps a run's checkpoints whole (docs/tenancy.md).
pub(super) fn thread_ttl(given: Option<&Value>) -> Result<Option<Duration>, ServiceError> {
    let minutes = match given {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(minutes)) => minutes.as_f64(),
        Some(Value::Object(ttl)) => {
            match ttl.get("strategy").and_then(Value::as_str) {
                None | Some("delete") => {}
                Some("keep_latest") => {
                    return Err(ServiceError::unusable(
                        "a thread `ttl` with strategy `keep_latest` is not supported here: an expired thread is deleted whole (strategy `delete`)",
                    ))
                }
                Some(other) => {
                    return Err(ServiceError::invalid(format!(
                        "`ttl.strategy` must be `delete`, not `{other}`"
                    )))
                }
            }
            ttl.get("ttl").and_then(Value::as_f64)
        }
        Some(_) => None,
    };
    match minutes.filter(|minutes| minutes.is_finite() && *minutes > 0.0) {
        Some(minutes) => Duration::try_from_secs_f64(minutes * 60.0)
            .map(Some)
            .map_err(|_| ServiceError::invalid("`ttl` is too large")),
        None => Err(ServiceError::invalid(
            "`ttl` is a number of minutes above 0, or `{\"strategy\": \"delete\", \"ttl\": MINUTES}`",
        )),
    }
}

/// What a thread's runs occupy (`GET /threads/{thread}/storage`, a
/// tollgate extension).
pub(super) fn storage(thread: &str, storage: &ThreadStorage) -> Value {
    json!({
        "thread_id": thread,
        "runs": storage.runs,
        "checkpoint_bytes": storage.checkpoint_bytes,
        "event_bytes": storage.event_bytes,
        "bytes": storage.checkpoint_bytes + storage.event_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assistant_ids_are_stable_uuids() {
        let id = assistant_uuid("refunds");
        assert_eq!(id, assistant_uuid("refunds"));
        assert_ne!(id, assistant_uuid("chat"));
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "8", "version 8");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "RFC 4122 variant: {id}");
    }

    #[test]
    fn user_text_takes_the_last_human_message() {
        let input = json!({"messages": [
            {"role": "user", "content": "first"},
            {"type": "ai", "content": "answer"},
            {"type": "human", "content": [{"type": "text", "text": "second"}]},
        ]});
        assert_eq!(user_text(&input).as_deref(), Some("second"));
        assert_eq!(user_text(&json!({"messages": [["user", "pair"]]})).as_deref(), Some("pair"));
        assert_eq!(user_text(&json!({"text": "x"})), None);
    }

    #[test]
    fn checkpoint_ids_round_trip() {
        let run = RunId::new();
        let id = checkpoint_id(run, 7);
        assert_eq!(parse_checkpoint_id(&id), Some((run, 7)));
        assert_eq!(parse_checkpoint_id("nope"), None);
        assert_eq!(parse_checkpoint_id("01JABC-7"), None, "not a run id");
    }

    #[test]
    fn updates_carry_messages_not_their_operations() {
        let update = json!({"messages": [
            {"upsert": {"role": "assistant", "id": "m1", "content": "hi"}},
            {"remove": {"id": "m0"}},
            "remove_all"
        ], "count": 1});
        let shown = super::update(&update);
        assert_eq!(shown["count"], 1);
        assert_eq!(shown["messages"][0]["type"], "ai");
        assert_eq!(shown["messages"][0]["content"], "hi");
        assert_eq!(shown["messages"][1], json!({"type": "remove", "id": "m0", "content": ""}));
        assert_eq!(shown["messages"][2]["id"], "__remove_all__");
    }

    #[test]
    fn messages_take_langchains_shape() {
        let ai = json!({"role": "assistant", "id": "m1", "agent": "a", "content": "",
                        "tool_calls": [{"id": "c1", "name": "refund", "args": {"id": 7}}]});
        let shown = message(&ai);
        assert_eq!(shown["type"], "ai");
        assert_eq!(
            shown["tool_calls"][0],
            json!({"name": "refund", "args": {"id": 7}, "id": "c1", "type": "tool_call"})
        );
        let tool =
            json!({"role": "tool", "id": "m2", "call_id": "c1", "name": "refund", "content": "ok"});
        let shown = message(&tool);
        assert_eq!(
            (shown["type"].as_str(), shown["tool_call_id"].as_str()),
            (Some("tool"), Some("c1"))
        );
        assert_eq!(message(&json!({"role": "user", "id": "u", "content": "hi"}))["type"], "human");
    }

    #[test]
    fn a_thread_ttl_is_minutes_or_a_delete_strategy() {
        use std::time::Duration;
        let ttl = |value: serde_json::Value| super::thread_ttl(Some(&value));
        assert_eq!(ttl(json!(0.03)).unwrap(), Some(Duration::from_millis(1_800)));
        let object = json!({"strategy": "delete", "ttl": 60});
        assert_eq!(ttl(object).unwrap(), Some(Duration::from_secs(3_600)));
        assert_eq!(ttl(json!({"ttl": 1})).unwrap(), Some(Duration::from_secs(60)));
        assert_eq!(super::thread_ttl(None).unwrap(), None);
        assert_eq!(ttl(serde_json::Value::Null).unwrap(), None);
        for bad in [json!(0), json!(-1), json!("5"), json!({"strategy": "delete"}), json!(1e300)] {
            assert!(ttl(bad.clone()).is_err(), "{bad}");
        }
        let kept = ttl(json!({"strategy": "keep_latest", "ttl": 5})).unwrap_err();
        assert!(kept.to_string().contains("keep_latest"), "{kept}");
        assert!(ttl(json!({"strategy": "archive", "ttl": 5})).is_err());
    }
}
