//! The child process: runs the crash workload on a file database.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::{
    Executor, GraphState, NodeContext, Route, RunConfig, RunId, RunStatus, Send, SqliteStore,
    StateGraph, END, START,
};
use tollgate_testkit::{HookedStore, StoreHooks};

/// Steps of the `loop` node after the fan-out and the tally.
pub(crate) const LOOPS: u64 = 20;
/// Steps of the whole workload.
pub(crate) const STEPS: u64 = 3 + LOOPS;

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Job {
    #[reducer(append)]
    pub(crate) done: Vec<String>,
    #[reducer(sum)]
    pub(crate) total: u64,
}

/// Appends one line to a journal file (append mode: one write per line).
pub(crate) fn journal(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// The workload: a fan-out of 4 (multi-task step: pending writes), a join,
/// then a loop of single-task steps. Every node execution is journalled
/// to `effects.log` as `pid step task node`.
pub(crate) fn graph(dir: PathBuf) -> tollgate::CompiledGraph<Job> {
    let effects = dir.join("effects.log");
    let effect = move |ctx: &NodeContext| {
        let line = format!("{} {} {} {}", std::process::id(), ctx.step(), ctx.task(), ctx.node());
        journal(&effects, &line);
    };
    let (work_effect, tally_effect, loop_effect) = (effect.clone(), effect.clone(), effect);
    StateGraph::<Job>::new("crashy", 1)
        .node("split", |_s: Arc<Job>, _ctx| async move { Ok(JobUpdate::default()) })
        .node("work", move |_s: Arc<Job>, ctx| {
            let effect = work_effect.clone();
            async move {
                let item: u64 = ctx.input()?;
                tokio::time::sleep(Duration::from_millis(1 + 2 * item)).await;
                effect(&ctx);
                Ok(JobUpdate::default().done(vec![format!("w{item}")]).total(item))
            }
        })
        .node("tally", move |_s: Arc<Job>, ctx| {
            tally_effect(&ctx);
            async move { Ok(JobUpdate::default().done(vec!["tally".into()]).total(100)) }
        })
        .node("loop", move |_s: Arc<Job>, ctx| {
            let effect = loop_effect.clone();
            async move {
                tokio::time::sleep(Duration::from_micros(500)).await;
                effect(&ctx);
                Ok(JobUpdate::default().done(vec![format!("l{}", ctx.step())]).total(1))
            }
        })
        .edge(START, "split")
        .route("split", ["work"], |_: &Job| {
            Route::send((0..4u64).map(|i| Send::new("work", json!(i))))
        })
        .join(["work"], "tally")
        .edge("tally", "loop")
        .route("loop", ["loop", END], |s: &Job| {
            if s.total < 106 + LOOPS {
                Route::to("loop")
            } else {
                Route::end()
            }
        })
        .compile()
        .unwrap()
}

/// Hooks that journal every write the database acknowledged, to
/// `acks.log`: `pid commit STEP` and `pid pending STEP TASK`.
#[derive(Debug)]
struct Journal {
    acks: PathBuf,
}

impl StoreHooks for Journal {
    fn after_create(&self, _run: RunId) {
        journal(&self.acks, &format!("{} commit 0", std::process::id()));
    }

    fn after_commit(&self, _run: RunId, step: Option<u64>, _status: RunStatus) {
        if let Some(step) = step {
            journal(&self.acks, &format!("{} commit {step}", std::process::id()));
        }
    }

    fn after_task_writes(&self, tasks: &[(u64, u32)]) {
        for (step, task) in tasks {
            journal(&self.acks, &format!("{} pending {step} {task}", std::process::id()));
        }
    }
}

pub(crate) fn run_id() -> RunId {
    RunId::from_parts(1_795_937_988_000, 0xC0FFEE)
}

pub(crate) fn main(mode: &str) {
    let dir = PathBuf::from(std::env::var("TOLLGATE_CRASH_DIR").unwrap());
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let result = runtime.block_on(async {
        match mode {
            "start" | "recover" => {
                let store = HookedStore::new(
                    SqliteStore::open(dir.join("db.sqlite"))?,
                    Journal { acks: dir.join("acks.log") },
                );
                let executor = Executor::new(store);
                let graph = graph(dir.clone());
                if mode == "start" {
                    let config = RunConfig::new().run_id(run_id());
                    executor.run(&graph, Job::default(), config).await?;
                } else {
                    for handle in executor.recover(&graph, RunConfig::new()).await? {
                        handle.wait().await?;
                    }
                }
                Ok::<(), Box<dyn std::error::Error>>(())
            }
            "start_nested" => crate::nested::child(&dir, true).await,
            "recover_nested" => crate::nested::child(&dir, false).await,
            "soak" => soak(&dir).await,
            "memory" => crate::memory::child(&dir).await,
            "workflow_start" => crate::workflow::child(&dir, true).await,
            "workflow_recover" => crate::workflow::child(&dir, false).await,
            other => Err(format!("unknown child mode {other}").into()),
        }
    });
    if let Err(error) = result {
        eprintln!("child {mode} failed: {error}");
        std::process::exit(1);
    }
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Count {
    #[reducer(sum)]
    n: u64,
}

/// Soak mode: one run of `SOAK_STEPS` single-task transitions on the
/// shared database.
pub(crate) const SOAK_STEPS: u64 = 1_000;

async fn soak(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let executor = Executor::new(SqliteStore::open(dir.join("soak.sqlite"))?);
    let graph = StateGraph::<Count>::new("soak", 1)
        .node("inc", |_s: Arc<Count>, _ctx| async move { Ok(CountUpdate::default().n(1)) })
        .edge(START, "inc")
        .route(
            "inc",
            ["inc", END],
            |s: &Count| if s.n < SOAK_STEPS { Route::to("inc") } else { Route::end() },
        )
        .compile()?;
    let outcome =
        executor.run(&graph, Count::default(), RunConfig::new().max_steps(SOAK_STEPS)).await?;
    if outcome.state.n != SOAK_STEPS {
        return Err(format!("soak run ended at {}", outcome.state.n).into());
    }
    Ok(())
}
