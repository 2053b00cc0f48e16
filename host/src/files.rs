//! Files the host's correctness rests on, written the durable way: a
//! temporary file beside the target, fsynced, put in place by one rename
//! (or link), then the directory fsynced. A power cut leaves the old file
//! or the new one, never an empty or torn one (SQLite's and redb's rule;
//! `write` then `rename` alone may leave a name pointing at nothing).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Makes the entries of directory `dir` durable (files created, renamed
/// or removed in it).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates `dir` and any missing parents, each new entry made durable in
/// its parent: a file synced into a directory whose own name a power cut
/// took is lost with it.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(up) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir(up)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => sync_dir(parent(dir)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Writes `bytes` to `path`, replacing what was there, durably.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let temp = written_aside(path, bytes, 0o644)?;
    std::fs::rename(&temp, path)?;
    sync_dir(parent(path))
}

/// Creates `path` holding `bytes`, readable by its owner only, durably;
/// `AlreadyExists` if it is there already (another process made it
/// first), leaving that one as it was.
pub fn create_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let temp = written_aside(path, bytes, 0o600)?;
    // A link, unlike a rename, fails when the name is taken.
    match std::fs::hard_link(&temp, path) {
        Ok(()) => std::fs::remove_file(&temp)?,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(&temp)?;
            return Err(e);
        }
        // A filesystem without hard links: a rename where nothing is.
        Err(_) if !path.exists() => std::fs::rename(&temp, path)?,
        Err(_) => {
            std::fs::remove_file(&temp)?;
            return Err(io::ErrorKind::AlreadyExists.into());
        }
    }
    sync_dir(parent(path))
}

/// `bytes` in a new temporary file beside `path`, fsynced.
fn written_aside(path: &Path, bytes: &[u8], mode: u32) -> io::Result<PathBuf> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(
        ".tmp{}-{}",
        std::process::id(),
        crate::ids::random_hex(4)
    ));
    let temp = path.with_file_name(name);
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    let mut file = options.open(&temp)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    Ok(temp)
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_a_private_one_created_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        replace(&path, b"one").unwrap();
        replace(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let key = dir.path().join("key");
        create_private(&key, b"first").unwrap();
        let again = create_private(&key, b"second").unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&key).unwrap(), b"first");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 2, "no temporary file left behind");
        let deep = dir.path().join("a/b/c");
        create_dir(&deep).unwrap();
        create_dir(&deep).unwrap();
        assert!(deep.is_dir());
    }
}
