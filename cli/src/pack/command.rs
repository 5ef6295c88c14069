//! `tollgate pack …` and running a pack with `tollgate run`.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tollgate_nodes::{Blueprint, PackProvenance};

use crate::args::PackCommand;
use crate::error::{code, CliError};

use super::{
    build, cache_dir, check_cached, generate, read_file, unpack, PackError, SigningKeyFile,
    TrustedKeys, Verified,
};
use crate::output::printable;

impl From<PackError> for CliError {
    fn from(error: PackError) -> Self {
        match &error {
            PackError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                CliError::NotFound { message: error.to_string() }
            }
            PackError::Io { .. } => CliError::Failed { message: error.to_string() },
            _ => CliError::Invalid { message: error.to_string() },
        }
    }
}

fn print(value: &Value, json: bool, text: impl FnOnce() -> String) {
    if json {
        say!("{value}");
    } else {
        say!("{}", text());
    }
}

/// Runs a `tollgate pack` command (no database involved).
pub(crate) fn pack_command(command: PackCommand) -> Result<u8, CliError> {
    match command {
        PackCommand::Keygen { out } => {
            let id = generate(&out)?;
            say!(
                "wrote {} (private, mode 0600) and {}.pub; key id {id}",
                out.display(),
                out.display()
            );
            Ok(code::OK)
        }
        PackCommand::Build { dir, out, sign, blueprint, json } => {
            let key = sign.as_deref().map(SigningKeyFile::load).transpose()?;
            let pack = build(&dir, blueprint.as_deref(), key.as_ref())?;
            let bytes = pack.to_bytes()?;
            write_atomically(&out, &bytes)?;
            let key_id = pack.signature.as_ref().map(|doc| doc.key_id.clone());
            let report = json!({
                "out": out.display().to_string(),
                "bundle_hash": pack.bundle_hash(),
                "signed": key_id.is_some(),
                "key_id": key_id,
                "name": pack.manifest.name,
                "version": pack.manifest.blueprint_version,
                "entries": pack.files.len(),
                "bytes": bytes.len(),
            });
            print(&report, json, || {
                format!(
                    "wrote {} ({} files, {} bytes), bundle {}, {}",
                    out.display(),
                    pack.files.len(),
                    bytes.len(),
                    pack.bundle_hash(),
                    match &key_id {
                        Some(id) => format!("signed by {id}"),
                        None => "unsigned".into(),
                    }
                )
            });
            Ok(code::OK)
        }
        PackCommand::Inspect { pack: path, json } => {
            let pack = read_file(&path)?;
            let key_id = pack.signature.as_ref().map(|doc| doc.key_id.clone());
            let report = json!({
                "bundle_hash": pack.bundle_hash(),
                "signed": key_id.is_some(),
                "key_id": key_id,
                "name": pack.manifest.name,
                "version": pack.manifest.blueprint_version,
                "blueprint": pack.manifest.blueprint,
                "entries": pack.manifest.files,
            });
            print(&report, json, || {
                let mut text = format!(
                    "pack {}\nbundle   {}\nsigned   {}\nblueprint {} (name {}, version {})\nentries:",
                    path.display(),
                    pack.bundle_hash(),
                    key_id.as_deref().map_or("no".to_owned(), |id| format!("yes, by key {} (whether it is trusted: `pack verify`)", printable(id))),
                    printable(&pack.manifest.blueprint),
                    printable(&pack.manifest.name),
                    pack.manifest.blueprint_version,
                );
                for file in &pack.manifest.files {
                    text.push_str(&format!(
                        "\n  {} {:>8} B  {}  {}",
                        if file.executable { "x" } else { "-" },
                        file.size,
                        printable(file.sha256.get(..16).unwrap_or(&file.sha256)),
                        printable(&file.path)
                    ));
                }
                text
            });
            Ok(code::OK)
        }
        PackCommand::Verify { pack: path, trusted_keys, json } => {
            let pack = read_file(&path)?;
            let trusted = TrustedKeys::load(&trusted_keys)?;
            let verified = pack.verify(&trusted, false)?;
            let report = json!({
                "bundle_hash": verified.bundle_hash,
                "signature_verified": verified.signature_verified,
                "key_id": verified.key_id,
                "name": pack.manifest.name,
                "version": pack.manifest.blueprint_version,
            });
            print(&report, json, || {
                format!(
                    "verified: {} is signed by trusted key {}; bundle {}",
                    path.display(),
                    verified.key_id.as_deref().unwrap_or("?"),
                    verified.bundle_hash
                )
            });
            Ok(code::OK)
        }
    }
}

/// Writes `bytes` to `path` through a temporary file beside it.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), PackError> {
    let io = |source| PackError::Io { path: path.display().to_string(), source };
    let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let staging = path.with_file_name(format!(".{name}.{}", ulid::Ulid::new()));
    std::fs::write(&staging, bytes).map_err(io)?;
    std::fs::rename(&staging, path).map_err(|error| {
        let _ = std::fs::remove_file(&staging);
        io(error)
    })
}

/// Whether `path` names a pack (by its extension).
pub(crate) fn is_pack(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "tgpack")
}

/// What `tollgate run PACK` does before the database is touched: reads and
/// verifies the pack, then (unless `dry_run`) extracts it into the cache
/// and loads its blueprint from there. With `dry_run`, returns the report
/// instead.
pub(crate) enum Loaded {
    Blueprint(Box<Blueprint>),
    DryRun(Value),
}

pub(crate) fn load_pack(
    path: &Path,
    trusted_keys: &[PathBuf],
    allow_unsigned: bool,
    dry_run: bool,
) -> Result<Loaded, CliError> {
    let pack = read_file(path)?;
    let trusted = TrustedKeys::load(trusted_keys)?;
    let Verified { bundle_hash, signature_verified, key_id } =
        pack.verify(&trusted, allow_unsigned)?;
    let cache = cache_dir();
    if dry_run {
        let cache_hit = check_cached(&cache.join(&bundle_hash), &bundle_hash).is_ok();
        return Ok(Loaded::DryRun(json!({
            "bundle_hash": bundle_hash,
            "signature_verified": signature_verified,
            "key_id": key_id,
            "cache_hit": cache_hit,
            "dry_run_verify": true,
            "name": pack.manifest.name,
            "version": pack.manifest.blueprint_version,
        })));
    }
    let unpacked = unpack(&pack, &cache)?;
    let blueprint = match Blueprint::load(unpacked.dir.join(&pack.manifest.blueprint)) {
        Ok(blueprint) => blueprint,
        Err(error) => {
            // A pack whose blueprint is invalid leaves nothing behind.
            if !unpacked.cache_hit {
                let _ = std::fs::remove_dir_all(&unpacked.dir);
            }
            return Err(error.into());
        }
    };
    let provenance =
        PackProvenance { bundle_hash, signature_verified, key_id, cache_hit: unpacked.cache_hit };
    let blueprint = with_work_dir(blueprint, &cache, &provenance.bundle_hash)?;
    Ok(Loaded::Blueprint(Box::new(blueprint.with_pack(provenance))))
}

/// Before a leg of a pack run (continue, resume, a worker): its extracted
/// pack must still be intact, else the leg is refused. The leg's
/// `pack_run` then says `cache_hit: true`.
pub(crate) fn recheck(blueprint: Blueprint) -> Result<Blueprint, CliError> {
    let Some(pack) = blueprint.pack().cloned() else { return Ok(blueprint) };
    let entry = blueprint
        .base_dir()
        .ancestors()
        .find(|dir| dir.file_name().is_some_and(|name| name == pack.bundle_hash.as_str()))
        .map(Path::to_path_buf)
        .unwrap_or_else(|| cache_dir().join(&pack.bundle_hash));
    check_cached(&entry, &pack.bundle_hash)?;
    let cache = entry.parent().map_or_else(cache_dir, Path::to_path_buf);
    let blueprint = with_work_dir(blueprint, &cache, &pack.bundle_hash)?;
    Ok(blueprint.with_pack(PackProvenance { cache_hit: true, ..pack }))
}

/// Where the programs of a pack should write what they keep:
/// `CACHE/work/BUNDLE_HASH`, apart from the verified files, handed to them
/// as `TOLLGATE_PACK_WORK_DIR` (created if missing).
fn with_work_dir(
    blueprint: Blueprint,
    cache: &Path,
    bundle_hash: &str,
) -> Result<Blueprint, CliError> {
    let work = cache.join("work").join(bundle_hash);
    std::fs::create_dir_all(&work).map_err(|error| CliError::Failed {
        message: format!("cannot create the pack's work folder {}: {error}", work.display()),
    })?;
    Ok(blueprint.with_program_env("TOLLGATE_PACK_WORK_DIR", work.display().to_string()))
}
