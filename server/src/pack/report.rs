//! What the `tollgate pack` commands do, and running a pack: verified and
//! extracted before anything else, checked again before every later leg.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tollgate_nodes::{Blueprint, PackProvenance};

use crate::error::ServiceError;

use super::{
    build, cache_dir, check_cached, generate, read_file, unpack, PackError, SigningKeyFile,
    TrustedKeys, Verified,
};

impl From<PackError> for ServiceError {
    fn from(error: PackError) -> Self {
        match &error {
            PackError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                ServiceError::missing(error.to_string())
            }
            PackError::Io { .. } => ServiceError::failed(error.to_string()),
            _ => ServiceError::invalid(error.to_string()),
        }
    }
}

/// `tollgate pack keygen`: writes a new Ed25519 key pair, `out` (private,
/// mode 0600) and `out.pub`, making `out`'s folder when missing; returns
/// the key's id.
pub fn keygen(out: &Path) -> Result<String, ServiceError> {
    Ok(generate(out)?)
}

/// `tollgate pack build`: packs the blueprint folder `dir` (its blueprint
/// `blueprint`, else `FOLDER_NAME.json`) into `out`, signed with the
/// private key file `sign` when given. The report: `out`, `bundle_hash`,
/// `signed`, `key_id`, `name`, `version`, `entries`, `bytes`.
pub fn build_pack(
    dir: &Path,
    out: &Path,
    sign: Option<&Path>,
    blueprint: Option<&str>,
) -> Result<Value, ServiceError> {
    let key = sign.map(SigningKeyFile::load).transpose()?;
    let pack = build(dir, blueprint, key.as_ref())?;
    let bytes = pack.to_bytes()?;
    write_atomically(out, &bytes)?;
    let key_id = pack.signature.as_ref().map(|doc| doc.key_id.clone());
    Ok(json!({
        "out": out.display().to_string(),
        "bundle_hash": pack.bundle_hash(),
        "signed": key_id.is_some(),
        "key_id": key_id,
        "name": pack.manifest.name,
        "version": pack.manifest.blueprint_version,
        "entries": pack.files.len(),
        "bytes": bytes.len(),
    }))
}

/// `tollgate pack inspect`: what a pack holds, read with every check but
/// the signature's trust. The report: `bundle_hash`, `signed`, `key_id`,
/// `name`, `version`, `blueprint`, `entries` (each `path`, `size`,
/// `sha256`, `executable`).
pub fn inspect_pack(path: &Path) -> Result<Value, ServiceError> {
    let pack = read_file(path)?;
    let key_id = pack.signature.as_ref().map(|doc| doc.key_id.clone());
    Ok(json!({
        "bundle_hash": pack.bundle_hash(),
        "signed": key_id.is_some(),
        "key_id": key_id,
        "name": pack.manifest.name,
        "version": pack.manifest.blueprint_version,
        "blueprint": pack.manifest.blueprint,
        "entries": pack.manifest.files,
    }))
}

/// `tollgate pack verify`: succeeds only when the pack's signature
/// verifies against one of the trusted keys in `trusted_keys` (folders of
/// `*.pub`). The report: `bundle_hash`, `signature_verified`, `key_id`,
/// `name`, `version`.
pub fn verify_pack(path: &Path, trusted_keys: &[PathBuf]) -> Result<Value, ServiceError> {
    let pack = read_file(path)?;
    let trusted = TrustedKeys::load(trusted_keys)?;
    let verified = pack.verify(&trusted, false)?;
    Ok(json!({
        "bundle_hash": verified.bundle_hash,
        "signature_verified": verified.signature_verified,
        "key_id": verified.key_id,
        "name": pack.manifest.name,
        "version": pack.manifest.blueprint_version,
    }))
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

/// Whether `path` names a pack (by its extension, `.tgpack`).
pub fn is_pack(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "tgpack")
}

/// What [`load_pack`] found: the pack's blueprint, ready to run, or (with
/// `dry_run`) the report of what was verified.
#[derive(Debug)]
pub enum Loaded {
    /// The verified, extracted pack's blueprint.
    Blueprint(Box<Blueprint>),
    /// `bundle_hash`, `signature_verified`, `key_id`, `cache_hit`,
    /// `dry_run_verify: true`, `name`, `version`.
    DryRun(Value),
}

/// What `tollgate run PACK` does before the database is touched: reads and
/// verifies the pack (refused unless signed by one of `trusted_keys`, or
/// `allow_unsigned`), then (unless `dry_run`) extracts it into the cache
/// and loads its blueprint from there. With `dry_run`, returns the report
/// instead.
pub fn load_pack(
    path: &Path,
    trusted_keys: &[PathBuf],
    allow_unsigned: bool,
    dry_run: bool,
) -> Result<Loaded, ServiceError> {
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
pub(crate) fn recheck(blueprint: Blueprint) -> Result<Blueprint, ServiceError> {
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
) -> Result<Blueprint, ServiceError> {
    let work = cache.join("work").join(bundle_hash);
    std::fs::create_dir_all(&work).map_err(|error| {
        ServiceError::failed(format!(
            "cannot create the pack's work folder {}: {error}",
            work.display()
        ))
        .with_source(error)
    })?;
    Ok(blueprint.with_program_env("TOLLGATE_PACK_WORK_DIR", work.display().to_string()))
}
