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

use std::sync::Arc;
use std::time::Duration;

use fuser::{FileHandle, FopenFlags, Generation, INodeNo, ReplyCreate, ReplyEntry, Request};
use nosefs_core::format::pinode;
use nosefs_core::fs::Fs;
use nosefs_core::namespace::{Attr, Owner};

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

mod cache;
mod convert;
mod ops;

pub use cache::{Invalidator, KernelView};
pub use convert::file_attr;
use convert::{errno, owner, reply_entry, request_cred};

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

impl NoseFuse {
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

    /// Owner and permission bits of a new inode of `mode` (with its type) in `parent`: the
    /// caller's, except in a set-group-id directory, whose group the new inode takes, and a new
    /// directory its set-group-id bit too (as every Linux file system does). The kernel has
    /// already dropped a set-group-id bit the caller may not give a file. The umask goes to the
    /// core with the owner: a directory's default ACL replaces it.
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
