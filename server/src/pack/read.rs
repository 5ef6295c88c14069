//! Reading a pack: its file within the limits, then every entry checked
//! (regular files, safe unique paths, the manifest first and matching,
//! the signature last, the bytes exactly those `pack build` writes).

use std::collections::HashSet;
use std::io::Read;
use std::path::Path;

use super::{
    canonical, safe_path, sha256, whole, FileEntry, Limits, Manifest, Pack, PackError,
    SignatureDoc, FORMAT, FORMAT_VERSION, LIMITS, MANIFEST, SIGNATURE,
};
use crate::hex::encode as hex;

/// Reads a pack's file (at most the limits allow, plus the archive's own
/// overhead).
pub(crate) fn read_file(path: &Path) -> Result<Pack, PackError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path)
        .map_err(|source| PackError::Io { path: shown.clone(), source })?;
    let size =
        file.metadata().map_err(|source| PackError::Io { path: shown.clone(), source })?.len();
    let most = LIMITS.total + (LIMITS.entries as u64 + 3) * 1024 + 64 * 1024;
    if size > most {
        return Err(PackError::TooLarge { what: shown, size, limit: most });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(most + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| PackError::Io { path: shown.clone(), source })?;
    read(&bytes, &shown)
}

/// Parses and checks a pack: regular files only, safe unique paths, within
/// the limits, the manifest first and matching every file, the signature
/// (if any) last, and the bytes exactly those `pack build` would write.
pub(crate) fn read(bytes: &[u8], shown: &str) -> Result<Pack, PackError> {
    read_within(bytes, shown, LIMITS)
}

/// [`read`] with other limits.
pub(super) fn read_within(bytes: &[u8], shown: &str, limits: Limits) -> Result<Pack, PackError> {
    let entries = tar_entries(bytes, shown, limits)?;
    let Opened { manifest, manifest_bytes, rest, signature } = manifest_of(entries)?;
    let files = matched_files(&manifest, rest)?;
    let bundle_hash = sha256(&manifest_bytes);
    if let Some(doc) = &signature {
        if !whole(doc, &bundle_hash) {
            return Err(PackError::BadSignature {
                reason: format!(
                    "it does not verify with its own key, or the key id `{}` is not that key's: the pack was changed",
                    doc.key_id
                ),
            });
        }
    }
    let pack = Pack { manifest, manifest_bytes, files, signature, bundle_hash };
    // Canonical: the manifest and signature as `build` encodes them, and
    // every byte of the archive as `build` writes it.
    if canonical(&pack.manifest)? != pack.manifest_bytes || pack.to_bytes()? != bytes {
        return Err(PackError::NotCanonical);
    }
    Ok(pack)
}

/// A file of the archive: its path, bytes, and whether it is executable.
type Entry = (String, Vec<u8>, bool);

/// The archive's entries, each a regular file at a safe path, once,
/// within the limits.
fn tar_entries(bytes: &[u8], shown: &str, limits: Limits) -> Result<Vec<Entry>, PackError> {
    let not_a_pack =
        |reason: &str| PackError::NotAPack { path: shown.to_owned(), reason: reason.to_owned() };
    if bytes.len() < 1024 {
        return Err(if bytes.is_empty() {
            not_a_pack("it is empty")
        } else {
            PackError::Truncated { path: shown.to_owned() }
        });
    }
    if bytes.get(257..263) != Some(b"ustar\0".as_slice()) {
        return Err(not_a_pack("no tar header"));
    }
    if bytes.len() % 512 != 0 {
        return Err(PackError::Truncated { path: shown.to_owned() });
    }
    let mut archive = tar::Archive::new(bytes);
    let entries = archive.entries().map_err(|error| not_a_pack(&error.to_string()))?;
    let mut seen = HashSet::new();
    let mut read_entries: Vec<Entry> = Vec::new();
    let mut total = 0u64;
    for entry in entries {
        let mut entry = entry.map_err(|error| read_error(error, shown))?;
        let header = entry.header();
        let path = String::from_utf8(entry.path_bytes().into_owned()).map_err(|_| {
            PackError::UnsafePath {
                path: String::from_utf8_lossy(&entry.path_bytes()).into_owned(),
            }
        })?;
        check_entry(header.entry_type(), &path, &mut seen, limits)?;
        let size = header.size().map_err(|error| not_a_pack(&error.to_string()))?;
        if size > limits.entry {
            return Err(PackError::TooLarge { what: path, size, limit: limits.entry });
        }
        total += size;
        if total > limits.total {
            return Err(PackError::TooLarge {
                what: "the pack's files".into(),
                size: total,
                limit: limits.total,
            });
        }
        let executable =
            header.mode().map_err(|error| not_a_pack(&error.to_string()))? & 0o111 != 0;
        let mut data = Vec::with_capacity(size as usize);
        entry.read_to_end(&mut data).map_err(|error| read_error(error, shown))?;
        if data.len() as u64 != size {
            return Err(PackError::Truncated { path: shown.to_owned() });
        }
        read_entries.push((path, data, executable));
    }
    Ok(read_entries)
}

/// An entry is a regular file at a safe path, seen once, within the
/// count of entries.
fn check_entry(
    kind: tar::EntryType,
    path: &str,
    seen: &mut HashSet<String>,
    limits: Limits,
) -> Result<(), PackError> {
    if kind != tar::EntryType::Regular {
        let what = match kind {
            tar::EntryType::Symlink => "symbolic link".to_owned(),
            tar::EntryType::Link => "hard link".to_owned(),
            tar::EntryType::Directory => "directory".to_owned(),
            other => format!("entry of type {:?}", other.as_byte() as char),
        };
        return Err(PackError::NotAFile { path: path.to_owned(), kind: what });
    }
    if !safe_path(path) {
        return Err(PackError::UnsafePath { path: path.to_owned() });
    }
    if !seen.insert(path.to_owned()) {
        return Err(PackError::Duplicate { path: path.to_owned() });
    }
    if seen.len() > limits.entries + 2 {
        return Err(PackError::TooManyEntries { limit: limits.entries });
    }
    Ok(())
}

/// A pack's entries taken apart: the manifest (the first entry) with its
/// bytes, the files after it, and the signature (the last entry, if it is
/// one).
struct Opened {
    manifest: Manifest,
    manifest_bytes: Vec<u8>,
    rest: Vec<Entry>,
    signature: Option<SignatureDoc>,
}

/// The entries taken apart ([`Opened`]), the manifest and signature read.
fn manifest_of(entries: Vec<Entry>) -> Result<Opened, PackError> {
    let mut entries = entries.into_iter();
    let Some((first, manifest_bytes, _)) = entries.next() else {
        return Err(PackError::NoManifest);
    };
    if first != MANIFEST {
        return Err(PackError::NoManifest);
    }
    let manifest: Manifest = serde_json::from_slice(&manifest_bytes)
        .map_err(|error| PackError::BadManifest { reason: error.to_string() })?;
    if manifest.format != FORMAT || manifest.version != FORMAT_VERSION {
        return Err(PackError::BadManifest {
            reason: format!(
                "format `{}` version {}, this tollgate reads `{FORMAT}` version {FORMAT_VERSION}",
                manifest.format, manifest.version
            ),
        });
    }
    let mut rest: Vec<Entry> = entries.collect();
    let signature = match rest.last() {
        Some((path, _, _)) if path == SIGNATURE => {
            let (_, bytes, _) = rest.pop().ok_or(PackError::NotCanonical)?;
            let doc: SignatureDoc = serde_json::from_slice(&bytes)
                .map_err(|error| PackError::BadSignature { reason: error.to_string() })?;
            if doc.version != 1 {
                return Err(PackError::BadSignature {
                    reason: format!("version {}, this tollgate reads 1", doc.version),
                });
            }
            Some(doc)
        }
        _ => None,
    };
    Ok(Opened { manifest, manifest_bytes, rest, signature })
}

/// The files, each the one the manifest lists at its place, with its
/// size, SHA-256 and mode.
fn matched_files(
    manifest: &Manifest,
    rest: Vec<Entry>,
) -> Result<Vec<(FileEntry, Vec<u8>)>, PackError> {
    if rest.len() != manifest.files.len() {
        return Err(PackError::Mismatch {
            path: MANIFEST.into(),
            reason: format!(
                "it lists {} files, the pack holds {}",
                manifest.files.len(),
                rest.len()
            ),
        });
    }
    if !manifest.files.iter().any(|file| file.path == manifest.blueprint) {
        return Err(PackError::BadManifest {
            reason: format!("the blueprint `{}` is not among its files", manifest.blueprint),
        });
    }
    let mut files = Vec::with_capacity(rest.len());
    for (listed, (path, data, executable)) in manifest.files.iter().zip(rest) {
        let mismatch = |reason: String| PackError::Mismatch { path: path.clone(), reason };
        if listed.path != path {
            return Err(mismatch(format!("the manifest lists `{}` here", listed.path)));
        }
        if listed.size != data.len() as u64 || listed.sha256 != hex(&sha256(&data)) {
            return Err(mismatch("its SHA-256 differs".into()));
        }
        if listed.executable != executable {
            return Err(mismatch("its mode differs".into()));
        }
        files.push((listed.clone(), data));
    }
    Ok(files)
}

fn read_error(error: std::io::Error, shown: &str) -> PackError {
    if error.kind() == std::io::ErrorKind::UnexpectedEof {
        PackError::Truncated { path: shown.to_owned() }
    } else {
        PackError::NotAPack { path: shown.to_owned(), reason: error.to_string() }
    }
}
