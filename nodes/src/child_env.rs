//! The environment of programs tollgate starts for blueprints (command
//! tools, MCP servers): cleared, then only the variables named here, those
//! the process's operator lets through, and those the blueprint sets. The
//! process's own secrets (`OPENAI_API_KEY`, `TOLLGATE_TOKEN`, a database
//! URL) never reach them unless the operator names them.

use std::collections::BTreeMap;

use tokio::process::Command;

/// The variables of the process's environment every program it starts
/// sees (where set): what programs need to find other programs and to
/// read and write text.
pub const BASE_CHILD_ENV: &[&str] =
    &["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SYSTEMROOT"];

/// Clears `command`'s environment, then gives it [`BASE_CHILD_ENV`] and
/// `inherit` from this process's environment, and `set` on top.
pub(crate) fn clean_env(command: &mut Command, inherit: &[String], set: &BTreeMap<String, String>) {
    command.env_clear();
    let names = BASE_CHILD_ENV.iter().copied().chain(inherit.iter().map(String::as_str));
    for name in names {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command.envs(set);
}
