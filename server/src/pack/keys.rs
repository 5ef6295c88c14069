//! Ed25519 keys for packs: generation, the key files, trusted keys.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};

use super::{sha256, PackError, SignatureDoc};
use crate::hex::{decode as unhex, encode as hex};

const PRIVATE: &str = "tollgate-ed25519-private-v1";
const PUBLIC: &str = "tollgate-ed25519-public-v1";

/// A key's id: the first 16 hex digits of the SHA-256 of its public key.
pub(crate) fn key_id(public: &VerifyingKey) -> String {
    hex(&sha256(public.as_bytes()))[..16].to_owned()
}

/// Writes a new key pair: `out` (private, mode 0600, created new: an
/// existing file is never overwritten) and `out.pub`. Returns the key id.
pub(crate) fn generate(out: &Path) -> Result<String, PackError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|error| PackError::Key(format!("no randomness from the system: {error}")))?;
    let key = SigningKey::from_bytes(&seed);
    seed.fill(0);
    let public = key.verifying_key();
    let id = key_id(&public);
    let public_path = public_path(out);
    for path in [out, public_path.as_path()] {
        if path.exists() {
            return Err(PackError::Key(format!(
                "{} exists; keys are never overwritten",
                path.display()
            )));
        }
    }
    // `--out keys/release`: the folder is made when missing.
    if let Some(parent) = out.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| {
            PackError::Key(format!(
                "cannot create the folder {} for the key: {source}",
                parent.display()
            ))
        })?;
    }
    let write = |path: &Path, text: String, mode: u32| -> Result<(), PackError> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .map_err(|source| PackError::Io { path: path.display().to_string(), source })?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|source| PackError::Io { path: path.display().to_string(), source })
    };
    write(out, format!("{PRIVATE} {}\n", hex(key.as_bytes())), 0o600)?;
    write(&public_path, format!("{PUBLIC} {} {id}\n", hex(public.as_bytes())), 0o644)?;
    Ok(id)
}

fn public_path(private: &Path) -> PathBuf {
    let mut name = private.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// A private key read from its file.
pub(crate) struct SigningKeyFile {
    key: SigningKey,
    id: String,
}

impl SigningKeyFile {
    /// Reads `path`, refusing a file others may read (as ssh does).
    pub(crate) fn load(path: &Path) -> Result<Self, PackError> {
        use std::os::unix::fs::PermissionsExt;
        let io = |source| PackError::Io { path: path.display().to_string(), source };
        let mode = std::fs::metadata(path).map_err(io)?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(PackError::Key(format!(
                "{} is readable by others (mode {:o}); `chmod 600` it",
                path.display(),
                mode & 0o777
            )));
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        let seed: [u8; 32] = text
            .trim()
            .strip_prefix(PRIVATE)
            .map(str::trim)
            .and_then(unhex)
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(|| {
                PackError::Key(format!(
                    "{} is not a tollgate private key (`tollgate pack keygen` writes one)",
                    path.display()
                ))
            })?;
        let key = SigningKey::from_bytes(&seed);
        let id = key_id(&key.verifying_key());
        Ok(Self { key, id })
    }

    /// The signature entry for `message`.
    pub(crate) fn sign(&self, message: &[u8]) -> SignatureDoc {
        SignatureDoc {
            version: 1,
            key_id: self.id.clone(),
            public_key: hex(self.key.verifying_key().as_bytes()),
            signature: hex(&self.key.sign(message).to_bytes()),
        }
    }
}

/// Public keys trusted to sign packs: every `*.pub` file of the folders
/// given, by key id.
#[derive(Debug, Default)]
pub(crate) struct TrustedKeys {
    keys: BTreeMap<String, VerifyingKey>,
    dirs: Vec<PathBuf>,
}

impl TrustedKeys {
    /// Reads the `*.pub` files of `dirs`; a file that is not a public key
    /// is an error (a trust store should hold nothing else).
    pub(crate) fn load(dirs: &[PathBuf]) -> Result<Self, PackError> {
        let mut keys = BTreeMap::new();
        for dir in dirs {
            let io = |source| PackError::Io { path: dir.display().to_string(), source };
            let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(io)?
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "pub"))
                .collect();
            paths.sort();
            for path in paths {
                let text = std::fs::read_to_string(&path)
                    .map_err(|source| PackError::Io { path: path.display().to_string(), source })?;
                let key = text
                    .trim()
                    .strip_prefix(PUBLIC)
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(unhex)
                    .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
                    .and_then(|bytes| VerifyingKey::from_bytes(&bytes).ok())
                    .ok_or_else(|| {
                        PackError::Key(format!("{} is not a tollgate public key", path.display()))
                    })?;
                keys.insert(key_id(&key), key);
            }
        }
        Ok(Self { keys, dirs: dirs.to_vec() })
    }

    pub(crate) fn get(&self, id: &str) -> Option<&VerifyingKey> {
        self.keys.get(id)
    }

    /// Where the keys came from, for messages.
    pub(crate) fn describe(&self) -> String {
        if self.dirs.is_empty() {
            " (no --trusted-keys DIR or TOLLGATE_TRUSTED_KEYS given)".to_owned()
        } else {
            let dirs: Vec<String> = self.dirs.iter().map(|dir| dir.display().to_string()).collect();
            format!(" in {} ({} key(s))", dirs.join(", "), self.keys.len())
        }
    }
}
