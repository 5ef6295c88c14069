//! Signed blueprint packs (docs/packs.md): one deterministic tar archive
//! holding a blueprint folder, a manifest of its files with their SHA-256,
//! and optionally an Ed25519 signature over the manifest's hash (the
//! bundle hash).

mod cache;
mod keys;
mod read;
mod report;

use std::path::{Component, Path};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::hex::{decode as unhex, encode as hex};

pub(crate) use cache::{cache_dir, check_cached, unpack};
pub(crate) use keys::{generate, key_id, SigningKeyFile, TrustedKeys};
pub(crate) use read::read_file;
pub(crate) use report::recheck;
pub use report::{build_pack, inspect_pack, is_pack, keygen, load_pack, verify_pack, Loaded};

/// The manifest's name in the archive (its first entry).
pub(crate) const MANIFEST: &str = "tgpack.json";
/// The signature's name in the archive (its last entry, when signed).
pub(crate) const SIGNATURE: &str = "tgpack.sig";
/// What the signature signs: this, then the bundle hash's 32 bytes.
const SIGNED_PREFIX: &[u8] = b"tollgate-pack-v1\0";
pub(super) const FORMAT: &str = "tgpack";
pub(super) const FORMAT_VERSION: u32 = 1;

/// Sizes a pack may have (archive bombs stop here, before anything is
/// read into memory or written).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Bytes of one file.
    pub(crate) entry: u64,
    /// Bytes of all files together.
    pub(crate) total: u64,
    /// Files.
    pub(crate) entries: usize,
}

pub(crate) const LIMITS: Limits =
    Limits { entry: 16 * 1024 * 1024, total: 64 * 1024 * 1024, entries: 2_000 };

/// Bytes of a path inside a pack (the ustar name field).
const MAX_PATH: usize = 100;

use crate::printable::printable;

/// Why a pack was refused. Nothing was run or written when one is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum PackError {
    #[error("cannot read {}: {source}", printable(path))]
    Io { path: String, source: std::io::Error },
    #[error("{} is not a tollgate pack ({})", printable(path), printable(reason))]
    NotAPack { path: String, reason: String },
    #[error("{} is cut short: it ends inside an entry", printable(path))]
    Truncated { path: String },
    #[error("{} is {size} bytes, over the limit of {limit}", printable(what))]
    TooLarge { what: String, size: u64, limit: u64 },
    #[error("more than {limit} files")]
    TooManyEntries { limit: usize },
    #[error("entry `{}` is not a plain relative path inside the pack (no `..`, no absolute paths, at most {MAX_PATH} bytes)", printable(path))]
    UnsafePath { path: String },
    #[error("entry `{}` is a {kind}; a pack holds regular files only", printable(path))]
    NotAFile { path: String, kind: String },
    #[error("entry `{}` appears twice", printable(path))]
    Duplicate { path: String },
    #[error("the manifest `{MANIFEST}` is missing, or not the first entry")]
    NoManifest,
    #[error("the manifest is unreadable: {}", printable(reason))]
    BadManifest { reason: String },
    #[error(
        "entry `{}` does not match the manifest ({}): the pack was changed",
        printable(path),
        printable(reason)
    )]
    Mismatch { path: String, reason: String },
    #[error("the pack's bytes are not what `tollgate pack build` writes (a header, padding or order was changed)")]
    NotCanonical,
    #[error("the signature entry is unreadable: {}", printable(reason))]
    BadSignature { reason: String },
    #[error(
        "the pack is signed by key {}, which is not among the trusted keys{where_}",
        printable(key_id)
    )]
    UnknownKey { key_id: String, where_: String },
    #[error("the signature does not verify against trusted key {}: the pack was changed or signed by another key", printable(key_id))]
    SignatureInvalid { key_id: String },
    #[error("the pack is not signed (build it with --sign KEY, or pass --allow-unsigned)")]
    Unsigned,
    #[error("{0}")]
    Build(String),
    #[error("{0}")]
    Key(String),
}

/// One file of the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileEntry {
    pub(crate) path: String,
    pub(crate) size: u64,
    pub(crate) sha256: String,
    pub(crate) executable: bool,
}

/// `tgpack.json`: what the pack holds. Its SHA-256 is the bundle hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Manifest {
    pub(crate) format: String,
    pub(crate) version: u32,
    /// The blueprint's file among `files`.
    pub(crate) blueprint: String,
    /// The blueprint's `name` and `version`.
    pub(crate) name: String,
    pub(crate) blueprint_version: u64,
    /// Sorted by path.
    pub(crate) files: Vec<FileEntry>,
}

/// `tgpack.sig`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignatureDoc {
    pub(crate) version: u32,
    pub(crate) key_id: String,
    /// Hex.
    pub(crate) public_key: String,
    /// Hex, over `tollgate-pack-v1\0` and the bundle hash's bytes.
    pub(crate) signature: String,
}

/// A pack read and checked for shape and integrity (not yet for trust).
#[derive(Debug)]
pub(crate) struct Pack {
    pub(crate) manifest: Manifest,
    pub(crate) manifest_bytes: Vec<u8>,
    pub(crate) files: Vec<(FileEntry, Vec<u8>)>,
    /// Whole whenever the pack came from [`read`] or [`build`]: it
    /// verifies with its own key, under that key's id.
    pub(crate) signature: Option<SignatureDoc>,
    pub(crate) bundle_hash: [u8; 32],
}

/// What verification established.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Verified {
    pub(crate) bundle_hash: String,
    pub(crate) signature_verified: bool,
    pub(crate) key_id: Option<String>,
}

pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// A path of a pack entry: relative, `/`-separated, no `.`/`..`/empty
/// components, at most [`MAX_PATH`] bytes, no control characters.
pub(super) fn safe_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= MAX_PATH
        && !path.starts_with('/')
        && !path.contains('\\')
        && !path.chars().any(char::is_control)
        && path.split('/').all(|part| !part.is_empty() && part != "." && part != "..")
}

/// The archive's bytes for these entries, in this order: ustar headers
/// with mode 0644 (0755 when executable), owner 0, time 0.
fn write_tar(entries: &[(&str, &[u8], bool)]) -> Result<Vec<u8>, PackError> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, data, executable) in entries {
        let mut header = tar::Header::new_ustar();
        header
            .set_path(path)
            .map_err(|error| PackError::Build(format!("cannot name entry `{path}`: {error}")))?;
        header.set_size(data.len() as u64);
        header.set_mode(if *executable { 0o755 } else { 0o644 });
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        builder
            .append(&header, *data)
            .map_err(|error| PackError::Build(format!("cannot write entry `{path}`: {error}")))?;
    }
    builder
        .into_inner()
        .map_err(|error| PackError::Build(format!("cannot finish the archive: {error}")))
}

impl Pack {
    /// The archive's bytes (what `pack build` writes).
    pub(crate) fn to_bytes(&self) -> Result<Vec<u8>, PackError> {
        let signature = match &self.signature {
            Some(doc) => Some(canonical(doc)?),
            None => None,
        };
        let mut entries: Vec<(&str, &[u8], bool)> = vec![(MANIFEST, &self.manifest_bytes, false)];
        for (entry, data) in &self.files {
            entries.push((&entry.path, data, entry.executable));
        }
        if let Some(signature) = &signature {
            entries.push((SIGNATURE, signature, false));
        }
        write_tar(&entries)
    }

    /// The bundle hash in hex.
    pub(crate) fn bundle_hash(&self) -> String {
        hex(&self.bundle_hash)
    }

    /// Checks who signed it: with a signature, the key it names must be
    /// trusted and the signature must verify with that trusted key (a
    /// signature that does not verify is refused even with
    /// `allow_unsigned`); without one, `allow_unsigned` must be given. An
    /// unknown key counts as unsigned.
    pub(crate) fn verify(
        &self,
        trusted: &TrustedKeys,
        allow_unsigned: bool,
    ) -> Result<Verified, PackError> {
        let unverified = |key_id: Option<String>| Verified {
            bundle_hash: self.bundle_hash(),
            signature_verified: false,
            key_id,
        };
        let Some(doc) = &self.signature else {
            return if allow_unsigned { Ok(unverified(None)) } else { Err(PackError::Unsigned) };
        };
        let Some(key) = trusted.get(&doc.key_id) else {
            if allow_unsigned {
                return Ok(unverified(Some(doc.key_id.clone())));
            }
            return Err(PackError::UnknownKey {
                key_id: doc.key_id.clone(),
                where_: trusted.describe(),
            });
        };
        // The entry verifies with its own key (checked when it was read or
        // built): what is left is that this key is the trusted one.
        if unhex(&doc.public_key).as_deref() != Some(key.as_bytes().as_slice()) {
            return Err(PackError::SignatureInvalid { key_id: doc.key_id.clone() });
        }
        Ok(Verified {
            bundle_hash: self.bundle_hash(),
            signature_verified: true,
            key_id: Some(doc.key_id.clone()),
        })
    }
}

/// Whether a signature entry is whole, whoever signed it: its key id is
/// its key's, and the signature verifies with that key. (Trust is checked
/// separately, against the trusted keys.)
pub(super) fn whole(doc: &SignatureDoc, bundle_hash: &[u8; 32]) -> bool {
    let embedded = unhex(&doc.public_key)
        .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
        .and_then(|bytes| ed25519_dalek::VerifyingKey::from_bytes(&bytes).ok());
    let signature = unhex(&doc.signature)
        .and_then(|bytes| <[u8; 64]>::try_from(bytes).ok())
        .map(|bytes| ed25519_dalek::Signature::from_bytes(&bytes));
    match (embedded, signature) {
        (Some(key), Some(signature)) => {
            key_id(&key) == doc.key_id
                && key.verify_strict(&signed_message(bundle_hash), &signature).is_ok()
        }
        _ => false,
    }
}

fn signed_message(bundle_hash: &[u8; 32]) -> Vec<u8> {
    let mut message = SIGNED_PREFIX.to_vec();
    message.extend_from_slice(bundle_hash);
    message
}

fn canonical<T: Serialize>(value: &T) -> Result<Vec<u8>, PackError> {
    serde_json::to_vec(value).map_err(|error| PackError::Build(format!("cannot encode: {error}")))
}

/// Packs the blueprint folder `dir`: every regular file in it but hidden
/// ones (names starting with `.`), the blueprint being `blueprint` (a path
/// inside `dir`) or `DIR/FOLDER_NAME.json`. The blueprint must be valid.
/// Signed with `key` when given.
pub(crate) fn build(
    dir: &Path,
    blueprint: Option<&str>,
    key: Option<&SigningKeyFile>,
) -> Result<Pack, PackError> {
    let mut found = Vec::new();
    collect(dir, dir, &mut found)?;
    found.sort();
    if found.len() > LIMITS.entries {
        return Err(PackError::TooManyEntries { limit: LIMITS.entries });
    }
    let blueprint = match blueprint {
        Some(path) => path.trim_start_matches("./").to_owned(),
        None => format!("{}.json", folder_name(dir)?),
    };
    if !found.contains(&blueprint) {
        return Err(PackError::Build(format!(
            "no blueprint `{blueprint}` in {} (name it with --blueprint FILE)",
            dir.display()
        )));
    }
    let loaded = tollgate_nodes::Blueprint::load(dir.join(&blueprint)).map_err(|error| {
        PackError::Build(format!("the blueprint {blueprint} is invalid: {error}"))
    })?;
    let files = read_files(dir, found)?;
    // Valid, so a JSON object; its `version` defaults to 1.
    let blueprint_version = files
        .iter()
        .find(|(entry, _)| entry.path == blueprint)
        .and_then(|(_, data)| serde_json::from_slice::<serde_json::Value>(data).ok())
        .and_then(|source| source["version"].as_u64())
        .unwrap_or(1);
    let manifest = Manifest {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        blueprint,
        name: loaded.name().to_owned(),
        blueprint_version,
        files: files.iter().map(|(entry, _)| entry.clone()).collect(),
    };
    let manifest_bytes = canonical(&manifest)?;
    let bundle_hash = sha256(&manifest_bytes);
    let signature = key.map(|key| key.sign(&signed_message(&bundle_hash)));
    Ok(Pack { manifest, manifest_bytes, files, signature, bundle_hash })
}

/// An IO error on `path`.
fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PackError {
    let path = path.display().to_string();
    move |source| PackError::Io { path, source }
}

/// The name of the folder `dir` is.
fn folder_name(dir: &Path) -> Result<String, PackError> {
    Ok(dir
        .canonicalize()
        .map_err(io(dir))?
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default())
}

/// The files `found` under `dir`, read, with their entries; a reserved
/// name, a file or a folder over the limits is refused.
fn read_files(dir: &Path, found: Vec<String>) -> Result<Vec<(FileEntry, Vec<u8>)>, PackError> {
    let mut files = Vec::new();
    let mut total = 0u64;
    for path in found {
        if path == MANIFEST || path == SIGNATURE {
            return Err(PackError::Build(format!("`{path}` is a name packs reserve")));
        }
        let full = dir.join(&path);
        let metadata = std::fs::metadata(&full).map_err(io(&full))?;
        if metadata.len() > LIMITS.entry {
            return Err(PackError::TooLarge {
                what: path,
                size: metadata.len(),
                limit: LIMITS.entry,
            });
        }
        total += metadata.len();
        if total > LIMITS.total {
            return Err(PackError::TooLarge {
                what: "the folder".into(),
                size: total,
                limit: LIMITS.total,
            });
        }
        let data = std::fs::read(&full).map_err(io(&full))?;
        let executable = {
            use std::os::unix::fs::PermissionsExt;
            metadata.permissions().mode() & 0o111 != 0
        };
        let entry =
            FileEntry { path, size: data.len() as u64, sha256: hex(&sha256(&data)), executable };
        files.push((entry, data));
    }
    Ok(files)
}

/// Relative paths of the regular files under `dir`, hidden ones left out;
/// a symlink or anything else that is not a file or folder is refused.
fn collect(root: &Path, dir: &Path, found: &mut Vec<String>) -> Result<(), PackError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|source| PackError::Io { path: dir.display().to_string(), source })?;
    for entry in entries {
        let entry =
            entry.map_err(|source| PackError::Io { path: dir.display().to_string(), source })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|source| PackError::Io { path: path.display().to_string(), source })?;
        let relative = path
            .strip_prefix(root)
            .map_err(|_| PackError::Build(format!("{} is outside the folder", path.display())))?
            .components()
            .map(|part| match part {
                Component::Normal(part) => Ok(part.to_string_lossy().into_owned()),
                _ => Err(PackError::UnsafePath { path: path.display().to_string() }),
            })
            .collect::<Result<Vec<_>, _>>()?
            .join("/");
        if kind.is_dir() {
            collect(root, &path, found)?;
        } else if kind.is_file() {
            if !safe_path(&relative) {
                return Err(PackError::UnsafePath { path: relative });
            }
            found.push(relative);
        } else {
            let what = if kind.is_symlink() { "symbolic link" } else { "special file" };
            return Err(PackError::NotAFile { path: relative, kind: what.into() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
