//! The quick start's story cannot silently break: its example binary (built
//! by `cargo test` with every example) runs on a scratch database, and the
//! runs it leaves there are checked.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::path::PathBuf;
use std::process::Command;

use tollgate::{Event, EventEnvelope, PageRequest, RunFilter, RunStatus, RunStore, SqliteStore};

/// `target/<profile>/examples/NAME`, next to this test's own binary
/// (`target/<profile>/deps/examples-HASH`).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let path = profile.join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples (or: cargo build --example {name})",
        path.display()
    );
    path
}

#[tokio::test]
async fn the_quickstart_ends_with_its_four_runs() {
    let scratch = tempfile::tempdir().unwrap();
    let db = scratch.path().join("quickstart.db");
    let output = Command::new(example("quickstart")).env("TOLLGATE_DB", &db).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "quickstart failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );

    let store = SqliteStore::open(&db).unwrap();
    let page = PageRequest { limit: 10, cursor: None };
    let runs = store.list_runs(&RunFilter::default(), &page).await.unwrap().runs;
    let statuses: Vec<RunStatus> = runs.iter().map(|run| run.status).collect();
    use RunStatus::{Completed, Failed, Rejected};
    assert_eq!(statuses, [Rejected, Completed, Failed, Completed], "newest first");
    let kinds: Vec<Option<&str>> =
        runs.iter().map(|run| run.failure.as_ref().map(|f| f.kind.as_str())).collect();
    assert_eq!(kinds, [Some("rejected"), None, Some("step_limit_exceeded"), None]);
    let reason = runs[0].failure.as_ref().unwrap();
    assert_eq!(reason.message, "off-topic for this issue");
    assert_eq!(reason.node.as_deref(), Some("sign_off"));

    // Run 3 went through the gate: the reviewer's edit reached `publish`.
    let approved = &runs[1];
    let events = store.events(approved.id, 0, 1_000).await.unwrap();
    let events: Vec<EventEnvelope> =
        events.iter().map(|event| serde_json::from_str(&event.json).unwrap()).collect();
    let paused = events
        .iter()
        .any(|e| matches!(&e.event, Event::RunEnded { status: RunStatus::AwaitingHitl, .. }));
    assert!(paused, "run 3 paused for the reviewer");
    let Some(Event::RunEnded { status: Completed, result: Some(state), .. }) =
        events.last().map(|e| &e.event)
    else {
        panic!("run 3 should end completed: {:?}", events.last());
    };
    assert_eq!(state["headline"], "Agents that survive a crash");
    assert_eq!(state["published"], true);

    // The reviewer was another process.
    let own = stdout.lines().filter(|line| line.contains("[reviewer, pid")).count();
    assert!(own >= 4, "the reviewer process speaks for itself:\n{stdout}");
    assert!(stdout.contains("== run 4"), "{stdout}");
}
