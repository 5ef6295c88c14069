//! LangGraph's store API (`/store/items`, `/store/items/search`,
//! `/store/namespaces`) over tollgate's long-term memory: namespaces as
//! lists of parts, TTLs in minutes, times as RFC 3339.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tollgate_checkpoint::{Item, Namespace, NamespaceQuery, PutOp};
use tollgate_engine::format_rfc3339;

use super::super::extract::{JsonBody, JsonOrDefault};
use crate::error::ServiceError;
use crate::http::errors::ApiResult;
use crate::http::App;
use crate::identity::Caller;
use crate::service::{
    index_fields, search_op, shelved, shelved_query, unshelved, unshelved_namespace,
};

/// An item as LangGraph's clients read it: `{"namespace", "key",
/// "value", "created_at", "updated_at"}`, and a search's `"score"`.
#[derive(Serialize)]
struct ItemJson<'a> {
    namespace: &'a [String],
    key: &'a str,
    value: &'a Value,
    created_at: String,
    updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    score: Option<f32>,
}

fn item_json(item: &Item) -> Value {
    json!(ItemJson {
        namespace: item.namespace.parts(),
        key: &item.key,
        value: &item.value,
        created_at: format_rfc3339(item.created_at_ms),
        updated_at: format_rfc3339(item.updated_at_ms),
        score: item.score,
    })
}

#[derive(Deserialize, Default)]
pub(super) struct PutBody {
    #[serde(default)]
    namespace: Vec<String>,
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: Value,
    index: Option<Value>,
    /// Minutes.
    ttl: Option<f64>,
}

/// `PUT /store/items`: 204 once stored.
pub(super) async fn put(
    State(app): State<App>,
    caller: Caller,
    JsonBody(body): JsonBody<PutBody>,
) -> ApiResult<StatusCode> {
    if !body.value.is_object() {
        return Err(ServiceError::invalid("`value` must be a JSON object").into());
    }
    let namespace = Namespace::new(body.namespace).map_err(ServiceError::from)?;
    let mut op = PutOp::new(shelved(&caller, &namespace)?, body.key, body.value);
    match body.ttl {
        None => {}
        Some(minutes) if minutes.is_finite() && minutes > 0.0 && minutes < 1e9 => {
            op = op.ttl(std::time::Duration::from_secs_f64(minutes * 60.0));
        }
        Some(_) => {
            return Err(ServiceError::invalid("`ttl` is a positive number of minutes").into())
        }
    }
    op.index = index_fields(body.index)?;
    app.runs.memory().put_op(op).await.map_err(ServiceError::from)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
pub(super) struct GetQuery {
    namespace: String,
    key: String,
    refresh_ttl: Option<bool>,
}

/// `GET /store/items?namespace=a.b&key=k` (parts joined by `.`, as the
/// SDKs send them).
pub(super) async fn get(
    State(app): State<App>,
    caller: Caller,
    Query(query): Query<GetQuery>,
) -> ApiResult<Json<Value>> {
    let parts: Vec<&str> = match query.namespace.as_str() {
        "" => Vec::new(),
        text => text.split('.').collect(),
    };
    let namespace = Namespace::new(parts).map_err(ServiceError::from)?;
    let refresh = query.refresh_ttl.unwrap_or(true);
    let item = app.runs.item(&caller, namespace, query.key, refresh).await?;
    Ok(Json(item_json(&item)))
}

#[derive(Deserialize, Default)]
pub(super) struct DeleteBody {
    #[serde(default)]
    namespace: Vec<String>,
    #[serde(default)]
    key: String,
}

/// `DELETE /store/items` with `{namespace, key}`: 204.
pub(super) async fn delete(
    State(app): State<App>,
    caller: Caller,
    JsonBody(body): JsonBody<DeleteBody>,
) -> ApiResult<StatusCode> {
    let namespace = Namespace::new(body.namespace).map_err(ServiceError::from)?;
    let namespace = shelved(&caller, &namespace)?;
    app.runs.memory().delete(&namespace, &body.key).await.map_err(ServiceError::from)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, Default)]
pub(super) struct SearchBody {
    #[serde(default)]
    namespace_prefix: Vec<String>,
    filter: Option<Value>,
    limit: Option<usize>,
    offset: Option<usize>,
    query: Option<String>,
    refresh_ttl: Option<bool>,
}

/// `POST /store/items/search`.
pub(super) async fn search(
    State(app): State<App>,
    caller: Caller,
    JsonOrDefault(body): JsonOrDefault<SearchBody>,
) -> ApiResult<Json<Value>> {
    let prefix = Namespace::new(body.namespace_prefix).map_err(ServiceError::from)?;
    let op = search_op(
        shelved(&caller, &prefix)?,
        body.filter.as_ref(),
        body.query,
        body.limit,
        body.offset,
        body.refresh_ttl,
    )?;
    let items = app.runs.memory().search(op).await.map_err(ServiceError::from)?;
    let items = items.into_iter().map(|item| item_json(&unshelved(&caller, item)));
    Ok(Json(json!({"items": items.collect::<Vec<_>>()})))
}

#[derive(Deserialize, Default)]
pub(super) struct NamespacesBody {
    prefix: Option<Vec<String>>,
    suffix: Option<Vec<String>>,
    max_depth: Option<usize>,
    limit: Option<usize>,
    offset: Option<usize>,
}

/// `POST /store/namespaces`.
pub(super) async fn namespaces(
    State(app): State<App>,
    caller: Caller,
    JsonOrDefault(body): JsonOrDefault<NamespacesBody>,
) -> ApiResult<Json<Value>> {
    let mut query = NamespaceQuery::new()
        .prefix(body.prefix.unwrap_or_default())
        .suffix(body.suffix.unwrap_or_default())
        .page(body.limit.unwrap_or(100).min(1000), body.offset.unwrap_or(0));
    if let Some(depth) = body.max_depth {
        query = query.max_depth(depth);
    }
    let query = shelved_query(&caller, query);
    let found = app.runs.memory().list_namespaces(query).await.map_err(ServiceError::from)?;
    let found: Vec<Namespace> =
        found.iter().map(|found| unshelved_namespace(&caller, found)).collect();
    let lists: Vec<&[String]> = found.iter().map(Namespace::parts).collect();
    Ok(Json(json!({"namespaces": lists})))
}
