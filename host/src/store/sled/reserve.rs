//! Room kept back on the store's disk, so that a full disk can clear
//! itself: a file of [`BYTES`] (`<data>/reserve`), given up when a write
//! meets a full disk or a start finds one. With it gone the store is
//! *full*: the API refuses writes (503 `store_full`), while reads, the
//! delivery path's own records and the expiry of old history (which writes
//! what still waits before it deletes) use the room it freed. Once the disk
//! has room for it twice over, the reserve is set aside again and writes
//! resume.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// How much the reserve holds: enough for a start, a checkpoint and the
/// expiry of a segment's waiting records.
pub const BYTES: u64 = 32 << 20;

pub(super) struct Reserve {
    path: PathBuf,
    bytes: u64,
    full: AtomicBool,
}

impl Reserve {
    /// The reserve of the store in `dir`, given up for the start (which
    /// may need its room); [`Reserve::restore`] sets it aside again.
    pub(super) fn open(dir: &Path, bytes: u64) -> Reserve {
        let path = dir.join("reserve");
        let _ = std::fs::remove_file(&path);
        Reserve {
            path,
            bytes,
            full: AtomicBool::new(true),
        }
    }

    /// Whether the store is full: the reserve is given up.
    pub(super) fn is_full(&self) -> bool {
        self.full.load(Ordering::SeqCst)
    }

    /// Gives the reserve up: a write met a full disk.
    pub(super) fn release(&self) {
        if !self.full.swap(true, Ordering::SeqCst) {
            let _ = std::fs::remove_file(&self.path);
            tracing::error!(
                reserve = %self.path.display(),
                "the disk holding the store is full: writes are refused (503 store_full) until it has room again; \
                 the reserve was given up so that deliveries and expiry go on"
            );
        }
    }

    /// Sets the reserve aside again when the disk has room for it twice
    /// over; says whether the store takes writes.
    pub(super) fn restore(&self) -> bool {
        if !self.is_full() {
            return true;
        }
        match free_bytes(self.path.parent().unwrap_or(Path::new("."))) {
            Ok(free) if free >= 2 * self.bytes => {}
            _ => return false,
        }
        match allocate(&self.path, self.bytes) {
            Ok(()) => {
                if self.full.swap(false, Ordering::SeqCst) {
                    tracing::info!("the store's disk has room again: writes resume");
                }
                true
            }
            Err(e) => {
                let _ = std::fs::remove_file(&self.path);
                tracing::warn!(error = %e, "cannot set the store's reserve aside");
                false
            }
        }
    }
}

/// Bytes free to an unprivileged writer on the disk holding `dir`.
fn free_bytes(dir: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `stat` is a valid out-pointer.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat.f_bavail as u64 * stat.f_frsize as u64)
}

/// `bytes` really allocated at `path` (not a sparse file), durably.
fn allocate(path: &Path, bytes: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::create(path)?;
    if bytes == 0 {
        return Ok(());
    }
    let len = i64::try_from(bytes).map_err(io::Error::other)?;
    // SAFETY: a valid descriptor, offset 0 and a positive length.
    let err = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    if err != 0 {
        return Err(io::Error::from_raw_os_error(err));
    }
    file.sync_all()?;
    match path.parent() {
        Some(dir) => crate::files::sync_dir(dir),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_given_up_and_set_aside_again() {
        let dir = tempfile::tempdir().unwrap();
        let reserve = Reserve::open(dir.path(), 1 << 20);
        assert!(reserve.is_full(), "given up for the start");
        assert!(reserve.restore());
        let on_disk = std::fs::metadata(dir.path().join("reserve")).unwrap();
        assert_eq!(on_disk.len(), 1 << 20);
        assert!(!reserve.is_full());
        reserve.release();
        assert!(reserve.is_full());
        assert!(!dir.path().join("reserve").exists());
        assert!(reserve.restore());
        drop(reserve);
        let reopened = Reserve::open(dir.path(), 1 << 20);
        assert!(!dir.path().join("reserve").exists());
        assert!(reopened.restore());
    }
}
