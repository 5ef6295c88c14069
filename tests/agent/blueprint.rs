//! Blueprints: validation, command tools, continuing a stored blueprint in
//! a fresh process, and recovery after a crash between turns.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tollgate::{
    Agent, Blueprint, BlueprintError, Decision, DecisionRequest, Event, Executor, FnTool,
    HarnessError, ModelRegistry, RunConfig, RunStatus, SqliteStore, ToolSpec,
};
use tollgate_testkit::assert_trajectory;

use crate::support::{self, call, id_schema, model, text};

fn write(dir: &Path, name: &str, body: &str) {
    std::fs::write(dir.join(name), body).unwrap();
}

/// The refunds blueprint of docs/agents.md, with a command tool behind approval.
fn refunds(dir: &Path) -> Value {
    write(
        dir,
        "replies.json",
        r#"[{"tool_calls": [{"name": "lookup_order", "args": {"id": 7}}]},
            {"tool_calls": [{"name": "issue_refund", "args": {"id": 7}}]},
            {"text": "Refunded 20 EUR for order 7."}]"#,
    );
    write(
        dir,
        "refund.sh",
        "read args\necho \"refunding $args\" >&2\necho '{\"refunded\": true}'\n",
    );
    json!({
        "name": "refunds", "version": 1,
        "system": "You handle refund requests.",
        "model": "scripted:replies.json",
        "max_steps": 40,
        "tools": [
            {"name": "lookup_order", "description": "Find an order", "parameters": id_schema(),
             "fixture": {"id": 7, "amount": 20}},
            {"name": "issue_refund", "description": "Refund an order", "parameters": id_schema(),
             "command": ["/bin/sh", "refund.sh"], "approval": true}
        ],
        "output_schema": null
    })
}

#[test]
fn every_problem_of_a_blueprint_is_reported_at_once() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bad_script.json", r#"[{"text": 1}, {"nope": true}]"#);
    let blueprint = json!({
        "name": "broken",
        "model": "scripted:bad_script.json",
        "tools": [
            {"name": "a", "description": "", "parameters": {"type": "object"}},
            {"name": "a", "description": "", "parameters": {"type": "nonsense"}, "fixture": 1,
             "command": ["x"]}
        ],
        "output_schema": {"type": 12}
    });
    let Err(BlueprintError::Invalid { problems }) = Blueprint::from_value(blueprint, dir.path())
    else {
        panic!("expected an invalid blueprint")
    };
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    let expect = [
        "/model: script",
        "reply 0: `text` is a string",
        "reply 1: a reply has exactly one of",
        "/tools/1/name: tool `a` is declared twice",
        "/tools/0: a tool needs a `fixture`",
        "/tools/1: a tool has a `fixture` or a `command`, not both",
        "/tools/1/parameters",
        "/output_schema",
    ];
    for needle in expect {
        assert!(text.iter().any(|p| p.contains(needle)), "missing `{needle}` in {text:#?}");
    }
    // Structure problems (unknown fields, wrong types) are all listed too.
    let structure = json!({"name": 3, "model": "scripted:x", "tools": "none", "surprise": true});
    let Err(BlueprintError::Invalid { problems }) = Blueprint::from_value(structure, dir.path())
    else {
        panic!("expected an invalid blueprint")
    };
    assert!(problems.len() >= 3, "{problems:#?}");
    // A misspelt key: the nearest known one is suggested.
    let typo = json!({"name": "t", "modle": "scripted:x", "tols": []});
    let Err(BlueprintError::Invalid { problems }) = Blueprint::from_value(typo, dir.path()) else {
        panic!("expected an invalid blueprint")
    };
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(text.iter().any(|p| p.contains("`modle`: did you mean `model`?")), "{text:#?}");
    assert!(text.iter().any(|p| p.contains("`tols`: did you mean `tools`?")), "{text:#?}");
    // A graph naming unknown agents.
    let graph = json!({"name": "g", "agents": [{"name": "a", "model": "openai:gpt"}],
                       "edges": [["a", "b"]]});
    let Err(BlueprintError::Invalid { problems }) = Blueprint::from_value(graph, dir.path()) else {
        panic!("expected an invalid graph")
    };
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(text.iter().any(|p| p.contains("unknown node `b`")), "{text:?}");
    assert!(text.iter().any(|p| p.contains("no edge leaves START")), "{text:?}");
}

#[test]
fn a_blueprint_run_pauses_and_is_continued_from_its_stored_blueprint_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("refunds.json"), refunds(dir.path()).to_string()).unwrap();
    let db = dir.path().join("runs.db");
    let rt = support::runtime();

    let blueprint = Blueprint::load(dir.path().join("refunds.json")).unwrap();
    let agent = blueprint.compile(&ModelRegistry::new()).unwrap();
    let executor = Executor::new(SqliteStore::open(&db).unwrap());
    let paused =
        rt.block_on(agent.run(&executor, "Refund order 7", blueprint.run_config())).unwrap();
    assert_eq!(paused.status, RunStatus::AwaitingHitl);
    assert_eq!(paused.interrupts[0].payload["tool"], "issue_refund");
    let run_id = paused.run_id;
    drop((agent, executor, blueprint));

    let done = approve_elsewhere(&rt, &db, run_id);
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.final_text(), Some("Refunded 20 EUR for order 7."));
    assert_trajectory(done.events())
        .tool_called("lookup_order")
        .interrupted("tool_approval")
        .event("run_resumed")
        .tool_called_with("issue_refund", json!({"id": 7}))
        .tool_completed("issue_refund", true)
        .completed();
    // The command's stderr line arrived as a tool_delta event.
    let lines: Vec<&str> = done
        .events()
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolDelta { stream, line, .. } if stream == "stderr" => Some(line.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(lines, [r#"refunding {"id":7}"#]);
}

/// Another process: only the database and the run id. Approves the run's
/// interrupt with the blueprint the run stored.
fn approve_elsewhere(
    rt: &tokio::runtime::Runtime,
    db: &Path,
    run_id: tollgate::RunId,
) -> tollgate::AgentRun {
    let executor = Executor::new(SqliteStore::open(db).unwrap());
    let attachment = rt.block_on(executor.attachment(run_id)).unwrap().expect("blueprint stored");
    let blueprint = Blueprint::from_attachment(&attachment).unwrap();
    let agent = blueprint.compile(&ModelRegistry::new()).unwrap();
    let approve = DecisionRequest::new(Decision::Approve);
    rt.block_on(agent.resume(&executor, run_id, approve, RunConfig::new())).unwrap()
}

/// A graph blueprint of two agents in `dir`: a researcher who searches,
/// then a writer who answers `report`.
fn pipeline(dir: &Path, report: &str) -> Blueprint {
    write(
        dir,
        "research.json",
        r#"[{"tool_calls": [{"name": "search", "args": {"id": 1}}]}, {"text": "Facts: 42."}]"#,
    );
    write(dir, "write.json", &json!([{"text": report}]).to_string());
    let blueprint = json!({
        "name": "pipeline", "version": 2,
        "agents": [
            {"name": "researcher", "model": "scripted:research.json",
             "tools": [{"name": "search", "description": "", "parameters": id_schema(), "fixture": {"hits": 1}}]},
            {"name": "writer", "model": "scripted:write.json"}
        ],
        "edges": [["START", "researcher"], ["researcher", "writer"], ["writer", "END"]]
    });
    Blueprint::from_value(blueprint, dir).unwrap()
}

#[test]
fn a_graph_of_agents_hands_answers_along_and_keeps_tool_traffic_apart() {
    let dir = tempfile::tempdir().unwrap();
    let blueprint = pipeline(dir.path(), "Report: the answer is 42.");
    let agent = blueprint.compile(&ModelRegistry::new()).unwrap();
    assert_eq!((agent.graph().name(), agent.graph().version()), ("pipeline", 2));
    let rt = support::runtime();
    let run = rt
        .block_on(agent.run(&support::executor(), "What is the answer?", blueprint.run_config()))
        .unwrap();
    assert_eq!(run.final_text(), Some("Report: the answer is 42."));
    let writer_saw: Vec<&str> =
        run.messages.iter().filter(|m| m.visible_to("writer")).map(|m| m.content()).collect();
    assert_eq!(writer_saw, ["What is the answer?", "Facts: 42.", "Report: the answer is 42."]);
}

#[test]
fn an_unknown_model_spec_fails_to_compile_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let blueprint =
        Blueprint::from_value(json!({"name": "x", "model": "openai:gpt-x"}), dir.path()).unwrap();
    let error = blueprint.compile(&ModelRegistry::new()).unwrap_err();
    assert!(
        matches!(&error, BlueprintError::Compile { source: HarnessError::MissingModel { spec } } if spec == "openai:gpt-x"),
        "{error}"
    );
}

/// A tool that hangs on its first call (the process "dies" in it) and
/// answers afterwards.
fn hang_once(calls: Arc<AtomicU32>, hung: Arc<AtomicBool>) -> FnTool {
    FnTool::new(ToolSpec::new("slow", "", id_schema()), move |args, _| {
        let (calls, hung) = (Arc::clone(&calls), Arc::clone(&hung));
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            if !hung.swap(true, Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            Ok(args)
        }
    })
}

#[test]
fn a_crash_between_turns_resumes_at_the_next_turn_without_redoing_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let (calls, hung) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicBool::new(false)));
    let build = || {
        Agent::new("a", model(vec![call("slow", json!({"id": 1})), text("finished")]))
            .tool(hang_once(Arc::clone(&calls), Arc::clone(&hung)))
            .compile()
            .unwrap()
    };
    let lease = Duration::from_millis(200);
    let run_id = {
        // Leg 1: turn 1 commits, then the process dies inside the tool.
        let rt = support::runtime();
        let executor = Executor::new(SqliteStore::open(&db).unwrap());
        let agent = build();
        let input = tollgate::AgentState {
            messages: vec![tollgate::Message::user("input.0", "go")],
            ..Default::default()
        };
        let handle = rt
            .block_on(executor.start(agent.graph(), input, RunConfig::new().lease(lease)))
            .unwrap();
        let run_id = handle.run_id();
        rt.block_on(async {
            while calls.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        drop(rt); // the crash: the run stays `running` under a lease
        run_id
    };
    // Leg 2, a fresh "process": recover once the lease has expired.
    std::thread::sleep(lease * 2);
    let rt = support::runtime();
    let executor = Executor::new(SqliteStore::open(&db).unwrap());
    let agent = build();
    let handles = rt.block_on(executor.recover(agent.graph(), RunConfig::new())).unwrap();
    assert_eq!(handles.len(), 1);
    let outcome = rt.block_on(handles.into_iter().next().unwrap().wait()).unwrap();
    assert_eq!((outcome.run_id, outcome.status), (run_id, RunStatus::Completed));
    let progress = &outcome.state.progress["a"];
    assert_eq!(progress.model_calls, 2, "turn 1 was not asked again; turn 2 got reply 2");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the in-flight tool round ran again (at least once)"
    );
    let texts: Vec<&str> = outcome.state.messages.iter().map(|m| m.content()).collect();
    assert_eq!(texts.last(), Some(&"finished"));
}

/// Graph problems are blueprint problems, found by `load` and listed
/// together: reserved names, agents START cannot reach, cycles with no way
/// to END.
#[test]
fn graph_problems_are_found_when_the_blueprint_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let agent = |name: &str| json!({"name": name, "model": "openai:gpt"});
    let graph = json!({
        "name": "g",
        "agents": [agent("START"), agent("a"), agent("b"), agent("c"), agent("island")],
        "edges": [["START", "a"], ["a", "b"], ["b", "a"], ["a", "c"], ["c", "END"],
                  ["island", "END"], ["START", "START"]]
    });
    let Err(BlueprintError::Invalid { problems }) = Blueprint::from_value(graph, dir.path()) else {
        panic!("expected an invalid graph")
    };
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    for needle in [
        "/agents/0/name: `START` is reserved",
        "/agents/4: agent `island` cannot be reached from START",
    ] {
        assert!(text.iter().any(|p| p.contains(needle)), "missing `{needle}` in {text:#?}");
    }
    // `a` and `b` loop, but `a` can leave through `c`: no problem there.
    assert!(!text.iter().any(|p| p.contains("`a` has no path") || p.contains("`b` has no path")));

    let trapped = json!({
        "name": "g",
        "agents": [agent("a"), agent("b"), agent("__end__")],
        "edges": [["START", "a"], ["a", "b"], ["b", "a"], ["START", "__end__"], ["__end__", "END"]]
    });
    let Err(BlueprintError::Invalid { problems }) = Blueprint::from_value(trapped, dir.path())
    else {
        panic!("expected an invalid graph")
    };
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    for needle in
        ["agent `a` has no path to END", "agent `b` has no path to END", "`__end__` is reserved"]
    {
        assert!(text.iter().any(|p| p.contains(needle)), "missing `{needle}` in {text:#?}");
    }
}

#[test]
fn agents_of_a_graph_blueprint_say_who_holds_the_work() {
    let dir = tempfile::tempdir().unwrap();
    let blueprint = pipeline(dir.path(), "Report: 42.");
    write(dir.path(), "solo.json", r#"[{"text": "Alone."}]"#);
    let agent = blueprint.compile(&ModelRegistry::new()).unwrap();
    let rt = support::runtime();
    let (sink, mut events) = tollgate::EventSink::channel();
    rt.block_on(agent.run(&support::executor(), "Go", blueprint.run_config().events(sink)))
        .unwrap();
    let mut stages = Vec::new();
    while let Some(envelope) = events.try_recv() {
        if let tollgate::Event::PersonaStage { persona, stage, transition } = envelope.event {
            stages.push(format!("{persona} {transition} {stage}"));
        }
    }
    assert_eq!(
        stages,
        [
            "researcher started researcher",
            "researcher completed researcher",
            "researcher handoff writer",
            "writer started writer",
            "writer completed writer",
        ]
    );
    // A lone agent says nothing of the kind.
    let solo =
        Blueprint::from_value(json!({"name": "solo", "model": "scripted:solo.json"}), dir.path())
            .unwrap();
    let (sink, mut events) = tollgate::EventSink::channel();
    let compiled = solo.compile(&ModelRegistry::new()).unwrap();
    rt.block_on(compiled.run(&support::executor(), "Hi", solo.run_config().events(sink))).unwrap();
    while let Some(envelope) = events.try_recv() {
        assert_ne!(envelope.event.kind(), "persona_stage");
    }
}

/// `pipeline.json`: `intake`, then `review` (the graph blueprint in
/// `review/review.json`, whose checker asks before its tool runs), then
/// `summary` (an agent blueprint inline).
fn nested(dir: &Path) -> Value {
    std::fs::create_dir_all(dir.join("review")).unwrap();
    write(dir, "intake.json", r#"[{"text": "Intake: order 7, 20 EUR."}]"#);
    write(
        &dir.join("review"),
        "checker.json",
        r#"[{"tool_calls": [{"name": "approve_refund", "args": {"id": 7}}]},
            {"text": "Checked: refund approved."}]"#,
    );
    write(dir, "summary.json", r#"[{"text": "Summary: refunded 20 EUR."}]"#);
    let review = json!({
        "name": "review", "version": 3,
        "agents": [{"name": "checker", "model": "scripted:checker.json",
                    "tools": [{"name": "approve_refund", "description": "", "parameters": id_schema(),
                               "fixture": {"ok": true}, "approval": true}]}],
        "edges": [["START", "checker"], ["checker", "END"]]
    });
    write(&dir.join("review"), "review.json", &review.to_string());
    json!({
        "name": "pipeline", "version": 1,
        "agents": [
            {"name": "intake", "model": "scripted:intake.json"},
            {"name": "review", "blueprint": "review/review.json"},
            {"name": "summary", "blueprint": {"name": "summarizer", "model": "scripted:summary.json"}}
        ],
        "edges": [["START", "intake"], ["intake", "review"], ["review", "summary"], ["summary", "END"]]
    })
}

#[test]
fn an_entry_may_be_another_blueprint_run_as_a_subgraph_and_continued_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "pipeline.json", &nested(dir.path()).to_string());
    let db = dir.path().join("runs.db");
    let rt = support::runtime();
    let blueprint = Blueprint::load(dir.path().join("pipeline.json")).unwrap();
    let agent = blueprint.compile(&ModelRegistry::new()).unwrap();
    let mermaid = agent.graph().to_mermaid();
    assert!(mermaid.contains("subgraph n3[\"review\"]"), "{mermaid}");
    // Agents without tools have no tools node; the checker, with its
    // approval tool, has one.
    assert!(
        !mermaid.contains("intake.tools") && !mermaid.contains("summarizer.tools"),
        "{mermaid}"
    );
    assert!(mermaid.contains("checker.tools"), "{mermaid}");
    let executor = Executor::new(SqliteStore::open(&db).unwrap());
    let paused =
        rt.block_on(agent.run(&executor, "Refund order 7", blueprint.run_config())).unwrap();
    assert_eq!(paused.status, RunStatus::AwaitingHitl);
    let asked = &paused.interrupts[0];
    assert_eq!(asked.payload["tool"], "approve_refund");
    assert!(asked.node.starts_with("review/checker"), "{}", asked.node);
    let run_id = paused.run_id;
    drop((agent, executor, blueprint));

    let done = approve_elsewhere(&rt, &db, run_id);
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.final_text(), Some("Summary: refunded 20 EUR."));
    let said: Vec<&str> = done
        .messages
        .iter()
        .filter(|m| matches!(m, tollgate::Message::Assistant { tool_calls, .. } if tool_calls.is_empty()))
        .map(|m| m.content())
        .collect();
    assert_eq!(
        said,
        ["Intake: order 7, 20 EUR.", "Checked: refund approved.", "Summary: refunded 20 EUR."],
        "each subgraph's answer joined the run's conversation once"
    );
    let inner: Vec<String> = done
        .events()
        .iter()
        .filter(|e| e.event.kind() == "tool_completed")
        .filter_map(|e| e.node_id.clone())
        .collect();
    assert_eq!(inner.len(), 1);
    assert!(inner[0].starts_with("review:2.0/checker"), "{inner:?}");
}

#[test]
fn problems_of_nested_blueprints_are_reported_with_their_pointers() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "bad.json",
        r#"{"name": "bad", "model": "nonsense", "tools": [{"name": "t"}]}"#,
    );
    write(
        dir.path(),
        "loop.json",
        r#"{"name": "loop", "agents": [{"name": "again", "blueprint": "loop.json"}], "edges": [["START", "again"], ["again", "END"]]}"#,
    );
    let graph = json!({
        "name": "outer",
        "agents": [
            {"name": "inline", "blueprint": {"name": "x", "model": "nonsense"}},
            {"name": "missing", "blueprint": "missing.json"},
            {"name": "bad", "blueprint": "bad.json"},
            {"name": "loop", "blueprint": "loop.json"},
            {"name": "odd", "blueprint": 7}
        ],
        "edges": [["START", "inline"], ["inline", "missing"], ["missing", "bad"], ["bad", "loop"],
                  ["loop", "odd"], ["odd", "END"]]
    });
    let Err(BlueprintError::Invalid { problems }) =
        Blueprint::from_value(graph.clone(), dir.path())
    else {
        panic!("expected an invalid blueprint")
    };
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(text.iter().any(|p| p.starts_with("/agents/4/blueprint: ")), "{text:#?}");
    // Structure first: fix the odd entry and the nested ones are read.
    let mut graph = graph;
    graph["agents"][4]["blueprint"] = json!({"name": "fine", "model": "openai:gpt"});
    let Err(BlueprintError::Invalid { problems }) = Blueprint::from_value(graph, dir.path()) else {
        panic!("expected an invalid blueprint")
    };
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    for needle in [
        "/agents/0/blueprint/model: `nonsense` is not a model spec",
        "/agents/1/blueprint: cannot read blueprint",
        "/agents/2/blueprint: in ",
        "bad.json at /tools/0: ",
        "loop.json includes itself",
    ] {
        assert!(text.iter().any(|p| p.contains(needle)), "missing `{needle}` in {text:#?}");
    }
}

#[test]
fn command_tools_of_nested_blueprints_are_listed_by_path() {
    let dir = tempfile::tempdir().unwrap();
    let graph = json!({
        "name": "outer",
        "agents": [{"name": "ops", "blueprint": {
            "name": "ops", "model": "openai:gpt",
            "tools": [{"name": "deploy", "description": "", "parameters": {"type": "object"},
                       "command": ["/bin/true"]}]}}],
        "edges": [["START", "ops"], ["ops", "END"]]
    });
    let blueprint = Blueprint::from_value(graph, dir.path()).unwrap();
    assert_eq!(blueprint.command_tools(), ["ops/ops.deploy"]);
}

#[test]
fn approvals_name_their_reviewers_and_bad_reviewers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tool = |name: &str, approval: serde_json::Value| {
        json!({"name": name, "description": "", "parameters": {"type": "object"},
               "fixture": {}, "approval": approval})
    };
    let graph = json!({
        "name": "outer",
        "agents": [
            {"name": "desk", "model": "openai:gpt",
             "tools": [tool("refund", json!({"reviewers": ["finance", "ops"]})),
                       tool("note", json!(true))]},
            {"name": "nested", "blueprint": {
                "name": "nested", "model": "openai:gpt",
                "tools": [tool("wire", json!({"reviewers": ["treasury", "finance"]}))]}}
        ],
        "edges": [["START", "desk"], ["desk", "nested"], ["nested", "END"]]
    });
    let blueprint = Blueprint::from_value(graph, dir.path()).unwrap();
    assert_eq!(blueprint.reviewers(), ["finance", "ops", "treasury"]);
    let plain = json!({"name": "plain", "model": "openai:gpt", "tools": [tool("t", json!(true))]});
    assert!(Blueprint::from_value(plain, dir.path()).unwrap().reviewers().is_empty());
    for bad in [json!({"reviewers": []}), json!({"reviewers": ["two words"]}), json!({"who": 1})] {
        let doc = json!({"name": "bad", "model": "openai:gpt", "tools": [tool("t", bad.clone())]});
        let Err(BlueprintError::Invalid { problems }) = Blueprint::from_value(doc, dir.path())
        else {
            panic!("{bad} accepted")
        };
        assert!(
            problems.iter().any(|p| p.to_string().contains("/tools/0/approval")),
            "{problems:?}"
        );
    }
}
