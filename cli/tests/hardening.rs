//! The real `tollgate` binary at the sharp edges: files that are not ours,
//! damaged rows and checkpoints, runs that cannot be decided, graph
//! problems, a rejection that ends a run, and logs and histories readable
//! by people.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use support::{code, Fixture};

/// A mistyped `--db` is "not found" for every command but `run`, and no
/// file appears; another application's SQLite file is refused (exit 2) and
/// left byte for byte as it was.
#[test]
fn missing_and_foreign_databases_are_refused_untouched() {
    let fx = Fixture::new();
    let missing = fx.path("typo.db");
    for args in [
        vec!["runs", "list"],
        vec!["runs", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV"],
        vec!["runs", "events", "01ARZ3NDEKTSV4RRFFQ69G5FAV"],
        vec!["runs", "prune", "--older-than", "1d"],
        vec!["worker"],
        vec!["serve", "--addr", "127.0.0.1:0"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("--db")
            .arg(&missing)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(code(&output), Some(3), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("no database at"), "{args:?}: {stderr}");
        assert!(!missing.exists(), "{args:?} created {}", missing.display());
    }

    // A path in a directory that does not exist: said, exit 3, even for
    // `run`, which creates a missing file but not its directory.
    let nowhere = fx.path("no-such-dir").join("runs.db");
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("--db")
        .arg(&nowhere)
        .args(["run", "hello_bp.json"])
        .current_dir(fx.dir.path())
        .output()
        .unwrap();
    assert_eq!(code(&output), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no directory") && stderr.contains("mkdir -p"), "{stderr}");

    let foreign = fx.path("shop.db");
    let conn = rusqlite::Connection::open(&foreign).unwrap();
    conn.execute_batch("CREATE TABLE customers (id INTEGER); INSERT INTO customers VALUES (7);")
        .unwrap();
    drop(conn);
    let before = std::fs::read(&foreign).unwrap();
    for args in [vec!["runs", "list"], vec!["run", "hello_bp.json"]] {
        let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("--db")
            .arg(&foreign)
            .args(&args)
            .current_dir(fx.dir.path())
            .output()
            .unwrap();
        assert_eq!(code(&output), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("customers"), "{args:?}");
        assert_eq!(std::fs::read(&foreign).unwrap(), before, "{args:?}: the file changed");
    }
}

/// A paused run whose checkpoint is damaged: `resume` fails with the
/// checksum error, and a later `reject` says why the run failed rather than
/// "someone decided first". `continue` on a finished run conflicts, as
/// `resume` on one does.
#[test]
fn deciding_a_run_that_failed_says_why() {
    let fx = Fixture::new();
    let run = fx.paused();
    let conn = rusqlite::Connection::open(fx.db()).unwrap();
    let (id, mut updates): (i64, Vec<u8>) = conn
        .query_row("SELECT id, updates FROM steps ORDER BY id DESC LIMIT 1", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .unwrap();
    let middle = updates.len() / 2;
    updates[middle] ^= 0xff;
    conn.execute("UPDATE steps SET updates = ?1 WHERE id = ?2", rusqlite::params![updates, id])
        .unwrap();
    drop(conn);
    let resumed = fx.run(&["runs", "resume", &run, "--approve"]);
    assert_eq!(code(&resumed), Some(1));
    assert!(String::from_utf8_lossy(&resumed.stderr).contains("checksum"));
    let rejected = fx.run(&["runs", "reject", &run, "--reason", "no"]);
    assert_eq!(code(&rejected), Some(4));
    let said = String::from_utf8_lossy(&rejected.stderr);
    assert!(said.contains("failed") && said.contains("checksum"), "{said}");
    assert!(!said.contains("decided first"), "{said}");

    // A paused run: continue waits for a decision, and says how to give it.
    let paused = fx.paused();
    let output = fx.run(&["runs", "continue", &paused]);
    assert_eq!(code(&output), Some(4));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains(&format!("tollgate runs resume {paused} --interrupt")), "{said}");

    let done = fx.json(&["run", "hello_bp.json", "--json"], 0);
    let id = done["id"].as_str().unwrap();
    for args in [vec!["runs", "continue", id], vec!["runs", "resume", id, "--approve"]] {
        let output = fx.run(&args);
        assert_eq!(code(&output), Some(4), "{args:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("completed"), "{args:?}");
    }
}

/// The human `runs events` shows what every event carries: the decision
/// and its reason, the tool refusal told to the model, node updates.
#[test]
fn human_events_show_decisions_reasons_and_updates() {
    let fx = Fixture::new();
    let run = fx.paused();
    let rejected = fx.run(&["runs", "reject", &run, "--reason", "too much"]);
    assert_eq!(code(&rejected), Some(0), "{}", String::from_utf8_lossy(&rejected.stderr));
    let output = fx.run(&["runs", "events", &run]);
    assert_eq!(code(&output), Some(0));
    let text = String::from_utf8_lossy(&output.stdout);
    let line = |kind: &str| {
        text.lines()
            .filter(|line| line.split_whitespace().nth(2) == Some(kind))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(line("run_resumed").contains("reject: too much"), "{text}");
    assert!(
        line("custom").contains("tool_refused") && line("custom").contains("too much"),
        "{text}"
    );
    assert!(line("node_completed").contains("update {"), "{text}");
    assert!(line("interrupt_raised").contains("approve/edit/reject"), "{text}");
    assert!(line("run_ended").contains("waiting on"), "{text}");
}

/// A graph problem is a blueprint error: exit 2, every problem listed,
/// nothing run.
#[test]
fn graph_problems_exit_2_before_anything_runs() {
    let fx = Fixture::new();
    let graph = json!({"name": "g",
        "agents": [{"name": "END", "model": "scripted:hello.json"},
                   {"name": "lonely", "model": "scripted:hello.json"}],
        "edges": [["START", "END"], ["lonely", "END"]]});
    std::fs::write(fx.path("bad_graph.json"), graph.to_string()).unwrap();
    let output = fx.run(&["run", "bad_graph.json"]);
    assert_eq!(code(&output), Some(2));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("`END` is reserved") && said.contains("`lonely` cannot be reached"),
        "{said}"
    );
    assert!(!fx.db().exists(), "nothing was run, no database made");
}

/// The refunds example ends its run when the refund is rejected: exit 11,
/// the reason as the failure, no refund, the model not called again.
#[test]
fn a_rejected_refund_ends_the_run() {
    let fx = Fixture::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/blueprints/refunds");
    let folder = fx.path("example");
    std::fs::create_dir_all(&folder).unwrap();
    for file in ["refunds.json", "replies.json", "refund.sh"] {
        std::fs::copy(example.join(file), folder.join(file)).unwrap();
    }
    let paused =
        fx.json(&["run", "example/refunds.json", "--input", "Refund order 7", "--json"], 10);
    let run = paused["id"].as_str().unwrap();
    let rejected = fx.run(&["runs", "reject", run, "--reason", "not eligible", "--json"]);
    assert_eq!(code(&rejected), Some(11), "{}", String::from_utf8_lossy(&rejected.stderr));
    let summary: Value = serde_json::from_slice(&rejected.stdout).unwrap();
    assert_eq!(summary["status"], "rejected");
    assert_eq!(summary["error"]["message"], "not eligible");
    let events = fx.run(&["runs", "events", run, "--json"]);
    let events: Vec<Value> = String::from_utf8_lossy(&events.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let models = events.iter().filter(|e| e["event_type"] == "model_started").count();
    assert_eq!(models, 2, "no model call after the rejection");
    let refunds = events
        .iter()
        .filter(|e| e["event_type"] == "tool_started" && e["tool"] == "issue_refund")
        .count();
    assert_eq!(refunds, 0, "the refund was not made");
}

/// A run row with an unknown status is reported as damaged while the other
/// runs are listed; a damaged stored event line stops `runs events`
/// (exit 1), named.
#[test]
fn damaged_rows_are_reported_without_hiding_the_rest() {
    let fx = Fixture::new();
    let ids: Vec<String> = (0..3)
        .map(|_| fx.json(&["run", "hello_bp.json", "--json"], 0)["id"].as_str().unwrap().to_owned())
        .collect();
    let conn = rusqlite::Connection::open(fx.db()).unwrap();
    conn.execute("UPDATE runs SET status = 'sleepy' WHERE id = ?1", [&ids[1]]).unwrap();
    let num: i64 =
        conn.query_row("SELECT num FROM runs WHERE id = ?1", [&ids[2]], |row| row.get(0)).unwrap();
    conn.execute(
        "UPDATE steps SET events = '{broken' || substr(events, 8) WHERE num = ?1 AND step = 1",
        [num],
    )
    .unwrap();
    drop(conn);

    let listed = fx.json(&["runs", "list", "--json"], 0);
    let listed_ids: Vec<&str> =
        listed["runs"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(listed_ids, [ids[2].as_str(), ids[0].as_str()], "the others are listed");
    assert_eq!(listed["damaged"][0]["id"], ids[1].as_str());
    assert!(listed["damaged"][0]["error"].as_str().unwrap().contains("sleepy"), "{listed}");
    let human = fx.run(&["runs", "list"]);
    assert_eq!(code(&human), Some(0));
    assert!(String::from_utf8_lossy(&human.stdout).contains(&format!("damaged run {}", ids[1])));

    for json in [false, true] {
        let mut args = vec!["runs", "events", ids[2].as_str()];
        if json {
            args.push("--json");
        }
        let output = fx.run(&args);
        assert_eq!(code(&output), Some(1), "{args:?}");
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(
            said.contains("stored event") && said.contains("not valid JSON"),
            "{args:?}: {said}"
        );
    }
}

/// `runs history --values`: every checkpoint, newest first, with its state
/// and next nodes; pages with `--before`.
#[test]
fn history_with_values_and_next_nodes() {
    let fx = Fixture::new();
    let run = fx.paused();
    let page = fx.json(&["runs", "history", &run, "--values", "--json"], 0);
    let checkpoints = page["checkpoints"].as_array().unwrap();
    let steps: Vec<u64> = checkpoints.iter().map(|c| c["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [3, 2, 1, 0], "newest first");
    assert_eq!(checkpoints[0]["next"], json!(["refunds.tools"]));
    assert_eq!(checkpoints[3]["next"], json!(["refunds"]));
    let messages = |c: &Value| c["values"]["messages"].as_array().unwrap().len();
    assert_eq!((messages(&checkpoints[3]), messages(&checkpoints[0])), (1, 4));
    let older = fx.json(&["runs", "history", &run, "--limit", "2", "--before", "2", "--json"], 0);
    let steps: Vec<u64> = older["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 0]);
    assert!(older["checkpoints"][0].get("values").is_none(), "values only when asked");
    let human = fx.run(&["runs", "history", &run, "--values"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("next: refunds.tools") && text.contains("values: {"), "{text}");
}

#[test]
fn a_missing_postgres_database_is_not_found_as_a_missing_file_is() {
    let Some(url) = support::postgres_url() else { return };
    let (base, query) = url.split_once('?').unwrap_or((&url, ""));
    let (server, _) = base.rsplit_once('/').unwrap();
    let missing = format!("{server}/tg_no_such_database?{query}");
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["--db", &missing, "runs", "list"])
        .output()
        .unwrap();
    assert_eq!(code(&output), Some(3), "{}", String::from_utf8_lossy(&output.stderr));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("does not exist") && stderr.contains("create it"), "{stderr}");
}
