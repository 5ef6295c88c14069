//! `tollgate run`: a blueprint (or a verified pack) or a registered graph,
//! run here or queued for workers.

use serde_json::{json, Value};
use tollgate_nodes::Blueprint;
use tollgate_server::{Runs, ServiceError, UserInput};

use crate::args::Command;
use crate::{json_arg, print_json, progress, report};

/// What `run` loads before the database is opened.
pub(crate) enum Load {
    /// The blueprint to run (none for a registered graph or another
    /// command).
    Blueprint(Option<Box<Blueprint>>),
    /// A pack was verified and nothing is to run (`--dry-run-verify`).
    Verified,
}

/// A blueprint (or a pack, verified and extracted into its cache), checked
/// before the database is opened (or created): an invalid one runs
/// nothing and leaves nothing behind.
pub(crate) fn load(command: &Command) -> Result<Load, ServiceError> {
    let Command::Run {
        blueprint, trusted_keys, allow_unsigned, dry_run_verify, queue, json, ..
    } = command
    else {
        return Ok(Load::Blueprint(None));
    };
    let Some(path) = blueprint.as_deref().filter(|path| tollgate_server::is_pack(path)) else {
        if *dry_run_verify {
            return Err(ServiceError::invalid("--dry-run-verify is for packs (.tgpack)"));
        }
        let loaded = blueprint.as_deref().map(Blueprint::load).transpose()?;
        return Ok(Load::Blueprint(loaded.map(Box::new)));
    };
    if *queue {
        return Err(ServiceError::invalid(
            "a pack cannot be queued: workers elsewhere may not hold the verified pack; run it here",
        ));
    }
    match tollgate_server::load_pack(path, trusted_keys, *allow_unsigned, *dry_run_verify)? {
        tollgate_server::Loaded::Blueprint(blueprint) => Ok(Load::Blueprint(Some(blueprint))),
        tollgate_server::Loaded::DryRun(report) => {
            if *json {
                print_json(&report);
            } else {
                let signed =
                    match (report["signature_verified"].as_bool(), report["key_id"].as_str()) {
                        (Some(true), Some(key)) => {
                            format!("signed by trusted key {}", tollgate_server::printable(key))
                        }
                        (_, Some(key)) => format!(
                            "signed by untrusted key {} (allowed)",
                            tollgate_server::printable(key)
                        ),
                        _ => "unsigned (allowed)".to_owned(),
                    };
                let bundle = report["bundle_hash"].as_str().unwrap_or("?");
                say!("verified {}: bundle {bundle}, {signed}; nothing run", path.display());
            }
            Ok(Load::Verified)
        }
    }
}

/// The blueprint as the command line sets it: the environment it passes,
/// the model, streaming.
pub(crate) fn configured(
    blueprint: Box<Blueprint>,
    pass_env: &[String],
    model: Option<String>,
    stream: bool,
) -> Blueprint {
    let mut blueprint = (*blueprint).with_inherited_env(pass_env);
    if let Some(spec) = model {
        blueprint = blueprint.with_model(spec);
    }
    if stream {
        blueprint = blueprint.with_streaming();
    }
    blueprint
}

/// `run --graph NAME`: a registered graph from `--input` (JSON).
pub(crate) async fn run_graph(
    runs: &Runs,
    name: &str,
    input: &str,
    (queue, thread): (bool, Option<String>),
    json: bool,
) -> Result<u8, ServiceError> {
    let thread = thread_arg(thread)?;
    let input = match input.trim() {
        "" => json!({}),
        text => json_arg("--input", text)?,
    };
    let events = if queue { None } else { progress(json) };
    let summary = runs.start_graph(name, input, thread.as_deref(), queue, events).await?;
    Ok(report(&summary, json))
}

/// `run BLUEPRINT`: the blueprint from the user's message.
pub(crate) async fn run_blueprint(
    runs: &Runs,
    blueprint: &Blueprint,
    input: &str,
    (queue, thread): (bool, Option<String>),
    json: bool,
) -> Result<u8, ServiceError> {
    let input = user_message(input)?;
    let thread = thread_arg(thread)?;
    let summary = if queue {
        runs.enqueue(blueprint, input, thread.as_deref()).await?
    } else {
        runs.start(blueprint, input, thread.as_deref(), progress(json)).await?
    };
    Ok(report(&summary, json))
}

/// `--thread`, refused when blank.
fn thread_arg(thread: Option<String>) -> Result<Option<String>, ServiceError> {
    if thread.as_deref().is_some_and(|thread| thread.trim().is_empty()) {
        return Err(ServiceError::invalid("--thread must not be empty"));
    }
    Ok(thread)
}

/// The user's message from `--input`: text, a JSON string, or a JSON object
/// (its `message` field, else the object itself as JSON text; its
/// `context`, an object, the run's values).
pub(crate) fn user_message(input: &str) -> Result<UserInput, ServiceError> {
    Ok(match serde_json::from_str::<Value>(input) {
        Ok(value @ (Value::String(_) | Value::Object(_))) => UserInput::from_json(&value),
        _ => UserInput::from(input),
    })
}
