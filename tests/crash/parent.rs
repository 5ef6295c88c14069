//! The parent: kills children at many points and checks what survived.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use tollgate::{Executor, RunConfig, RunStatus, RunStore, SqliteStore};

use crate::child::{self, Job, SOAK_STEPS, STEPS};

fn spawn(dir: &Path, mode: &str, failpoints: Option<&str>) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.env("TOLLGATE_CRASH_CHILD", mode).env("TOLLGATE_CRASH_DIR", dir);
    command.env_remove("TOLLGATE_FAILPOINTS");
    if let Some(failpoints) = failpoints {
        command.env("TOLLGATE_FAILPOINTS", failpoints);
    }
    command.stderr(std::process::Stdio::null());
    command.spawn().unwrap()
}

pub(crate) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(future)
}

/// What one crash scenario did.
pub(crate) struct Scenario {
    /// Child pids in the order they ran.
    pub(crate) legs: Vec<u32>,
    /// Whether the first child died before finishing.
    pub(crate) crashed: bool,
}

/// Runs the first child (killed after `kill_after`, or by a failpoint), then
/// recovering children until the run completes. `workload` suffixes the
/// child modes (`""` the flat workload, `"_nested"` the subgraph one).
pub(crate) fn crash_and_recover(
    dir: &Path,
    workload: &str,
    failpoints: Option<&str>,
    kill_after: Option<Duration>,
) -> Scenario {
    let run_id = if workload.is_empty() { child::run_id() } else { crate::nested::run_id() };
    let mut first = spawn(dir, &format!("start{workload}"), failpoints);
    let mut legs = vec![first.id()];
    if let Some(delay) = kill_after {
        std::thread::sleep(delay);
        let _ = first.kill(); // SIGKILL; it may have finished already
    }
    let crashed = !first.wait().unwrap().success();
    for _ in 0..8 {
        let store = SqliteStore::open(dir.join("db.sqlite")).unwrap();
        let status = block_on(store.run(run_id)).map(|record| record.status);
        drop(store);
        let mode = match status {
            Ok(RunStatus::Completed) => return Scenario { legs, crashed },
            Ok(_) => "recover",
            Err(tollgate::StoreError::RunNotFound { .. }) => "start",
            Err(error) => panic!("reading the run failed: {error}"),
        };
        let mut next = spawn(dir, &format!("{mode}{workload}"), None);
        legs.push(next.id());
        assert!(next.wait().unwrap().success(), "a {mode} child failed");
    }
    panic!("the run did not complete after 8 recoveries");
}

fn reference() -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("reference.sqlite")).unwrap();
    let outcome = block_on(Executor::new(store).run(
        &child::graph(dir.path().to_owned()),
        Job::default(),
        RunConfig::new(),
    ))
    .unwrap();
    assert_eq!(outcome.step, STEPS);
    serde_json::to_value(outcome.state).unwrap()
}

pub(crate) fn lines(path: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// Every durability check on a finished scenario (docs/durability.md).
fn verify(dir: &Path, scenario: &Scenario, expected: &serde_json::Value) {
    let store = SqliteStore::open(dir.join("db.sqlite")).unwrap();
    let run = child::run_id();
    let record = block_on(store.run(run)).unwrap();
    assert_eq!(
        (record.status, record.step, record.owner.as_ref()),
        (RunStatus::Completed, STEPS, None)
    );

    final_state_and_log(&store, run, expected);

    // Every acknowledged checkpoint is present; history is gap-free.
    let history = block_on(store.history(run, None, 1_000)).unwrap();
    let steps: Vec<u64> = history.checkpoints.iter().rev().map(|c| c.step).collect();
    assert_eq!(steps, (0..=STEPS).collect::<Vec<_>>());
    let acks = lines(&dir.join("acks.log"));
    for ack in &acks {
        if ack[1] == "commit" {
            let step: u64 = ack[2].parse().unwrap();
            assert!(step <= STEPS, "acknowledged step {step} beyond the end");
        }
    }
    drop(store);
    file_is_intact(dir);

    // No task whose output was acknowledged durable ran again later.
    let leg_of: HashMap<String, usize> =
        scenario.legs.iter().enumerate().map(|(i, pid)| (pid.to_string(), i)).collect();
    let mut durable: HashMap<(u64, Option<u32>), usize> = HashMap::new();
    for ack in &acks {
        let leg = leg_of[&ack[0]];
        let key = match ack[1].as_str() {
            "commit" => (ack[2].parse().unwrap(), None),
            _ => (ack[2].parse().unwrap(), Some(ack[3].parse().unwrap())),
        };
        durable.entry(key).or_insert(leg);
    }
    let mut executed = BTreeSet::new();
    for effect in lines(&dir.join("effects.log")) {
        let leg = leg_of[&effect[0]];
        let (step, task): (u64, u32) = (effect[1].parse().unwrap(), effect[2].parse().unwrap());
        executed.insert((step, task));
        for key in [(step, None), (step, Some(task))] {
            if let Some(&acked) = durable.get(&key) {
                assert!(leg <= acked, "step {step} task {task} ran again in leg {leg} after it was durable in leg {acked}");
            }
        }
    }
    assert_eq!(
        executed.len() as u64,
        4 + 1 + STEPS - 3,
        "every task with an effect ran at least once"
    );
}

/// The run's last event is its end, with the uncrashed run's state; its
/// events are numbered without a gap.
pub(crate) fn final_state_and_log(
    store: &SqliteStore,
    run: tollgate::RunId,
    expected: &serde_json::Value,
) {
    let events = block_on(store.events(run, 0, u64::MAX)).unwrap();
    let last: serde_json::Value = serde_json::from_str(&events.last().unwrap().json).unwrap();
    assert_eq!(last["event_type"], "run_ended");
    assert_eq!(&last["result"], expected, "final state differs from the uncrashed run");
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>(), "events are gap-free");
}

/// `PRAGMA integrity_check` of the scenario's database is `ok`.
pub(crate) fn file_is_intact(dir: &Path) {
    let conn = rusqlite::Connection::open(dir.join("db.sqlite")).unwrap();
    let integrity: String = conn.query_row("PRAGMA integrity_check", [], |row| row.get(0)).unwrap();
    assert_eq!(integrity, "ok");
}

fn failpoints() {
    let expected = reference();
    let mut crashes = 0;
    for point in ["node:before", "node:after", "pending:before", "commit:inside", "commit:after"] {
        for hit in [1, 2, 4, 9, 17] {
            let dir = tempfile::tempdir().unwrap();
            let spec = format!("{point}@{hit}");
            let scenario = crash_and_recover(dir.path(), "", Some(&spec), None);
            crashes += usize::from(scenario.crashed);
            verify(dir.path(), &scenario, &expected);
        }
    }
    // pending:before fires at most at its few batches; every other point
    // is reached by each hit count.
    assert!(crashes >= 20, "only {crashes} scenarios crashed");
}

fn random_kills() {
    let expected = reference();
    let mut seed: u64 = 0x5eed;
    let mut crashes = 0;
    for _ in 0..25 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let delay = Duration::from_micros((seed >> 33) % 60_000);
        let dir = tempfile::tempdir().unwrap();
        let scenario = crash_and_recover(dir.path(), "", None, Some(delay));
        crashes += usize::from(scenario.crashed);
        verify(dir.path(), &scenario, &expected);
    }
    assert!(crashes >= 10, "only {crashes} of 25 random kills hit a running child");
}

fn eight_processes_share_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let children: Vec<Child> = (0..8).map(|_| spawn(dir.path(), "soak", None)).collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a soak child failed (busy or locked database?)");
    }
    let store = SqliteStore::open(dir.path().join("soak.sqlite")).unwrap();
    let page = block_on(
        store.list_runs(&Default::default(), &tollgate::PageRequest { limit: 100, cursor: None }),
    )
    .unwrap();
    assert_eq!(page.runs.len(), 8);
    for run in page.runs {
        assert_eq!((run.status, run.step), (RunStatus::Completed, SOAK_STEPS));
        let mut steps = Vec::new();
        let mut before = None;
        loop {
            let history = block_on(store.history(run.id, before, 400)).unwrap();
            steps.extend(history.checkpoints.iter().map(|c| c.step));
            match history.next_before {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        steps.reverse();
        assert_eq!(steps, (0..=SOAK_STEPS).collect::<Vec<_>>(), "run {} has gaps", run.id);
    }
    let conn = rusqlite::Connection::open(dir.path().join("soak.sqlite")).unwrap();
    let integrity: String = conn.query_row("PRAGMA integrity_check", [], |row| row.get(0)).unwrap();
    assert_eq!(integrity, "ok");
}

pub(crate) fn main() {
    let tests: [(&str, fn()); 9] = [
        ("failpoints_at_every_named_point", failpoints),
        ("random_sigkill_delays", random_kills),
        ("subgraph_failpoints", crate::nested::failpoints),
        ("subgraph_random_sigkill_delays", crate::nested::random_kills),
        ("memory_batches_are_all_or_nothing", crate::memory::batches_are_all_or_nothing),
        (
            "memory_batches_are_all_or_nothing_on_postgres",
            crate::memory::batches_are_all_or_nothing_on_postgres,
        ),
        ("workflow_tasks_run_once", crate::workflow::tasks_run_once),
        ("workflow_tasks_run_once_on_postgres", crate::workflow::tasks_run_once_on_postgres),
        ("eight_processes_share_one_file", eight_processes_share_one_file),
    ];
    let filter: Vec<String> =
        std::env::args().skip(1).filter(|arg| !arg.starts_with('-')).collect();
    let (mut passed, mut failed) = (0, 0);
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let started = std::time::Instant::now();
        match std::panic::catch_unwind(test) {
            Ok(()) => {
                passed += 1;
                println!("test {name} ... ok ({:.1} s)", started.elapsed().as_secs_f64());
            }
            Err(_) => {
                failed += 1;
                println!("test {name} ... FAILED");
            }
        }
    }
    println!("crash: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
