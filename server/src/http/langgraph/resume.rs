//! `Command(resume=…)` as decisions: which pending interrupt each value
//! answers, and which decision it is.

use serde_json::Value;
use tollgate_engine::Decision;

use super::super::errors::ApiResult;
use crate::error::ServiceError;
use crate::service::InterruptView;

/// The decisions a `resume` value makes: a map from interrupt id to value
/// answers each; one value answers the only pending interrupt, or, in the
/// shape of LangChain's human-in-the-loop middleware (`{"decisions":
/// [...]}`), the pending tool approvals in order.
pub(super) fn answers(
    pending: &[InterruptView],
    resume: &Value,
) -> ApiResult<Vec<(String, Decision)>> {
    if let Value::Object(map) = resume {
        if !map.is_empty() && map.keys().all(|key| pending.iter().any(|i| i.id == *key)) {
            return map
                .iter()
                .map(|(id, value)| {
                    let interrupt = pending.iter().find(|i| i.id == *id).expect("checked above");
                    Ok((id.clone(), decision(interrupt, value, 0)?))
                })
                .collect();
        }
        if let Some(Value::Array(decisions)) = map.get("decisions") {
            if decisions.len() > 1 {
                if decisions.len() != pending.len() {
                    return Err(ServiceError::invalid(format!(
                        "{} decisions for {} pending interrupts",
                        decisions.len(),
                        pending.len()
                    ))
                    .into());
                }
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

/// One decision on `interrupt` from a resume value: LangChain's
/// middleware shape (`{"decisions": [{"type": "approve"} | {"type":
/// "edit", "edited_action": {"args"}} | {"type": "reject", "message"}]}`,
/// its `index`th entry), a bare `{"type": …}`, else the value as the
/// answer (`respond`; an interrupt that takes no answer but approval is
/// approved by `true`).
fn decision(interrupt: &InterruptView, value: &Value, index: usize) -> ApiResult<Decision> {
    let allows = |kind: &str| interrupt.decisions.contains(&kind);
    let typed = match value.get("decisions").and_then(Value::as_array) {
        Some(decisions) => decisions.get(index).cloned(),
        None if value.get("type").is_some() => Some(value.clone()),
        None => None,
    };
    if let Some(typed) = typed {
        return Ok(match typed["type"].as_str() {
            Some("approve" | "accept") => Decision::Approve,
            Some("edit") => {
                let args = typed["edited_action"]["args"].clone();
                let value = if args.is_null() { typed["args"].clone() } else { args };
                Decision::Edit { value }
            }
            Some("reject") => Decision::Reject {
                reason: typed["message"].as_str().or(typed["reason"].as_str()).map(str::to_owned),
            },
            Some("respond" | "response") => Decision::Respond {
                value: typed.get("value").or(typed.get("message")).cloned().unwrap_or(Value::Null),
            },
            other => {
                return Err(ServiceError::invalid(format!(
                    "decision type {} is not approve, edit, reject or respond",
                    other.unwrap_or("(none)")
                ))
                .into())
            }
        });
    }
    Ok(if allows("respond") {
        Decision::Respond { value: value.clone() }
    } else if value == &Value::Bool(true) && allows("approve") {
        Decision::Approve
    } else if allows("edit") {
        Decision::Edit { value: value.clone() }
    } else {
        return Err(ServiceError::invalid(format!(
            "interrupt {} takes {}: resume with {{\"type\": …}}",
            interrupt.id,
            interrupt.decisions.join(", ")
        ))
        .into());
    })
}
