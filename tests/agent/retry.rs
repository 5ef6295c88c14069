//! Model-call retries: classification, Retry-After, exhaustion, events.

use std::time::Duration;

use tollgate::{
    Agent, ErrorClass, Event, HarnessError, RunConfig, RunError, RunStatus, ScriptReply,
};
use tollgate_testkit::assert_trajectory;

use crate::support::{self, fast_retry, model, text};

fn failure(kind: &str) -> ScriptReply {
    ScriptReply::Error { kind: kind.into(), message: format!("scripted {kind}"), retry_after: None }
}

fn cause(error: &HarnessError) -> Option<&HarnessError> {
    match error {
        HarnessError::Run(RunError::NodeFailed { source, .. }) => source.cause().downcast_ref(),
        _ => None,
    }
}

#[test]
fn transient_failures_are_retried_with_events_and_use_the_next_reply() {
    let rt = support::runtime();
    for kind in ["rate_limit", "server", "timeout", "network"] {
        let agent = Agent::new("a", model(vec![failure(kind), text("ok")]))
            .retry(fast_retry())
            .compile()
            .unwrap();
        let run = rt.block_on(agent.run(&support::executor(), "go", RunConfig::new())).unwrap();
        assert_eq!(run.final_text(), Some("ok"), "{kind}");
        assert_trajectory(run.events())
            .model_called("default")
            .event("retry_scheduled")
            .model_called("default")
            .completed();
        let retry = run.events().iter().find_map(|e| match &e.event {
            Event::RetryScheduled { call_id, attempt, .. } => Some((call_id.clone(), *attempt)),
            _ => None,
        });
        assert!(matches!(retry, Some((Some(_), 1))), "{kind}: {retry:?}");
        assert_eq!(run.state.progress["a"].model_calls, 2, "both attempts count");
    }
}

#[test]
fn permanent_failures_are_not_retried() {
    let rt = support::runtime();
    for kind in ["auth", "invalid_request"] {
        let agent = Agent::new("a", model(vec![failure(kind), text("never")]))
            .retry(fast_retry())
            .compile()
            .unwrap();
        let error =
            rt.block_on(agent.run(&support::executor(), "go", RunConfig::new())).unwrap_err();
        let class = cause(&error).map(HarnessError::class);
        assert!(
            matches!(class, Some(ErrorClass::Auth | ErrorClass::InvalidRequest)),
            "{kind}: {error}"
        );
    }
    // Unless the policy says so.
    let policy = fast_retry().retry_class(ErrorClass::Auth, true);
    let agent =
        Agent::new("a", model(vec![failure("auth"), text("ok")])).retry(policy).compile().unwrap();
    let run = rt.block_on(agent.run(&support::executor(), "go", RunConfig::new())).unwrap();
    assert_eq!(run.status, RunStatus::Completed);
}

#[test]
fn retries_stop_at_the_policy_limit() {
    let rt = support::runtime();
    let script = vec![failure("server"), failure("server"), failure("server"), text("late")];
    let agent = Agent::new("a", model(script)).retry(fast_retry()).compile().unwrap();
    let error = rt.block_on(agent.run(&support::executor(), "go", RunConfig::new())).unwrap_err();
    assert!(
        matches!(cause(&error), Some(HarnessError::RetryExhausted { attempts: 3, .. })),
        "{error}"
    );
}

#[test]
fn retry_after_is_honoured() {
    let rt = support::runtime();
    let limited = ScriptReply::Error {
        kind: "rate_limit".into(),
        message: "slow down".into(),
        retry_after: Some(Duration::from_millis(120)),
    };
    let agent =
        Agent::new("a", model(vec![limited, text("ok")])).retry(fast_retry()).compile().unwrap();
    let started = std::time::Instant::now();
    let run = rt.block_on(agent.run(&support::executor(), "go", RunConfig::new())).unwrap();
    assert!(started.elapsed() >= Duration::from_millis(120));
    let delay = run.events().iter().find_map(|e| match &e.event {
        Event::RetryScheduled { delay_ms, .. } => Some(*delay_ms),
        _ => None,
    });
    assert_eq!(delay, Some(120));
}

#[test]
fn a_fallback_model_answers_when_the_primary_fails_for_good() {
    let rt = support::runtime();
    let primary = model(vec![failure("auth")]);
    let backup =
        std::sync::Arc::new(tollgate::ScriptedModel::new("backup", vec![text("from the backup")]));
    let agent = Agent::new("a", primary)
        .middleware(tollgate::ModelFallback::new(backup))
        .retry(fast_retry())
        .compile()
        .unwrap();
    let run = rt.block_on(agent.run(&support::executor(), "go", RunConfig::new())).unwrap();
    assert_eq!(run.final_text(), Some("from the backup"));
    assert_trajectory(run.events()).model_called("default").fallback_selected("backup").completed();
}
