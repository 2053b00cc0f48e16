//! The journal's file I/O, behind a narrow seam: the real directory, or a
//! simulated disk (`sim.rs`, tests only) that can crash at any step and
//! fail any write or sync, as redb's crash tests and TigerBeetle's
//! simulator do. Files are named, within one directory.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[cfg(test)]
pub mod sim;

/// What the journal asks of a directory.
pub trait Disk: Send + Sync {
    /// The names of the files in the directory.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Creates `name` empty (truncating any file of that name).
    fn create(&self, name: &str) -> io::Result<()>;
    /// The whole of `name`.
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// Fills `buf` from `name` at `off`.
    fn read_at(&self, name: &str, off: u64, buf: &mut [u8]) -> io::Result<()>;
    /// What `name` holds from `off` to its end; an error if it is shorter.
    fn read_from(&self, name: &str, off: u64) -> io::Result<Vec<u8>> {
        let mut bytes = self.read(name)?;
        if off as usize > bytes.len() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(bytes.split_off(off as usize))
    }
    /// How many bytes `name` holds.
    fn len(&self, name: &str) -> io::Result<u64> {
        Ok(self.read(name)?.len() as u64)
    }
    /// Writes all of `bytes` to `name` at `off`.
    fn write_at(&self, name: &str, off: u64, bytes: &[u8]) -> io::Result<()>;
    /// Makes `name`'s data durable (fdatasync).
    fn sync(&self, name: &str) -> io::Result<()>;
    /// Cuts or extends `name` to `len` bytes.
    fn set_len(&self, name: &str, len: u64) -> io::Result<()>;
    /// Removes `name`.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Makes the directory's entries (files created or removed) durable.
    fn sync_dir(&self) -> io::Result<()>;
}

/// A real directory. Files stay open once used.
pub struct Real {
    dir: PathBuf,
    open: Mutex<HashMap<String, Arc<File>>>,
}

impl Real {
    /// The directory `dir`, created if missing.
    pub fn new(dir: &Path) -> io::Result<Real> {
        crate::files::create_dir(dir)?;
        Ok(Real {
            dir: dir.to_path_buf(),
            open: Mutex::default(),
        })
    }

    /// The directory `dir`, which must exist.
    pub fn existing(dir: &Path) -> io::Result<Real> {
        if !dir.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no journal at {}: is this a data directory?", dir.display()),
            ));
        }
        Real::new(dir)
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<File>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn file(&self, name: &str) -> io::Result<Arc<File>> {
        if let Some(file) = self.open().get(name) {
            return Ok(file.clone());
        }
        let file = Arc::new(
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.dir.join(name))?,
        );
        self.open().insert(name.to_string(), file.clone());
        Ok(file)
    }
}

impl Disk for Real {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn create(&self, name: &str) -> io::Result<()> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(self.dir.join(name))?;
        self.open().insert(name.to_string(), Arc::new(file));
        Ok(())
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.dir.join(name))
    }

    fn read_at(&self, name: &str, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file(name)?.read_exact_at(buf, off)
    }

    fn read_from(&self, name: &str, off: u64) -> io::Result<Vec<u8>> {
        let file = self.file(name)?;
        let len = file.metadata()?.len();
        let mut buf = vec![0; len.checked_sub(off).ok_or(io::ErrorKind::UnexpectedEof)? as usize];
        file.read_exact_at(&mut buf, off)?;
        Ok(buf)
    }

    fn len(&self, name: &str) -> io::Result<u64> {
        Ok(self.file(name)?.metadata()?.len())
    }

    fn write_at(&self, name: &str, off: u64, bytes: &[u8]) -> io::Result<()> {
        self.file(name)?.write_all_at(bytes, off)
    }

    fn sync(&self, name: &str) -> io::Result<()> {
        self.file(name)?.sync_data()
    }

    fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
        self.file(name)?.set_len(len)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        self.open().remove(name);
        std::fs::remove_file(self.dir.join(name))
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }
}
