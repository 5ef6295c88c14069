//! `Command(resume=…)` as decisions: which pending interrupt each value
//! answers, and which decision it is. Three clients' shapes are read:
//! LangChain's human-in-the-loop middleware (`{"decisions": [...]}`, what
//! Agent Chat UI sends), Agent Inbox's list of responses (`[{"type":
//! "accept" | "edit" | "response" | "ignore", "args"}]`, one per pending
//! interrupt), and a bare value (LangGraph's `Command(resume=value)`).

use serde_json::Value;
use tollgate_engine::Decision;
use tollgate_nodes::TOOL_APPROVAL;

use super::super::errors::ApiResult;
use crate::error::ServiceError;
use crate::service::InterruptView;

/// The decision types a typed answer may name.
const TYPES: &str = "approve, accept, edit, reject, ignore, respond or response";

/// The decisions a `resume` value makes: a map from interrupt id to value
/// answers each; a list of typed answers (Agent Inbox) answers the
/// pending interrupts in order, one each; one value answers the only
/// pending interrupt, or, in the shape of LangChain's human-in-the-loop
/// middleware (`{"decisions": [...]}`), the pending tool approvals in
/// order.
pub(super) fn answers(
    pending: &[InterruptView],
    resume: &Value,
) -> ApiResult<Vec<(String, Decision)>> {
    if let Value::Object(map) = resume {
        if !map.is_empty() && map.keys().all(|key| pending.iter().any(|i| i.id == *key)) {
            return map
                .iter()
                .filter_map(|(id, value)| Some((pending.iter().find(|i| i.id == *id)?, value)))
                .map(|(interrupt, value)| {
                    Ok((interrupt.id.clone(), decision(interrupt, value, 0)?))
                })
                .collect();
        }
        if let Some(Value::Array(decisions)) = map.get("decisions") {
            if decisions.len() > 1 {
                counted(decisions.len(), pending.len())?;
                return pending
                    .iter()
                    .enumerate()
                    .map(|(i, interrupt)| {
                        Ok((interrupt.id.clone(), decision(interrupt, resume, i)?))
                    })
                    .collect();
            }
        }
    }
    if let Value::Array(entries) = resume {
        if !entries.is_empty() && entries.iter().all(|entry| entry.get("type").is_some()) {
            counted(entries.len(), pending.len())?;
            return pending
                .iter()
                .zip(entries)
                .map(|(interrupt, entry)| {
                    Ok((interrupt.id.clone(), decision(interrupt, entry, 0)?))
                })
                .collect();
        }
    }
    match pending {
        [only] => Ok(vec![(only.id.clone(), decision(only, resume, 0)?)]),
        [] => Err(ServiceError::invalid("nothing waits for a decision").into()),
        several => Err(ServiceError::invalid(format!(
            "{} interrupts wait: resume with a map from interrupt id to value ({})",
            several.len(),
            several.iter().map(|i| i.id.as_str()).collect::<Vec<_>>().join(", ")
        ))
        .into()),
    }
}

/// Refuses `given` answers for `pending` interrupts unless they match.
fn counted(given: usize, pending: usize) -> ApiResult<()> {
    if given == pending {
        return Ok(());
    }
    Err(ServiceError::invalid(format!(
        "{given} decisions for {pending} pending interrupts: answer each, in order"
    ))
    .into())
}

/// One decision on `interrupt` from a resume value: a typed answer (the
/// `index`th of LangChain's `{"decisions": [...]}`, or a bare `{"type":
/// …}` such as Agent Inbox's), else the value itself as the answer
/// (`respond`; approval by `true`; an edit of an interrupt that takes one
/// but is not a tool approval).
fn decision(interrupt: &InterruptView, value: &Value, index: usize) -> ApiResult<Decision> {
    let allows = |kind: &str| interrupt.decisions.contains(&kind);
    let typed = match value.get("decisions").and_then(Value::as_array) {
        Some(decisions) => decisions.get(index),
        None if value.get("type").is_some() => Some(value),
        None => None,
    };
    if let Some(typed) = typed {
        return typed_decision(interrupt, typed);
    }
    if allows("respond") {
        return Ok(Decision::Respond { value: value.clone() });
    }
    if value == &Value::Bool(true) && allows("approve") {
        return Ok(Decision::Approve);
    }
    if interrupt.kind == TOOL_APPROVAL {
        // An unknown shape is never taken for new arguments.
        return Err(ServiceError::invalid(format!(
            "a tool approval ({}) is answered with {{\"decisions\": [{{\"type\": \"approve\"}} | {{\"type\": \"edit\", \"edited_action\": {{\"args\": {{…}}}}}} | {{\"type\": \"reject\", \"message\": \"…\"}}]}}, with Agent Inbox's [{{\"type\": \"accept\" | \"edit\" | \"response\" | \"ignore\", \"args\": …}}], or with {{\"type\": …}}",
            interrupt.id
        ))
        .into());
    }
    if allows("edit") {
        return Ok(Decision::Edit { value: coerced(interrupt, value.clone()) });
    }
    Err(ServiceError::invalid(format!(
        "interrupt {} takes {}: resume with {{\"type\": …}}",
        interrupt.id,
        interrupt.decisions.join(", ")
    ))
    .into())
}

/// A typed answer (`{"type": …}`) as a decision on `interrupt`. Read by
/// key: the answer is free-form JSON in any of three front-ends' shapes
/// (LangChain's middleware, Agent Inbox, Agent Chat UI), which name the
/// same things differently (`message`/`reason`/`args`).
fn typed_decision(interrupt: &InterruptView, typed: &Value) -> ApiResult<Decision> {
    let allows = |kind: &str| interrupt.decisions.contains(&kind);
    let text = |value: &Value| match value {
        Value::String(text) => Some(text.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    };
    Ok(match typed["type"].as_str() {
        Some("approve" | "accept") => Decision::Approve,
        Some("edit") => Decision::Edit { value: coerced(interrupt, edited_args(typed)) },
        Some("reject") => {
            Decision::Reject { reason: text(&typed["message"]).or(text(&typed["reason"])) }
        }
        // Agent Inbox's "ignore": the request is turned down.
        Some("ignore") => Decision::Reject { reason: text(&typed["args"]) },
        Some("respond") => Decision::Respond {
            value: typed.get("value").or(typed.get("message")).cloned().unwrap_or(Value::Null),
        },
        // Agent Inbox's free-text response: the answer of an interrupt
        // that takes one; for one that does not (a tool approval), a
        // rejection whose reason is the text the model reads.
        Some("response") if allows("respond") => {
            Decision::Respond { value: typed.get("args").cloned().unwrap_or(Value::Null) }
        }
        Some("response") => Decision::Reject { reason: text(&typed["args"]) },
        other => {
            return Err(ServiceError::invalid(format!(
                "decision type {} is not {TYPES}",
                other.map_or_else(|| "(none)".to_owned(), |kind| format!("`{kind}`"))
            ))
            .into())
        }
    })
}

/// The new arguments of an `edit`: LangChain's `edited_action.args`,
/// Agent Inbox's `args.args` (its `args` is `{"action", "args"}`), else
/// `args`.
fn edited_args(typed: &Value) -> Value {
    if let Some(args) = typed.get("edited_action").and_then(|action| action.get("args")) {
        return args.clone();
    }
    match typed.get("args") {
        Some(inner) if inner.get("action").is_some() && inner.get("args").is_some() => {
            inner["args"].clone()
        }
        Some(args) => args.clone(),
        None => Value::Null,
    }
}

/// `value` with strings made the scalar its interrupt's schema asks for
/// where they parse as one (`"15"` for an integer): both LangGraph
/// front-ends send edited fields as text, and LangChain's tools coerce
/// them. What does not parse is left for the schema check to refuse.
fn coerced(interrupt: &InterruptView, value: Value) -> Value {
    match &interrupt.schema {
        Some(schema) => coerce(schema, value),
        None => value,
    }
}

/// (`schema` is the interrupt's JSON Schema, a document read by key.)
fn coerce(schema: &Value, value: Value) -> Value {
    match value {
        Value::String(text) => {
            scalar(schema["type"].as_str(), &text).unwrap_or(Value::String(text))
        }
        Value::Object(mut fields) => {
            if let Some(properties) = schema["properties"].as_object() {
                for (name, field) in fields.iter_mut() {
                    if let Some(property) = properties.get(name) {
                        *field = coerce(property, field.take());
                    }
                }
            }
            Value::Object(fields)
        }
        Value::Array(items) => match schema.get("items") {
            Some(item) => Value::Array(items.into_iter().map(|v| coerce(item, v)).collect()),
            None => Value::Array(items),
        },
        other => other,
    }
}

/// `text` as a JSON `kind` (integer, number, boolean) when it is one.
fn scalar(kind: Option<&str>, text: &str) -> Option<Value> {
    let text = text.trim();
    match kind? {
        "integer" => text.parse::<i64>().ok().map(Value::from),
        "number" => text.parse::<i64>().map(Value::from).ok().or_else(|| {
            text.parse::<f64>()
                .ok()
                .and_then(|n| serde_json::Number::from_f64(n).map(Value::Number))
        }),
        "boolean" => match text {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn view(
        id: &str,
        kind: &str,
        decisions: &[&'static str],
        schema: Option<Value>,
    ) -> InterruptView {
        InterruptView {
            id: id.into(),
            node: "tools".into(),
            kind: kind.into(),
            payload: json!({}),
            decisions: decisions.to_vec(),
            schema,
            raised_at: String::new(),
        }
    }

    fn tool_approval(id: &str) -> InterruptView {
        let schema = json!({"type": "object", "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"}, "n": {"type": "number"}}});
        view(id, TOOL_APPROVAL, &["approve", "edit", "reject"], Some(schema))
    }

    fn question(id: &str) -> InterruptView {
        view(id, "question", &["approve", "edit", "reject", "respond"], None)
    }

    fn one(pending: &[InterruptView], resume: Value) -> Decision {
        let mut answers = answers(pending, &resume).expect("answers");
        assert_eq!(answers.len(), 1, "{answers:?}");
        answers.remove(0).1
    }

    #[test]
    fn agent_inbox_answers_a_tool_approval() {
        let pending = [tool_approval("a")];
        assert_eq!(one(&pending, json!([{"type": "accept", "args": null}])), Decision::Approve);
        assert_eq!(
            one(
                &pending,
                json!([{"type": "edit", "args": {"action": "issue_refund", "args": {"id": "15"}}}])
            ),
            Decision::Edit { value: json!({"id": 15}) }
        );
        assert_eq!(
            one(&pending, json!([{"type": "response", "args": "wrong order"}])),
            Decision::Reject { reason: Some("wrong order".into()) }
        );
        assert_eq!(
            one(&pending, json!([{"type": "ignore", "args": null}])),
            Decision::Reject { reason: None }
        );
    }

    #[test]
    fn agent_inbox_answers_a_graph_interrupt() {
        let pending = [question("q")];
        assert_eq!(
            one(&pending, json!([{"type": "response", "args": "Ann"}])),
            Decision::Respond { value: json!("Ann") }
        );
        assert_eq!(one(&pending, json!([{"type": "accept", "args": null}])), Decision::Approve);
    }

    #[test]
    fn agent_chat_ui_decisions_are_read() {
        let pending = [tool_approval("a")];
        assert_eq!(
            one(
                &pending,
                json!({"decisions": [{"type": "edit", "edited_action": {"name": "t", "args": {"id": "15", "ok": "true", "n": "2.5"}}}]})
            ),
            Decision::Edit { value: json!({"id": 15, "ok": true, "n": 2.5}) }
        );
        assert_eq!(
            one(&pending, json!({"decisions": [{"type": "reject", "message": "no"}]})),
            Decision::Reject { reason: Some("no".into()) }
        );
    }

    #[test]
    fn text_that_does_not_parse_is_left_for_the_schema_check() {
        let pending = [tool_approval("a")];
        assert_eq!(
            one(&pending, json!({"type": "edit", "args": {"id": "fifteen", "ok": "yes"}})),
            Decision::Edit { value: json!({"id": "fifteen", "ok": "yes"}) }
        );
    }

    #[test]
    fn an_unknown_shape_is_never_an_edit_of_a_tool_call() {
        let pending = [tool_approval("a")];
        let refused = answers(&pending, &json!({"id": 99})).expect_err("refused");
        // Bad input (400 here; the LangGraph API answers it 422).
        assert_eq!(refused.status, axum::http::StatusCode::BAD_REQUEST);
        assert!(refused.message.contains("a tool approval"), "{}", refused.message);
        // A graph's own interrupt takes the value as its answer.
        assert_eq!(
            one(&[question("q")], json!({"id": 99})),
            Decision::Respond { value: json!({"id": 99}) }
        );
    }

    #[test]
    fn a_list_answers_each_pending_interrupt_in_order() {
        let pending = [tool_approval("a"), tool_approval("b")];
        let both =
            answers(&pending, &json!([{"type": "accept"}, {"type": "ignore"}])).expect("answers");
        assert_eq!(
            both,
            vec![("a".into(), Decision::Approve), ("b".into(), Decision::Reject { reason: None })]
        );
        let short = answers(&pending, &json!([{"type": "accept"}])).expect_err("one short");
        assert!(short.message.contains("1 decisions for 2"), "{}", short.message);
        let unknown =
            answers(&pending[..1], &json!([{"type": "maybe"}])).expect_err("unknown type");
        assert!(unknown.message.contains("`maybe`"), "{}", unknown.message);
    }
}
