//! Structured output: reading the answer, checking it against its schema,
//! and what to tell the model when it does not match.

use serde_json::Value;

use crate::agent::AgentCore;
use crate::agent::Ids;
use crate::message::Message;
use crate::model::ResponseFormat;

/// What a model turn's answer means for structured output.
pub(crate) enum Verdict {
    /// The turn is over: with the validated answer, if this was the final
    /// structured one, and messages to add after it.
    Done { value: Option<Value>, extra: Vec<Message> },
    /// The answer did not match: ask again with these messages.
    Retry { errors: Vec<String>, correction: Vec<Message> },
}

pub(crate) fn check(core: &AgentCore, message: &Message, ids: &Ids) -> Verdict {
    let done = Verdict::Done { value: None, extra: Vec::new() };
    let Some(validator) = &core.output else { return done };
    let agent = Some(core.name.clone());
    match &core.response_format {
        ResponseFormat::Text => done,
        ResponseFormat::JsonSchema(schema) | ResponseFormat::ProviderNative(schema) => {
            if !message.tool_calls().is_empty() {
                return done;
            }
            let errors = match extract_json(message.content()) {
                None => vec!["the answer holds no JSON value".to_owned()],
                Some(value) => match validator.errors(&value) {
                    errors if errors.is_empty() => {
                        return Verdict::Done { value: Some(value), extra: Vec::new() }
                    }
                    errors => errors,
                },
            };
            let text = format!(
                "Your answer must be JSON matching the schema `{}`. Problems: {}. Reply with the JSON only.",
                schema.name,
                errors.join("; ")
            );
            Verdict::Retry { errors, correction: vec![Message::user(ids.next(), text)] }
        }
        ResponseFormat::ToolStrategy { tool_name, .. } => {
            let calls = message.tool_calls();
            let Some(output) = calls.iter().find(|call| &call.name == tool_name) else {
                if !calls.is_empty() {
                    return done;
                }
                let errors =
                    vec![format!("the model answered in text instead of calling `{tool_name}`")];
                let text = format!("Call the tool `{tool_name}` with your final answer.");
                return Verdict::Retry {
                    errors,
                    correction: vec![Message::user(ids.next(), text)],
                };
            };
            let errors = validator.errors(&output.args);
            // Every call of the message gets a result, so the transcript
            // stays one a provider accepts.
            let answer =
                |call: &crate::message::ToolCall, content: String, is_error| Message::Tool {
                    id: ids.next(),
                    agent: agent.clone(),
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    content,
                    is_error,
                };
            if errors.is_empty() {
                let extra = calls
                    .iter()
                    .map(|call| match &call.name == tool_name && call.id == output.id {
                        true => answer(call, "Answer recorded.".into(), false),
                        false => answer(call, "Not run: the final answer was given.".into(), true),
                    })
                    .collect();
                return Verdict::Done { value: Some(output.args.clone()), extra };
            }
            let text = format!(
                "Invalid arguments: {}. Call `{tool_name}` again with corrected arguments.",
                errors.join("; ")
            );
            let correction = calls
                .iter()
                .map(|call| match call.id == output.id {
                    true => answer(call, text.clone(), true),
                    false => answer(call, "Not run: give the final answer first.".into(), true),
                })
                .collect();
            Verdict::Retry { errors, correction }
        }
    }
}

/// The JSON value in a model's text: the whole text, else a fenced block,
/// else the first balanced object or array.
pub(crate) fn extract_json(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(value) = serde_json::from_str(trimmed) {
        return Some(value);
    }
    if let Some(start) = trimmed.find("```") {
        let after = &trimmed[start + 3..];
        let body = after.strip_prefix("json").unwrap_or(after);
        if let Some(end) = body.find("```") {
            if let Ok(value) = serde_json::from_str(body[..end].trim()) {
                return Some(value);
            }
        }
    }
    let bytes = trimmed.as_bytes();
    for (start, &open) in bytes.iter().enumerate() {
        if open != b'{' && open != b'[' {
            continue;
        }
        if let Some(end) = balanced_end(&bytes[start..]) {
            if let Ok(value) = serde_json::from_str(&trimmed[start..start + end]) {
                return Some(value);
            }
        }
    }
    None
}

/// Length of the balanced bracket group at the start of `bytes`, skipping
/// brackets inside strings.
fn balanced_end(bytes: &[u8]) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &byte) in bytes.iter().enumerate() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_is_found_whole_fenced_or_embedded() {
        let cases = [
            (r#"{"a": 1}"#, Some(json!({"a": 1}))),
            ("Here:\n```json\n{\"a\": [1, 2]}\n```\nDone.", Some(json!({"a": [1, 2]}))),
            (
                r#"The answer is {"s": "a } brace", "n": {"m": 2}} as asked."#,
                Some(json!({"s": "a } brace", "n": {"m": 2}})),
            ),
            ("no json here", None),
            ("{broken", None),
        ];
        for (text, expected) in cases {
            assert_eq!(extract_json(text), expected, "{text}");
        }
    }
}
