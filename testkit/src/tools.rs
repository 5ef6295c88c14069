//! Tool doubles: recording, failing, flaky and slow.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use tollgate_nodes::{HarnessError, Tool, ToolContext, ToolSpec};

fn object_schema() -> Value {
    json!({"type": "object"})
}

/// A tool that records every call's arguments and returns a fixed result.
/// Clones share the record.
#[derive(Debug, Clone)]
pub struct FakeTool {
    spec: ToolSpec,
    result: Value,
    calls: Arc<Mutex<Vec<Value>>>,
}

impl FakeTool {
    /// A tool named `name` accepting any object, answering `result`.
    pub fn new(name: impl Into<String>, result: Value) -> Self {
        let name = name.into();
        Self::with_spec(
            ToolSpec::new(name.clone(), format!("fake {name}"), object_schema()),
            result,
        )
    }

    /// A tool described by `spec`, answering `result`.
    pub fn with_spec(spec: ToolSpec, result: Value) -> Self {
        Self { spec, result, calls: Arc::default() }
    }

    /// Arguments of every call, in order.
    pub fn calls(&self) -> Vec<Value> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[async_trait]
impl Tool for FakeTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<Value, HarnessError> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).push(args);
        Ok(self.result.clone())
    }
}

/// A tool that fails its first `failures` calls, then answers `result`
/// (`u32::MAX` failures: always fails).
#[derive(Debug, Clone)]
pub struct FlakyTool {
    spec: ToolSpec,
    failures: u32,
    result: Value,
    calls: Arc<AtomicU32>,
}

impl FlakyTool {
    /// Fails `failures` times, then answers `result`.
    pub fn new(name: impl Into<String>, failures: u32, result: Value) -> Self {
        let name = name.into();
        let spec = ToolSpec::new(name.clone(), format!("flaky {name}"), object_schema());
        Self { spec, failures, result, calls: Arc::default() }
    }

    /// A tool that always fails.
    pub fn failing(name: impl Into<String>) -> Self {
        Self::new(name, u32::MAX, Value::Null)
    }

    /// Calls made so far.
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Tool for FlakyTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<Value, HarnessError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        if call < self.failures {
            return Err(HarnessError::ToolFailed {
                tool: self.spec.name.clone(),
                message: format!("injected failure {}", call + 1),
            });
        }
        Ok(self.result.clone())
    }
}

/// A tool that takes `delay` to answer; counts calls that were dropped
/// before finishing (cancelled).
#[derive(Debug, Clone)]
pub struct SlowTool {
    spec: ToolSpec,
    delay: Duration,
    started: Arc<AtomicU32>,
    cancelled: Arc<AtomicU32>,
}

impl SlowTool {
    /// Answers `{"slept_ms": ..}` after `delay`.
    pub fn new(name: impl Into<String>, delay: Duration) -> Self {
        let name = name.into();
        let spec = ToolSpec::new(name.clone(), format!("slow {name}"), object_schema());
        Self { spec, delay, started: Arc::default(), cancelled: Arc::default() }
    }

    /// Calls started.
    pub fn started(&self) -> u32 {
        self.started.load(Ordering::SeqCst)
    }

    /// Calls dropped before they finished.
    pub fn cancelled(&self) -> u32 {
        self.cancelled.load(Ordering::SeqCst)
    }
}

/// Counts a drop that happens before `finish`.
struct CancelGuard(Option<Arc<AtomicU32>>);

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Some(counter) = self.0.take() {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl Tool for SlowTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<Value, HarnessError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let mut guard = CancelGuard(Some(Arc::clone(&self.cancelled)));
        tokio::time::sleep(self.delay).await;
        guard.0 = None;
        Ok(json!({"slept_ms": self.delay.as_millis() as u64}))
    }
}
