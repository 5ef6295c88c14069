//! Durable workflows under kill -9: a child runs a workflow of 50
//! sequential tasks, each journalling its side effect (`pid ran N`) as it
//! runs and its stored result (`pid stored N`, from the store's hook) once
//! the store acknowledged it. Killed at a failpoint (before or after a
//! result's write) or once it has run a random number of tasks, then
//! continued by new children until the run completes, the run must show:
//! every task ran, a task whose result was acknowledged never ran again,
//! at most the task in flight at each kill ran twice, and the output is an
//! uncrashed run's. On a SQLite file, and on PostgreSQL
//! (`TOLLGATE_PG_URL`, a schema per scenario; killed while running).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tollgate::{Blob, Executor, RunConfig, RunId, RunStatus, SqliteStore, Store, Workflow};
use tollgate_postgres::{PostgresOptions, PostgresStore};
use tollgate_testkit::{HookedStore, StoreHooks};

use crate::child::journal;
use crate::parent::{block_on, lines};

/// Tasks of the workflow.
const TASKS: u32 = 50;

fn run_id() -> RunId {
    RunId::from_parts(1_795_937_988_000, 0xF10)
}

/// The workflow: task `i` sleeps a little, journals `pid ran i`, returns
/// `i * i`; the output is their sum.
fn workflow(dir: &Path) -> Workflow<u32, u64> {
    let effects = dir.join("workflow-effects.log");
    Workflow::new("crash_workflow", 1, move |ctx, tasks: u32| {
        let effects = effects.clone();
        async move {
            let mut sum = 0;
            for i in 0..tasks {
                let effects = effects.clone();
                sum += ctx
                    .task(&format!("square{i}"), move || async move {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        journal(&effects, &format!("{} ran {i}", std::process::id()));
                        Ok(u64::from(i) * u64::from(i))
                    })
                    .await?;
            }
            Ok(sum)
        }
    })
    .unwrap()
}

/// Journals each stored task result (`pid stored N`).
#[derive(Debug)]
struct Acks {
    path: std::path::PathBuf,
}

impl StoreHooks for Acks {
    fn after_task_progress(&self, task: (u64, u32), _progress: &Blob) {
        // Results are stored under task numbers from 2^29 up.
        if let Some(position) = task.1.checked_sub(1 << 29) {
            journal(&self.path, &format!("{} stored {position}", std::process::id()));
        }
    }
}

async fn store(
    dir: &Path,
    schema: Option<&str>,
) -> Result<Arc<dyn Store>, Box<dyn std::error::Error>> {
    let acks = Acks { path: dir.join("workflow-acks.log") };
    Ok(match schema {
        Some(schema) => {
            let url = std::env::var("TOLLGATE_PG_URL")?;
            let options = PostgresOptions::default().with_schema(schema);
            Arc::new(HookedStore::new(PostgresStore::connect_with(&url, options).await?, acks))
        }
        None => Arc::new(HookedStore::new(SqliteStore::open(dir.join("workflow.sqlite"))?, acks)),
    })
}

/// The child: starts the run, or continues it.
pub(crate) async fn child(dir: &Path, start: bool) -> Result<(), Box<dyn std::error::Error>> {
    let schema = std::env::var("TOLLGATE_CRASH_PG_SCHEMA").ok();
    let executor = Executor::with_store(store(dir, schema.as_deref()).await?);
    let flow = workflow(dir);
    if start {
        let config = RunConfig::new().run_id(run_id());
        executor.run(flow.graph(), flow.input(&TASKS)?, config).await?;
    } else {
        for handle in executor.recover(flow.graph(), RunConfig::new()).await? {
            handle.wait().await?;
        }
    }
    Ok(())
}

/// Starts a child; kills it once it has run `kill_after` tasks (when
/// given). Whether it died.
fn child_process(
    dir: &Path,
    schema: Option<&str>,
    start: bool,
    failpoint: Option<&str>,
    kill_after: Option<usize>,
) -> bool {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    let mode = if start { "workflow_start" } else { "workflow_recover" };
    command.env("TOLLGATE_CRASH_CHILD", mode).env("TOLLGATE_CRASH_DIR", dir);
    command.env_remove("TOLLGATE_FAILPOINTS").env_remove("TOLLGATE_CRASH_PG_SCHEMA");
    if let Some(schema) = schema {
        command.env("TOLLGATE_CRASH_PG_SCHEMA", schema);
    }
    if let Some(failpoint) = failpoint {
        command.env("TOLLGATE_FAILPOINTS", failpoint);
    }
    let mut child = command.spawn().unwrap();
    if let Some(ran) = kill_after {
        let effects = dir.join("workflow-effects.log");
        let started = std::time::Instant::now();
        while lines(&effects).len() < ran && child.try_wait().unwrap().is_none() {
            assert!(started.elapsed() < Duration::from_secs(60), "the child stalled");
            std::thread::sleep(Duration::from_micros(200));
        }
        let _ = child.kill();
    }
    !child.wait().unwrap().success()
}

/// One scenario: a started child that dies (failpoint or kill), children
/// continuing the run until it completes (the first of them killed too,
/// when `kill_again`), then every check.
fn scenario(
    schema: Option<&str>,
    failpoint: Option<&str>,
    kill_after: Option<usize>,
    kill_again: bool,
) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut died = usize::from(child_process(dir, schema, true, failpoint, kill_after));
    if kill_again {
        let ran = lines(&dir.join("workflow-effects.log")).len();
        died += usize::from(child_process(dir, schema, false, None, Some(ran + 5)));
    }
    let mut completed = false;
    for _ in 0..6 {
        let status = block_on(async {
            let store = store(dir, schema).await.unwrap();
            store.run(run_id()).await.map(|record| record.status)
        });
        if matches!(status, Ok(RunStatus::Completed)) {
            completed = true;
            break;
        }
        assert!(!child_process(dir, schema, false, None, None), "a continuing child failed");
    }
    assert!(completed, "the run did not complete");
    assert!(died >= 1, "no child died: the scenario tested nothing");

    // The output is an uncrashed run's.
    let output = block_on(async {
        let store = store(dir, schema).await.unwrap();
        let checkpoint = store.checkpoint(run_id(), None).await.unwrap();
        assert!(checkpoint.progress.is_empty(), "the step's results went with its commit");
        let flow = workflow(dir);
        let state =
            Executor::with_store(store).get_state(flow.graph(), run_id(), None).await.unwrap();
        flow.output(&state.values).unwrap()
    });
    let expected: u64 = (0..u64::from(TASKS)).map(|i| i * i).sum();
    assert_eq!(output, Some(expected));

    // Runs per task, and when each result became durable.
    let effects = lines(&dir.join("workflow-effects.log"));
    let acks = lines(&dir.join("workflow-acks.log"));
    for task in 0..TASKS {
        let ran: Vec<&String> =
            effects.iter().filter(|e| e[2] == task.to_string()).map(|e| &e[0]).collect();
        assert!(!ran.is_empty(), "task {task} never ran");
        let stored: Vec<&String> =
            acks.iter().filter(|a| a[2] == task.to_string()).map(|a| &a[0]).collect();
        assert!(stored.len() <= 1, "task {task}'s result was stored {} times", stored.len());
        // Once a process had its result acknowledged, no later process
        // ran it: every run is by that process or an earlier one. (A
        // process killed between the acknowledgement and its journal line
        // leaves none.)
        if let Some(stored_by) = stored.first() {
            let last_run = ran.last().unwrap();
            assert_eq!(last_run, stored_by, "task {task} ran again after its result was stored");
        }
        assert!(ran.len() <= 2, "task {task} ran {} times", ran.len());
        if ran.len() == 2 {
            // The first run was the killed process's last task.
            let killed = ran[0];
            let its_last = effects.iter().rev().find(|e| &e[0] == killed).unwrap();
            assert_eq!(
                its_last[2],
                task.to_string(),
                "task {task} ran twice but was not in flight"
            );
        }
    }
    let twice = (0..TASKS)
        .filter(|task| effects.iter().filter(|e| e[2] == task.to_string()).count() == 2)
        .count();
    assert!(twice <= died, "{twice} tasks ran twice over {died} crashes");
}

/// Failpoints before and after a result's write, and random kills, on
/// SQLite.
pub(crate) fn tasks_run_once() {
    for failpoint in ["task:before@1", "task:before@17", "task:after@1", "task:after@30"] {
        scenario(None, Some(failpoint), None, false);
    }
    let mut seed = u64::from(std::process::id());
    for round in 0..4 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let ran = 1 + ((seed >> 33) % 40) as usize;
        scenario(None, None, Some(ran), round % 2 == 1);
    }
}

/// Random kills on PostgreSQL.
pub(crate) fn tasks_run_once_on_postgres() {
    let Some(url) = tollgate_testkit::postgres_url() else { return };
    let base = format!("crash_workflow_{}", RunId::new().to_string().to_lowercase());
    let mut seed = u64::from(std::process::id()) ^ 0x5eed;
    for round in 0..3 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let ran = 1 + ((seed >> 33) % 40) as usize;
        scenario(Some(&format!("{base}_{round}")), None, Some(ran), round == 1);
    }
    block_on(async {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        for round in 0..3 {
            client.batch_execute(&format!("DROP SCHEMA IF EXISTS {base}_{round} CASCADE")).await?;
        }
        Ok::<(), tokio_postgres::Error>(())
    })
    .unwrap();
}
