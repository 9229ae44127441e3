//! The FUSE frontend: every request maps to one call of the core's [`Fs`] API.
//!
//! Inode numbers are the core's handles, so the kernel's `ino` is passed straight through (the
//! root is 1 in both). Open files need no state of their own beyond a count in the core (so an
//! unlinked file lives until its last release): the file handle is 0, reads and writes address
//! the inode. The kernel checks permissions (`default_permissions`) against the
//! modes, owners and groups we report; new files get the caller's uid and gid.
//!
//! Supported: lookup, getattr, setattr (mode, owner, size, times), mknod, create, mkdir, unlink,
//! rmdir, rename (with RENAME_NOREPLACE and RENAME_EXCHANGE), link, symlink, readlink, open,
//! read, write, flush, release, fsync, fsyncdir, opendir, readdir, readdirplus, releasedir,
//! statfs, access, fallocate, lseek (SEEK_DATA, SEEK_HOLE), and extended attributes (getxattr,
//! setxattr, listxattr, removexattr) with POSIX ACLs: the mount asks for `FUSE_POSIX_ACL`, so the
//! kernel enforces ACLs and passes each create's umask through, and the core applies a
//! directory's default ACL (or the umask) to what is created in it. Not supported (the kernel
//! gets ENOSYS from fuser's defaults, and tells the caller EOPNOTSUPP where POSIX allows it):
//! POSIX locks beyond the kernel's own, copy_file_range, RENAME_WHITEOUT (EINVAL).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use nosefs_core::file::holes::Seek;
use nosefs_core::format::pinode;
use nosefs_core::fs::Fs;
use nosefs_core::namespace::{Attr, Owner, RenameFlags, SetAttr, XattrMode};

/// How long the kernel may cache names and attributes. Every change goes through this mount, and
/// the kernel invalidates what each request changes, so a second is safe, as libfuse's default.
const TTL: Duration = Duration::from_secs(1);

/// The mounted file system, served to the kernel.
#[derive(Debug)]
pub struct NoseFuse {
    fs: Option<Arc<Fs>>,
    view: Arc<KernelView>,
    /// How the frontend tells the kernel of a change it made on its own (set-id bits a write
    /// cleared): set once the session exists ([`NoseFuse::notifier_slot`]).
    notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
    /// Open directory handles: where each one's listing ends (`Fs::listing_end`), read again
    /// when it starts over from offset 0 (rewinddir), so that names added since are listed.
    listings: parking_lot::Mutex<std::collections::HashMap<u64, u64>>,
    next_listing: std::sync::atomic::AtomicU64,
}

/// What the kernel may have cached through this mount, so that the daemon invalidates only
/// that (each invalidation is a write to /dev/fuse, about a microsecond, and a name a shim
/// client creates in a directory the kernel never looked into needs none).
///
/// Both sets are filled *before* what they cover is served: a directory before a name in it is
/// looked up (so a change racing the lookup is invalidated), an inode before the attributes the
/// kernel will cache are read (so a change racing them either comes after the read or is
/// invalidated). They shrink at `forget`, when the kernel lets an inode go.
#[derive(Debug, Default)]
pub struct KernelView {
    /// Directories the kernel may hold entries (or negative entries) of.
    dirs: parking_lot::Mutex<std::collections::HashSet<u64>>,
    /// Inodes the kernel holds, with their lookup counts (FUSE's nlookup).
    inodes: parking_lot::Mutex<std::collections::HashMap<u64, u64>>,
    /// Held inodes whose data the kernel may have cached pages of: it read or wrote through the
    /// mount (a READ or WRITE served, a mapping's faults and write-back among them). A file the
    /// kernel holds only for its record locks (SQLite's, PostgreSQL's) has none, and a write
    /// by a shim client then invalidates its attributes alone instead of storing its bytes
    /// into pages of the kernel's cache no one reads (a copy of the data, memory included).
    paged: parking_lot::Mutex<std::collections::HashSet<u64>>,
}

impl KernelView {
    fn note_dir(&self, dir: u64) {
        self.dirs.lock().insert(dir);
    }

    fn note_inode(&self, ino: u64) {
        *self.inodes.lock().entry(ino).or_insert(0) += 1;
    }

    fn forget(&self, ino: u64, nlookup: u64) {
        let mut inodes = self.inodes.lock();
        let gone = match inodes.get_mut(&ino) {
            Some(count) => {
                *count = count.saturating_sub(nlookup);
                *count == 0
            }
            None => false,
        };
        if gone {
            inodes.remove(&ino);
            drop(inodes);
            self.dirs.lock().remove(&ino);
            self.paged.lock().remove(&ino);
        }
    }

    fn note_paged(&self, ino: u64) {
        self.paged.lock().insert(ino);
    }

    fn may_cache_pages_of(&self, ino: u64) -> bool {
        self.paged.lock().contains(&ino)
    }

    fn may_hold_entries_of(&self, dir: u64) -> bool {
        self.dirs.lock().contains(&dir)
    }

    fn may_hold_inode(&self, ino: u64) -> bool {
        ino == nosefs_core::namespace::ROOT_INO || self.inodes.lock().contains_key(&ino)
    }
}

impl NoseFuse {
    /// Serves `fs`. Unmounting commits every file and marks the image clean.
    pub fn new(fs: Fs) -> NoseFuse {
        NoseFuse::shared(Arc::new(fs))
    }

    /// Serves `fs`, which others (the daemon's shim clients) serve too. Unmounting commits
    /// every file, and unmounts the image if no one else holds it.
    pub fn shared(fs: Arc<Fs>) -> NoseFuse {
        NoseFuse {
            fs: Some(fs),
            view: Arc::default(),
            notifier: Arc::default(),
            listings: Default::default(),
            next_listing: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// Where the listing of handle `fh` of directory `ino` ends for a read from `offset`: read
    /// again at offset 0 (a first read, or after rewinddir).
    fn listing_end(&self, fh: FileHandle, ino: u64, offset: u64) -> nosefs_core::Result<u64> {
        if offset == 0 {
            let end = self.fs().listing_end(ino)?;
            self.listings.lock().insert(fh.0, end);
            return Ok(end);
        }
        Ok(self.listings.lock().get(&fh.0).copied().unwrap_or(u64::MAX))
    }

    /// Where the mount puts the session's notifier once it is mounted.
    pub fn notifier_slot(&self) -> Arc<std::sync::OnceLock<fuser::Notifier>> {
        Arc::clone(&self.notifier)
    }

    /// Clears the set-id bits a change of `ino`'s data by the caller of `req` clears (the
    /// kernel's FUSE client clears set-group-id only with group-execute set; tmpfs and ext4 also
    /// for a caller outside the file's group), and drops the attributes the kernel cached.
    fn remove_privs(&self, req: &Request, ino: u64) -> Result<(), nosefs_core::Errno> {
        if nosefs_core::vfs::remove_privs(self.fs(), || request_cred(req), ino)? {
            self.attributes_changed(ino);
        }
        Ok(())
    }

    /// Drops the attributes the kernel cached of `ino`, which the frontend changed on its own.
    fn attributes_changed(&self, ino: u64) {
        if let Some(notifier) = self.notifier.get() {
            // Attributes only (offset -1): the kernel holds the inode's lock for a write, and
            // dropping its pages here would wait for it.
            let _ = notifier.inval_inode(INodeNo(ino), -1, 0);
        }
    }

    /// What the kernel may have cached (for [`Invalidator::new`]).
    pub fn kernel_view(&self) -> Arc<KernelView> {
        Arc::clone(&self.view)
    }

    /// Replies with a new or found inode: noted as the kernel's first, then its attributes read
    /// again (see [`KernelView`]).
    fn reply_entry(&self, reply: ReplyEntry, result: nosefs_core::Result<Attr>) {
        let result = result.and_then(|a| {
            self.view.note_inode(a.ino);
            self.fs().getattr(a.ino)
        });
        reply_entry(reply, result);
    }

    fn fs(&self) -> &Fs {
        self.fs.as_ref().expect("served until destroy")
    }
}

/// The largest write whose bytes are stored into the kernel's cached pages; above it, the range
/// is dropped from the cache instead (a store copies the data once more).
const STORE_MAX_BYTES: usize = 64 << 10;

/// The kernel's caches, told what the daemon's shim clients changed
/// ([`nosefs_daemon::server::Invalidate`] through fuser's notifier). Errors mean the kernel had
/// nothing cached, or the mount is going away: nothing to do either way.
#[derive(Debug)]
pub struct Invalidator {
    notifier: fuser::Notifier,
    view: Arc<KernelView>,
}

impl Invalidator {
    /// Tells the kernel through `notifier` what it may have cached, as `view` says.
    pub fn new(notifier: fuser::Notifier, view: Arc<KernelView>) -> Invalidator {
        Invalidator { notifier, view }
    }
}

impl nosefs_daemon::server::Invalidate for Invalidator {
    fn entry(&self, parent: u64, name: &[u8]) {
        if self.view.may_hold_entries_of(parent) {
            let _ = self
                .notifier
                .inval_entry(INodeNo(parent), OsStr::from_bytes(name));
        }
    }

    fn inode(&self, ino: u64) {
        if self.view.may_hold_inode(ino) {
            let _ = self.notifier.inval_inode(INodeNo(ino), 0, 0);
        }
    }

    /// The written bytes go into the kernel's cached pages of the range (FUSE's notify store),
    /// so a process mapping the file through the mount keeps its other pages and sees these
    /// without faulting them in again; a store also raises the kernel's size. Larger writes
    /// drop the range instead. Before, every write dropped the whole file's pages: LMDB, which
    /// maps its file read-only and writes with pwrite, refaulted its map after each update.
    fn written(&self, ino: u64, offset: u64, data: &[u8]) {
        if !self.view.may_hold_inode(ino) {
            return;
        }
        // Attributes only (offset -1 leaves the pages).
        let _ = self.notifier.inval_inode(INodeNo(ino), -1, 0);
        if !self.view.may_cache_pages_of(ino) {
            return;
        }
        let stored = data.len() <= STORE_MAX_BYTES
            && self.notifier.store(INodeNo(ino), offset, data).is_ok();
        if !stored {
            let _ =
                self.notifier
                    .inval_inode(INodeNo(ino), offset as i64, data.len().max(1) as i64);
        }
    }

    fn resized(&self, ino: u64, size: u64) {
        if self.view.may_hold_inode(ino) {
            let _ = self.notifier.inval_inode(INodeNo(ino), 0, 0);
            // An empty store at `size` raises the kernel's size to it (never lowers it; a
            // shrink is learnt at the next getattr, which the invalidation forces).
            let _ = self.notifier.store(INodeNo(ino), size, &[]);
        }
    }
}

fn errno(e: nosefs_core::Error) -> Errno {
    Errno::from_i32(e.errno().0)
}

fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn time_ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(before) => -(before.duration().as_nanos() as i64),
    }
}

fn kind(mode: u32) -> FileType {
    match mode & pinode::S_IFMT {
        pinode::S_IFDIR => FileType::Directory,
        pinode::S_IFLNK => FileType::Symlink,
        pinode::S_IFCHR => FileType::CharDevice,
        pinode::S_IFBLK => FileType::BlockDevice,
        pinode::S_IFIFO => FileType::NamedPipe,
        pinode::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

/// The kernel's view of an inode's attributes.
pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: time(a.atime_ns),
        mtime: time(a.mtime_ns),
        ctime: time(a.ctime_ns),
        crtime: time(a.ctime_ns),
        kind: kind(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        flags: 0,
        blksize: 4096,
    }
}

fn owner(req: &Request) -> Owner {
    Owner {
        uid: req.uid(),
        gid: req.gid(),
        umask: 0,
    }
}

/// Replies to getxattr or listxattr: the size when asked for it (`size` 0), else the bytes, or
/// ERANGE when they do not fit.
fn reply_xattr(reply: ReplyXattr, size: u32, result: nosefs_core::Result<Vec<u8>>) {
    match result {
        Ok(value) if size == 0 => reply.size(value.len() as u32),
        Ok(value) if value.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
        Ok(value) => reply.data(&value),
        Err(e) => reply.error(errno(e)),
    }
}

impl NoseFuse {
    /// Owner and permission bits of a new inode of `mode` (with its type) in `parent`: the
    /// caller's, except in a set-group-id directory, whose group the new inode takes, and a new
    /// directory its set-group-id bit too (as every Linux file system does). The kernel has
    /// already dropped a set-group-id bit the caller may not give a file. The umask goes to the
    /// core with the owner: a directory's default ACL replaces it.
    /// The tail of create and tmpfile: the new file counted open (freed at its last release
    /// when it has no name), noted as one the kernel holds, and its entry and open replied.
    fn open_created(&self, created: nosefs_core::Result<Attr>, reply: ReplyCreate) {
        let opened = created
            .and_then(|a| self.fs().open(a.ino).map(|()| a))
            .and_then(|a| {
                self.view.note_inode(a.ino);
                self.fs().getattr(a.ino)
            });
        match opened {
            Ok(a) => reply.created(
                &TTL,
                &file_attr(&a),
                Generation(0),
                FileHandle(0),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn new_owner(&self, req: &Request, parent: u64, mode: u32, umask: u32) -> (Owner, u32) {
        let mut owner = owner(req);
        owner.umask = umask & 0o777;
        let mut perm = mode & 0o7777;
        if let Ok(dir) = self.fs().getattr(parent) {
            if dir.mode & pinode::S_ISGID != 0 {
                owner.gid = dir.gid;
                if mode & pinode::S_IFMT == pinode::S_IFDIR {
                    perm |= pinode::S_ISGID;
                }
            }
        }
        (owner, perm)
    }
}

fn reply_entry(reply: ReplyEntry, result: nosefs_core::Result<Attr>) {
    match result {
        Ok(a) => reply.entry(&TTL, &file_attr(&a), Generation(0)),
        Err(e) => reply.error(errno(e)),
    }
}

fn reply_attr(reply: ReplyAttr, result: nosefs_core::Result<Attr>) {
    match result {
        Ok(a) => reply.attr(&TTL, &file_attr(&a)),
        Err(e) => reply.error(errno(e)),
    }
}

fn reply_empty(reply: ReplyEmpty, result: nosefs_core::Result<()>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

fn set_time(t: Option<TimeOrNow>) -> Option<i64> {
    t.map(|t| match t {
        TimeOrNow::SpecificTime(t) => time_ns(t),
        TimeOrNow::Now => time_ns(SystemTime::now()),
    })
}

impl Filesystem for NoseFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // The kernel enforces ACLs (it reads them with getxattr and caches them) and leaves the
        // umask to us (DONT_MASK); a kernel without them keeps applying the umask itself, which
        // the core applying it again does not change.
        let _ = config.add_capabilities(InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK);
        // NFS-style export: open_by_handle_at of an inode the kernel has forgotten looks up "."
        // in it (any file type) and ".." of a directory; inode numbers are never reused, so
        // generation 0 names one inode forever.
        let _ = config.add_capabilities(InitFlags::FUSE_EXPORT_SUPPORT);
        Ok(())
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        reply_xattr(reply, size, self.fs().getxattr(ino.0, name.as_bytes()));
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply_xattr(reply, size, self.fs().listxattr(ino.0));
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        if position != 0 {
            return reply.error(Errno::from_i32(libc::EINVAL));
        }
        // An access ACL set by someone outside the file's group drops set-group-id, which the
        // kernel's FUSE client leaves to the server.
        let name = name.as_bytes();
        if req.uid() != 0 {
            match nosefs_core::vfs::xattr::acl_drops_setgid(
                self.fs(),
                &request_cred(req),
                ino.0,
                name,
            ) {
                Ok(true) => self.attributes_changed(ino.0),
                Ok(false) => {}
                Err(e) => return reply.error(Errno::from_i32(e.0)),
            }
        }
        let result = XattrMode::from_flags(flags)
            .and_then(|mode| self.fs().setxattr(ino.0, name, value, mode));
        reply_empty(reply, result);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.fs().removexattr(ino.0, name.as_bytes()));
    }

    fn destroy(&mut self) {
        if let Some(fs) = self.fs.take() {
            fs.stop_compactor();
            match Arc::try_unwrap(fs) {
                Ok(fs) => drop(fs.unmount()),
                Err(shared) => drop(shared.sync_all()),
            }
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if name.as_bytes() == b"." {
            // Only the kernel's export code asks this (of an inode it no longer holds), and of
            // any file type.
            return self.reply_entry(reply, self.fs().getattr(parent.0));
        }
        self.view.note_dir(parent.0);
        match self.fs().lookup(parent.0, name.as_bytes()) {
            // A negative entry (inode 0) the kernel may cache: creating a file looks its name up
            // first, and every later change to that name goes through this mount, which
            // invalidates it.
            Err(e) if e.errno() == nosefs_core::Errno::ENOENT => {
                let mut attr = file_attr(&Attr::default());
                attr.ino = INodeNo(0);
                reply.entry(&TTL, &attr, Generation(0));
            }
            result => self.reply_entry(reply, result),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        reply_attr(reply, self.fs().getattr(ino.0));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let change = SetAttr {
            mode,
            uid,
            gid,
            atime_ns: set_time(atime),
            mtime_ns: set_time(mtime),
            size,
        };
        if size.is_some() && mode.is_none() {
            if let Err(e) = self.remove_privs(req, ino.0) {
                reply.error(Errno::from_i32(e.0));
                return;
            }
        }
        reply_attr(reply, self.fs().setattr(ino.0, &change));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs().readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.view.note_dir(parent.0);
        let (owner, perm) = self.new_owner(req, parent.0, mode, umask);
        let mode = (mode & pinode::S_IFMT) | perm;
        let result = if mode & pinode::S_IFMT == pinode::S_IFREG {
            self.fs()
                .create(parent.0, name.as_bytes(), perm, owner, true)
        } else {
            self.fs()
                .mknod(parent.0, name.as_bytes(), mode, rdev, owner)
        };
        self.reply_entry(reply, result);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.view.note_dir(parent.0);
        let (owner, perm) = self.new_owner(req, parent.0, pinode::S_IFDIR | (mode & 0o7777), umask);
        self.reply_entry(
            reply,
            self.fs().mkdir(parent.0, name.as_bytes(), perm, owner),
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.fs().unlink(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.fs().rmdir(parent.0, name.as_bytes()));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let target = target.as_os_str().as_bytes();
        self.view.note_dir(parent.0);
        let (owner, _) = self.new_owner(req, parent.0, pinode::S_IFLNK | 0o777, 0);
        self.reply_entry(
            reply,
            self.fs()
                .symlink(parent.0, link_name.as_bytes(), target, owner),
        );
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        // The kernel checked CAP_MKNOD for a whiteout (overlayfs makes them).
        let whiteout = flags.contains(fuser::RenameFlags::RENAME_WHITEOUT);
        let flags = RenameFlags {
            noreplace: flags.contains(fuser::RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(fuser::RenameFlags::RENAME_EXCHANGE),
            whiteout: whiteout.then_some(nosefs_core::namespace::Owner {
                uid: req.uid(),
                gid: req.gid(),
                umask: 0,
            }),
        };
        self.view.note_dir(newparent.0); // the kernel moves its entry there
        let result = self.fs().rename(
            parent.0,
            name.as_bytes(),
            newparent.0,
            newname.as_bytes(),
            flags,
        );
        reply_empty(reply, result);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.view.note_dir(newparent.0);
        self.reply_entry(
            reply,
            self.fs().link(ino.0, newparent.0, newname.as_bytes()),
        );
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.view.forget(ino.0, nlookup);
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Counted, so that a file unlinked while open lives on until its release.
        match self.fs().open(ino.0) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.fs().close(ino.0));
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
        // Before the read: a write racing it is either seen by it or stored into its pages.
        self.view.note_paged(ino.0);
        let mut buf = vec![0u8; size as usize];
        match self.fs().read(ino.0, offset, &mut buf) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // The kernel keeps the bytes it writes through in its cache.
        self.view.note_paged(ino.0);
        // The kernel's FUSE client clears set-group-id only with group-execute set before a
        // write; the frontend clears what tmpfs and ext4 clear.
        let result = self
            .remove_privs(req, ino.0)
            .map_err(nosefs_core::Error::from)
            .and_then(|()| self.fs().write(ino.0, offset, data));
        match result {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(e)),
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
        // close() promises nothing about durability (fsync does), and a file's open count ends
        // at release, so flush has nothing to do. Answering ENOSYS tells the kernel so once: it
        // stops sending FLUSH and every later close() saves a round trip, which dominates
        // create+close through FUSE.
        reply.error(Errno::ENOSYS);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.fs().fsync(ino.0));
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Directory operations are durable when they return.
        reply_empty(reply, self.fs().getattr(ino.0).map(drop));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // The handle names where the listing ends (see `NoseFuse::listing_end`).
        match self.fs().getattr(ino.0) {
            Ok(a) if a.is_dir() => match self.fs().listing_end(ino.0) {
                // Counted, so a removed directory answers getattr until its release.
                Ok(end) => match self.fs().open(ino.0) {
                    Ok(()) => {
                        let id = self
                            .next_listing
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        self.listings.lock().insert(id, end);
                        reply.opened(FileHandle(id), FopenFlags::empty())
                    }
                    Err(e) => reply.error(errno(e)),
                },
                Err(e) => reply.error(errno(e)),
            },
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let end = match self.listing_end(fh, ino.0, offset) {
            Ok(end) => end,
            Err(e) => return reply.error(errno(e)),
        };
        let result = self.fs().readdir(ino.0, offset, |e| {
            if e.cookie >= end {
                return false; // added after the directory was opened: the listing ends here
            }
            let name = OsStr::from_bytes(&e.name);
            !reply.add(INodeNo(e.ino), e.cookie, kind(e.file_type), name)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let fs = self.fs();
        let end = match self.listing_end(fh, ino.0, offset) {
            Ok(end) => end,
            Err(e) => return reply.error(errno(e)),
        };
        self.view.note_dir(ino.0);
        let result = fs.readdir(ino.0, offset, |e| {
            if e.cookie >= end {
                return false;
            }
            // The kernel takes a lookup reference on every entry but "." and "..".
            if e.name != b"." && e.name != b".." {
                self.view.note_inode(e.ino);
            }
            // A name removed since the listing was read is skipped, as readdir would.
            let Ok(a) = fs.getattr(e.ino) else {
                return true;
            };
            let name = OsStr::from_bytes(&e.name);
            !reply.add(
                INodeNo(e.ino),
                e.cookie,
                name,
                &TTL,
                &file_attr(&a),
                Generation(0),
            )
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.listings.lock().remove(&fh.0);
        let _ = self.fs().close(ino.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let fs = self.fs();
        let blocks = fs.image().geometry().data_block_count();
        let free = fs.free_data_blocks();
        let (used, free_pinodes) = fs.pinode_usage();
        reply.statfs(
            blocks,
            free,
            free,
            used + free_pinodes,
            free_pinodes,
            4096,
            255,
            4096,
        );
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let (Ok(offset), Ok(length)) = (i64::try_from(offset), i64::try_from(length)) else {
            reply.error(Errno::EINVAL);
            return;
        };
        // The kernel clears no set-id bit before a fallocate: the frontend does, as ext4 and
        // tmpfs do (file_modified).
        let result = self
            .remove_privs(req, ino.0)
            .and_then(|()| nosefs_core::vfs::fallocate(self.fs(), ino.0, mode, offset, length));
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e.0)),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        // The kernel answers SEEK_SET, SEEK_CUR and SEEK_END itself; holes are ours to find.
        let what = match whence {
            libc::SEEK_DATA => Seek::Data,
            libc::SEEK_HOLE => Seek::Hole,
            _ => {
                reply.error(Errno::EINVAL);
                return;
            }
        };
        let Ok(offset) = u64::try_from(offset) else {
            reply.error(Errno::ENXIO);
            return;
        };
        match self.fs().seek(ino.0, offset, what) {
            Ok(at) => reply.offset(at as i64),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // With default_permissions the kernel has checked the mode bits already.
        reply_empty(reply, self.fs().getattr(ino.0).map(drop));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.view.note_dir(parent.0);
        let (owner, perm) = self.new_owner(req, parent.0, pinode::S_IFREG | (mode & 0o7777), umask);
        let exclusive = flags & libc::O_EXCL != 0;
        let created = self
            .fs()
            .create(parent.0, name.as_bytes(), perm, owner, exclusive);
        self.open_created(created, reply);
    }
    /// O_TMPFILE (FUSE_TMPFILE, served by our patched fuser): a file with no name in `parent`,
    /// opened at once, freed at its last release unless a link (`linkat` with AT_EMPTY_PATH,
    /// or through /proc/self/fd) names it first. The kernel has checked write and search
    /// permission on `parent` and keeps O_EXCL files unlinkable itself; the core refuses
    /// those too.
    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let (owner, perm) = self.new_owner(req, parent.0, pinode::S_IFREG | (mode & 0o7777), umask);
        let linkable = flags & libc::O_EXCL == 0;
        let created = self.fs().create_tmpfile(parent.0, perm, owner, linkable);
        self.open_created(created, reply);
    }
}

/// The credentials a request was made with: its uid and gid, and the caller's supplementary
/// groups from /proc (its file-system ids there, when the process is still there to ask).
fn request_cred(req: &Request) -> nosefs_core::namespace::perm::Cred {
    let pid = req.pid() as i32;
    nosefs_daemon::server::proc_cred(pid)
        .filter(|c| c.uid == req.uid() && c.gid == req.gid())
        .unwrap_or_else(|| nosefs_core::namespace::perm::Cred {
            uid: req.uid(),
            gid: req.gid(),
            groups: Default::default(),
        })
}
