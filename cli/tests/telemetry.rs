//! Telemetry of real processes: OpenTelemetry spans sent over OTLP/HTTP
//! (JSON and protobuf) to a receiver this test runs, and Prometheus
//! metrics scraped from `serve` and `worker --metrics-addr` after a known
//! workload.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use serde_json::{json, Value};
use support::{client, code, runtime, settled, Fixture, Served};

/// One received span, flattened.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace: String,
    id: String,
    parent: String,
    attributes: BTreeMap<String, String>,
    /// 2 is ERROR.
    status: i32,
    service: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn flatten(request: ExportTraceServiceRequest) -> Vec<Span> {
    let mut spans = Vec::new();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(&kv.value))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                spans.push(Span {
                    name: span.name.clone(),
                    trace: hex(&span.trace_id),
                    id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(&kv.value)))
                        .collect(),
                    status: span.status.as_ref().map_or(0, |s| s.code),
                    service: service.clone(),
                });
            }
        }
    }
    spans
}

/// An OTLP/HTTP receiver on a free port: the spans it got, and the content
/// types they came in.
#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    formats: BTreeSet<String>,
}

fn receiver(runtime: &tokio::runtime::Runtime) -> (String, Arc<Mutex<Received>>) {
    let received = Arc::new(Mutex::new(Received::default()));
    let sink = Arc::clone(&received);
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |headers: HeaderMap, body: Bytes| {
            let sink = Arc::clone(&sink);
            async move {
                let kind = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let request = if kind.starts_with("application/json") {
                    serde_json::from_slice::<ExportTraceServiceRequest>(&body).unwrap()
                } else {
                    ExportTraceServiceRequest::decode(body).unwrap()
                };
                let mut sink = sink.lock().unwrap();
                sink.spans.extend(flatten(request));
                sink.formats.insert(kind);
                "{}"
            }
        }),
    );
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), received)
}

/// The spans of run `run`.
fn of_run(spans: &[Span], run: &str) -> Vec<Span> {
    let of = |s: &&Span| s.attributes.get("tollgate.run_id").map(String::as_str) == Some(run);
    spans.iter().filter(of).cloned().collect()
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn parent<'a>(spans: &'a [Span], span: &Span) -> &'a Span {
    spans
        .iter()
        .find(|s| s.id == span.parent)
        .unwrap_or_else(|| panic!("the parent of {} was not received", span.name))
}

#[test]
fn spans_are_nested_with_genai_attributes_and_a_resumed_run_joins_its_trace() {
    let fx = Fixture::new();
    let rt = runtime();
    let (endpoint, received) = receiver(&rt);
    let otel = |command: &mut std::process::Command, protocol: &str| {
        command
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
            .env("OTEL_SERVICE_NAME", "refund-desk")
            .env_remove("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT");
    };
    // Leg 1 (JSON): the agent looks the order up and pauses for approval.
    let mut start = fx.command(&["run", "refunds.json", "--input", "Refund order 7", "--json"]);
    otel(&mut start, "http/json");
    let output = start.output().unwrap();
    assert_eq!(code(&output), Some(10), "{}", String::from_utf8_lossy(&output.stderr));
    let run: Value = serde_json::from_slice(&output.stdout).unwrap();
    let run = run["id"].as_str().unwrap().to_owned();
    // Leg 2 (protobuf), another process: approved, the refund runs, done;
    // this one records message contents.
    let mut resume = fx.command(&["runs", "resume", &run, "--approve", "--json"]);
    otel(&mut resume, "http/protobuf");
    resume.env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
    let output = resume.output().unwrap();
    assert_eq!(code(&output), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    // A run whose model refuses: failed spans.
    let mut down = fx.command(&["run", "down_bp.json", "--input", "Hi", "--json"]);
    otel(&mut down, "http/protobuf");
    let output = down.output().unwrap();
    assert_eq!(code(&output), Some(1), "{}", String::from_utf8_lossy(&output.stderr));

    // Each process flushed its spans before it exited.
    let received = received.lock().unwrap();
    assert_eq!(
        received.formats,
        BTreeSet::from(["application/json".to_owned(), "application/x-protobuf".to_owned()])
    );
    let spans = of_run(&received.spans, &run);
    assert!(spans.iter().all(|s| s.service == "refund-desk"), "OTEL_SERVICE_NAME");

    // Two legs, one trace: the second leg's run span is a child of the
    // first's.
    let legs = named(&spans, "run refunds");
    assert_eq!(legs.len(), 2, "{:#?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    let (first, second) =
        if legs[0].parent.is_empty() { (legs[0], legs[1]) } else { (legs[1], legs[0]) };
    assert!(first.parent.is_empty(), "the first leg is the trace's root");
    assert_eq!(second.parent, first.id, "the resumed leg continues the stored trace");
    assert!(spans.iter().all(|s| s.trace == first.trace), "every span of the run in one trace");
    assert_eq!(first.attributes["tollgate.graph"], "refunds");

    // run > step > node > invoke_agent > chat; node > execute_tool.
    let chats = named(&spans, "chat scripted:replies.json");
    assert_eq!(chats.len(), 3, "three model calls");
    for chat in &chats {
        let agent = parent(&spans, chat);
        assert_eq!(agent.name, "invoke_agent refunds");
        assert_eq!(agent.attributes["gen_ai.operation.name"], "invoke_agent");
        assert_eq!(agent.attributes["gen_ai.agent.name"], "refunds");
        let node = parent(&spans, agent);
        assert!(node.name.starts_with("node "), "{}", node.name);
        let step = parent(&spans, node);
        assert!(step.name.starts_with("step "), "{}", step.name);
        assert_eq!(step.attributes["tollgate.step"], node.attributes["tollgate.step"]);
        assert!(parent(&spans, step).name == "run refunds");
        let a = &chat.attributes;
        assert_eq!(a["gen_ai.operation.name"], "chat");
        assert_eq!(a["gen_ai.request.model"], "scripted:replies.json");
        assert_eq!(a["gen_ai.response.model"], "scripted:replies.json");
        assert_eq!(a["gen_ai.agent.name"], "refunds");
        assert!(a["gen_ai.usage.input_tokens"].parse::<u64>().unwrap() > 0);
        assert!(a["gen_ai.usage.output_tokens"].parse::<u64>().is_ok());
        assert_eq!(a["tollgate.run_id"], run);
        assert_eq!(a["tollgate.node"], node.attributes["tollgate.node"]);
        assert_eq!(chat.status, 0);
    }
    let reasons: BTreeSet<&str> =
        chats.iter().map(|c| c.attributes["gen_ai.response.finish_reasons"].as_str()).collect();
    assert_eq!(reasons, BTreeSet::from(["stop", "tool_calls"]));
    let tools = named(&spans, "execute_tool issue_refund");
    assert_eq!(tools.len(), 1);
    let tool = tools[0];
    assert_eq!(tool.attributes["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tool.attributes["gen_ai.tool.name"], "issue_refund");
    assert!(!tool.attributes["gen_ai.tool.call.id"].is_empty());
    assert!(parent(&spans, tool).name.starts_with("node "));
    assert_eq!(named(&spans, "execute_tool lookup_order").len(), 1);

    // Message contents only where asked for (the second leg).
    // Which leg a span is in: walk up to a leg's run span.
    let in_first = |s: &&Span| {
        let mut at = *s;
        loop {
            if at.id == second.id {
                break false;
            }
            if at.id == first.id {
                break true;
            }
            at = parent(&spans, at);
        }
    };
    for chat in &chats {
        let captured = chat.attributes.contains_key("gen_ai.input.messages");
        assert_eq!(captured, !in_first(chat), "contents are recorded only when asked for");
    }
    let captured = chats.iter().find(|c| !in_first(c)).unwrap();
    assert!(captured.attributes["gen_ai.output.messages"].contains("Refunded 20 EUR"));
    assert!(tool.attributes["gen_ai.tool.call.result"].contains("refunded"));

    // The failed run: its chat span, node, step and run carry ERROR.
    let failed: Vec<&Span> = received
        .spans
        .iter()
        .filter(|s| s.attributes.get("tollgate.graph").map(String::as_str) == Some("down"))
        .collect();
    assert_eq!(failed.len(), 1, "one leg of `down`");
    assert_eq!(failed[0].status, 2, "the failed run's span is an error");
    let chat = received.spans.iter().find(|s| s.name == "chat scripted:down.json").unwrap();
    assert_eq!(chat.status, 2, "the refused model call is an error");
    drop(received);
    drop(rt);
}

#[test]
fn a_queued_run_driven_by_a_worker_joins_the_trace_that_queued_it() {
    let fx = Fixture::new();
    let rt = runtime();
    let (endpoint, received) = receiver(&rt);
    let mut queue = fx.command(&["run", "hello_bp.json", "--input", "Hi", "--queue", "--json"]);
    queue.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
    let output = queue.output().unwrap();
    assert_eq!(code(&output), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let run: Value = serde_json::from_slice(&output.stdout).unwrap();
    let run = run["id"].as_str().unwrap().to_owned();

    let mut worker = fx.command(&["worker", "--json"]);
    worker
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let worker = worker.spawn().map(support::Reaped::new).unwrap();
    support::wait_for(&fx, std::slice::from_ref(&run), |s| s[0] == "completed");
    support::signal(&worker, "TERM");
    let mut worker = worker;
    assert!(worker.wait().unwrap().success());

    let received = received.lock().unwrap();
    let spans = of_run(&received.spans, &run);
    let enqueue = named(&spans, "enqueue hello");
    let legs = named(&spans, "run hello");
    assert_eq!((enqueue.len(), legs.len()), (1, 1), "{spans:#?}");
    assert_eq!(legs[0].parent, enqueue[0].id, "the worker's leg continues the queuing trace");
    assert_eq!(legs[0].trace, enqueue[0].trace);
    let chat = named(&spans, "chat scripted:hello.json");
    assert_eq!(chat.len(), 1);
    assert_eq!(chat[0].trace, enqueue[0].trace, "the worker's spans were exported");
    drop(received);
    drop(rt);
}

#[test]
fn a_protocol_it_cannot_send_is_a_usage_error() {
    let fx = Fixture::new();
    let mut command = fx.command(&["runs", "list", "--json"]);
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    let output = command.output().unwrap();
    assert_eq!(code(&output), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported"), "{stderr}");
}

/// Prometheus text → {"name{sorted labels}": value}.
fn scrape(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let key = match series.split_once('{') {
            Some((name, labels)) => {
                let mut labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                labels.sort_unstable();
                format!("{name}{{{}}}", labels.join(","))
            }
            None => series.to_owned(),
        };
        out.insert(key, value.parse().unwrap());
    }
    out
}

fn metric(metrics: &BTreeMap<String, f64>, key: &str) -> f64 {
    *metrics.get(key).unwrap_or_else(|| panic!("no {key} in {metrics:#?}"))
}

#[test]
fn serve_counts_runs_steps_models_tools_and_waits() {
    let fx = Fixture::new();
    let library = fx.path("library");
    std::fs::create_dir_all(&library).unwrap();
    for file in ["refunds.json", "replies.json", "refund.sh"] {
        std::fs::copy(fx.path(file), library.join(file)).unwrap();
    }
    let server = Served::start(&fx, &["--blueprints", library.to_str().unwrap()]);
    let client = client();
    runtime().block_on(async {
        let metrics_url = server.url("/metrics");
        let anonymous = support::anonymous().get(&metrics_url).send().await.unwrap();
        assert_eq!(anonymous.status(), 401, "/metrics is behind the token");
        let read = || async {
            let response = client.get(&metrics_url).send().await.unwrap();
            assert_eq!(response.status(), 200);
            let kind = response.headers()["content-type"].to_str().unwrap().to_owned();
            assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
            response.text().await.unwrap()
        };

        let body = json!({"blueprint": "refunds", "input": "Refund order 7"});
        let created = client.post(server.url("/runs?wait=true")).json(&body).send().await;
        let summary: Value = created.unwrap().json().await.unwrap();
        assert_eq!(summary["status"], "awaiting_hitl");
        let id = summary["id"].as_str().unwrap().to_owned();

        let text = read().await;
        for help in [
            "# TYPE tollgate_runs_started_total counter",
            "# TYPE tollgate_step_duration_seconds histogram",
            "# HELP tollgate_runs_waiting ",
            "# TYPE tollgate_tool_calls_total counter",
        ] {
            assert!(text.contains(help), "{help} in\n{text}");
        }
        let m = scrape(&text);
        assert_eq!(metric(&m, r#"tollgate_runs_started_total{graph="refunds"}"#), 1.0);
        assert_eq!(metric(&m, r#"tollgate_runs_paused_total{graph="refunds"}"#), 1.0);
        assert_eq!(metric(&m, "tollgate_runs_waiting"), 1.0);
        let age = metric(&m, "tollgate_runs_waiting_oldest_seconds");
        assert!((0.0..60.0).contains(&age), "{age}");
        let model = r#"model="scripted:replies.json""#;
        assert_eq!(
            metric(&m, &format!(r#"tollgate_model_calls_total{{{model},outcome="ok"}}"#)),
            2.0
        );
        assert!(metric(&m, &format!("tollgate_model_input_tokens_total{{{model}}}")) > 0.0);
        assert_eq!(
            metric(&m, r#"tollgate_tool_calls_total{outcome="ok",tool="lookup_order"}"#),
            1.0
        );
        // model, tools (lookup), model, tools (it pauses before the refund).
        assert_eq!(metric(&m, "tollgate_step_duration_seconds_count"), 4.0);
        // Three steps and the pause.
        assert_eq!(metric(&m, "tollgate_commit_duration_seconds_count"), 4.0);
        assert!(metric(&m, r#"tollgate_step_duration_seconds_bucket{le="+Inf"}"#) == 4.0);

        let resume = server.url(&format!("/runs/{id}/resume"));
        let approved = client.post(&resume).json(&json!({"decision": "approve"})).send().await;
        assert_eq!(approved.unwrap().status(), 200);
        let done = settled(&client, &server.url(&format!("/runs/{id}"))).await;
        assert_eq!(done["status"], "completed");

        let m = scrape(&read().await);
        assert_eq!(
            metric(&m, r#"tollgate_runs_finished_total{graph="refunds",status="completed"}"#),
            1.0
        );
        assert_eq!(metric(&m, "tollgate_runs_waiting"), 0.0);
        assert_eq!(metric(&m, "tollgate_runs_waiting_oldest_seconds"), 0.0);
        assert_eq!(
            metric(&m, &format!(r#"tollgate_model_calls_total{{{model},outcome="ok"}}"#)),
            3.0
        );
        assert_eq!(
            metric(&m, r#"tollgate_tool_calls_total{outcome="ok",tool="issue_refund"}"#),
            1.0
        );
        assert!(!m.keys().any(|k| k.starts_with("tollgate_store_errors_total")), "{m:#?}");
    });
}

#[test]
fn a_worker_serves_its_metrics_on_its_own_address() {
    use std::io::BufRead;
    let fx = Fixture::new();
    let runs: Vec<String> = (0..3)
        .map(|_| {
            let queued =
                fx.json(&["run", "hello_bp.json", "--input", "Hi", "--queue", "--json"], 0);
            queued["id"].as_str().unwrap().to_owned()
        })
        .collect();
    let mut worker = fx
        .command(&["worker", "--metrics-addr", "127.0.0.1:0", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map(support::Reaped::new)
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(worker.stderr.take().unwrap()).read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("tollgate: metrics on ")
        .unwrap_or_else(|| panic!("worker said {line:?}"))
        .to_owned();
    support::wait_for(&fx, &runs, |statuses| statuses.iter().all(|s| s == "completed"));
    let text = runtime().block_on(async {
        support::anonymous().get(&url).send().await.unwrap().text().await.unwrap()
    });
    support::signal(&worker, "TERM");
    assert!(worker.wait().unwrap().success());
    let m = scrape(&text);
    assert_eq!(
        metric(&m, r#"tollgate_runs_finished_total{graph="hello",status="completed"}"#),
        3.0
    );
    assert_eq!(metric(&m, "tollgate_worker_leases_held"), 0.0);
    assert_eq!(metric(&m, "tollgate_runs_waiting"), 0.0);
    assert!(!m.keys().any(|k| k.starts_with("tollgate_runs_started_total")), "queued elsewhere");
    assert_eq!(
        metric(&m, r#"tollgate_model_calls_total{model="scripted:hello.json",outcome="ok"}"#),
        3.0
    );
}
