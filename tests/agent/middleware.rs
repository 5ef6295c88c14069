//! Middleware order and events.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{json, Value};
use tollgate::{
    Agent, Event, HarnessError, Middleware, ModelNext, ModelRequest, ModelResponse, RunConfig,
    RunContext, ToolCall, ToolNext,
};

use crate::support::{self, call, counting, model, text};

#[derive(Debug)]
struct Recorder {
    name: &'static str,
    log: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn note(&self, what: &str) {
        self.log.lock().unwrap().push(format!("{}.{what}", self.name));
    }
}

#[async_trait]
impl Middleware for Recorder {
    fn name(&self) -> &str {
        self.name
    }
    async fn before_model(
        &self,
        request: &mut ModelRequest,
        cx: &RunContext,
    ) -> Result<(), HarnessError> {
        self.note("before");
        assert_eq!((cx.agent(), cx.node()), ("a", "a"), "the hook knows where it runs");
        request.system =
            Some(format!("{} +{}", request.system.clone().unwrap_or_default(), self.name));
        Ok(())
    }
    async fn after_model(
        &self,
        _: &ModelRequest,
        _: &mut ModelResponse,
        _: &RunContext,
    ) -> Result<(), HarnessError> {
        self.note("after");
        Ok(())
    }
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: ModelNext<'_>,
    ) -> Result<ModelResponse, HarnessError> {
        self.note("wrap_in");
        let response = next.call(request).await;
        self.note("wrap_out");
        response
    }
    async fn wrap_tool_call(
        &self,
        call: ToolCall,
        next: ToolNext<'_>,
    ) -> Result<Value, HarnessError> {
        self.note("tool_in");
        let cx = next.context();
        assert_eq!(cx.node(), "a.tools");
        cx.emit_custom("audit", json!({"by": self.name, "tool": call.name})).unwrap();
        let result = next.call(call).await;
        self.note("tool_out");
        result
    }
}

#[test]
fn the_first_registered_middleware_is_the_outermost() {
    let rt = support::runtime();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tool, _) = counting("t");
    let agent = Agent::new("a", model(vec![call("t", json!({"id": 1})), text("done")]))
        .tool(tool)
        .middleware(Recorder { name: "A", log: Arc::clone(&log) })
        .middleware(Recorder { name: "B", log: Arc::clone(&log) })
        .compile()
        .unwrap();
    let run = rt.block_on(agent.run(&support::executor(), "go", RunConfig::new())).unwrap();
    let turn = [
        "A.before",
        "B.before",
        "A.wrap_in",
        "B.wrap_in",
        "B.wrap_out",
        "A.wrap_out",
        "B.after",
        "A.after",
    ];
    let tools = ["A.tool_in", "B.tool_in", "B.tool_out", "A.tool_out"];
    let expected: Vec<&str> = turn.iter().chain(&tools).chain(&turn).copied().collect();
    assert_eq!(*log.lock().unwrap(), expected);
    let hooks: Vec<(String, String)> = run
        .events()
        .iter()
        .filter_map(|e| match &e.event {
            Event::MiddlewareStarted { middleware, hook, .. } => {
                Some((middleware.clone(), hook.clone()))
            }
            _ => None,
        })
        .take(4)
        .collect();
    let names = |pairs: &[(&str, &str)]| {
        pairs.iter().map(|(m, h)| (m.to_string(), h.to_string())).collect::<Vec<_>>()
    };
    assert_eq!(
        hooks,
        names(&[
            ("A", "before_model"),
            ("B", "before_model"),
            ("A", "wrap_model_call"),
            ("B", "wrap_model_call")
        ])
    );
    let completed =
        run.events().iter().filter(|e| e.event.kind() == "middleware_completed").count();
    assert_eq!(completed, 2 * 6 + 2, "every hook run is bookended: 6 per turn, 2 per tool call");
    let audits: Vec<(&str, &serde_json::Value)> = run
        .events()
        .iter()
        .filter_map(|e| match &e.event {
            Event::Custom { payload, .. } => Some((e.node_id.as_deref().unwrap(), payload)),
            _ => None,
        })
        .filter(|(_, payload)| payload.get("by").is_some())
        .collect();
    assert_eq!(
        audits,
        [
            ("a.tools:2.0", &json!({"by": "A", "tool": "t"})),
            ("a.tools:2.0", &json!({"by": "B", "tool": "t"}))
        ],
        "middleware records custom events through its RunContext"
    );
}
