//! `tollgate pack …`: the library's pack operations, printed.

use serde_json::Value;
use tollgate_server::{
    build_pack, code, inspect_pack, keygen, printable, verify_pack, ServiceError,
};

use crate::args::PackCommand;

fn print(value: &Value, json: bool, text: impl FnOnce() -> String) {
    if json {
        say!("{value}");
    } else {
        say!("{}", text());
    }
}

/// Runs a `tollgate pack` command (no database involved).
pub(crate) fn pack_command(command: PackCommand) -> Result<u8, ServiceError> {
    match command {
        PackCommand::Keygen { out } => {
            let id = keygen(&out)?;
            say!(
                "wrote {} (private, mode 0600) and {}.pub; key id {id}",
                out.display(),
                out.display()
            );
            Ok(code::OK)
        }
        PackCommand::Build { dir, out, sign, blueprint, json } => {
            let report = build_pack(&dir, &out, sign.as_deref(), blueprint.as_deref())?;
            print(&report, json, || {
                format!(
                    "wrote {} ({} files, {} bytes), bundle {}, {}",
                    out.display(),
                    report["entries"],
                    report["bytes"],
                    report["bundle_hash"].as_str().unwrap_or("?"),
                    match report["key_id"].as_str() {
                        Some(id) => format!("signed by {}", printable(id)),
                        None => "unsigned".into(),
                    }
                )
            });
            Ok(code::OK)
        }
        PackCommand::Inspect { pack: path, json } => {
            let report = inspect_pack(&path)?;
            print(&report, json, || {
                let text = |key: &str| printable(report[key].as_str().unwrap_or("?"));
                let mut shown = format!(
                    "pack {}\nbundle   {}\nsigned   {}\nblueprint {} (name {}, version {})\nentries:",
                    path.display(),
                    text("bundle_hash"),
                    report["key_id"].as_str().map_or("no".to_owned(), |id| format!(
                        "yes, by key {} (whether it is trusted: `pack verify`)",
                        printable(id)
                    )),
                    text("blueprint"),
                    text("name"),
                    report["version"],
                );
                for file in report["entries"].as_array().into_iter().flatten() {
                    let hash = file["sha256"].as_str().unwrap_or_default();
                    shown.push_str(&format!(
                        "\n  {} {:>8} B  {}  {}",
                        if file["executable"] == true { "x" } else { "-" },
                        file["size"],
                        printable(hash.get(..16).unwrap_or(hash)),
                        printable(file["path"].as_str().unwrap_or_default())
                    ));
                }
                shown
            });
            Ok(code::OK)
        }
        PackCommand::Verify { pack: path, trusted_keys, json } => {
            let report = verify_pack(&path, &trusted_keys)?;
            print(&report, json, || {
                format!(
                    "verified: {} is signed by trusted key {}; bundle {}",
                    path.display(),
                    printable(report["key_id"].as_str().unwrap_or("?")),
                    report["bundle_hash"].as_str().unwrap_or("?")
                )
            });
            Ok(code::OK)
        }
    }
}
