//! Checking a blueprint: its structure against a JSON Schema, then its
//! meaning (models, scripts, tools, edges, nested blueprints), every
//! problem with its JSON pointer.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

use super::{AgentDoc, Blueprint, BlueprintError, BlueprintProblem, EntryDoc, GraphDoc, Reach};
use crate::scripted::ScriptReply;
use crate::tool::ArgsValidator;

/// The structure of a blueprint, checked before anything else.
const SCHEMA: &str = r##"{
  "$defs": {
    "tool": {
      "type": "object",
      "additionalProperties": false,
      "required": ["name"],
      "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
        "description": {"type": "string"},
        "parameters": {"type": "object"},
        "fixture": true,
        "command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "mcp": {"type": "string", "minLength": 1},
        "approval": {"oneOf": [
          {"type": "boolean"},
          {"type": "object", "additionalProperties": false, "required": ["reviewers"],
           "properties": {"reviewers": {"type": "array", "minItems": 1,
             "items": {"type": "string", "pattern": "^[^\\s]{1,128}$"}}}}
        ]},
        "on_reject": {"enum": ["tell_model", "end_run"]},
        "on_error": {"enum": ["tell_model", "fail_run"]},
        "timeout_ms": {"type": "integer", "minimum": 1},
        "env": {"type": "object", "additionalProperties": {"type": "string"}}
      },
      "if": {"required": ["mcp"]},
      "then": {
        "properties": {"description": false, "parameters": false, "fixture": false, "command": false, "env": false}
      },
      "else": {"required": ["description", "parameters"]}
    },
    "mcp_server": {
      "type": "object",
      "additionalProperties": false,
      "required": ["name"],
      "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
        "command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "url": {"type": "string"},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "start_timeout_ms": {"type": "integer", "minimum": 1},
        "timeout_ms": {"type": "integer", "minimum": 1},
        "on_error": {"enum": ["tell_model", "fail_run"]}
      }
    },
    "agent": {
      "type": "object",
      "additionalProperties": false,
      "required": ["name", "model"],
      "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
        "version": {"type": "integer", "minimum": 1},
        "system": {"type": ["string", "null"]},
        "model": {"type": "string", "minLength": 1},
        "max_steps": {"type": "integer", "minimum": 1},
        "max_turns": {"type": "integer", "minimum": 1},
        "stream": {"type": "boolean"},
        "tools": {"type": "array", "items": {"$ref": "#/$defs/tool"}},
        "mcp_servers": {"type": "array", "items": {"$ref": "#/$defs/mcp_server"}},
        "output_schema": {"type": ["object", "null"]},
        "memory": {"$ref": "#/$defs/memory"}
      }
    },
    "memory": {
      "type": "object",
      "additionalProperties": false,
      "required": ["namespace"],
      "properties": {
        "namespace": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
        "tools": {"type": "array", "items": {"enum": ["remember", "recall"]}, "uniqueItems": true},
        "prompt": {"type": "integer", "minimum": 0, "maximum": 50}
      }
    },
    "entry": {
      "if": {"type": "object", "required": ["blueprint"]},
      "then": {"$ref": "#/$defs/subgraph"},
      "else": {"$ref": "#/$defs/agent"}
    },
    "subgraph": {
      "type": "object",
      "additionalProperties": false,
      "required": ["name", "blueprint"],
      "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
        "blueprint": {"type": ["string", "object"], "minLength": 1}
      }
    },
    "graph": {
      "type": "object",
      "additionalProperties": false,
      "required": ["name", "agents", "edges"],
      "properties": {
        "name": {"type": "string", "minLength": 1},
        "version": {"type": "integer", "minimum": 1},
        "max_steps": {"type": "integer", "minimum": 1},
        "agents": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/entry"}},
        "edges": {
          "type": "array",
          "items": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2}
        }
      }
    }
  },
  "if": {"type": "object", "required": ["agents"]},
  "then": {"$ref": "#/$defs/graph"},
  "else": {"$ref": "#/$defs/agent"}
}"##;

/// Reads and validates the blueprint of a subgraph entry (`value`: a path
/// relative to `base_dir`, or the blueprint inline); problems go to
/// `problems` under `at`.
pub(super) fn nested_blueprint(
    value: &Value,
    base_dir: &Path,
    reach: &Reach,
    at: &str,
    within: &mut Vec<PathBuf>,
    problems: &mut Vec<BlueprintProblem>,
) -> Option<Blueprint> {
    let (source, dir, file) = match value {
        Value::String(path) => {
            let (file, text) = reach.read(base_dir, path);
            let file = std::fs::canonicalize(&file).unwrap_or(file);
            if within.contains(&file) {
                let message = format!("blueprint {} includes itself", file.display());
                problem(problems, at.to_owned(), message);
                return None;
            }
            let source =
                text.map_err(|error| error.describe("blueprint", path, &file)).and_then(|text| {
                    serde_json::from_str::<Value>(&text).map_err(|error| {
                        format!("blueprint {} is not valid JSON: {error}", file.display())
                    })
                });
            let source = match source {
                Ok(source) => source,
                Err(message) => {
                    problem(problems, at.to_owned(), message);
                    return None;
                }
            };
            let dir = file.parent().map_or_else(|| base_dir.to_owned(), Path::to_owned);
            (source, dir, Some(file))
        }
        inline => (inline.clone(), base_dir.to_owned(), None),
    };
    if let Some(file) = &file {
        within.push(file.clone());
    }
    let nested = Blueprint::nested_in(source, dir, reach, within);
    if file.is_some() {
        within.pop();
    }
    match nested {
        Ok(nested) => Some(nested),
        Err(BlueprintError::Invalid { problems: found }) => {
            for found in found {
                // Inline: the pointer continues into it; a file: the
                // problem names the file and its own pointer.
                let (at, message) = match &file {
                    None => (format!("{at}{}", found.at), found.message),
                    Some(file) => {
                        let inside = if found.at.is_empty() { "/" } else { found.at.as_str() };
                        (
                            at.to_owned(),
                            format!("in {} at {inside}: {}", file.display(), found.message),
                        )
                    }
                };
                problem(problems, at, message);
            }
            None
        }
        Err(other) => {
            problem(problems, at.to_owned(), other.to_string());
            None
        }
    }
}

pub(super) fn structure_problems(source: &Value) -> Vec<BlueprintProblem> {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    static SCHEMA_JSON: OnceLock<Value> = OnceLock::new();
    let schema = SCHEMA_JSON
        .get_or_init(|| serde_json::from_str(SCHEMA).expect("the blueprint schema is JSON"));
    let validator = VALIDATOR
        .get_or_init(|| jsonschema::validator_for(schema).expect("the blueprint schema is valid"));
    let mut problems: Vec<BlueprintProblem> = validator
        .iter_errors(source)
        .map(|error| {
            let mut message = error.to_string();
            if let jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } =
                error.kind()
            {
                // The keys allowed there: `properties` beside the
                // `additionalProperties` that refused it.
                let at = error.schema_path().to_string();
                let known = at
                    .strip_suffix("/additionalProperties")
                    .and_then(|parent| schema.pointer(&format!("{parent}/properties")))
                    .and_then(Value::as_object);
                let hints: Vec<String> = unexpected
                    .iter()
                    .filter_map(|key| {
                        let nearest = nearest(key, known?.keys().map(String::as_str))?;
                        Some(format!("`{key}`: did you mean `{nearest}`?"))
                    })
                    .collect();
                if !hints.is_empty() {
                    message = format!("{message} ({})", hints.join("; "));
                }
            }
            BlueprintProblem { at: error.instance_path().to_string(), message }
        })
        .collect();
    problems.dedup();
    problems
}

/// The known key nearest to `key` (by edit distance, at most a third of
/// its length and at least 2), if any is that near.
fn nearest<'a>(key: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let most = (key.chars().count() / 3).max(2);
    known
        .map(|candidate| (distance(key, candidate), candidate))
        .filter(|(distance, _)| *distance <= most)
        .min()
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance, case-insensitive.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

fn problem(problems: &mut Vec<BlueprintProblem>, at: String, message: impl Into<String>) {
    problems.push(BlueprintProblem { at, message: message.into() });
}

pub(super) fn check_agent(
    agent: &AgentDoc,
    at: &str,
    base_dir: &Path,
    reach: &Reach,
    problems: &mut Vec<BlueprintProblem>,
) {
    if RESERVED_NAMES.contains(&agent.name.as_str()) {
        problem(
            problems,
            format!("{at}/name"),
            format!(
                "`{}` is reserved for the graph's own ends; name the agent otherwise",
                agent.name
            ),
        );
    }
    check_model(agent, at, base_dir, reach, problems);
    let servers = check_mcp_servers(agent, at, problems);
    check_tools(agent, at, &servers, problems);
    if let Some(schema) = &agent.output_schema {
        if let Err(error) = ArgsValidator::new("output_schema", schema) {
            problem(problems, format!("{at}/output_schema"), error.to_string());
        }
    }
    check_memory(agent, at, problems);
}

/// An agent's model spec; a scripted model's script, read and parsed.
fn check_model(
    agent: &AgentDoc,
    at: &str,
    base_dir: &Path,
    reach: &Reach,
    problems: &mut Vec<BlueprintProblem>,
) {
    match agent.model.split_once(':') {
        Some(("scripted", path)) => {
            let (file, text) = reach.read(base_dir, path);
            match text {
                Err(error) => {
                    problem(problems, format!("{at}/model"), error.describe("script", path, &file))
                }
                Ok(text) => match serde_json::from_str::<Value>(&text) {
                    Err(error) => problem(
                        problems,
                        format!("{at}/model"),
                        format!("script {} is not JSON: {error}", file.display()),
                    ),
                    Ok(value) => {
                        if let Err(found) = ScriptReply::parse_script(&value) {
                            for message in found {
                                problem(
                                    problems,
                                    format!("{at}/model"),
                                    format!("script {}: {message}", file.display()),
                                );
                            }
                        }
                    }
                },
            }
        }
        Some((_, rest)) if !rest.is_empty() => {}
        _ => problem(
            problems,
            format!("{at}/model"),
            format!(
                "`{}` is not a model spec (`scripted:PATH`, `openai:MODEL`, `anthropic:MODEL`)",
                agent.model
            ),
        ),
    }
}

/// An agent's MCP servers: each started or reached, once; their names.
fn check_mcp_servers<'a>(
    agent: &'a AgentDoc,
    at: &str,
    problems: &mut Vec<BlueprintProblem>,
) -> BTreeSet<&'a str> {
    let mut servers = BTreeSet::new();
    for (index, server) in agent.mcp_servers.iter().enumerate() {
        let at = format!("{at}/mcp_servers/{index}");
        if !servers.insert(server.name.as_str()) {
            let message = format!("MCP server `{}` is declared twice", server.name);
            problem(problems, format!("{at}/name"), message);
        }
        match (&server.url, server.command.is_empty()) {
            (Some(_), false) => problem(
                problems,
                at.clone(),
                "an MCP server is started (`command`) or reached (`url`), not both",
            ),
            (None, true) => problem(
                problems,
                at.clone(),
                "an MCP server needs its `command` (program first) or its `url`",
            ),
            (Some(url), true) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    let message = format!("`{url}` is not an http:// or https:// URL");
                    problem(problems, format!("{at}/url"), message);
                }
                if !server.env.is_empty() {
                    let message = "`env` is for a server this process starts (`command`)";
                    problem(problems, format!("{at}/env"), message);
                }
            }
            (None, false) => {}
        }
    }
    servers
}

/// An agent's tools: each declared once, an MCP tool of a declared
/// server, a local one with a fixture or a command, parameters a schema.
fn check_tools(
    agent: &AgentDoc,
    at: &str,
    servers: &BTreeSet<&str>,
    problems: &mut Vec<BlueprintProblem>,
) {
    let mut names = BTreeSet::new();
    for (index, tool) in agent.tools.iter().enumerate() {
        let at = format!("{at}/tools/{index}");
        if !names.insert(tool.name.as_str()) {
            problem(
                problems,
                format!("{at}/name"),
                format!("tool `{}` is declared twice", tool.name),
            );
        }
        if let Some(server) = &tool.mcp {
            if !servers.contains(server.as_str()) {
                let message = format!("no MCP server `{server}` in this agent's `mcp_servers`");
                problem(problems, format!("{at}/mcp"), message);
            }
            if tool.on_reject.is_some() && !tool.approval.needed() {
                let message =
                    "`on_reject` says what a rejection does: it needs `\"approval\": true`";
                problem(problems, format!("{at}/on_reject"), message);
            }
            continue;
        }
        match (&tool.fixture, &tool.command) {
            (Some(_), Some(_)) => {
                problem(problems, at.clone(), "a tool has a `fixture` or a `command`, not both")
            }
            (None, None) => problem(
                problems,
                at.clone(),
                "a tool needs a `fixture` (fixed result) or a `command`",
            ),
            _ => {}
        }
        if let Err(error) = ArgsValidator::new(&tool.name, &tool.parameters) {
            problem(problems, format!("{at}/parameters"), error.to_string());
        }
        if tool.on_reject.is_some() && !tool.approval.needed() {
            problem(
                problems,
                format!("{at}/on_reject"),
                "`on_reject` says what a rejection does: it needs `\"approval\": true`",
            );
        }
    }
}

/// An agent's memory: namespace parts (or `{template}`s), tool names
/// apart from the agent's own.
fn check_memory(agent: &AgentDoc, at: &str, problems: &mut Vec<BlueprintProblem>) {
    if let Some(memory) = &agent.memory {
        for (index, part) in memory.namespace.iter().enumerate() {
            let template = part.strip_prefix('{').and_then(|rest| rest.strip_suffix('}'));
            let checked = match template {
                Some(name) if !name.is_empty() && !name.contains(['{', '}']) => Ok(()),
                _ => tollgate_checkpoint::Namespace::new([part.as_str()]).map(drop),
            };
            if let Err(error) = checked {
                problem(problems, format!("{at}/memory/namespace/{index}"), error.to_string());
            }
        }
        for tool in memory.tools.iter().flatten() {
            if agent.tools.iter().any(|own| &own.name == tool) {
                let message =
                    format!("memory tool `{tool}` has the name of one of the agent's tools");
                problem(problems, format!("{at}/memory/tools"), message);
            }
        }
    }
}

pub(super) fn check_graph(
    graph: &GraphDoc,
    base_dir: &Path,
    reach: &Reach,
    problems: &mut Vec<BlueprintProblem>,
) {
    let mut names = BTreeSet::new();
    for (index, entry) in graph.agents.iter().enumerate() {
        if !names.insert(entry.name()) {
            problem(
                problems,
                format!("/agents/{index}/name"),
                format!("agent `{}` is declared twice", entry.name()),
            );
        }
        match entry {
            EntryDoc::Agent(agent) => {
                check_agent(agent, &format!("/agents/{index}"), base_dir, reach, problems)
            }
            EntryDoc::Subgraph { name, .. } if RESERVED_NAMES.contains(&name.as_str()) => problem(
                problems,
                format!("/agents/{index}/name"),
                format!(
                    "`{name}` is reserved for the graph's own ends; name the subgraph otherwise"
                ),
            ),
            EntryDoc::Subgraph { .. } => {}
        }
    }
    for (index, (from, to)) in graph.edges.iter().enumerate() {
        if from != "START" && !names.contains(from.as_str()) {
            problem(problems, format!("/edges/{index}/0"), format!("unknown node `{from}`"));
        }
        if to != "END" && !names.contains(to.as_str()) {
            problem(problems, format!("/edges/{index}/1"), format!("unknown node `{to}`"));
        }
    }
    if !graph.edges.iter().any(|(from, _)| from == "START") {
        problem(problems, "/edges".into(), "no edge leaves START");
    }
    for entry in &graph.agents {
        if !graph.edges.iter().any(|(from, _)| from == entry.name()) {
            problem(
                problems,
                "/edges".into(),
                format!("agent `{}` has no outgoing edge (add one to END)", entry.name()),
            );
        }
    }
    check_reach(graph, problems);
}

/// Reachability, over the edges as written: every agent is reached from
/// START, and from every agent that has an edge out END can be reached.
fn check_reach(graph: &GraphDoc, problems: &mut Vec<BlueprintProblem>) {
    let reached = |start: &'static str, forward: bool| {
        let mut seen: BTreeSet<&str> = BTreeSet::from([start]);
        let mut todo = vec![start];
        while let Some(at) = todo.pop() {
            for (from, to) in &graph.edges {
                let (here, next) = if forward { (from, to) } else { (to, from) };
                if here == at && seen.insert(next.as_str()) {
                    todo.push(next.as_str());
                }
            }
        }
        seen
    };
    let from_start = reached("START", true);
    let to_end = reached("END", false);
    for (index, entry) in graph.agents.iter().enumerate() {
        let name = entry.name();
        if !from_start.contains(name) {
            problem(
                problems,
                format!("/agents/{index}"),
                format!("agent `{name}` cannot be reached from START"),
            );
        }
        let leaves = graph.edges.iter().any(|(from, _)| from == name);
        if leaves && !to_end.contains(name) {
            problem(
                problems,
                format!("/agents/{index}"),
                format!("agent `{name}` has no path to END (a cycle with no way out)"),
            );
        }
    }
}

/// Names the graph keeps for itself.
pub(super) const RESERVED_NAMES: [&str; 4] = ["START", "END", "__start__", "__end__"];
