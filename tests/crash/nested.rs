//! Crashes inside a subgraph: the child runs a graph whose second step is a
//! subgraph of `INNER` steps (a fan-out of three, then a loop), and is
//! killed at the subgraph's progress writes, at its nodes and commits, and
//! at random. Beyond the checks of the flat workload: no inner task whose
//! progress was acknowledged ran again, and every inner step ran.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate::{
    Blob, Executor, NodeContext, Route, RunConfig, RunId, RunStatus, RunStore, Send, SqliteStore,
    StateGraph, END, START,
};
use tollgate_testkit::{HookedStore, StoreHooks};

use crate::child::{journal, Job, JobUpdate};
use crate::parent::{
    block_on, crash_and_recover, file_is_intact, final_state_and_log, lines, Scenario,
};

/// Inner steps: the fan-out, then `INNER - 1` loop steps.
const INNER: u64 = 12;

pub(crate) fn run_id() -> RunId {
    RunId::from_parts(1_795_937_988_000, 0xBEEF)
}

/// `START -> prep -> sub -> done -> END`; `sub` runs `inner`. Every inner
/// node execution is journalled to `effects.log` as
/// `pid inner STEP TASK` (the subgraph's own step and task).
pub(crate) fn graph(dir: PathBuf) -> tollgate::CompiledGraph<Job> {
    let effects = dir.join("effects.log");
    let effect = move |ctx: &NodeContext| {
        let line = format!("{} inner {} {}", std::process::id(), ctx.step(), ctx.task());
        journal(&effects, &line);
    };
    let (part_effect, tick_effect) = (effect.clone(), effect);
    let inner = StateGraph::<Job>::new("inner", 1)
        .node("part", move |_s: Arc<Job>, ctx| {
            let effect = part_effect.clone();
            async move {
                let item: u64 = ctx.input()?;
                tokio::time::sleep(Duration::from_millis(1 + 2 * item)).await;
                effect(&ctx);
                Ok(JobUpdate::default().done(vec![format!("p{item}")]).total(item))
            }
        })
        .node("tick", move |_s: Arc<Job>, ctx| {
            let effect = tick_effect.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                effect(&ctx);
                Ok(JobUpdate::default().done(vec![format!("t{}", ctx.step())]).total(1))
            }
        })
        .route(START, ["part"], |_: &Job| {
            Route::send((0..3u64).map(|i| Send::new("part", json!(i))))
        })
        .join(["part"], "tick")
        .route("tick", ["tick", END], |s: &Job| {
            if s.total < 3 + INNER - 1 {
                Route::to("tick")
            } else {
                Route::end()
            }
        })
        .compile()
        .unwrap();
    StateGraph::<Job>::new("nested", 1)
        .node("prep", |_s: Arc<Job>, _ctx| async move {
            Ok(JobUpdate::default().done(vec!["prep".into()]))
        })
        .subgraph(
            "sub",
            inner,
            |_: &Job, _| Ok(Job::default()),
            |_: &Job, inner: Job| Ok(JobUpdate::default().done(inner.done).total(inner.total)),
        )
        .node("done", |_s: Arc<Job>, _ctx| async move {
            Ok(JobUpdate::default().done(vec!["done".into()]).total(100))
        })
        .edge(START, "prep")
        .edge("prep", "sub")
        .edge("sub", "done")
        .edge("done", END)
        .compile()
        .unwrap()
}

/// Journals every progress write the database acknowledged, to
/// `acks.log`: `pid progress STEP` (the subgraph's last stored step) and
/// `pid kept STEP TASK` (finished inner tasks of the step in flight), and
/// `pid commit STEP` for the run's own steps.
#[derive(Debug)]
struct Journal {
    acks: PathBuf,
}

impl StoreHooks for Journal {
    fn after_commit(&self, _run: RunId, step: Option<u64>, _status: RunStatus) {
        if let Some(step) = step {
            journal(&self.acks, &format!("{} commit {step}", std::process::id()));
        }
    }

    fn after_task_progress(&self, _task: (u64, u32), progress: &Blob) {
        let tree: serde_json::Value = progress.decode().unwrap();
        let record = &tree["record"];
        let step = record["step"].as_u64().unwrap();
        let pid = std::process::id();
        journal(&self.acks, &format!("{pid} progress {step}"));
        for kept in record["kept"].as_array().unwrap() {
            journal(&self.acks, &format!("{pid} kept {} {}", step + 1, kept["task"]));
        }
    }
}

/// The child's work in modes `start_nested` and `recover_nested`.
pub(crate) async fn child(dir: &Path, start: bool) -> Result<(), Box<dyn std::error::Error>> {
    let store = HookedStore::new(
        SqliteStore::open(dir.join("db.sqlite"))?,
        Journal { acks: dir.join("acks.log") },
    );
    let executor = Executor::new(store);
    let graph = graph(dir.to_owned());
    if start {
        executor.run(&graph, Job::default(), RunConfig::new().run_id(run_id())).await?;
    } else {
        for handle in executor.recover(&graph, RunConfig::new()).await? {
            handle.wait().await?;
        }
    }
    Ok(())
}

fn reference() -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("reference.sqlite")).unwrap();
    let graph = graph(dir.path().to_owned());
    let outcome = block_on(Executor::new(store).run(&graph, Job::default(), RunConfig::new()));
    let outcome = outcome.unwrap();
    assert_eq!(outcome.step, 3);
    serde_json::to_value(outcome.state).unwrap()
}

fn verify(dir: &Path, scenario: &Scenario, expected: &serde_json::Value) {
    let store = SqliteStore::open(dir.join("db.sqlite")).unwrap();
    let run = run_id();
    let record = block_on(store.run(run)).unwrap();
    assert_eq!(
        (record.status, record.step, record.owner.as_ref()),
        (RunStatus::Completed, 3, None)
    );
    final_state_and_log(&store, run, expected);
    assert!(block_on(store.checkpoint(run, None)).unwrap().progress.is_empty());
    drop(store);
    file_is_intact(dir);

    // When each inner step (and finished inner task) became durable.
    let leg_of: HashMap<String, usize> =
        scenario.legs.iter().enumerate().map(|(i, pid)| (pid.to_string(), i)).collect();
    let mut durable: HashMap<(u64, Option<u32>), usize> = HashMap::new();
    for ack in lines(&dir.join("acks.log")) {
        let leg = leg_of[&ack[0]];
        match ack[1].as_str() {
            "progress" => {
                let last: u64 = ack[2].parse().unwrap();
                for step in 1..=last {
                    durable.entry((step, None)).or_insert(leg);
                }
            }
            "kept" => {
                let key = (ack[2].parse().unwrap(), Some(ack[3].parse().unwrap()));
                durable.entry(key).or_insert(leg);
            }
            "commit" if ack[2] == "2" => {
                for step in 1..=INNER {
                    durable.entry((step, None)).or_insert(leg);
                }
            }
            _ => {}
        }
    }
    let mut executed = BTreeSet::new();
    for effect in lines(&dir.join("effects.log")) {
        let leg = leg_of[&effect[0]];
        let (step, task): (u64, u32) = (effect[2].parse().unwrap(), effect[3].parse().unwrap());
        executed.insert((step, task));
        for key in [(step, None), (step, Some(task))] {
            if let Some(&acked) = durable.get(&key) {
                assert!(
                    leg <= acked,
                    "inner step {step} task {task} ran again in leg {leg} after it was durable in leg {acked}"
                );
            }
        }
    }
    assert_eq!(executed.len() as u64, 3 + INNER - 1, "every inner task ran");
}

pub(crate) fn failpoints() {
    let expected = reference();
    let mut crashes = 0;
    let points =
        ["progress:before", "progress:after", "node:before", "node:after", "commit:inside"];
    for point in points {
        for hit in [1, 2, 5, 9] {
            let dir = tempfile::tempdir().unwrap();
            let spec = format!("{point}@{hit}");
            let scenario = crash_and_recover(dir.path(), "_nested", Some(&spec), None);
            crashes += usize::from(scenario.crashed);
            verify(dir.path(), &scenario, &expected);
        }
    }
    assert!(crashes >= 16, "only {crashes} scenarios crashed");
}

pub(crate) fn random_kills() {
    let expected = reference();
    let mut crashes = 0;
    let mut seed: u64 = 0xb0b;
    for _ in 0..12 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let delay = Duration::from_micros((seed >> 33) % 40_000);
        let dir = tempfile::tempdir().unwrap();
        let scenario = crash_and_recover(dir.path(), "_nested", None, Some(delay));
        crashes += usize::from(scenario.crashed);
        verify(dir.path(), &scenario, &expected);
    }
    assert!(crashes >= 4, "only {crashes} of 12 random kills hit a running child");
}
