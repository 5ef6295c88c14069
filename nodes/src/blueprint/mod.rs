//! Blueprints: agents and graphs of agents described in JSON, validated
//! with every problem reported, compiled into the same graph as the Rust
//! API, and stored with their runs so any process can continue them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tollgate_engine::{Event, RunConfig};

use crate::error::HarnessError;
use crate::mcp::McpError;
use approval::Approval;

mod approval;
mod build;
mod check;
mod facts;
mod files;
mod mcp;

use files::Reach;
pub use files::MAX_FILE_BYTES;

use check::{check_agent, check_graph, nested_blueprint, structure_problems};

/// Version of the attachment a blueprint run stores.
const ATTACHMENT_VERSION: u64 = 1;

/// One thing wrong with a blueprint, and where (a JSON pointer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlueprintProblem {
    /// Where, as a JSON pointer (`/tools/1/parameters`); empty for the root.
    pub at: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for BlueprintProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.at.is_empty() {
            true => write!(f, "{}", self.message),
            false => write!(f, "{}: {}", self.at, self.message),
        }
    }
}

/// A blueprint could not be read, was invalid, or did not compile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlueprintError {
    /// The file could not be read.
    #[error("cannot read blueprint {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not JSON.
    #[error("blueprint {} is not valid JSON: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        #[source]
        source: serde_json::Error,
    },
    /// The blueprint breaks the format; every problem found is listed.
    #[error("invalid blueprint ({} problem(s)):\n  {}", problems.len(), problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    Invalid {
        /// Every problem.
        problems: Vec<BlueprintProblem>,
    },
    /// A run's stored attachment is not a blueprint attachment.
    #[error("the run was not started from a blueprint (or its attachment is unreadable)")]
    NotABlueprintRun,
    /// It is valid but could not be built (a model spec no factory serves).
    #[error("blueprint does not compile: {source}")]
    Compile {
        /// Why.
        #[source]
        source: HarnessError,
    },
    /// One of its MCP servers could not be started, or its tools do not
    /// match the blueprint's `tools` entries.
    #[error("blueprint's MCP servers: {source}")]
    Mcp {
        /// Why.
        #[source]
        source: McpError,
    },
    /// It names MCP servers, which [`Blueprint::compile`] does not start:
    /// build it with [`Blueprint::start`].
    #[error("the blueprint names MCP servers ({}): build it with `Blueprint::start`, which starts them", servers.join(", "))]
    ServersNotStarted {
        /// The servers, as `agent/server`.
        servers: Vec<String>,
    },
}

#[derive(Debug, Clone, Deserialize)]
struct AgentDoc {
    name: String,
    #[serde(default = "one")]
    version: u32,
    #[serde(default)]
    system: Option<String>,
    model: String,
    #[serde(default)]
    max_steps: Option<u64>,
    #[serde(default)]
    max_turns: Option<u32>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    tools: Vec<ToolDoc>,
    #[serde(default)]
    mcp_servers: Vec<McpServerDoc>,
    #[serde(default)]
    output_schema: Option<Value>,
    #[serde(default)]
    memory: Option<MemoryDoc>,
}

/// An agent's `memory`: its namespace (parts `{name}` filled from the run's
/// context), the built-in tools it gets, memories recalled into its prompt.
#[derive(Debug, Clone, Deserialize)]
struct MemoryDoc {
    namespace: Vec<String>,
    #[serde(default)]
    tools: Option<Vec<String>>,
    #[serde(default)]
    prompt: usize,
}

#[derive(Debug, Clone, Deserialize)]
struct McpServerDoc {
    name: String,
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    start_timeout_ms: Option<u64>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    on_error: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct ToolDoc {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    parameters: Value,
    #[serde(default)]
    fixture: Option<Value>,
    #[serde(default)]
    command: Option<Vec<String>>,
    /// A tool of this MCP server (of the agent's `mcp_servers`): the entry
    /// only sets how it is called.
    #[serde(default)]
    mcp: Option<String>,
    #[serde(default)]
    on_error: Option<String>,
    #[serde(default)]
    approval: Approval,
    #[serde(default)]
    on_reject: Option<String>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    /// Variables set for a command tool's program.
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
struct GraphDoc {
    name: String,
    #[serde(default = "one")]
    version: u32,
    #[serde(default)]
    max_steps: Option<u64>,
    agents: Vec<EntryDoc>,
    edges: Vec<(String, String)>,
}

/// An entry of a graph's `agents`: an agent, or another blueprint run as a
/// subgraph (a path relative to the blueprint's folder, or inline).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum EntryDoc {
    Subgraph { name: String, blueprint: Value },
    Agent(Box<AgentDoc>),
}

impl EntryDoc {
    fn name(&self) -> &str {
        match self {
            EntryDoc::Subgraph { name, .. } => name,
            EntryDoc::Agent(agent) => &agent.name,
        }
    }
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone)]
enum Doc {
    Agent(AgentDoc),
    Graph(GraphDoc),
}

/// A validated blueprint: an agent, or a graph of agents.
///
/// ```json
/// {"name": "refunds", "version": 1, "system": "You handle refund requests.",
///  "model": "scripted:replies.json", "max_steps": 40,
///  "tools": [{"name": "lookup_order", "description": "Find an order",
///             "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
///             "fixture": {"id": 7, "amount": 20}}],
///  "output_schema": null}
/// ```
///
/// A graph: `{"name", "version", "max_steps"?, "agents": [agent, ...],
/// "edges": [["START", "a"], ["a", "b"], ["b", "END"]]}`. Paths (scripts,
/// commands) are relative to the blueprint's folder.
#[derive(Debug, Clone)]
pub struct Blueprint {
    source: Value,
    base_dir: PathBuf,
    doc: Doc,
    /// The graph's subgraph entries, validated, by entry name.
    subgraphs: std::collections::BTreeMap<String, Blueprint>,
    model_override: Option<String>,
    stream_all: bool,
    /// Parts every agent's memory namespace begins with (a server's user's
    /// own part of the store): stored with runs.
    memory_shelf: Vec<String>,
    pack: Option<PackProvenance>,
    /// Which files it may name.
    reach: Reach,
    /// Variables of this process's environment its programs see besides
    /// [`BASE_CHILD_ENV`](crate::BASE_CHILD_ENV) (not stored with runs: each
    /// process's operator says).
    inherit_env: Vec<String>,
    /// Variables set for every program it starts (not stored with runs).
    program_env: std::collections::BTreeMap<String, String>,
}

/// Where a blueprint came from when it was run from a signed pack: kept in
/// the run's attachment, announced as a `pack_run` event at the start of
/// every leg.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackProvenance {
    /// SHA-256 of the pack's manifest, hex.
    pub bundle_hash: String,
    /// Whether a trusted key's signature verified when the run started.
    pub signature_verified: bool,
    /// The signing key's id, when the pack is signed.
    pub key_id: Option<String>,
    /// Whether this leg found the pack extracted and intact.
    pub cache_hit: bool,
}

impl Blueprint {
    /// Reads and validates the blueprint at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, BlueprintError> {
        let path = path.as_ref();
        let text = files::read_regular(path).map_err(|error| {
            let source = match error {
                files::FileError::Io(source) => source,
                other => std::io::Error::other(other.describe("file", "", path)),
            };
            BlueprintError::Io { path: path.to_owned(), source }
        })?;
        let source = serde_json::from_str(&text)
            .map_err(|source| BlueprintError::Json { path: path.to_owned(), source })?;
        let dir = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let base_dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned());
        Self::from_value(source, base_dir)
    }

    /// Validates a blueprint whose relative paths start at `base_dir`.
    pub fn from_value(source: Value, base_dir: impl Into<PathBuf>) -> Result<Self, BlueprintError> {
        Self::nested_in(source, base_dir.into(), &Reach::Any, &mut Vec::new())
    }

    /// Validates a blueprint a client sent (inline, over an API): its
    /// relative paths start at `folder`, and every file it names (scripted
    /// replies, nested blueprints) must resolve, symlinks followed, inside
    /// `folder`; with no folder it may name none. A file outside, or one
    /// that does not exist, is refused with the same problem, which says
    /// nothing about the file. Runs of it keep the restriction on every
    /// leg.
    pub fn from_client(source: Value, folder: Option<&Path>) -> Result<Self, BlueprintError> {
        let (base_dir, reach) = match folder {
            Some(folder) => {
                let root = std::fs::canonicalize(folder)
                    .map_err(|source| BlueprintError::Io { path: folder.to_owned(), source })?;
                (root.clone(), Reach::Within(root))
            }
            None => (PathBuf::from("."), Reach::Nothing),
        };
        Self::nested_in(source, base_dir, &reach, &mut Vec::new())
    }

    /// Validates a blueprint; `within` lists the files of the blueprints
    /// that include it (a blueprint may not include itself).
    fn nested_in(
        source: Value,
        base_dir: PathBuf,
        reach: &Reach,
        within: &mut Vec<PathBuf>,
    ) -> Result<Self, BlueprintError> {
        let mut problems = structure_problems(&source);
        if !problems.is_empty() {
            return Err(BlueprintError::Invalid { problems });
        }
        let doc = if source.get("agents").is_some() {
            serde_json::from_value(source.clone()).map(Doc::Graph)
        } else {
            serde_json::from_value(source.clone()).map(Doc::Agent)
        };
        let doc = doc.map_err(|error| BlueprintError::Invalid {
            problems: vec![BlueprintProblem { at: String::new(), message: error.to_string() }],
        })?;
        let mut subgraphs = std::collections::BTreeMap::new();
        match &doc {
            Doc::Agent(agent) => check_agent(agent, "", &base_dir, reach, &mut problems),
            Doc::Graph(graph) => {
                check_graph(graph, &base_dir, reach, &mut problems);
                for (index, entry) in graph.agents.iter().enumerate() {
                    let EntryDoc::Subgraph { name, blueprint } = entry else { continue };
                    let at = format!("/agents/{index}/blueprint");
                    if let Some(nested) =
                        nested_blueprint(blueprint, &base_dir, reach, &at, within, &mut problems)
                    {
                        subgraphs.insert(name.clone(), nested);
                    }
                }
            }
        }
        if problems.is_empty() {
            Ok(Self {
                source,
                base_dir,
                doc,
                subgraphs,
                model_override: None,
                stream_all: false,
                memory_shelf: Vec::new(),
                pack: None,
                reach: reach.clone(),
                inherit_env: Vec::new(),
                program_env: std::collections::BTreeMap::new(),
            })
        } else {
            Err(BlueprintError::Invalid { problems })
        }
    }

    /// Uses model `spec` for every agent instead of the blueprint's
    /// (nested blueprints' agents included).
    pub fn with_model(mut self, spec: impl Into<String>) -> Self {
        let spec = spec.into();
        self.subgraphs = std::mem::take(&mut self.subgraphs)
            .into_iter()
            .map(|(name, nested)| (name, nested.with_model(spec.clone())))
            .collect();
        self.model_override = Some(spec);
        self
    }

    /// Streams every agent's model calls (as `"stream": true` on each
    /// agent does): the reply's text arrives as `model_delta` events while
    /// the model writes.
    pub fn with_streaming(mut self) -> Self {
        self.subgraphs = std::mem::take(&mut self.subgraphs)
            .into_iter()
            .map(|(name, nested)| (name, nested.with_streaming()))
            .collect();
        self.stream_all = true;
        self
    }

    /// Keeps every agent's long-term memory (nested blueprints' included)
    /// under `parts`: an agent whose `memory.namespace` is
    /// `users/{user_id}/memories` reads and writes
    /// `PARTS/users/{user_id}/memories`, whatever the run's context fills
    /// in. Stored with its runs, so every leg keeps it. A server gives a
    /// user's runs the user's own part of the store so.
    pub fn with_memory_shelf(mut self, parts: Vec<String>) -> Self {
        self.subgraphs = std::mem::take(&mut self.subgraphs)
            .into_iter()
            .map(|(name, nested)| (name, nested.with_memory_shelf(parts.clone())))
            .collect();
        self.memory_shelf = parts;
        self
    }

    /// Lets the programs it starts (command tools, MCP servers, nested
    /// blueprints' included) see these variables of this process's
    /// environment, besides [`BASE_CHILD_ENV`](crate::BASE_CHILD_ENV) and
    /// what the blueprint's own `env` entries set. Not stored with its
    /// runs: the process that drives a leg decides.
    pub fn with_inherited_env(mut self, names: &[String]) -> Self {
        self.subgraphs = std::mem::take(&mut self.subgraphs)
            .into_iter()
            .map(|(name, nested)| (name, nested.with_inherited_env(names)))
            .collect();
        self.inherit_env = names.to_vec();
        self
    }

    /// Sets `name` to `value` for every program it starts (command tools,
    /// MCP servers, nested blueprints' included), over what the blueprint
    /// sets. Not stored with its runs.
    pub fn with_program_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let (name, value) = (name.into(), value.into());
        self.subgraphs = std::mem::take(&mut self.subgraphs)
            .into_iter()
            .map(|(entry, nested)| (entry, nested.with_program_env(name.clone(), value.clone())))
            .collect();
        self.program_env.insert(name, value);
        self
    }

    /// The agents of this blueprint itself (not those of nested ones).
    fn own_agents(&self) -> Vec<&AgentDoc> {
        match &self.doc {
            Doc::Agent(agent) => vec![agent],
            Doc::Graph(graph) => graph
                .agents
                .iter()
                .filter_map(|entry| match entry {
                    EntryDoc::Agent(agent) => Some(&**agent),
                    EntryDoc::Subgraph { .. } => None,
                })
                .collect(),
        }
    }

    /// The blueprint's (graph's) name.
    pub fn name(&self) -> &str {
        match &self.doc {
            Doc::Agent(agent) => &agent.name,
            Doc::Graph(graph) => &graph.name,
        }
    }

    /// What a run of this blueprint stores, to be continued anywhere:
    /// the blueprint, its folder, any model override, and whether every
    /// agent streams.
    pub fn attachment(&self) -> Value {
        json!({
            "blueprint_attachment": ATTACHMENT_VERSION,
            "blueprint": self.source,
            "base_dir": self.base_dir,
            "model": self.model_override,
            "stream": self.stream_all,
            "memory_shelf": self.memory_shelf,
            "pack": self.pack,
            "confined": self.reach != Reach::Any,
            "confined_to": match &self.reach {
                Reach::Within(root) => Some(root),
                _ => None,
            },
        })
    }

    /// The blueprint a run stored ([`Blueprint::attachment`]), validated
    /// again.
    pub fn from_attachment(attachment: &Value) -> Result<Self, BlueprintError> {
        if attachment["blueprint_attachment"].as_u64() != Some(ATTACHMENT_VERSION) {
            return Err(BlueprintError::NotABlueprintRun);
        }
        let base_dir = attachment["base_dir"].as_str().ok_or(BlueprintError::NotABlueprintRun)?;
        // A client's blueprint keeps its confinement on every leg.
        let reach = match (attachment["confined"].as_bool(), attachment["confined_to"].as_str()) {
            (Some(true), Some(root)) => Reach::Within(PathBuf::from(root)),
            (Some(true), None) => Reach::Nothing,
            _ => Reach::Any,
        };
        let source = attachment["blueprint"].clone();
        let blueprint = Self::nested_in(source, base_dir.into(), &reach, &mut Vec::new())?;
        let blueprint = match attachment["model"].as_str() {
            Some(spec) => blueprint.with_model(spec),
            None => blueprint,
        };
        // Attachments written before `stream` existed have none: false.
        let mut blueprint = match attachment["stream"].as_bool() {
            Some(true) => blueprint.with_streaming(),
            _ => blueprint,
        };
        // Attachments written before `memory_shelf` existed have none.
        if let Some(parts) = attachment["memory_shelf"].as_array() {
            let parts: Vec<String> =
                parts.iter().filter_map(|part| part.as_str().map(str::to_owned)).collect();
            if !parts.is_empty() {
                blueprint = blueprint.with_memory_shelf(parts);
            }
        }
        if !attachment["pack"].is_null() {
            let pack = serde_json::from_value(attachment["pack"].clone())
                .map_err(|_| BlueprintError::NotABlueprintRun)?;
            blueprint.pack = Some(pack);
        }
        Ok(blueprint)
    }

    /// Records that it runs from a pack ([`PackProvenance`]).
    pub fn with_pack(mut self, pack: PackProvenance) -> Self {
        self.pack = Some(pack);
        self
    }

    /// The pack it runs from, if any.
    pub fn pack(&self) -> Option<&PackProvenance> {
        self.pack.as_ref()
    }

    /// The folder its relative paths resolve in.
    pub fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    /// The settings a run of it starts with: its `max_steps`, the
    /// blueprint attached so any process can continue the run, and for a
    /// pack a `pack_run` event after `run_started`.
    pub fn run_config(&self) -> RunConfig {
        let max_steps = match &self.doc {
            Doc::Agent(agent) => agent.max_steps,
            Doc::Graph(graph) => graph.max_steps,
        };
        let mut config = RunConfig::new().attach(&self.attachment());
        if let Some(pack) = &self.pack {
            config = config.announce(Event::PackRun {
                bundle_hash: pack.bundle_hash.clone(),
                signature_verified: pack.signature_verified,
                key_id: pack.key_id.clone(),
                cache_hit: pack.cache_hit,
                dry_run_verify: false,
            });
        }
        match max_steps {
            Some(steps) => config.max_steps(steps),
            None => config,
        }
    }
}
