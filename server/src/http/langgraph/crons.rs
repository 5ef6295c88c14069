//! LangGraph's crons as tollgate's schedules (docs/workflows.md,
//! Schedules): stateless crons (`POST /runs/crons`) start a run of their
//! assistant on each tick of their schedule, fired by the server's worker
//! (SQLite) or any `tollgate worker` (Postgres). Crons on a thread, time
//! zones other than UTC, an end time, disabled crons, per-run breakpoints
//! and webhooks, and updates are refused with a 422 naming what.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tollgate_checkpoint::{RunId, ScheduleRecord, ScheduleTiming};
use tollgate_engine::{format_rfc3339, Schedule};

use super::super::errors::{ApiError, ApiResult};
use super::super::extract::{JsonBody, JsonOrDefault};
use super::super::App;
use super::assistants;
use super::wire::{assistant_uuid, blueprint_input, uuid_of};
use crate::error::ServiceError;
use crate::service::ListingKind;

/// The key of a schedule's metadata under which the LangGraph API keeps
/// its cron: the assistant, the user's metadata and the payload.
const CRON: &str = "langgraph_cron";

/// Schedules read per page while searching.
const PAGE: u64 = 500;

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct CreateBody {
    assistant_id: Option<String>,
    schedule: Option<String>,
    input: Option<Value>,
    metadata: Option<Value>,
    config: Option<Value>,
    context: Option<Value>,
    interrupt_before: Option<Value>,
    interrupt_after: Option<Value>,
    webhook: Option<String>,
    on_run_completed: Option<String>,
    multitask_strategy: Option<String>,
    end_time: Option<String>,
    enabled: Option<bool>,
    timezone: Option<String>,
    stream_mode: Option<Value>,
    stream_subgraphs: Option<bool>,
    stream_resumable: Option<bool>,
    durability: Option<String>,
    checkpoint_during: Option<bool>,
}

fn refused(what: &str) -> ApiError {
    super::unsupported_error(what)
}

fn not_empty(names: &Option<Value>) -> bool {
    match names {
        None | Some(Value::Null) => false,
        Some(Value::Array(names)) => !names.is_empty(),
        Some(_) => true,
    }
}

impl CreateBody {
    /// What this server cannot do of the body, if anything.
    fn refusal(&self) -> Option<ApiError> {
        if self.enabled == Some(false) {
            return Some(refused("a disabled cron"));
        }
        if self.end_time.is_some() {
            return Some(refused("`end_time`"));
        }
        if self.timezone.as_deref().is_some_and(|zone| !matches!(zone, "UTC" | "Etc/UTC" | "utc")) {
            return Some(refused("a time zone other than UTC"));
        }
        if not_empty(&self.interrupt_before) || not_empty(&self.interrupt_after) {
            return Some(refused("breakpoints on a cron's runs"));
        }
        if self.webhook.is_some() {
            return Some(refused("a webhook on a cron's runs"));
        }
        None
    }

    /// What LangGraph shows as the cron's payload.
    fn payload(&self, assistant: &str, schedule: &str) -> Value {
        let mut payload = Map::new();
        payload.insert("assistant_id".into(), json!(assistant));
        payload.insert("schedule".into(), json!(schedule));
        let optional = [
            ("input", self.input.clone()),
            ("config", self.config.clone()),
            ("context", self.context.clone()),
            ("metadata", self.metadata.clone()),
            ("on_run_completed", self.on_run_completed.clone().map(Value::from)),
            ("multitask_strategy", self.multitask_strategy.clone().map(Value::from)),
            ("stream_mode", self.stream_mode.clone()),
            ("stream_subgraphs", self.stream_subgraphs.map(Value::from)),
            ("stream_resumable", self.stream_resumable.map(Value::from)),
            ("durability", self.durability.clone().map(Value::from)),
            ("checkpoint_during", self.checkpoint_during.map(Value::from)),
        ];
        for (key, value) in optional {
            if let Some(value) = value.filter(|value| !value.is_null()) {
                payload.insert(key.into(), value);
            }
        }
        Value::Object(payload)
    }
}

/// `POST /runs/crons`: a stateless cron.
pub(super) async fn create(
    State(app): State<App>,
    JsonBody(body): JsonBody<CreateBody>,
) -> ApiResult<Json<Cron>> {
    if let Some(refusal) = body.refusal() {
        return Err(refusal);
    }
    let Some(assistant_id) = body.assistant_id.clone() else {
        return Err(ServiceError::invalid("`assistant_id` is required").into());
    };
    let Some(expression) = body.schedule.clone() else {
        return Err(ServiceError::invalid("`schedule` (a cron expression) is required").into());
    };
    let metadata = match body.metadata.clone() {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(object)) => object,
        Some(_) => return Err(ServiceError::invalid("`metadata` must be an object").into()),
    };
    let assistant = assistants::to_run(&app, &assistant_id).await?;
    let id = uuid_of(&format!("tollgate-cron:{}", RunId::new()));
    let kept = KeptCron {
        assistant: Some(assistant.name.clone()),
        metadata,
        payload: Some(body.payload(&assistant_id, &expression)),
        on_run_completed: body.on_run_completed.clone().or_else(|| Some("delete".into())),
    };
    let schedule = Schedule::cron(id, &expression)
        .map_err(|error| ServiceError::invalid(error.to_string()).with_source(error))?
        .metadata(kept.into_metadata());
    let input = body.input.clone().unwrap_or(Value::Null);
    let added = match assistant.kind {
        ListingKind::Blueprint => {
            let found =
                app.settings.admission.blueprint(Value::String(assistant.name.clone())).await?;
            let given = blueprint_input(&input, body.config.as_ref(), body.context.as_ref());
            app.runs.add_blueprint_schedule(&found, given, schedule).await?
        }
        _ => {
            let input = if input.is_null() { json!({}) } else { input };
            app.runs.add_graph_schedule(&assistant.name, input, schedule).await?
        }
    };
    Ok(Json(Cron::of(&added)))
}

/// `POST /threads/{thread_id}/runs/crons`: refused.
pub(super) async fn for_thread(Path(_thread): Path<String>) -> ApiError {
    refused("a cron on a thread (each run of a cron continuing its thread)")
}

/// `PATCH /runs/crons/{cron_id}`: refused.
pub(super) async fn update(Path(_cron): Path<String>) -> ApiError {
    refused("updating a cron (delete it and create another)")
}

/// What a schedule made by this API keeps of its cron, in the schedule's
/// metadata under [`CRON`]. Every field may be missing (a schedule made
/// elsewhere has none of them).
#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct KeptCron {
    /// The assistant's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    assistant: Option<String>,
    /// The user's metadata.
    metadata: Map<String, Value>,
    /// What LangGraph shows as its payload.
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<Value>,
    /// `delete` or `keep`.
    #[serde(skip_serializing_if = "Option::is_none")]
    on_run_completed: Option<String>,
}

impl KeptCron {
    /// What `record` keeps (nothing of a schedule made elsewhere).
    fn of(record: &ScheduleRecord) -> Self {
        record
            .metadata
            .get(CRON)
            .and_then(|kept| serde_json::from_value(kept.clone()).ok())
            .unwrap_or_default()
    }

    /// The schedule's metadata that keeps it.
    fn into_metadata(self) -> Value {
        json!({CRON: self})
    }
}

/// A schedule as LangGraph's `Cron`.
#[derive(Serialize)]
pub(super) struct Cron {
    cron_id: String,
    /// The assistant's UUID.
    assistant_id: String,
    thread_id: Option<String>,
    user_id: Option<String>,
    on_run_completed: String,
    end_time: Option<String>,
    schedule: String,
    timezone: Option<String>,
    created_at: String,
    updated_at: String,
    payload: Value,
    next_run_date: Option<String>,
    metadata: Map<String, Value>,
    /// A cron whose ticks ended (a one-off that ran) is disabled.
    enabled: bool,
}

impl Cron {
    fn of(record: &ScheduleRecord) -> Self {
        let kept = KeptCron::of(record);
        let assistant = kept.assistant.as_deref().unwrap_or(&record.graph.name);
        let schedule = match &record.timing {
            ScheduleTiming::Cron { expression } => expression.clone(),
            ScheduleTiming::At { at_ms } => format_rfc3339(*at_ms),
            _ => String::new(),
        };
        let payload = kept.payload.clone().unwrap_or_else(
            || json!({"assistant_id": assistant, "schedule": schedule, "input": record.input}),
        );
        Self {
            cron_id: record.id.clone(),
            assistant_id: assistant_uuid(assistant),
            thread_id: None,
            user_id: None,
            on_run_completed: kept.on_run_completed.clone().unwrap_or_else(|| "keep".into()),
            end_time: None,
            schedule,
            timezone: None,
            created_at: format_rfc3339(record.created_at_ms),
            updated_at: format_rfc3339(record.last_fired_at_ms.unwrap_or(record.created_at_ms)),
            payload,
            next_run_date: record.next_at_ms.map(format_rfc3339),
            metadata: kept.metadata,
            enabled: record.next_at_ms.is_some(),
        }
    }

    /// Whether `wanted` names its assistant (by name or UUID, as its
    /// payload or as the cron does).
    fn of_assistant(&self, wanted: &str) -> bool {
        self.assistant_id == wanted
            || self.payload.get("assistant_id").and_then(Value::as_str) == Some(wanted)
            || assistant_uuid(wanted) == self.assistant_id
    }

    /// What a search sorts by `key` on (one of [`SORT_KEYS`]); a missing
    /// value after every present one (ascending), as Postgres sorts nulls.
    fn sort_key(&self, key: &str) -> (bool, String) {
        let value = match key {
            "cron_id" => Some(&self.cron_id),
            "assistant_id" => Some(&self.assistant_id),
            "next_run_date" => self.next_run_date.as_ref(),
            "updated_at" => Some(&self.updated_at),
            "created_at" => Some(&self.created_at),
            // `thread_id`, `end_time`: none has one.
            _ => None,
        };
        (value.is_none(), value.cloned().unwrap_or_default())
    }
}

/// What crons can be sorted by.
const SORT_KEYS: [&str; 7] = [
    "cron_id",
    "assistant_id",
    "thread_id",
    "next_run_date",
    "end_time",
    "created_at",
    "updated_at",
];

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct SearchBody {
    assistant_id: Option<String>,
    thread_id: Option<String>,
    enabled: Option<bool>,
    metadata: Option<Map<String, Value>>,
    limit: Option<u64>,
    offset: Option<u64>,
    sort_by: Option<String>,
    sort_order: Option<String>,
    select: Option<Vec<String>>,
}

/// The crons a search's filters keep, sorted.
async fn found(app: &App, body: &SearchBody) -> ApiResult<Vec<Cron>> {
    if body.thread_id.is_some() {
        // No cron is on a thread.
        return Ok(Vec::new());
    }
    let key = body.sort_by.as_deref().unwrap_or("created_at");
    if !SORT_KEYS.contains(&key) {
        return Err(ServiceError::invalid(format!("cannot sort crons by `{key}`")).into());
    }
    let mut all = Vec::new();
    let mut offset = 0;
    loop {
        let page = app.runs.schedules(offset, PAGE).await?;
        let len = page.len() as u64;
        all.extend(page);
        if len < PAGE {
            break;
        }
        offset += len;
    }
    let mut crons: Vec<Cron> = all
        .iter()
        .map(Cron::of)
        .filter(|cron| body.assistant_id.as_ref().is_none_or(|wanted| cron.of_assistant(wanted)))
        .filter(|cron| body.enabled.is_none_or(|enabled| cron.enabled == enabled))
        .filter(|cron| {
            body.metadata.as_ref().is_none_or(|wanted| {
                let field = |key: &String| cron.metadata.get(key).unwrap_or(&Value::Null);
                wanted.iter().all(|(key, value)| field(key) == value)
            })
        })
        .collect();
    crons.sort_by_cached_key(|cron| cron.sort_key(key));
    if body.sort_order.as_deref().unwrap_or("desc") == "desc" {
        crons.reverse();
    }
    Ok(crons)
}

/// `POST /runs/crons/search`.
pub(super) async fn search(
    State(app): State<App>,
    JsonOrDefault(body): JsonOrDefault<SearchBody>,
) -> ApiResult<Json<Value>> {
    let crons = found(&app, &body).await?;
    let (offset, limit) = (body.offset.unwrap_or(0), body.limit.unwrap_or(10));
    let page = crons.into_iter().skip(usize::try_from(offset).unwrap_or(usize::MAX));
    let page: Vec<Value> = page
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .map(|cron| {
            let cron = serde_json::to_value(cron).unwrap_or(Value::Null);
            match &body.select {
                Some(fields) if !fields.is_empty() => {
                    Value::Object(fields.iter().map(|f| (f.clone(), cron[f].clone())).collect())
                }
                _ => cron,
            }
        })
        .collect();
    Ok(Json(Value::Array(page)))
}

/// `POST /runs/crons/count`.
pub(super) async fn count(
    State(app): State<App>,
    JsonOrDefault(body): JsonOrDefault<SearchBody>,
) -> ApiResult<Json<Value>> {
    Ok(Json(json!(found(&app, &body).await?.len())))
}

/// `GET /runs/crons/{cron_id}`: the cron as a search lists it.
pub(super) async fn get(State(app): State<App>, Path(cron): Path<String>) -> ApiResult<Json<Cron>> {
    Ok(Json(Cron::of(&app.runs.schedule(&cron).await?)))
}

/// `DELETE /runs/crons/{cron_id}`: the cron goes; its runs stay.
pub(super) async fn delete(
    State(app): State<App>,
    Path(cron): Path<String>,
) -> ApiResult<impl IntoResponse> {
    app.runs.delete_schedule(&cron).await?;
    Ok(StatusCode::NO_CONTENT)
}
