//! Runs: a run with input is a new tollgate run of the assistant's graph
//! (on the thread, or without one); a run with `command.resume` is a
//! decision on the thread's paused run, which continues it. Background,
//! `wait` and `stream` answer the same start; a run that cannot start yet
//! (`enqueue` behind a busy thread, `after_seconds`) is kept as a pending
//! run (`queue.rs`) and they answer it pending, or once it ran.
//! `thread_runs.rs` reads and changes runs once asked for.

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use tollgate_checkpoint::{RunId, RunStatus};
use tollgate_engine::Decision;

use super::super::errors::{ApiError, ApiResult};
use super::super::extract::{replayed as replay, run_id, KeyedJson};
use super::super::App;
use super::assistants::{self, Assistant};
use super::body::RunBody;
pub(super) use super::continued::Started;
use super::continued::{checkpoint_run, command_run, decided, resume_run};
use super::outcome::{last_seq, outcome, run_json};
use super::queue::{self, Pending};
use super::stream::sse;
use super::threads::{self, latest};
use super::{webhook, wire};
use crate::error::ServiceError;
use crate::identity::Caller;
use crate::service::{
    Follow, Launch, ListingKind, Made, Makes, Multitask, RequestKey, RunSummary, Until,
};

/// What a request began: a run, or one that waits to start.
enum Begun {
    Started(Started),
    Pending(Box<Pending>),
}

/// The assistant `body` names, and the latest run of `thread` (created
/// first when it is new and `if_not_exists` says `create`). A checkpoint
/// that is the thread's head is no checkpoint: `useStream` sends the head
/// beside every decision and new input, which are then what they are
/// without it (a decision; new input, refused while a decision waits).
/// The thread's metadata gets the run's `graph_id` and `assistant_id`,
/// as LangGraph's server writes them, so clients listing threads by
/// graph find it.
async fn prepare(
    app: &App,
    thread: Option<&str>,
    body: &mut RunBody,
) -> ApiResult<(Assistant, Option<RunSummary>)> {
    let caller = body.caller.clone().unwrap_or_else(Caller::anyone);
    let resumes = body.command.as_ref().is_some_and(|command| command.resume.is_some());
    if let (Some(thread), true, false) = (thread, caller.decides_only(), resumes) {
        let who = caller.name().unwrap_or_default().to_owned();
        return Err(ServiceError::ReviewOnly { who, thread: thread.to_owned() }.into());
    }
    let (record, latest) = match thread {
        Some(thread) => (app.runs.thread_record(thread).await?, latest(app, thread).await?),
        None => (None, None),
    };
    let at_head = latest.as_ref().is_some_and(|latest| {
        body.checkpoint() == Some(wire::checkpoint_id(latest.id, latest.step).as_str())
    });
    if at_head {
        body.checkpoint_id = None;
        body.checkpoint = None;
    }
    if let Some(refusal) = body.refusal() {
        return Err(refusal);
    }
    let Some(assistant_id) = &body.assistant_id else {
        return Err(ServiceError::invalid("`assistant_id` is required").into());
    };
    let assistant = assistants::to_run(app, assistant_id).await?;
    if let Some(thread) = thread {
        if record.is_none() && latest.is_none() && body.if_not_exists.as_deref() != Some("create") {
            return Err(threads::not_found(thread));
        }
        // A thread keeps to one graph: a run of another is refused later,
        // and must not relabel it first.
        if latest.as_ref().is_none_or(|latest| latest.graph == assistant.name) {
            labelled(app, &caller, thread, record, &assistant).await?;
        }
    }
    Ok((assistant, latest))
}

/// Writes `graph_id` and `assistant_id` of `assistant` into `thread`'s
/// metadata (its record made when it has none) unless they are there.
async fn labelled(
    app: &App,
    caller: &Caller,
    thread: &str,
    record: Option<tollgate_checkpoint::ThreadRecord>,
    assistant: &Assistant,
) -> ApiResult<()> {
    let labels = Map::from_iter([
        ("graph_id".to_owned(), Value::String(assistant.name.clone())),
        ("assistant_id".to_owned(), Value::String(wire::assistant_uuid(&assistant.name))),
    ]);
    Ok(app.runs.label_thread(caller, thread, record, labels, wire::now_ms()).await?)
}

/// Starts a pending run (`queue.rs`) as `id` now that its thread is free
/// and its time has come: its request as if made now, with strategy
/// `reject` (a thread that is busy again is a conflict: it waits on).
pub(super) async fn start_pending(
    app: &App,
    thread: Option<&str>,
    request: &RunBody,
    id: RunId,
) -> ApiResult<Started> {
    let mut body = request.clone();
    body.multitask_strategy = None;
    body.after_seconds = None;
    let (assistant, latest) = prepare(app, thread, &mut body).await?;
    start(app, thread, &body, assistant, latest, id).await
}

/// Starts what `body` asks on `thread` (none: a stateless run): a new run
/// `into` from `input`, the thread's paused run continued by
/// `command.resume`, or its interrupted run continued by no input.
async fn start(
    app: &App,
    thread: Option<&str>,
    body: &RunBody,
    assistant: Assistant,
    latest: Option<RunSummary>,
    into: RunId,
) -> ApiResult<Started> {
    if let Some(checkpoint) = body.checkpoint() {
        return checkpoint_run(app, assistant, thread, latest, checkpoint, body).await;
    }
    if let Some(resume) = body.command.as_ref().and_then(|command| command.resume.clone()) {
        let Some(latest) = latest else {
            return Err(ServiceError::conflict(
                "`Command(resume=…)` needs a thread whose run waits for a decision",
            )
            .into());
        };
        return resume_run(app, assistant, latest, &resume, body.by.as_deref()).await;
    }
    let latest = app.runs.make_way(&app.legs, latest, body.strategy()).await?;
    if let Some(command) = body.command.as_ref().filter(|c| c.update.is_some() || c.moves()) {
        return command_run(app, assistant, thread, latest, command, body.by.as_deref()).await;
    }
    let no_input = body.input.as_ref().is_none_or(Value::is_null);
    if let Some(paused) = &latest {
        let at_breakpoints = paused.status == RunStatus::AwaitingHitl
            && paused.interrupts.iter().all(|i| i.kind == tollgate_engine::BREAKPOINT);
        if no_input && at_breakpoints {
            // LangGraph goes on from `interrupt_before`/`interrupt_after`
            // with a run without input: every breakpoint approved.
            let answers = paused.interrupts.iter().map(|i| (i.id.clone(), Decision::Approve));
            return decided(app, assistant, paused.id, answers.collect(), body.by.as_deref()).await;
        }
    }
    if let Some(latest) = &latest {
        match latest.status {
            RunStatus::Running | RunStatus::Queued => return Err(busy_thread(thread, latest)),
            RunStatus::Interrupted | RunStatus::Failed if no_input => {
                // No input: the thread's stopped run goes on.
                let run = latest.id;
                let after_seq = last_seq(app, run).await?;
                let leg = app.runs.continue_leg(run, Some(app.hub.sink(run))).await?;
                return Ok(Started { run, assistant: assistant.name, after_seq, leg: Some(leg) });
            }
            _ => {}
        }
    }
    launch_new(app, thread, body, assistant, into).await
}

/// A new run `into` of `assistant` from the body's input (a blueprint's
/// user message and context, or a graph's input), with its breakpoints.
async fn launch_new(
    app: &App,
    thread: Option<&str>,
    body: &RunBody,
    assistant: Assistant,
    into: RunId,
) -> ApiResult<Started> {
    let run = into;
    let names = |value: &Option<Value>| -> Vec<String> {
        value
            .as_ref()
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default()
    };
    let launch = Launch {
        thread: thread.map(str::to_owned),
        max_steps: None,
        breakpoints: (names(&body.interrupt_before), names(&body.interrupt_after)),
        memory_shelf: body.shelf.clone(),
    };
    let sink = Some(app.hub.sink(run));
    let input = body.input.clone().unwrap_or(Value::Null);
    let leg = match assistant.kind {
        ListingKind::Blueprint => {
            let found =
                app.settings.admission.blueprint(Value::String(assistant.name.clone())).await?;
            let given = wire::blueprint_input(&input, body.config.as_ref(), body.context.as_ref());
            app.runs.launch(&found, &given, launch, run, sink).await?
        }
        _ => {
            let input = if input.is_null() { json!({}) } else { input };
            app.runs.launch_graph(&assistant.name, input, launch, run, sink).await?
        }
    };
    Ok(Started { run, assistant: assistant.name, after_seq: 0, leg })
}

/// Waits until `started`'s run settles.
async fn settle(app: &App, started: Started) -> ApiResult<RunId> {
    match started.leg {
        Some(leg) => app.legs.wait(leg).await?,
        None => app.runs.settled(started.run).await?,
    }
    Ok(started.run)
}

fn location(thread: Option<&str>, run: RunId) -> HeaderValue {
    let path = match thread {
        Some(thread) => format!("/threads/{thread}/runs/{run}"),
        None => format!("/runs/{run}"),
    };
    HeaderValue::from_str(&path).unwrap_or_else(|_| HeaderValue::from_static("/runs"))
}

/// `POST /threads/{thread}/runs` (and `POST /runs`, a stateless run):
/// started in the background.
pub(super) async fn create(
    State(app): State<App>,
    thread: Option<Path<String>>,
    caller: Caller,
    headers: HeaderMap,
    KeyedJson { mut body, key }: KeyedJson<RunBody>,
) -> ApiResult<Response> {
    body.asked_by(caller);
    let asked = Asked { headers: &headers, key: key.as_ref() };
    background(app, thread.map(|Path(thread)| thread), body, asked).await
}

/// What a run request came with besides its body.
#[derive(Clone, Copy)]
struct Asked<'a> {
    headers: &'a HeaderMap,
    /// Its `Idempotency-Key`.
    key: Option<&'a RequestKey>,
}

/// [`begin`], once per request key: a retry of a request with the same
/// key gets what the first began (and `true`), which it answers as that
/// request would have: the run's view, its outcome once it settles, its
/// stream from the start of the leg the first request began.
async fn begin_once(
    app: &App,
    thread: Option<&str>,
    body: RunBody,
    asked: Asked<'_>,
) -> ApiResult<(Begun, bool)> {
    let into = RunId::new();
    let fresh = into.to_string();
    let made = app.runs.made_once(asked.key, &fresh, Makes::Run, || async {
        let begun = begin(app, thread, body, asked.headers, into).await?;
        let made = match &begun {
            // A leg of a run that was there (a decision, a run continued)
            // is streamed from where it began.
            Begun::Started(started) if started.after_seq > 0 => {
                format!("{}@{}", started.run, started.after_seq)
            }
            Begun::Started(started) => started.run.to_string(),
            Begun::Pending(pending) => pending.entry.id.clone(),
        };
        Ok::<_, ApiError>((begun, made))
    });
    match made.await? {
        Made::Fresh(begun) => Ok((begun, false)),
        Made::Replay(made) => Ok((made_before(app, &made).await?, true)),
    }
}

/// What an earlier request with the same key made (`RUN`, or `RUN@SEQ`
/// for a leg of a run that was there), as it is now: a run, or a run that
/// waits to start.
async fn made_before(app: &App, made: &str) -> ApiResult<Begun> {
    let (run, after_seq) = match made.split_once('@') {
        Some((run, seq)) => (run, seq.parse().unwrap_or(0)),
        None => (made, 0),
    };
    let id = run_id(run)?;
    match app.runs.summary(id).await {
        Ok(summary) => {
            let started = Started { run: id, assistant: summary.graph, after_seq, leg: None };
            return Ok(Begun::Started(started));
        }
        // Not started yet: a pending run.
        Err(ServiceError::NotFound { .. }) => {}
        Err(error) => return Err(error.into()),
    }
    match queue::get(app, run).await? {
        Some(pending) => Ok(Begun::Pending(Box::new(pending))),
        None => Err(ServiceError::not_found(id).into()),
    }
}

/// Starts what `body` asks, and its webhook once it settles; or, for a
/// run that waits (enqueued behind its thread's run, or asked to start
/// later), keeps it to start then.
async fn begin(
    app: &App,
    thread: Option<&str>,
    mut body: RunBody,
    headers: &HeaderMap,
    into: RunId,
) -> ApiResult<Begun> {
    let hook = match body.webhook.as_deref() {
        Some(url) => Some(webhook::checked(app, url, headers).await?),
        None => None,
    };
    let (assistant, latest) = prepare(app, thread, &mut body).await?;
    let body = &body;
    let waiting = match thread {
        Some(thread) => queue::any_waiting(app, thread).await?,
        None => false,
    };
    let enqueued = body.enqueues() && thread.is_some();
    if body.delay_ms().is_some()
        || (enqueued && (waiting || latest.as_ref().is_some_and(RunSummary::holds_thread)))
    {
        let pending = defer(app, thread, body, &assistant, latest.as_ref(), hook, into).await?;
        return Ok(Begun::Pending(Box::new(pending)));
    }
    // A new run jumps no queue; a decision, a command or a run without
    // input is for the thread's run that stopped, which they wait for.
    let new_input = body.command.is_none() && body.input.as_ref().is_some_and(|i| !i.is_null());
    let strategy = body.strategy();
    if waiting && new_input && !matches!(strategy, Multitask::Interrupt | Multitask::Rollback) {
        return Err(ServiceError::conflict(format!(
                "thread `{}` is busy: runs wait to start on it (multitask strategy `reject`; `enqueue` queues this one behind them)",
                thread.unwrap_or("")
            ))
        .into());
    }
    let name = assistant.name.clone();
    let started = match start(app, thread, body, assistant, latest, into).await {
        Ok(started) => started,
        // The thread took a run since it was read: this one waits for it.
        Err(error) if enqueued && error.status == StatusCode::CONFLICT => {
            let mut body = body.clone();
            let (assistant, latest) = prepare(app, thread, &mut body).await?;
            let body = &body;
            let pending = defer(app, thread, body, &assistant, latest.as_ref(), hook, into).await?;
            return Ok(Begun::Pending(Box::new(pending)));
        }
        Err(error) => return Err(error),
    };
    if let Some(url) = hook {
        webhook::register(app, started.run, thread, &url, &name, started.after_seq).await?;
    }
    Ok(Begun::Started(started))
}

/// Keeps the run `body` asks for to start later (`queue.rs`), with its
/// webhook: after `after_seconds`, and on a thread once no run is in
/// flight or waiting for a decision on it.
async fn defer(
    app: &App,
    thread: Option<&str>,
    body: &RunBody,
    assistant: &Assistant,
    latest: Option<&RunSummary>,
    hook: Option<reqwest::Url>,
    run: RunId,
) -> ApiResult<Pending> {
    if let Some(busy) = latest.filter(|latest| latest.in_flight()) {
        // A delayed run with strategy `reject` is refused now, as it
        // would be without the delay.
        if !body.enqueues() {
            return Err(busy_thread(thread, busy));
        }
    }
    if thread.is_some() && body.input.as_ref().is_none_or(Value::is_null) {
        return Err(ServiceError::invalid(
            "an enqueued or delayed run on a thread needs `input` (a run without input goes on with the thread's stopped run now)",
        )
        .into());
    }
    let due = wire::now_ms().saturating_add(body.delay_ms().unwrap_or(0));
    let pending = queue::put(app, run, thread, &assistant.name, body, due).await?;
    if let Some(url) = hook {
        webhook::register(app, run, thread, &url, &assistant.name, 0).await?;
    }
    queue::wake(app);
    Ok(pending)
}

fn busy_thread(thread: Option<&str>, busy: &RunSummary) -> ApiError {
    ServiceError::conflict(format!(
        "thread `{}` is busy: run {} is {} (multitask strategy `reject`)",
        thread.unwrap_or(""),
        busy.id,
        busy.status
    ))
    .into()
}

/// A pending run's answer to `runs.create`.
fn pending_response(thread: Option<&str>, pending: &Pending) -> ApiResult<Response> {
    let run = run_id(&pending.entry.id)?;
    let mut response = Json(queue::view(pending)).into_response();
    response.headers_mut().insert(header::CONTENT_LOCATION, location(thread, run));
    Ok(response)
}

/// Waits until pending run `run` starts: its id, or a conflict when it
/// was cancelled first.
pub(super) async fn when_started(app: &App, run: &str) -> ApiResult<RunId> {
    let id = run_id(run)?;
    queue::started(app, id).await?.ok_or_else(|| {
        ServiceError::conflict(format!("run {run} was cancelled before it started")).into()
    })
}

async fn background(
    app: App,
    thread: Option<String>,
    body: RunBody,
    asked: Asked<'_>,
) -> ApiResult<Response> {
    let (begun, replayed) = begin_once(&app, thread.as_deref(), body, asked).await?;
    let started = match begun {
        Begun::Started(started) => started,
        Begun::Pending(pending) => {
            return pending_response(thread.as_deref(), &pending).map(|r| replay(r, replayed))
        }
    };
    let run = started.run;
    let mut response = Json(driven(&app, started).await?).into_response();
    response.headers_mut().insert(header::CONTENT_LOCATION, location(thread.as_deref(), run));
    Ok(replay(response, replayed))
}

/// A run started in the background: its leg driven here, its `Run`.
async fn driven(app: &App, started: Started) -> ApiResult<Value> {
    if let Some(leg) = started.leg {
        app.legs.drive(leg);
    }
    Ok(run_json(app, started.run, &started.assistant).await?)
}

/// `POST /runs/batch` (`runs.create_batch`): stateless runs started in
/// the background, each as `POST /runs` starts one, in order; their
/// `Run`s. Every body is checked before any run starts (a refused one
/// starts none); a run that then cannot start ends the request with its
/// error, the runs before it going on. With `Idempotency-Key`, a retry
/// answers the runs the first request started (those it started before
/// an error included), as they are now, and starts none.
pub(super) async fn batch(
    State(app): State<App>,
    caller: Caller,
    headers: HeaderMap,
    KeyedJson { body: bodies, key }: KeyedJson<Vec<RunBody>>,
) -> ApiResult<Response> {
    if let Some(refusal) = bodies.iter().find_map(RunBody::refusal) {
        return Err(refusal);
    }
    let ids: Vec<RunId> = bodies.iter().map(|_| RunId::new()).collect();
    let fresh = ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
    let made = app.runs.made_once(key.as_ref(), &fresh, Makes::Runs, || async {
        let (mut shown, mut made) = (Vec::with_capacity(ids.len()), Vec::new());
        for (mut body, id) in bodies.into_iter().zip(&ids) {
            body.asked_by(caller.clone());
            let view = match begin(&app, None, body, &headers, *id).await {
                Ok(begun) => {
                    made.push(id.to_string());
                    shown_begun(&app, begun).await
                }
                Err(error) => Err(error),
            };
            match view {
                Ok(view) => shown.push(view),
                // Nothing started: the key is released with the error.
                Err(error) if made.is_empty() => return Err(error),
                // The runs started stay the key's: a retry answers them.
                Err(error) => return Ok(((shown, Some(error)), made.join(","))),
            }
        }
        Ok(((shown, None), made.join(",")))
    });
    match made.await? {
        Made::Fresh((shown, None)) => Ok(Json(shown).into_response()),
        Made::Fresh((_, Some(error))) => Err(error),
        Made::Replay(made) => {
            let mut shown = Vec::new();
            for run in made.split(',') {
                // A run the first request never started (its process died
                // in the middle of the batch) is passed over.
                match made_before(&app, run).await {
                    Ok(begun) => shown.push(shown_begun(&app, begun).await?),
                    Err(error) if error.status == StatusCode::NOT_FOUND => {}
                    Err(error) => return Err(error),
                }
            }
            Ok(replay(Json(shown).into_response(), true))
        }
    }
}

/// A run of a batch as `runs.create` shows it: started (its leg driven
/// here), or waiting to start.
async fn shown_begun(app: &App, begun: Begun) -> ApiResult<Value> {
    match begun {
        Begun::Started(started) => driven(app, started).await,
        Begun::Pending(pending) => Ok(queue::view(&pending)),
    }
}

/// `POST /threads/{thread}/runs/wait` (and `POST /runs/wait`): started
/// and waited for; the values at its end.
pub(super) async fn wait(
    State(app): State<App>,
    thread: Option<Path<String>>,
    caller: Caller,
    headers: HeaderMap,
    KeyedJson { mut body, key }: KeyedJson<RunBody>,
) -> ApiResult<Response> {
    body.asked_by(caller);
    let asked = Asked { headers: &headers, key: key.as_ref() };
    waited(app, thread.map(|Path(thread)| thread), body, asked).await
}

async fn waited(
    app: App,
    thread: Option<String>,
    body: RunBody,
    asked: Asked<'_>,
) -> ApiResult<Response> {
    let (begun, replayed) = begin_once(&app, thread.as_deref(), body, asked).await?;
    let run = match begun {
        Begun::Started(started) => settle(&app, started).await?,
        Begun::Pending(pending) => {
            let run = when_started(&app, &pending.entry.id).await?;
            app.runs.settled(run).await?;
            run
        }
    };
    let mut response = Json(outcome(&app, run).await?).into_response();
    response.headers_mut().insert(header::CONTENT_LOCATION, location(thread.as_deref(), run));
    Ok(replay(response, replayed))
}

/// `POST /threads/{thread}/runs/stream` (and `POST /runs/stream`):
/// started, its events streamed in the modes asked for (a run that waits
/// to start: once it started, from its first event).
pub(super) async fn stream(
    State(app): State<App>,
    thread: Option<Path<String>>,
    caller: Caller,
    headers: HeaderMap,
    KeyedJson { mut body, key }: KeyedJson<RunBody>,
) -> ApiResult<Response> {
    body.asked_by(caller);
    let asked = Asked { headers: &headers, key: key.as_ref() };
    streamed(app, thread.map(|Path(thread)| thread), body, asked).await
}

async fn streamed(
    app: App,
    thread: Option<String>,
    body: RunBody,
    asked: Asked<'_>,
) -> ApiResult<Response> {
    let modes = body.modes()?;
    let (begun, replayed) = begin_once(&app, thread.as_deref(), body, asked).await?;
    let (run, after, leg) = match begun {
        Begun::Started(started) => (started.run, started.after_seq, started.leg),
        Begun::Pending(pending) => (when_started(&app, &pending.entry.id).await?, 0, None),
    };
    let follow = Follow::new(&app.hub, &app.runs, run, after, Until::LegEnds).await?;
    if let Some(leg) = leg {
        app.legs.drive(leg);
    }
    let mut response = sse(app, follow, modes, true).into_response();
    response.headers_mut().insert(header::CONTENT_LOCATION, location(thread.as_deref(), run));
    Ok(replay(response, replayed))
}
