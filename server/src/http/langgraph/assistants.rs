//! Assistants: every registered graph and every blueprint of the server's
//! folder is one (its id is its name or the UUID derived from it). They
//! are what the server has; creating, changing or deleting one is refused.

use axum::extract::{Path, State};
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::super::errors::ApiResult;
use super::super::extract::JsonOrDefault;
use super::super::App;
use super::wire::{self, assistant_uuid};
use crate::error::ServiceError;
use crate::service::{GraphListing, InvalidBlueprint, ListingKind};

/// One assistant: what `GET /graphs` lists of a graph or blueprint.
#[derive(Debug, Clone)]
pub(super) struct Assistant {
    /// Its name (the graph's, or the blueprint's file name).
    pub(super) name: String,
    /// A registered graph or a blueprint.
    pub(super) kind: ListingKind,
    /// Its listing: version, input schema, outline (none when taken to
    /// run, without reading the others: see [`to_run`]).
    pub(super) listed: Option<GraphListing>,
}

impl Assistant {
    /// As LangGraph's `Assistant`.
    pub(super) fn to_json(&self) -> Value {
        json!({
            "assistant_id": assistant_uuid(&self.name),
            "graph_id": self.name,
            "name": self.name,
            "description": null,
            "config": {},
            "context": {},
            "metadata": {"created_by": "system", "kind": self.kind},
            "version": self.listed.as_ref().map(|listed| listed.version),
            "created_at": "1970-01-01T00:00:00Z",
            "updated_at": "1970-01-01T00:00:00Z",
        })
    }
}

/// Every assistant of the server: its registered graphs, then its
/// blueprints.
pub(super) async fn all(app: &App) -> ApiResult<Vec<Assistant>> {
    Ok(with_invalid(app).await?.0)
}

/// [`all`], and the blueprints of the folder that do not load.
async fn with_invalid(app: &App) -> ApiResult<(Vec<Assistant>, Vec<InvalidBlueprint>)> {
    let (listed, invalid) = app.settings.admission.listing(&app.runs).await?;
    let assistants = listed
        .into_iter()
        .map(|listed| Assistant {
            name: listed.name.clone(),
            kind: listed.kind,
            listed: Some(listed),
        })
        .collect();
    Ok((assistants, invalid))
}

/// The assistant `id` names (its name, or its UUID), or 404. A
/// registered graph named by name is found without listing the others.
pub(super) async fn find(app: &App, id: &str) -> ApiResult<Assistant> {
    if let Some(listed) = app.runs.graphs().described(id) {
        let (name, kind) = (id.to_owned(), ListingKind::Graph);
        return Ok(Assistant { name, kind, listed: Some(listed) });
    }
    let named = |name: &str| name == id || assistant_uuid(name) == id;
    let (assistants, invalid) = with_invalid(app).await?;
    if let Some(found) = assistants.into_iter().find(|assistant| named(&assistant.name)) {
        return Ok(found);
    }
    // A blueprint of the folder that does not load: say why (422), not
    // that there is none.
    if let Some(bad) = invalid.iter().find(|bad| named(&bad.name)) {
        let (file, problems) = (&bad.file, &bad.problems);
        return Err(ServiceError::invalid(format!(
            "assistant `{id}` is a blueprint that does not load ({file}): {problems}"
        ))
        .into());
    }
    Err(ServiceError::missing(format!(
            "no assistant `{id}`: assistants are the server's graphs and blueprints (POST /assistants/search lists them)"
        ))
    .into())
}

/// The assistant a run names: as [`find`], but a blueprint named by name
/// is taken from its file without compiling the folder's others (the
/// run reads it anyway).
pub(super) async fn to_run(app: &App, id: &str) -> ApiResult<Assistant> {
    if let Some(folder) = &app.settings.admission.blueprints {
        let plain = !id.is_empty()
            && id.len() <= 64
            && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        let file = |path: std::path::PathBuf| path.is_file();
        if plain
            && app.runs.graphs().described(id).is_none()
            && (file(folder.join(format!("{id}.json")))
                || file(folder.join(id).join(format!("{id}.json"))))
        {
            let (name, kind) = (id.to_owned(), ListingKind::Blueprint);
            return Ok(Assistant { name, kind, listed: None });
        }
    }
    find(app, id).await
}

#[derive(Deserialize, Default)]
pub(super) struct SearchBody {
    graph_id: Option<String>,
    name: Option<String>,
    metadata: Option<Value>,
    limit: Option<u64>,
    offset: Option<u64>,
}

impl SearchBody {
    fn matches(&self, assistant: &Assistant) -> bool {
        let metadata = assistant.to_json()["metadata"].clone();
        self.graph_id.as_ref().is_none_or(|graph| *graph == assistant.name)
            && self.name.as_ref().is_none_or(|name| assistant.name.contains(name.as_str()))
            && super::threads::metadata_matches(self.metadata.as_ref(), &metadata)
    }
}

/// `POST /assistants/search`: the assistants matching `graph_id`, `name`
/// (a part of it) and `metadata`, `offset` skipped, at most `limit` (10).
pub(super) async fn search(
    State(app): State<App>,
    JsonOrDefault(body): JsonOrDefault<SearchBody>,
) -> ApiResult<Json<Value>> {
    let (offset, limit) = (body.offset.unwrap_or(0) as usize, body.limit.unwrap_or(10) as usize);
    let found: Vec<Value> = all(&app)
        .await?
        .iter()
        .filter(|assistant| body.matches(assistant))
        .skip(offset)
        .take(limit)
        .map(Assistant::to_json)
        .collect();
    Ok(Json(Value::Array(found)))
}

/// `POST /assistants/count`.
pub(super) async fn count(
    State(app): State<App>,
    JsonOrDefault(body): JsonOrDefault<SearchBody>,
) -> ApiResult<Json<Value>> {
    let found = all(&app).await?.iter().filter(|assistant| body.matches(assistant)).count();
    Ok(Json(json!(found)))
}

/// `GET /assistants/{id}`.
pub(super) async fn get(State(app): State<App>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    Ok(Json(find(&app, &id).await?.to_json()))
}

/// `GET /assistants/{id}/graph`: nodes (`{"id", "type", "data"}`) and
/// edges (`{"source", "target", "conditional"}`), as LangGraph draws them.
pub(super) async fn graph(
    State(app): State<App>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let assistant = find(&app, &id).await?;
    let Some(listed) = &assistant.listed else {
        return Err(ServiceError::missing(format!("assistant `{id}` has no outline")).into());
    };
    Ok(Json(wire::drawing(&listed.outline)))
}

/// `GET /assistants/{id}/schemas`: the input schema where known (a
/// registered graph's, given by its registration; a blueprint's
/// messages), no others.
pub(super) async fn schemas(
    State(app): State<App>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let assistant = find(&app, &id).await?;
    let input = match assistant.kind {
        ListingKind::Blueprint => json!({
            "type": "object",
            "properties": {"messages": {"type": "array", "items": {"type": "object",
                "properties": {"role": {"type": "string"}, "type": {"type": "string"},
                               "content": {}}}}},
        }),
        ListingKind::Graph => {
            assistant.listed.and_then(|listed| listed.input_schema).unwrap_or(Value::Null)
        }
    };
    Ok(Json(json!({
        "graph_id": assistant.name,
        "input_schema": input,
        "output_schema": null,
        "state_schema": null,
        "config_schema": null,
        "context_schema": null,
    })))
}

/// `POST /assistants`: refused; assistants are the server's graphs.
pub(super) async fn refused() -> Response {
    super::unsupported("creating an assistant (assistants are the server's graphs and blueprints)")
}

/// `PATCH`/`DELETE /assistants/{id}`, versions: refused.
pub(super) async fn refused_id(Path(_id): Path<String>) -> Response {
    super::unsupported("changing an assistant or its versions (assistants are the server's graphs and blueprints, versioned with them)")
}
