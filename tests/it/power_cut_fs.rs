//! A filesystem that loses power, for the durability tests (issue 67): a
//! FUSE passthrough over a backing directory in which each file's writes
//! stay in memory until that file is fsynced (or written through an
//! `O_SYNC`/`O_DSYNC` handle). [`PowerCutFs::cut`] drops everything not
//! synced, as a machine whose power went, and every later call fails with
//! EIO; the backing directory then holds exactly what a disk would. Names
//! (create, rename, link, unlink, mkdir) reach the backing directory at
//! once. `sync_file_range`, unlike `fsync`, never reaches a FUSE
//! filesystem: what it "flushes" is lost too, as on a real power cut.
//!
//! Served from this process on its own threads (the `fuser` crate,
//! mounted with mount(2) directly, so it needs root and `/dev/fuse`).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

/// Attributes are never cached by the kernel: sizes change under it.
const TTL: Duration = Duration::ZERO;

/// An unsynced change to a file.
#[derive(Clone)]
enum Op {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

#[derive(Default)]
struct Inner {
    /// Inode → a path it has, relative to the backing directory.
    paths: HashMap<u64, PathBuf>,
    /// Path → inode.
    inos: HashMap<PathBuf, u64>,
    next_ino: u64,
    /// Inode → its changes since its last fsync, in order.
    pending: HashMap<u64, Vec<Op>>,
    /// File handle → (inode, writes go through at once).
    handles: HashMap<u64, (u64, bool)>,
    next_fh: u64,
    /// The power is off: everything fails.
    dead: bool,
    /// Bytes fsynced, and bytes a cut dropped.
    synced_bytes: u64,
    dropped_bytes: u64,
}

/// A mounted power-cut filesystem; unmounted when dropped.
pub struct PowerCut {
    pub mount: PathBuf,
    pub backing: PathBuf,
    fs: PowerCutFs,
    session: Option<fuser::BackgroundSession>,
    _dirs: tempfile::TempDir,
}

/// What the kernel talks to.
#[derive(Clone)]
struct PowerCutFs {
    backing: PathBuf,
    inner: Arc<Mutex<Inner>>,
}

/// Whether this machine can mount one: root, `/dev/fuse`.
pub fn available() -> Result<(), String> {
    if !Path::new("/dev/fuse").exists() {
        return Err("no /dev/fuse".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("mounting FUSE needs root".into());
    }
    Ok(())
}

impl PowerCut {
    /// A new empty filesystem, mounted in a temporary directory.
    pub fn mount() -> std::io::Result<PowerCut> {
        let dirs = tempfile::tempdir()?;
        let (mount, backing) = (dirs.path().join("mnt"), dirs.path().join("disk"));
        std::fs::create_dir_all(&mount)?;
        std::fs::create_dir_all(&backing)?;
        let fs = PowerCutFs::new(&backing);
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            fuser::MountOption::FSName("powercut".into()),
            fuser::MountOption::DefaultPermissions,
        ];
        config.n_threads = Some(4);
        let session = fuser::spawn_mount(fs.clone(), &mount, &config)?;
        Ok(PowerCut {
            mount,
            backing,
            fs,
            session: Some(session),
            _dirs: dirs,
        })
    }

    /// The power goes: what no fsync covered is gone, and the mount
    /// answers EIO from now on. Returns the bytes dropped.
    pub fn cut(&self) -> u64 {
        let mut inner = self.fs.inner();
        inner.dead = true;
        let dropped: u64 = inner
            .pending
            .values()
            .flatten()
            .map(|op| match op {
                Op::Write(_, bytes) => bytes.len() as u64,
                Op::SetLen(_) => 0,
            })
            .sum();
        inner.pending.clear();
        inner.dropped_bytes += dropped;
        dropped
    }

    /// Bytes fsynced so far.
    pub fn synced_bytes(&self) -> u64 {
        self.fs.inner().synced_bytes
    }

    /// Unmounts (after a cut, whatever still holds files open).
    pub fn unmount(&mut self) {
        if let Some(session) = self.session.take() {
            // Lazily: a killed host's last calls may still be queued.
            let path = std::ffi::CString::new(self.mount.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a NUL-terminated path.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
            drop(session);
        }
    }
}

impl Drop for PowerCut {
    fn drop(&mut self) {
        self.unmount();
    }
}

fn attr_of(ino: u64, meta: &std::fs::Metadata, size: u64) -> FileAttr {
    let time = |s: i64, ns: i64| UNIX_EPOCH + Duration::new(s.max(0) as u64, ns.max(0) as u32);
    let kind = if meta.is_dir() {
        FileType::Directory
    } else {
        FileType::RegularFile
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind,
        perm: (meta.permissions().mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn errno(e: std::io::Error) -> Errno {
    Errno::from(e)
}

impl PowerCutFs {
    fn new(backing: &Path) -> PowerCutFs {
        let mut inner = Inner {
            next_ino: 2,
            next_fh: 1,
            ..Inner::default()
        };
        inner.paths.insert(1, PathBuf::new());
        inner.inos.insert(PathBuf::new(), 1);
        PowerCutFs {
            backing: backing.to_path_buf(),
            inner: Arc::new(Mutex::new(inner)),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live state, or EIO once the power is off.
    fn live(&self) -> Result<MutexGuard<'_, Inner>, Errno> {
        let inner = self.inner();
        if inner.dead {
            return Err(Errno::EIO);
        }
        Ok(inner)
    }

    fn real(&self, rel: &Path) -> PathBuf {
        self.backing.join(rel)
    }
}

impl Inner {
    fn path(&self, ino: u64) -> Result<PathBuf, Errno> {
        self.paths.get(&ino).cloned().ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.path(parent.0)?.join(name))
    }

    /// The inode of `rel`, made on first sight.
    fn ino(&mut self, rel: &Path) -> u64 {
        if let Some(ino) = self.inos.get(rel) {
            return *ino;
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inos.insert(rel.to_path_buf(), ino);
        self.paths.insert(ino, rel.to_path_buf());
        ino
    }

    /// Forgets the name `rel`; the inode keeps another name if it has one.
    fn unname(&mut self, rel: &Path) {
        let Some(ino) = self.inos.remove(rel) else {
            return;
        };
        let other = self
            .inos
            .iter()
            .find(|(_, i)| **i == ino)
            .map(|(p, _)| p.clone());
        match other {
            Some(path) => {
                self.paths.insert(ino, path);
            }
            None => {
                self.paths.remove(&ino);
                self.pending.remove(&ino);
            }
        }
    }

    /// The size `ino` has with its pending changes, over `on_disk`.
    fn size(&self, ino: u64, on_disk: u64) -> u64 {
        let ops = self.pending.get(&ino).map(Vec::as_slice).unwrap_or(&[]);
        ops.iter().fold(on_disk, |size, op| match op {
            Op::Write(off, bytes) => size.max(off + bytes.len() as u64),
            Op::SetLen(len) => *len,
        })
    }

    fn push(&mut self, ino: u64, op: Op) {
        let ops = self.pending.entry(ino).or_default();
        if let (Some(Op::Write(at, bytes)), Op::Write(off, more)) = (ops.last_mut(), &op)
            && *at + bytes.len() as u64 == *off
        {
            bytes.extend_from_slice(more);
            return;
        }
        ops.push(op);
    }
}

impl PowerCutFs {
    fn attr(&self, inner: &Inner, ino: u64) -> Result<FileAttr, Errno> {
        let rel = inner.path(ino)?;
        let meta = std::fs::symlink_metadata(self.real(&rel)).map_err(errno)?;
        let size = match meta.is_dir() {
            true => meta.len(),
            false => inner.size(ino, meta.len()),
        };
        Ok(attr_of(ino, &meta, size))
    }

    /// Makes `ino`'s pending changes durable: writes them to the backing file.
    fn sync(&self, inner: &mut Inner, ino: u64) -> Result<(), Errno> {
        let Some(ops) = inner.pending.remove(&ino) else {
            return Ok(());
        };
        let rel = inner.path(ino)?;
        let file = OpenOptions::new()
            .write(true)
            .open(self.real(&rel))
            .map_err(errno)?;
        for op in ops {
            match op {
                Op::Write(off, bytes) => {
                    file.write_all_at(&bytes, off).map_err(errno)?;
                    inner.synced_bytes += bytes.len() as u64;
                }
                Op::SetLen(len) => file.set_len(len).map_err(errno)?,
            }
        }
        Ok(())
    }

    fn read_at(&self, inner: &Inner, ino: u64, off: u64, size: u32) -> Result<Vec<u8>, Errno> {
        let rel = inner.path(ino)?;
        let file = std::fs::File::open(self.real(&rel)).map_err(errno)?;
        let on_disk = file.metadata().map_err(errno)?.len();
        let total = inner.size(ino, on_disk);
        let end = total.min(off + size as u64);
        if off >= end {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; (end - off) as usize];
        let have = on_disk.min(end).saturating_sub(off) as usize;
        if have > 0 {
            file.read_exact_at(&mut buf[..have], off).map_err(errno)?;
        }
        // Replayed over what the disk holds, in order; a cut-back zeroes
        // what lay past it.
        let mut len = on_disk;
        for op in inner.pending.get(&ino).into_iter().flatten() {
            match op {
                Op::Write(at, bytes) => {
                    let (from, to) = (off.max(*at), end.min(at + bytes.len() as u64));
                    if from < to {
                        buf[(from - off) as usize..(to - off) as usize]
                            .copy_from_slice(&bytes[(from - at) as usize..(to - at) as usize]);
                    }
                    len = len.max(at + bytes.len() as u64);
                }
                Op::SetLen(new) => {
                    if *new < len && *new < end {
                        let from = (*new).max(off);
                        buf[(from - off) as usize..].fill(0);
                    }
                    len = *new;
                }
            }
        }
        Ok(buf)
    }

    fn entry(&self, rel: &Path, reply: ReplyEntry) {
        let answer = self.live().and_then(|mut inner| {
            std::fs::symlink_metadata(self.real(rel)).map_err(errno)?;
            let ino = inner.ino(rel);
            self.attr(&inner, ino)
        });
        match answer {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// Removes a name from the backing directory with `remove`, at once.
    fn remove(
        &self,
        parent: INodeNo,
        name: &OsStr,
        remove: fn(PathBuf) -> std::io::Result<()>,
    ) -> Result<(), Errno> {
        let mut inner = self.live()?;
        let rel = inner.child(parent, name)?;
        remove(self.real(&rel)).map_err(errno)?;
        inner.unname(&rel);
        Ok(())
    }

    fn done(reply: ReplyEmpty, result: Result<(), Errno>) {
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

impl Filesystem for PowerCutFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.live().and_then(|inner| inner.child(parent, name)) {
            Ok(rel) => self.entry(&rel, reply),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.live().and_then(|inner| self.attr(&inner, ino.0)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let answer = self.live().and_then(|mut inner| {
            let rel = inner.path(ino.0)?;
            if let Some(mode) = mode {
                let perms = std::fs::Permissions::from_mode(mode & 0o7777);
                std::fs::set_permissions(self.real(&rel), perms).map_err(errno)?;
            }
            if let Some(len) = size {
                inner.push(ino.0, Op::SetLen(len));
            }
            self.attr(&inner, ino.0)
        });
        match answer {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let made = self.live().and_then(|inner| {
            let rel = inner.child(parent, name)?;
            std::fs::create_dir(self.real(&rel)).map_err(errno)?;
            let perms = std::fs::Permissions::from_mode(mode & 0o7777);
            std::fs::set_permissions(self.real(&rel), perms).map_err(errno)?;
            Ok(rel)
        });
        match made {
            Ok(rel) => self.entry(&rel, reply),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        Self::done(reply, self.remove(parent, name, std::fs::remove_file));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        Self::done(reply, self.remove(parent, name, std::fs::remove_dir));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let result = self.live().and_then(|mut inner| {
            let (from, to) = (inner.child(parent, name)?, inner.child(newparent, newname)?);
            std::fs::rename(self.real(&from), self.real(&to)).map_err(errno)?;
            inner.unname(&to);
            // The moved name's inode (and a directory's children) follow.
            let moved: Vec<(PathBuf, u64)> = inner
                .inos
                .iter()
                .filter(|(p, _)| p.starts_with(&from))
                .map(|(p, i)| (p.clone(), *i))
                .collect();
            for (old, ino) in moved {
                let new = to.join(old.strip_prefix(&from).expect("under from"));
                inner.inos.remove(&old);
                inner.inos.insert(new.clone(), ino);
                if inner.paths.get(&ino) == Some(&old) {
                    inner.paths.insert(ino, new);
                }
            }
            Ok(())
        });
        Self::done(reply, result);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let linked = self.live().and_then(|mut inner| {
            let (from, to) = (inner.path(ino.0)?, inner.child(newparent, newname)?);
            std::fs::hard_link(self.real(&from), self.real(&to)).map_err(errno)?;
            inner.inos.insert(to.clone(), ino.0);
            Ok(to)
        });
        match linked {
            Ok(rel) => self.entry(&rel, reply),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let opened = self.live().map(|mut inner| {
            let through = flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0;
            if flags.0 & libc::O_TRUNC != 0 {
                inner.push(ino.0, Op::SetLen(0));
            }
            let fh = inner.next_fh;
            inner.next_fh += 1;
            inner.handles.insert(fh, (ino.0, through));
            fh
        });
        match opened {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let made = self.live().and_then(|mut inner| {
            let rel = inner.child(parent, name)?;
            let mut options = OpenOptions::new();
            options.write(true).create(true);
            if flags & libc::O_EXCL != 0 {
                options.create_new(true);
            }
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode & 0o7777);
            options.open(self.real(&rel)).map_err(errno)?;
            let ino = inner.ino(&rel);
            if flags & libc::O_TRUNC != 0 {
                inner.push(ino, Op::SetLen(0));
            }
            let through = flags & (libc::O_SYNC | libc::O_DSYNC) != 0;
            let fh = inner.next_fh;
            inner.next_fh += 1;
            inner.handles.insert(fh, (ino, through));
            Ok((self.attr(&inner, ino)?, fh))
        });
        match made {
            Ok((attr, fh)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(fh),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self
            .live()
            .and_then(|inner| self.read_at(&inner, ino.0, offset, size))
        {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let written = self.live().and_then(|mut inner| {
            let through = inner.handles.get(&fh.0).is_some_and(|(_, sync)| *sync)
                || flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0;
            inner.push(ino.0, Op::Write(offset, data.to_vec()));
            if through {
                self.sync(&mut inner, ino.0)?;
            }
            Ok(data.len() as u32)
        });
        match written {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) makes nothing durable.
        Self::done(reply, self.live().map(|_| ()));
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.inner().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = self
            .live()
            .and_then(|mut inner| self.sync(&mut inner, ino.0));
        Self::done(reply, result);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listed = self.live().and_then(|mut inner| {
            let rel = inner.path(ino.0)?;
            let mut entries = vec![
                (ino.0, FileType::Directory, ".".into()),
                (ino.0, FileType::Directory, "..".into()),
            ];
            for entry in std::fs::read_dir(self.real(&rel)).map_err(errno)? {
                let entry = entry.map_err(errno)?;
                let kind = match entry.file_type().map_err(errno)?.is_dir() {
                    true => FileType::Directory,
                    false => FileType::RegularFile,
                };
                let child = rel.join(entry.file_name());
                entries.push((inner.ino(&child), kind, entry.file_name()));
            }
            Ok(entries)
        });
        match listed {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize)
                {
                    if reply.add(INodeNo(ino), i as u64 + 1, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Names are durable at once (see the module's comment).
        Self::done(reply, self.live().map(|_| ()));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let path = std::ffi::CString::new(self.backing.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: zeroed statvfs is a valid out-pointer; the path is NUL-terminated.
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
            return reply.error(Errno::EIO);
        }
        reply.statfs(
            stat.f_blocks,
            stat.f_bfree,
            stat.f_bavail,
            stat.f_files,
            stat.f_ffree,
            stat.f_bsize as u32,
            255,
            stat.f_frsize as u32,
        );
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if mode != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let result = self.live().and_then(|mut inner| {
            let rel = inner.path(ino.0)?;
            let on_disk = std::fs::metadata(self.real(&rel)).map_err(errno)?.len();
            if inner.size(ino.0, on_disk) < offset + length {
                inner.push(ino.0, Op::SetLen(offset + length));
            }
            Ok(())
        });
        Self::done(reply, result);
    }
}
