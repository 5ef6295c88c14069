//! The content-addressed cache packs are extracted into:
//! `CACHE/BUNDLE_HASH/` holds the manifest and the files, checked against
//! the manifest each time before use.

use std::collections::BTreeMap;
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

/// The files under `dir` (relative paths) with their executable bit;
/// `None` when something other than a file or folder is there.
fn listing(root: &Path, dir: &Path, out: &mut BTreeMap<String, PathBuf>) -> Option<()> {
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        let kind = entry.file_type().ok()?;
        let path = entry.path();
        if kind.is_dir() {
            listing(root, &path, out)?;
        } else if kind.is_file() {
            let relative = path.strip_prefix(root).ok()?.to_str()?.to_owned();
            out.insert(relative, path);
        } else {
            return None;
        }
    }
    Some(())
}

/// Whether `entry` holds exactly the manifest and its files, unchanged.
fn intact(entry: &Path, manifest_bytes: &[u8], manifest: &Manifest) -> bool {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::read(entry.join(MANIFEST)).ok().as_deref() != Some(manifest_bytes) {
        return false;
    }
    let mut found = BTreeMap::new();
    if listing(entry, entry, &mut found).is_none() {
        return false;
    }
    found.remove(MANIFEST);
    if found.len() != manifest.files.len() {
        return false;
    }
    manifest.files.iter().all(|file| {
        let Some(path) = found.get(&file.path) else { return false };
        let Ok(metadata) = std::fs::metadata(path) else { return false };
        let executable = metadata.permissions().mode() & 0o111 != 0;
        executable == file.executable
            && metadata.len() == file.size
            && std::fs::read(path).is_ok_and(|data| hex(&sha256(&data)) == file.sha256)
    })
}

/// Extracts `pack` into `cache` (nothing else is written), or finds it
/// there intact: a cache hit. A changed entry is removed and extracted
/// again.
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
    if entry.exists() {
        std::fs::remove_dir_all(&entry).map_err(io(&entry))?;
    }
    // Extracted beside, then renamed: a reader never sees half an entry.
    let staging = cache.join(format!(".{}.{}", pack.bundle_hash(), ulid::Ulid::new()));
    let written = (|| -> Result<(), PackError> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(&staging).map_err(io(&staging))?;
        std::fs::write(staging.join(MANIFEST), &pack.manifest_bytes).map_err(io(&staging))?;
        for (file, data) in &pack.files {
            // Paths were checked when the pack was read: relative, no `..`.
            let path = staging.join(&file.path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            std::fs::write(&path, data).map_err(io(&path))?;
            let mode = if file.executable { 0o755 } else { 0o644 };
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .map_err(io(&path))?;
        }
        Ok(())
    })();
    if let Err(error) = written {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(error);
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
