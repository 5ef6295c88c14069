//! The long-term memory endpoints (`/store/...`, docs/openapi.yaml): items
//! by namespace (written with slashes, `users/42/memories`) and key.

use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tollgate_checkpoint::{GetOp, Item, Namespace, NamespaceQuery, PutOp};

use crate::error::ServiceError;

use super::super::errors::ApiResult;
use super::super::extract::{JsonBody, JsonOrDefault};
use super::super::App;
use crate::identity::Caller;
use crate::service::{
    index_fields, search_op, shelved, shelved_query, unshelved, unshelved_namespace,
};

/// A namespace given as `users/42` or `["users", "42"]`.
#[derive(Deserialize, Default)]
#[serde(untagged)]
pub(crate) enum NamespaceArg {
    #[default]
    None,
    Text(String),
    Parts(Vec<String>),
}

impl NamespaceArg {
    pub(crate) fn parse(self) -> Result<Namespace, ServiceError> {
        match self {
            NamespaceArg::None => Ok(Namespace::default()),
            NamespaceArg::Text(text) => Ok(Namespace::parse(&text)?),
            NamespaceArg::Parts(parts) => Ok(Namespace::new(parts)?),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct PutBody {
    #[serde(default)]
    namespace: NamespaceArg,
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: Value,
    ttl_ms: Option<u64>,
    index: Option<Value>,
}

/// `PUT /store/items`: stores an item (replacing any), answers it.
pub(crate) async fn put(
    State(app): State<App>,
    caller: Caller,
    JsonBody(body): JsonBody<PutBody>,
) -> ApiResult<Json<Value>> {
    let namespace = shelved(&caller, &body.namespace.parse()?)?;
    let mut op = PutOp::new(namespace.clone(), body.key.clone(), body.value);
    if let Some(ms) = body.ttl_ms {
        op = op.ttl(std::time::Duration::from_millis(ms));
    }
    op.index = index_fields(body.index)?;
    let memory = app.runs.memory();
    memory.put_op(op).await.map_err(ServiceError::from)?;
    let mut stored = GetOp::new(namespace, body.key);
    stored.refresh_ttl = false;
    let item = memory.get_op(stored).await.map_err(ServiceError::from)?;
    let item = item.map(|item| unshelved(&caller, item));
    Ok(Json(serde_json::to_value(item).unwrap_or(Value::Null)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ItemQuery {
    namespace: String,
    key: String,
    refresh_ttl: Option<bool>,
}

/// `GET /store/items?namespace=…&key=…`.
pub(crate) async fn get(
    State(app): State<App>,
    caller: Caller,
    Query(query): Query<ItemQuery>,
) -> ApiResult<Json<Value>> {
    let namespace = Namespace::parse(&query.namespace).map_err(ServiceError::from)?;
    let refresh = query.refresh_ttl.unwrap_or(true);
    let item = app.runs.item(&caller, namespace, query.key, refresh).await?;
    Ok(Json(serde_json::to_value(item).unwrap_or(Value::Null)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeleteQuery {
    namespace: String,
    key: String,
}

/// `DELETE /store/items?namespace=…&key=…`: whether there was an item.
pub(crate) async fn delete(
    State(app): State<App>,
    caller: Caller,
    Query(query): Query<DeleteQuery>,
) -> ApiResult<Json<Value>> {
    let namespace = Namespace::parse(&query.namespace).map_err(ServiceError::from)?;
    let namespace = shelved(&caller, &namespace)?;
    let deleted =
        app.runs.memory().delete(&namespace, &query.key).await.map_err(ServiceError::from)?;
    Ok(Json(json!({"deleted": deleted})))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchBody {
    #[serde(default)]
    prefix: NamespaceArg,
    filter: Option<Value>,
    query: Option<String>,
    limit: Option<usize>,
    offset: Option<usize>,
    refresh_ttl: Option<bool>,
}

/// `POST /store/search`: items under a prefix, filtered, newest first or
/// ranked by similarity to `query` (then with `unindexed`, the items that
/// pass the filter but have no vector).
pub(crate) async fn search(
    State(app): State<App>,
    caller: Caller,
    JsonOrDefault(body): JsonOrDefault<SearchBody>,
) -> ApiResult<Json<Value>> {
    let op = search_op(
        shelved(&caller, &body.prefix.parse()?)?,
        body.filter.as_ref(),
        body.query,
        body.limit,
        body.offset,
        body.refresh_ttl,
    )?;
    let semantic = op.query.is_some();
    let found = app.runs.memory().search_ranked(op).await.map_err(ServiceError::from)?;
    // A semantic search also says how many items could not match it.
    let unindexed = semantic.then_some(found.unindexed);
    let items = found.items.into_iter().map(|item| unshelved(&caller, item)).collect();
    Ok(Json(json!(SearchAnswer { items, unindexed })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NamespacesQuery {
    prefix: Option<String>,
    suffix: Option<String>,
    max_depth: Option<usize>,
    limit: Option<usize>,
    offset: Option<usize>,
}

/// `GET /store/namespaces`: the namespaces holding items.
pub(crate) async fn namespaces(
    State(app): State<App>,
    caller: Caller,
    Query(query): Query<NamespacesQuery>,
) -> ApiResult<Json<Value>> {
    let parts = |text: Option<String>| -> Vec<String> {
        text.filter(|text| !text.is_empty())
            .map(|text| text.split('/').map(str::to_owned).collect())
            .unwrap_or_default()
    };
    let mut wanted = NamespaceQuery::new()
        .prefix(parts(query.prefix))
        .suffix(parts(query.suffix))
        .page(query.limit.unwrap_or(100).min(1000), query.offset.unwrap_or(0));
    if let Some(depth) = query.max_depth {
        wanted = wanted.max_depth(depth);
    }
    let wanted = shelved_query(&caller, wanted);
    let found = app.runs.memory().list_namespaces(wanted).await.map_err(ServiceError::from)?;
    let names: Vec<String> =
        found.iter().map(|found| unshelved_namespace(&caller, found).to_string()).collect();
    Ok(Json(json!({"namespaces": names})))
}

/// `POST /store/items/search`'s answer: `{"items"}`, and for a semantic
/// search `"unindexed"`, the items no query can match (stored without
/// an embedder).
#[derive(Serialize)]
struct SearchAnswer {
    items: Vec<Item>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unindexed: Option<u64>,
}
