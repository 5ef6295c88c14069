//! Reading the files a blueprint names (scripted replies, nested
//! blueprints): regular files only, opened without blocking (a FIFO or a
//! device is refused before anything is read), at most [`MAX_FILE_BYTES`]
//! read, and for a confined blueprint only files inside its folder.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest file a blueprint may name.
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Which files a blueprint may name (scripts, nested blueprints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Any the process can read (a blueprint of the operator's).
    Any,
    /// Only files that resolve, symlinks followed, inside this canonical
    /// folder (a client's inline blueprint).
    Within(PathBuf),
    /// None (a client's inline blueprint on a server without a folder).
    Nothing,
}

impl Reach {
    /// Reads the file `named` (relative to `base_dir`) if this reach
    /// allows it: the file as resolved, and its text.
    pub(super) fn read(
        &self,
        base_dir: &Path,
        named: &str,
    ) -> (PathBuf, Result<String, FileError>) {
        match self {
            Reach::Any => read_named(base_dir, named, None),
            Reach::Within(root) => read_named(base_dir, named, Some(root)),
            Reach::Nothing => (base_dir.join(named), Err(FileError::Outside)),
        }
    }
}

/// Why a file a blueprint names was not read.
#[derive(Debug)]
pub(super) enum FileError {
    /// Confined: the path does not resolve (symlinks followed) to an
    /// existing file inside the folder. One answer for missing and
    /// outside, so that nothing is learnt about the file.
    Outside,
    /// It is a FIFO, a device, a socket or a folder.
    NotRegular,
    /// It is larger than [`MAX_FILE_BYTES`].
    TooLarge,
    /// It is not UTF-8 text.
    NotText,
    /// The OS refused (not found, permissions).
    Io(std::io::Error),
}

impl FileError {
    /// The problem as a blueprint reports it, for the file named `named`
    /// (as the blueprint wrote it) at `file` (resolved).
    pub(super) fn describe(&self, what: &str, named: &str, file: &Path) -> String {
        match self {
            FileError::Outside => format!(
                "{what} `{named}`: an inline blueprint may name only files inside the server's blueprint folder"
            ),
            FileError::NotRegular => {
                format!("{what} {} is not a regular file", file.display())
            }
            FileError::TooLarge => {
                format!("{what} {} is larger than {MAX_FILE_BYTES} bytes", file.display())
            }
            FileError::NotText => format!("{what} {} is not UTF-8 text", file.display()),
            FileError::Io(error) => format!("cannot read {what} {}: {error}", file.display()),
        }
    }
}

/// Reads `named` (relative to `base_dir`, or absolute), within `root` when
/// given (a canonical folder). Returns the file as resolved, and its text.
pub(super) fn read_named(
    base_dir: &Path,
    named: &str,
    root: Option<&Path>,
) -> (PathBuf, Result<String, FileError>) {
    let file = base_dir.join(named);
    match root {
        None => {
            let text = read_regular(&file);
            (file, text)
        }
        Some(root) => match std::fs::canonicalize(&file) {
            Ok(resolved) if resolved.starts_with(root) => {
                let text = read_regular(&resolved);
                (resolved, text)
            }
            _ => (file, Err(FileError::Outside)),
        },
    }
}

/// Reads a regular file of at most [`MAX_FILE_BYTES`]. The file is opened
/// without blocking and checked on the open handle, so a FIFO never stalls
/// the caller and a swap between a check and the open is seen.
pub(super) fn read_regular(path: &Path) -> Result<String, FileError> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(FileError::Io)?;
    let metadata = file.metadata().map_err(FileError::Io)?;
    if !metadata.is_file() {
        return Err(FileError::NotRegular);
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(FileError::TooLarge);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    // A file that grows while it is read still stops at the limit.
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(FileError::Io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::TooLarge);
    }
    String::from_utf8(bytes).map_err(|_| FileError::NotText)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_devices_and_folders_are_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
        assert!(made.success());
        assert!(matches!(read_regular(&fifo), Err(FileError::NotRegular)));
        assert!(matches!(read_regular(Path::new("/dev/zero")), Err(FileError::NotRegular)));
        assert!(matches!(read_regular(dir.path()), Err(FileError::NotRegular)));
    }

    #[test]
    fn large_files_are_refused_and_small_ones_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let big = dir.path().join("big.json");
        let file = std::fs::File::create(&big).expect("create");
        file.set_len(MAX_FILE_BYTES + 1).expect("grow");
        assert!(matches!(read_regular(&big), Err(FileError::TooLarge)));
        let small = dir.path().join("small.json");
        std::fs::write(&small, "[]").expect("write");
        assert_eq!(read_regular(&small).expect("read"), "[]");
    }

    #[test]
    fn confined_reads_refuse_outside_and_missing_files_alike() {
        let root = tempfile::tempdir().expect("temp dir");
        let outside = tempfile::tempdir().expect("temp dir");
        std::fs::write(outside.path().join("secret.json"), "[\"s3cret\"]").expect("write");
        std::fs::write(root.path().join("ok.json"), "[]").expect("write");
        #[cfg(unix)]
        std::os::unix::fs::symlink(outside.path().join("secret.json"), root.path().join("link"))
            .expect("symlink");
        let canonical = std::fs::canonicalize(root.path()).expect("canonical");
        let secret = outside.path().join("secret.json");
        for named in [secret.to_str().expect("utf-8"), "../x.json", "missing.json", "link"] {
            let (_, read) = read_named(root.path(), named, Some(&canonical));
            assert!(matches!(read, Err(FileError::Outside)), "{named}: {read:?}");
        }
        let (_, read) = read_named(root.path(), "ok.json", Some(&canonical));
        assert_eq!(read.expect("inside"), "[]");
    }
}
