//! Shared helpers: scripted agents and counting tools.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tollgate::{
    FnTool, HarnessError, MemoryStore, ModelRetry, RetryPolicy, ScriptReply, ScriptedModel,
    ToolSpec,
};

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

pub(crate) fn executor() -> tollgate::Executor {
    tollgate::Executor::new(MemoryStore::new())
}

pub(crate) fn text(reply: &str) -> ScriptReply {
    ScriptReply::Text(reply.to_owned())
}

pub(crate) fn call(tool: &str, args: Value) -> ScriptReply {
    ScriptReply::ToolCalls(vec![(tool.to_owned(), args, None)])
}

pub(crate) fn model(replies: Vec<ScriptReply>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new("default", replies))
}

pub(crate) fn id_schema() -> Value {
    json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
           "additionalProperties": false})
}

/// A tool that counts its calls and echoes its arguments.
pub(crate) fn counting(name: &str) -> (FnTool, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    let spec = ToolSpec::new(name, format!("The {name} tool"), id_schema());
    let tool = FnTool::new(spec, move |args, _ctx| {
        let seen = Arc::clone(&seen);
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            Ok::<_, HarnessError>(json!({"echo": args}))
        }
    });
    (tool, calls)
}

/// Retries quickly, for tests.
pub(crate) fn fast_retry() -> ModelRetry {
    ModelRetry::new().backoff(RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        ..RetryPolicy::default()
    })
}
