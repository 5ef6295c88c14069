//! Structured output in every mode, with re-asks and their limit.

use serde_json::json;
use tollgate::{
    Agent, HarnessError, OutputSchema, ResponseFormat, RunConfig, RunError, RunStatus, ScriptReply,
};

use crate::support::{self, model, text};

fn schema() -> OutputSchema {
    OutputSchema::new(
        "verdict",
        json!({"type": "object", "properties": {"approved": {"type": "boolean"}},
               "required": ["approved"], "additionalProperties": false}),
    )
}

fn run(
    format: ResponseFormat,
    script: Vec<ScriptReply>,
) -> Result<tollgate::AgentRun, HarnessError> {
    let rt = support::runtime();
    let agent =
        Agent::new("judge", model(script)).response_format(format).max_reasks(1).compile().unwrap();
    rt.block_on(agent.run(&support::executor(), "decide", RunConfig::new()))
}

#[test]
fn json_mode_reads_json_out_of_text_and_reasks_once() {
    let script = vec![text("I think yes."), text("Sure:\n```json\n{\"approved\": true}\n```")];
    let run = run(ResponseFormat::JsonSchema(schema()), script).unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.structured_response, Some(json!({"approved": true})));
    // The correction told the model what was wrong.
    let correction = run.messages.iter().find(|m| m.content().contains("must be JSON matching"));
    assert!(correction.is_some(), "{:?}", run.messages);
}

#[test]
fn provider_native_mode_validates_the_answer() {
    let script = vec![ScriptReply::Structured(json!({"approved": false}))];
    let run = run(ResponseFormat::ProviderNative(schema()), script).unwrap();
    assert_eq!(run.structured_response, Some(json!({"approved": false})));
    #[derive(serde::Deserialize, PartialEq, Debug)]
    struct Verdict {
        approved: bool,
    }
    assert_eq!(run.structured::<Verdict>().unwrap().unwrap(), Verdict { approved: false });
}

#[test]
fn tool_strategy_feeds_invalid_arguments_back_then_accepts_valid_ones() {
    let format =
        ResponseFormat::ToolStrategy { tool_name: "give_verdict".into(), schema: schema() };
    let script = vec![
        ScriptReply::Structured(json!({"approved": "yes"})),
        ScriptReply::Structured(json!({"approved": true})),
    ];
    let run = run(format, script).unwrap();
    assert_eq!(run.structured_response, Some(json!({"approved": true})));
    let errors: Vec<&str> = run
        .messages
        .iter()
        .filter_map(|m| match m {
            tollgate::Message::Tool { content, is_error: true, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].contains("/approved"), "{errors:?}");
}

#[test]
fn text_mode_has_no_structured_response() {
    let run = run(ResponseFormat::Text, vec![text("{\"approved\": true}")]).unwrap();
    assert_eq!(run.structured_response, None);
}

#[test]
fn output_that_never_matches_fails_with_a_typed_error_after_the_reasks() {
    for format in [
        ResponseFormat::JsonSchema(schema()),
        ResponseFormat::ToolStrategy { tool_name: "give_verdict".into(), schema: schema() },
    ] {
        let script = vec![text("no"), text("still no"), text("never")];
        let error = run(format.clone(), script).unwrap_err();
        let HarnessError::Run(RunError::NodeFailed { source, .. }) = &error else {
            panic!("{error}")
        };
        let cause = source.cause().downcast_ref::<HarnessError>();
        assert!(
            matches!(cause, Some(HarnessError::StructuredOutputInvalid { attempts: 2, .. })),
            "{format:?}: {error}"
        );
    }
}
