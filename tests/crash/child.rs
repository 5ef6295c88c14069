//! The child process: runs the crash workload on a file database.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::{
    Executor, GraphState, HistoryPage, NodeContext, PageRequest, Route, RunConfig, RunFilter,
    RunId, RunPage, RunRecord, Send, SqliteStore, StateGraph, Store, StoreError, END, START,
};
use tollgate_checkpoint::{EventRecord, NewRun, Owner, StoredCheckpoint, TaskWrite, Transition};

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
fn journal(path: &Path, line: &str) {
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

/// A store that journals every write the database acknowledged, to
/// `acks.log`: `pid commit STEP` and `pid pending STEP TASK`.
#[derive(Debug)]
struct Journalled {
    inner: SqliteStore,
    acks: PathBuf,
}

#[async_trait]
impl Store for Journalled {
    async fn create_run(&self, run: NewRun) -> Result<u64, StoreError> {
        let epoch = self.inner.create_run(run).await?;
        journal(&self.acks, &format!("{} commit 0", std::process::id()));
        Ok(epoch)
    }
    async fn commit(&self, transition: Transition) -> Result<(), StoreError> {
        let step = transition.step.as_ref().map(|step| step.step);
        self.inner.commit(transition).await?;
        if let Some(step) = step {
            journal(&self.acks, &format!("{} commit {step}", std::process::id()));
        }
        Ok(())
    }
    async fn put_task_writes(&self, write: TaskWrite) -> Result<(), StoreError> {
        let tasks: Vec<(u64, u32)> =
            write.updates.iter().map(|u| (u.task.step, u.task.index)).collect();
        self.inner.put_task_writes(write).await?;
        for (step, task) in tasks {
            journal(&self.acks, &format!("{} pending {step} {task}", std::process::id()));
        }
        Ok(())
    }
    async fn claim(
        &self,
        run: RunId,
        epoch: u64,
        owner: Owner,
        until: i64,
    ) -> Result<u64, StoreError> {
        self.inner.claim(run, epoch, owner, until).await
    }
    async fn renew(&self, run: RunId, epoch: u64, until: i64) -> Result<(), StoreError> {
        self.inner.renew(run, epoch, until).await
    }
    async fn interrupts(
        &self,
        run: RunId,
    ) -> Result<Vec<tollgate_checkpoint::InterruptRecord>, StoreError> {
        self.inner.interrupts(run).await
    }
    async fn decide(&self, write: tollgate_checkpoint::DecisionWrite) -> Result<u64, StoreError> {
        self.inner.decide(write).await
    }
    async fn run(&self, run: RunId) -> Result<RunRecord, StoreError> {
        self.inner.run(run).await
    }
    async fn checkpoint(
        &self,
        run: RunId,
        at: Option<u64>,
    ) -> Result<StoredCheckpoint, StoreError> {
        self.inner.checkpoint(run, at).await
    }
    async fn list_runs(
        &self,
        filter: &RunFilter,
        page: &PageRequest,
    ) -> Result<RunPage, StoreError> {
        self.inner.list_runs(filter, page).await
    }
    async fn history(
        &self,
        run: RunId,
        before: Option<u64>,
        limit: usize,
    ) -> Result<HistoryPage, StoreError> {
        self.inner.history(run, before, limit).await
    }
    async fn events(
        &self,
        run: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.inner.events(run, after, limit).await
    }
    async fn attachment(&self, run: RunId) -> Result<Option<String>, StoreError> {
        self.inner.attachment(run).await
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
                let store = Journalled {
                    inner: SqliteStore::open(dir.join("db.sqlite"))?,
                    acks: dir.join("acks.log"),
                };
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
            "soak" => soak(&dir).await,
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
