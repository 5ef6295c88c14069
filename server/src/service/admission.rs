//! Admission: what a caller may have the server run and reach. Blueprints
//! named from the `--blueprints` folder or sent inline (whose files,
//! programs and MCP hosts are checked), the environment blueprints
//! inherit, and the hosts webhooks may go to. The same rules whichever API
//! asks.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use tollgate_nodes::Blueprint;

use crate::error::ServiceError;

use super::{GraphListing, InvalidBlueprint, Runs};

/// What callers may have this server run and reach (`tollgate serve`'s
/// `--blueprints`, `--allow-inline-commands`, `--allow-mcp-host`,
/// `--allow-webhook-host` and `--pass-env`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Admission {
    /// The folder of the server's own blueprints, if it has one.
    pub(crate) blueprints: Option<PathBuf>,
    /// Whether inline blueprints may start programs.
    pub(crate) inline_commands: bool,
    /// The hosts inline blueprints' MCP servers may be reached on.
    pub(crate) mcp_hosts: Vec<String>,
    /// The hosts webhooks may be sent to.
    pub(crate) webhook_hosts: Vec<String>,
    /// The environment variables blueprints inherit.
    pub(crate) pass_env: Vec<String>,
}

/// How long reading a request's blueprint (its files included) may take.
pub(crate) const BLUEPRINT_READ_TIMEOUT: Duration = Duration::from_secs(10);

impl Admission {
    /// The blueprint a request names, read off the runtime's workers within
    /// [`BLUEPRINT_READ_TIMEOUT`] (see [`blueprint_now`]), with the
    /// environment it inherits.
    pub(crate) async fn blueprint(
        self: &std::sync::Arc<Self>,
        given: Value,
    ) -> Result<Blueprint, ServiceError> {
        let rules = std::sync::Arc::clone(self);
        let read = tokio::task::spawn_blocking(move || blueprint_now(&rules, &given));
        match tokio::time::timeout(BLUEPRINT_READ_TIMEOUT, read).await {
            Ok(Ok(blueprint)) => Ok(blueprint?.with_inherited_env(&self.pass_env)),
            Ok(Err(_)) => Err(ServiceError::failed("reading the blueprint failed")),
            Err(_) => Err(ServiceError::TimedOut {
                what: "the blueprint's files were not read".into(),
                after: BLUEPRINT_READ_TIMEOUT,
            }),
        }
    }

    /// The registered graphs, then the blueprints of the `--blueprints`
    /// folder, as `GET /graphs` lists them; and the folder's files that
    /// fail as blueprints, each with its problems. The folder is read
    /// once, off the runtime's workers, within [`BLUEPRINT_READ_TIMEOUT`].
    pub(crate) async fn listing(
        &self,
        runs: &Runs,
    ) -> Result<(Vec<GraphListing>, Vec<InvalidBlueprint>), ServiceError> {
        let mut listed = runs.graphs().listing();
        if let Some(folder) = self.blueprints.clone() {
            let reader = runs.clone();
            let read = tokio::task::spawn_blocking(move || reader.blueprint_folder(&folder));
            let read = tokio::time::timeout(BLUEPRINT_READ_TIMEOUT, read).await;
            let folder = read.ok().and_then(Result::ok).ok_or_else(|| ServiceError::TimedOut {
                what: "the blueprint folder was not read".into(),
                after: BLUEPRINT_READ_TIMEOUT,
            })?;
            listed.extend(folder.listed);
            return Ok((listed, folder.invalid));
        }
        Ok((listed, Vec::new()))
    }

    /// Whether a webhook may go to `url`.
    pub(crate) fn webhook_allowed(&self, url: &str) -> bool {
        host_allowed(url, &self.webhook_hosts)
    }
}

/// The blueprint a request names: the name of one in the `--blueprints`
/// folder (`NAME.json` or `NAME/NAME.json`), or inline JSON, which may
/// name files only inside that folder (none without one), start programs
/// (command tools, MCP servers from a command) only with
/// `--allow-inline-commands`, and reach MCP servers over HTTP only on the
/// hosts `--allow-mcp-host` lists.
fn blueprint_now(rules: &Admission, given: &Value) -> Result<Blueprint, ServiceError> {
    match given {
        Value::String(name) => {
            let Some(dir) = &rules.blueprints else {
                return Err(ServiceError::invalid(
                    "this server has no folder of blueprints to run by name; send the blueprint's JSON instead",
                ));
            };
            let plain = !name.is_empty()
                && name.len() <= 64
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !plain {
                return Err(ServiceError::invalid(format!(
                    "`{name}` is not a blueprint name (letters, digits, `-`, `_`)"
                )));
            }
            let candidates =
                [dir.join(format!("{name}.json")), dir.join(name).join(format!("{name}.json"))];
            let Some(path) = candidates.iter().find(|path| path.is_file()) else {
                return Err(ServiceError::missing(format!(
                    "no blueprint `{name}` in the server's blueprint folder"
                )));
            };
            Ok(Blueprint::load(path)?)
        }
        Value::Object(_) => {
            let blueprint = Blueprint::from_client(given.clone(), rules.blueprints.as_deref())
                .map_err(ServiceError::from)?;
            let programs = blueprint.programs();
            if !programs.is_empty() && !rules.inline_commands {
                return Err(ServiceError::invalid(format!(
                    "an inline blueprint may not run programs on this server (command tools and MCP servers started from a command: {}); name one of the server's own blueprints instead (its operator can allow inline programs)",
                    programs.join(", ")
                )));
            }
            for (server, url) in blueprint.mcp_urls() {
                if !host_allowed(&url, &rules.mcp_hosts) {
                    return Err(ServiceError::invalid(format!(
                        "an inline blueprint may reach MCP servers over HTTP only on hosts the server's operator allows; `{server}` names another"
                    )));
                }
            }
            Ok(blueprint)
        }
        _ => Err(ServiceError::invalid(
            "`blueprint` is a blueprint's JSON object or the name of one the server has",
        )),
    }
}

/// Whether `url`'s host (and port, when the entry gives one) is one of
/// `allowed` (`HOST` or `HOST:PORT`).
/// Whether `url`'s host (and port, when the entry names one) is one of
/// `allowed` (`HOST` or `HOST:PORT`): MCP servers of inline blueprints,
/// webhooks.
pub(crate) fn host_allowed(url: &str, allowed: &[String]) -> bool {
    let Ok(url) = url::Url::parse(url) else { return false };
    let Some(host) = url.host_str() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    let port = url.port_or_known_default();
    allowed.iter().any(|entry| {
        let entry = entry.to_ascii_lowercase();
        let (entry_host, entry_port) = match entry.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(':') && port.parse::<u16>().is_ok() => {
                (host.trim_start_matches('[').trim_end_matches(']').to_owned(), port.parse().ok())
            }
            _ => (entry.trim_start_matches('[').trim_end_matches(']').to_owned(), None),
        };
        entry_host == host && entry_port.is_none_or(|entry_port| Some(entry_port) == port)
    })
}

#[cfg(test)]
mod tests {
    use super::host_allowed;

    #[test]
    fn mcp_hosts_match_by_host_and_optional_port() {
        let allowed = ["tools.internal".to_owned(), "127.0.0.1:9000".to_owned()];
        assert!(host_allowed("https://tools.internal/mcp", &allowed));
        assert!(host_allowed("http://TOOLS.internal:8080/mcp", &allowed));
        assert!(host_allowed("http://127.0.0.1:9000/mcp", &allowed));
        assert!(!host_allowed("http://127.0.0.1:8080/healthz", &allowed));
        assert!(!host_allowed("http://tools.internal.evil.example/mcp", &allowed));
        assert!(!host_allowed("http://user@evil.example/#@tools.internal", &allowed));
        assert!(!host_allowed("not a url", &allowed));
        assert!(!host_allowed("http://localhost/mcp", &[]));
    }
}
