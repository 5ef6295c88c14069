//! `/schedules`: runs of a registered graph or a blueprint on a cron
//! expression or at a time (`docs/workflows.md`, Schedules).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use tollgate_checkpoint::MissedTicks;
use tollgate_engine::{parse_rfc3339, Schedule};

use super::super::errors::ApiResult;
use super::super::extract::JsonBody;
use super::super::App;
use super::runs::blueprint;
use super::wire;
use crate::error::ServiceError;
use crate::service::UserInput;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    offset: Option<u64>,
    limit: Option<u64>,
}

/// `GET /schedules`: schedules by id, `offset` and `limit` (default 100,
/// at most 500).
pub(crate) async fn list(
    State(app): State<App>,
    Query(query): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    let (offset, limit) = (query.offset.unwrap_or(0), query.limit.unwrap_or(100));
    let listed: Vec<Value> =
        app.runs.schedules(offset, limit).await?.iter().map(wire::schedule_json).collect();
    Ok(Json(json!({"schedules": listed})))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddBody {
    id: String,
    blueprint: Option<Value>,
    graph: Option<String>,
    #[serde(default)]
    input: Value,
    cron: Option<String>,
    at: Option<Value>,
    missed: Option<String>,
    grace_seconds: Option<f64>,
    metadata: Option<Value>,
}

/// `POST /schedules`: adds a schedule of a blueprint (as `POST /runs`
/// takes one) or a registered graph, on `cron` (UTC) or `at` (RFC 3339,
/// or milliseconds since the Unix epoch). 201 with the schedule; 409 when
/// its id is taken.
pub(crate) async fn add(
    State(app): State<App>,
    JsonBody(body): JsonBody<AddBody>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let schedule = schedule_of(&body)?;
    let added = match (body.blueprint, body.graph) {
        (Some(given), None) => {
            let blueprint = blueprint(&app, given).await?;
            let input = UserInput::from_json(&body.input);
            app.runs.add_blueprint_schedule(&blueprint, input, schedule).await?
        }
        (None, Some(name)) => app.runs.add_graph_schedule(&name, body.input, schedule).await?,
        _ => {
            return Err(ServiceError::invalid(
                "give `blueprint` (a blueprint's JSON or the name of one the server has) or `graph` (the name of a graph the server serves), one of them",
            )
            .into())
        }
    };
    Ok((StatusCode::CREATED, Json(wire::schedule_json(&added))))
}

/// The schedule a body asks for.
fn schedule_of(body: &AddBody) -> Result<Schedule, ServiceError> {
    let mut schedule =
        match (&body.cron, &body.at) {
            (Some(cron), None) => Schedule::cron(body.id.clone(), cron)
                .map_err(|error| ServiceError::invalid(error.to_string()).with_source(error))?,
            (None, Some(at)) => Schedule::at(body.id.clone(), at_ms(at)?),
            _ => return Err(ServiceError::invalid(
                "give `cron` (an expression, read in UTC) or `at` (an RFC 3339 time), one of them",
            )),
        };
    if let Some(missed) = &body.missed {
        let missed: MissedTicks =
            missed.parse().map_err(|error: tollgate_checkpoint::InvalidMissedTicks| {
                ServiceError::invalid(error.to_string())
            })?;
        schedule = schedule.missed(missed);
    }
    match &body.metadata {
        None | Some(Value::Null) => {}
        Some(metadata @ Value::Object(_)) => schedule = schedule.metadata(metadata.clone()),
        Some(_) => return Err(ServiceError::invalid("`metadata` must be an object")),
    }
    if let Some(grace) = body.grace_seconds {
        let grace = std::time::Duration::try_from_secs_f64(grace).map_err(|_| {
            ServiceError::invalid("`grace_seconds` takes a number of seconds, 0 or more")
        })?;
        schedule = schedule.grace(grace);
    }
    Ok(schedule)
}

/// `at` as milliseconds since the Unix epoch.
fn at_ms(at: &Value) -> Result<i64, ServiceError> {
    let parsed = match at {
        Value::String(text) => parse_rfc3339(text),
        Value::Number(ms) => ms.as_i64(),
        _ => None,
    };
    parsed.ok_or_else(|| {
        ServiceError::invalid(format!(
            "`at` is {at}: give an RFC 3339 time (2026-12-24T09:00:00Z) or milliseconds since the Unix epoch"
        ))
    })
}

/// `GET /schedules/{id}`.
pub(crate) async fn show(State(app): State<App>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    Ok(Json(wire::schedule_json(&app.runs.schedule(&id).await?)))
}

/// `DELETE /schedules/{id}`: the schedule goes; its runs stay.
pub(crate) async fn delete(
    State(app): State<App>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    app.runs.delete_schedule(&id).await?;
    Ok(Json(json!({"id": id, "deleted": true})))
}
