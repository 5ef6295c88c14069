//! The content-addressed cache packs are extracted into:
//! `CACHE/BUNDLE_HASH/` holds the manifest and the files, checked against
//! the manifest each time before use.

use std::path::{Path, PathBuf};

use super::{sha256, Manifest, Pack, PackError, MANIFEST};
use crate::hex::encode as hex;

/// `$TOLLGATE_PACK_CACHE`, else `$XDG_CACHE_HOME/tollgate/packs`, else
/// `$HOME/.cache/tollgate/packs`, else the temporary folder's
/// `tollgate-packs`.
pub(crate) fn cache_dir() -> PathBuf {
    let set =
        |name: &str| std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from);
    if let Some(dir) = set("TOLLGATE_PACK_CACHE") {
        return dir;
    }
    if let Some(dir) = set("XDG_CACHE_HOME") {
        return dir.join("tollgate").join("packs");
    }
    if let Some(home) = set("HOME") {
        return home.join(".cache").join("tollgate").join("packs");
    }
    std::env::temp_dir().join("tollgate-packs")
}

/// Where a pack was extracted, and whether it already was.
#[derive(Debug)]
pub(crate) struct Unpacked {
    pub(crate) dir: PathBuf,
    pub(crate) cache_hit: bool,
}

/// Whether `entry` holds the manifest and each of its files, unchanged
/// (regular files, not links, with their size, hash and executable bit).
/// Other files there are what the pack's programs wrote while they ran:
/// they are not the pack's, and are left alone.
fn intact(entry: &Path, manifest_bytes: &[u8], manifest: &Manifest) -> bool {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::read(entry.join(MANIFEST)).ok().as_deref() != Some(manifest_bytes) {
        return false;
    }
    manifest.files.iter().all(|file| {
        let path = entry.join(&file.path);
        let Ok(metadata) = std::fs::symlink_metadata(&path) else { return false };
        let executable = metadata.permissions().mode() & 0o111 != 0;
        metadata.is_file()
            && executable == file.executable
            && metadata.len() == file.size
            && std::fs::read(&path).is_ok_and(|data| hex(&sha256(&data)) == file.sha256)
    })
}

/// Writes the pack's files (manifest last) into `dir`, each through a
/// temporary file renamed over it, so that files a run wrote there stay.
fn write_files(pack: &Pack, dir: &Path) -> Result<(), PackError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| PackError::Io { path, source }
    };
    let put = |path: &Path, data: &[u8], mode: u32| -> Result<(), PackError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        let name = path.file_name().and_then(|name| name.to_str()).unwrap_or("file");
        let temporary = path.with_file_name(format!(".{name}.{}", ulid::Ulid::new()));
        std::fs::write(&temporary, data).map_err(io(&temporary))?;
        std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(mode))
            .map_err(io(&temporary))?;
        // A link or a folder planted where a file goes is replaced.
        if std::fs::symlink_metadata(path).is_ok_and(|found| found.is_dir()) {
            std::fs::remove_dir_all(path).map_err(io(path))?;
        }
        std::fs::rename(&temporary, path).map_err(io(path))
    };
    for (file, data) in &pack.files {
        // Paths were checked when the pack was read: relative, no `..`.
        put(&dir.join(&file.path), data, if file.executable { 0o755 } else { 0o644 })?;
    }
    put(&dir.join(MANIFEST), &pack.manifest_bytes, 0o644)
}

/// Extracts `pack` into `cache` (nothing else is written), or finds it
/// there intact: a cache hit. An entry whose pack files changed has them
/// written again; files the pack's programs wrote beside them stay.
pub(crate) fn unpack(pack: &Pack, cache: &Path) -> Result<Unpacked, PackError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| PackError::Io { path, source }
    };
    let entry = cache.join(pack.bundle_hash());
    if intact(&entry, &pack.manifest_bytes, &pack.manifest) {
        return Ok(Unpacked { dir: entry, cache_hit: true });
    }
    std::fs::create_dir_all(cache).map_err(io(cache))?;
    if std::fs::symlink_metadata(&entry).is_ok_and(|found| found.is_dir()) {
        write_files(pack, &entry)?;
        return Ok(Unpacked { dir: entry, cache_hit: false });
    }
    // Extracted beside, then renamed: a reader never sees half an entry.
    let staging = cache.join(format!(".{}.{}", pack.bundle_hash(), ulid::Ulid::new()));
    let written = std::fs::create_dir_all(&staging)
        .map_err(io(&staging))
        .and_then(|()| write_files(pack, &staging));
    if let Err(error) = written {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(error);
    }
    if std::fs::symlink_metadata(&entry).is_ok() {
        // Something that is not a folder (a planted link or file).
        let _ = std::fs::remove_file(&entry);
    }
    if let Err(error) = std::fs::rename(&staging, &entry) {
        let _ = std::fs::remove_dir_all(&staging);
        // Another process extracted the same pack meanwhile.
        if intact(&entry, &pack.manifest_bytes, &pack.manifest) {
            return Ok(Unpacked { dir: entry, cache_hit: true });
        }
        return Err(PackError::Io { path: entry.display().to_string(), source: error });
    }
    Ok(Unpacked { dir: entry, cache_hit: false })
}

/// Checks the cache entry `entry` of `bundle_hash`: its manifest hashes
/// to `bundle_hash` and its files match the manifest.
pub(crate) fn check_cached(entry: &Path, bundle_hash: &str) -> Result<(), PackError> {
    let changed = || {
        PackError::Mismatch {
        path: entry.display().to_string(),
        reason: format!(
            "the extracted pack {bundle_hash} is missing or was changed on disk; run the .tgpack again to extract it"
        ),
    }
    };
    let manifest_bytes = std::fs::read(entry.join(MANIFEST)).map_err(|_| changed())?;
    if hex(&sha256(&manifest_bytes)) != bundle_hash {
        return Err(changed());
    }
    let manifest: Manifest = serde_json::from_slice(&manifest_bytes).map_err(|_| changed())?;
    if !intact(entry, &manifest_bytes, &manifest) {
        return Err(changed());
    }
    Ok(())
}
