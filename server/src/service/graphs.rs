//! What the run service does with graphs: finding a run's graph (a
//! blueprint's, rebuilt from its attachment, or a registered one by name
//! and version), starting registered graphs, and listing what a server
//! can start.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};
use tollgate_checkpoint::{RunId, RunRecord};
use tollgate_engine::{EventSink, RunConfig};
use tollgate_nodes::Blueprint;

use super::outline::{GraphListing, ListingKind};
use super::registry::Graphs;
use super::served::{self, Leg, ServedGraph};
use super::{with_events, Launch, Rebuilt, RunSummary, Runs};
use crate::error::ServiceError;

/// What a blueprint folder holds, as `GET /graphs` shows it.
#[derive(Debug, Default)]
pub(crate) struct BlueprintFolder {
    /// The blueprints that load and compile.
    pub(crate) listed: Vec<GraphListing>,
    /// The files that fail as blueprints, each with its problems.
    pub(crate) invalid: Vec<InvalidBlueprint>,
}

/// A file of a blueprint folder that fails as a blueprint.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InvalidBlueprint {
    /// Its name (the file's stem).
    pub name: String,
    /// The file, from the folder.
    pub file: String,
    /// Its problems, paths shown from the folder.
    pub problems: String,
}

impl Runs {
    /// The typed graphs this process serves.
    pub(crate) fn graphs(&self) -> &Graphs {
        &self.graphs
    }

    /// The files of `folder` that look like blueprints (JSON objects) but
    /// do not load or compile, each with its problems (paths shown from
    /// the folder, never the server's absolute ones): what `serve` warns
    /// of at start and `GET /graphs` lists as `invalid`.
    pub fn blueprint_problems(&self, folder: &Path) -> Vec<InvalidBlueprint> {
        self.blueprint_folder(folder).invalid
    }

    /// The blueprints of `folder` (`NAME.json` and `NAME/NAME.json` that
    /// read as blueprints; JSON files that are not objects, such as
    /// scripted replies, are not listed), as `GET /graphs` shows them
    /// (kind `blueprint`, the input a user's message), and the files that
    /// fail as blueprints; read once.
    pub(crate) fn blueprint_folder(&self, folder: &Path) -> BlueprintFolder {
        let (mut found, mut invalid) = (Vec::new(), Vec::new());
        let Ok(entries) = std::fs::read_dir(folder) else { return BlueprintFolder::default() };
        let mut files: Vec<std::path::PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter_map(|path| {
                if path.is_dir() {
                    let name = path.file_name()?.to_str()?.to_owned();
                    Some(path.join(format!("{name}.json")))
                } else {
                    (path.extension()? == "json").then_some(path)
                }
            })
            .filter(|path| path.is_file())
            .collect();
        files.sort();
        for file in files {
            let Some(name) = file.file_stem().and_then(|stem| stem.to_str()) else { continue };
            let shown = file.strip_prefix(folder).unwrap_or(&file).display().to_string();
            let failed = |problem: String| {
                let mut local = problem.replace(&format!("{}/", folder.display()), "");
                if let Ok(absolute) = std::path::absolute(folder) {
                    local = local.replace(&format!("{}/", absolute.display()), "");
                }
                InvalidBlueprint { name: name.to_owned(), file: shown.clone(), problems: local }
            };
            let blueprint = match Blueprint::load(&file) {
                Ok(blueprint) => blueprint,
                Err(tollgate_nodes::BlueprintError::Json { .. }) => continue,
                Err(error) => {
                    // Only what reads as a JSON object is meant as one.
                    let object = std::fs::read_to_string(&file)
                        .ok()
                        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
                        .is_some_and(|value| value.is_object());
                    if object {
                        invalid.push(failed(error.to_string()));
                    }
                    continue;
                }
            };
            let agent = match blueprint.compile_unstarted(&self.models) {
                Ok(agent) => agent,
                Err(error) => {
                    invalid.push(failed(error.to_string()));
                    continue;
                }
            };
            let graph = agent.graph();
            found.push(GraphListing {
                name: name.to_owned(),
                version: graph.version(),
                versions: vec![graph.version()],
                kind: ListingKind::Blueprint,
                graph: Some(blueprint.name().to_owned()),
                input_schema: Some(json!({"oneOf": [
                    {"type": "string", "description": "the user's message"},
                    {"type": "object", "properties": {"message": {"type": "string"}}}
                ]})),
                outline: served::outline(graph),
            });
        }
        BlueprintFolder { listed: found, invalid }
    }

    /// Starts a run of the registered graph `name` (its newest version) on
    /// `input` (JSON of its state's update), and waits for its leg; with
    /// `queue`, stores it `queued` for a worker and returns at once.
    pub async fn start_graph(
        &self,
        name: &str,
        input: Value,
        thread: Option<&str>,
        queue: bool,
        events: Option<EventSink>,
    ) -> Result<RunSummary, ServiceError> {
        let run = RunId::new();
        let launch = Launch { thread: thread.map(str::to_owned), ..Launch::default() };
        if let Some(leg) = self.open_graph(name, input, launch, run, queue, events).await? {
            self.wait(leg).await?;
        }
        self.summary(run).await
    }

    /// The newest version of the registered graph `name`.
    fn graph_named(&self, name: &str) -> Result<&Arc<dyn ServedGraph>, ServiceError> {
        self.graphs.newest_entry(name).ok_or_else(|| {
            ServiceError::missing(format!(
                "no graph `{name}` is served here (GET /graphs lists them)"
            ))
        })
    }

    /// Starts a run of the registered graph `name` (its newest version) on
    /// `input` (JSON of its state's update) with the id `run`: queued for a
    /// worker when runs are shared (Postgres), else driven here.
    pub(crate) async fn launch_graph(
        &self,
        name: &str,
        input: Value,
        launch: Launch,
        run: RunId,
        events: Option<EventSink>,
    ) -> Result<Option<Leg>, ServiceError> {
        self.open_graph(name, input, launch, run, self.shared(), events).await
    }

    /// Creates run `run` of the newest version of `name`: `queued` for a
    /// worker, or driven here (its leg returned, its events to `events`).
    async fn open_graph(
        &self,
        name: &str,
        input: Value,
        launch: Launch,
        run: RunId,
        queue: bool,
        events: Option<EventSink>,
    ) -> Result<Option<Leg>, ServiceError> {
        let graph = self.graph_named(name)?;
        let config = launch.configure(RunConfig::new().run_id(run));
        let config = if queue { config } else { with_events(config, events) };
        graph.open(&self.executor, input, launch.thread.as_deref(), config, queue).await
    }

    /// The graph of a run, if this process has it: a blueprint run's,
    /// rebuilt from its attachment, or the registered graph of the run's
    /// name and version. A run of a registered name whose version is gone
    /// is a conflict naming the versions there are.
    pub(crate) async fn rebuild(
        &self,
        record: &RunRecord,
    ) -> Result<Option<Rebuilt>, ServiceError> {
        let run = record.id;
        if let Some(attachment) = self.executor.attachment(run).await? {
            let blueprint = match Blueprint::from_attachment(&attachment) {
                Ok(blueprint) => {
                    Some(crate::pack::recheck(blueprint)?.with_inherited_env(&self.pass_env))
                }
                Err(tollgate_nodes::BlueprintError::NotABlueprintRun) => None,
                Err(error) => return Err(error.into()),
            };
            if let Some(blueprint) = blueprint {
                let agent = blueprint.start(&self.models).await?;
                let graph: Arc<dyn ServedGraph> = Arc::new(agent.graph().clone());
                return Ok(Some(Rebuilt { graph, config: blueprint.run_config() }));
            }
        }
        let (name, version) = (&record.graph.name, record.graph.version);
        if let Some(graph) = self.graphs.exact(name, version) {
            return Ok(Some(Rebuilt { graph: Arc::clone(graph), config: RunConfig::new() }));
        }
        let available = self.graphs.versions(name);
        if !available.is_empty() {
            return Err(ServiceError::MissingVersion {
                run,
                graph: name.clone(),
                version,
                available,
            });
        }
        Ok(None)
    }
}
