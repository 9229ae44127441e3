//! The calls a shim makes, as one trait with two implementations: [`Local`] runs them on an
//! `Fs` in the calling process (the shim's embedded mode, and the daemon executing a client's
//! request), [`crate::client::Remote`] sends them to a `nosefs mount` daemon.
//!
//! Path operations take a [`Found`] the caller got from [`Service::walk`]. A remote service
//! sends the found path (every symbolic link in it resolved) and the daemon walks it again with
//! the client's credentials, so a client cannot name what it could not reach. Descriptor
//! operations take a [`Handle`]: the inode number in embedded mode, an unguessable token the
//! daemon issued at open otherwise.

use nosefs_core::file::holes::DataExtent;
use nosefs_core::fs::Fs;
use nosefs_core::namespace::perm::Cred;
use nosefs_core::namespace::{Attr, DirEntry, SetAttr};
use nosefs_core::vfs::{self, Caller, Found, OpenKind, Walked, XattrCall};
use nosefs_core::Errno;
use std::sync::atomic::AtomicU64;

/// An open file description's name for the service.
pub type Handle = u64;

pub use crate::read_cache::{CachedPieces, ReadCache};

/// What `open` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// The object's attributes after creation and truncation.
    pub attr: Attr,
    /// What the description refers to.
    pub kind: OpenKind,
    /// Its handle.
    pub handle: Handle,
}

/// File-system statistics: data blocks, free data blocks, inodes, free inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Statfs {
    /// Data blocks.
    pub blocks: u64,
    /// Free data blocks.
    pub blocks_free: u64,
    /// Inodes (pinodes).
    pub inodes: u64,
    /// Free inodes.
    pub inodes_free: u64,
}

/// What [`Service::open_path`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenedPath {
    /// The path leaves noseFS (a symbolic link, or `..` at its root): the kernel's, as this.
    Outside(Vec<u8>),
    /// Opened: where the path led, and the description.
    Opened(Box<Found>, Opened),
}

/// Which inode an extended-attribute call addresses.
#[derive(Debug, Clone, Copy)]
pub enum XattrTarget<'a> {
    /// A path (getxattr, lgetxattr, ...).
    Path(&'a Found),
    /// An open description (fgetxattr, ...).
    Handle(Handle),
}

/// A plain name in an open directory: the directory's handle, its path, the name.
pub type NameIn<'a> = (Handle, &'a [u8], &'a [u8]);

/// The calls the shim makes on noseFS.
pub trait Service {
    /// Resolves an absolute logical path.
    fn walk(&self, path: Vec<u8>, follow_last: bool) -> Result<Walked, Errno>;
    /// One plain name in an open directory (`None`: walk the full path instead).
    fn walk_in(
        &self,
        dir: Handle,
        dir_path: &[u8],
        name: &[u8],
        follow_last: bool,
    ) -> Result<Option<Found>, Errno>;
    /// `open`, with creation and truncation.
    fn open(&self, found: &Found, flags: i32, mode: u32, umask: u32) -> Result<Opened, Errno>;
    /// [`Service::walk`] then [`Service::open`] on what it found: one round trip to a daemon,
    /// which walks the path itself.
    fn open_path(
        &self,
        path: Vec<u8>,
        follow_last: bool,
        flags: i32,
        mode: u32,
        umask: u32,
    ) -> Result<OpenedPath, Errno> {
        open_again(flags, || match self.walk(path.clone(), follow_last)? {
            Walked::Outside(p) => Ok(Ok(OpenedPath::Outside(p))),
            Walked::Found(found) => Ok(self
                .open(&found, flags, mode, umask)
                .map(|opened| OpenedPath::Opened(Box::new(found), opened))),
        })
    }
    /// [`Service::walk_in`] then [`Service::open`] on what it found, in one round trip to a
    /// daemon: `None` when the name needs a full walk.
    #[allow(clippy::too_many_arguments)]
    fn open_in(
        &self,
        dir: Handle,
        dir_path: &[u8],
        name: &[u8],
        follow_last: bool,
        flags: i32,
        mode: u32,
        umask: u32,
    ) -> Result<Option<(Box<Found>, Opened)>, Errno> {
        open_again(flags, || {
            match self.walk_in(dir, dir_path, name, follow_last)? {
                None => Ok(Ok(None)),
                Some(found) => Ok(self
                    .open(&found, flags, mode, umask)
                    .map(|opened| Some((Box::new(found), opened)))),
            }
        })
    }
    /// `unlinkat` of a plain name in an open directory: [`Service::walk_in`] then
    /// [`Service::unlink`], in one round trip to a daemon; `false` when the name needs a full
    /// walk (nothing was done).
    fn unlink_in(&self, dir: Handle, dir_path: &[u8], name: &[u8]) -> Result<bool, Errno> {
        match self.walk_in(dir, dir_path, name, false)? {
            Some(found) => self.unlink(&found).map(|()| true),
            None => Ok(false),
        }
    }
    /// `renameat2` between plain names in open directories (each a handle, its path and the
    /// name), in one round trip to a daemon; `false` when a name needs a full walk.
    fn rename_in(&self, from: NameIn<'_>, to: NameIn<'_>, flags: u32) -> Result<bool, Errno> {
        let a = self.walk_in(from.0, from.1, from.2, false)?;
        let b = self.walk_in(to.0, to.1, to.2, false)?;
        match (a, b) {
            (Some(a), Some(b)) => self.rename(&a, &b, flags).map(|()| true),
            _ => Ok(false),
        }
    }
    /// The description is gone from this process.
    fn close(&self, handle: Handle);
    /// Reads at `offset`.
    fn read(&self, handle: Handle, offset: u64, buf: &mut [u8]) -> Result<usize, Errno>;
    /// Reads at `offset` as [`Service::read`], where the description's `cache` may let a
    /// service answer without asking (a daemon client the image's owner trusts: from its view
    /// of the image, `nosefs_core::file::direct`).
    fn read_cached(
        &self,
        handle: Handle,
        offset: u64,
        buf: &mut [u8],
        cache: &ReadCache,
    ) -> Result<usize, Errno> {
        let _ = cache;
        self.read(handle, offset, buf)
    }
    /// Writes at `offset`, or at the end with `append`; returns where the data went.
    fn write(&self, handle: Handle, offset: u64, data: &[u8], append: bool) -> Result<u64, Errno>;
    /// `fsync`.
    fn fsync(&self, handle: Handle) -> Result<(), Errno>;
    /// `ftruncate`.
    fn ftruncate(&self, handle: Handle, size: u64) -> Result<(), Errno>;
    /// `fstat`.
    fn fstat(&self, handle: Handle) -> Result<Attr, Errno>;
    /// The size of regular file `handle` now: `lseek(SEEK_END)`. `watch` is the caller's word
    /// for this description, zero at first, where a service may remember how to answer
    /// without asking (a daemon client: the word of its size board the daemon keeps).
    fn end_of(&self, handle: Handle, watch: &AtomicU64) -> Result<u64, Errno> {
        let _ = watch;
        Ok(self.fstat(handle)?.size)
    }
    /// fchmod, fchown, futimens.
    fn fsetattr(&self, handle: Handle, change: &SetAttr, times_now: bool) -> Result<(), Errno>;
    /// Directory entries after `cookie`, at most `max`.
    fn readdir(&self, handle: Handle, cookie: u64, max: usize) -> Result<Vec<DirEntry>, Errno>;
    /// `fallocate`.
    fn fallocate(&self, handle: Handle, mode: i32, offset: i64, len: i64) -> Result<(), Errno>;
    /// `lseek` SEEK_DATA (`data`) or SEEK_HOLE from `offset`.
    fn seek_hole(&self, handle: Handle, offset: u64, data: bool) -> Result<u64, Errno>;
    /// Where a listing of the open directory starting now ends (`Fs::listing_end`).
    fn listing_end(&self, handle: Handle) -> Result<u64, Errno>;
    /// Where an open file's data in `[start, start + len)` is, at most `max` runs (FIEMAP).
    fn data_map(
        &self,
        handle: Handle,
        start: u64,
        len: u64,
        max: usize,
    ) -> Result<Vec<DataExtent>, Errno>;
    /// A path of the open description's inode now, from the noseFS root (`/` for the root):
    /// where a file renamed since it was opened is found by name again (`Fs::path_of`).
    fn path_of(&self, handle: Handle) -> Result<Vec<u8>, Errno>;
    /// `truncate` of a path.
    fn truncate(&self, found: &Found, size: i64) -> Result<(), Errno>;
    /// `mkdir`.
    fn mkdir(&self, found: &Found, mode: u32, umask: u32) -> Result<(), Errno>;
    /// `mknod`; returns the new inode's attributes.
    fn mknod(&self, found: &Found, mode: u32, rdev: u64, umask: u32) -> Result<Attr, Errno>;
    /// `symlink`.
    fn symlink(&self, target: &[u8], found: &Found) -> Result<(), Errno>;
    /// `readlink`.
    fn readlink(&self, found: &Found) -> Result<Vec<u8>, Errno>;
    /// `unlink`.
    fn unlink(&self, found: &Found) -> Result<(), Errno>;
    /// `rmdir` (`last`: the last component as the caller wrote it).
    fn rmdir(&self, found: &Found, last: &[u8]) -> Result<(), Errno>;
    /// `rename` / `renameat2`.
    fn rename(&self, from: &Found, to: &Found, flags: u32) -> Result<(), Errno>;
    /// `link`.
    fn link(&self, from: &Found, to: &Found) -> Result<(), Errno>;
    /// `linkat(fd, "", ..., AT_EMPTY_PATH)`: a name for an open file (O_TMPFILE's first).
    fn flink(&self, handle: Handle, to: &Found) -> Result<(), Errno>;
    /// chmod, chown, utimensat of a path.
    fn setattr(&self, found: &Found, change: &SetAttr, times_now: bool) -> Result<(), Errno>;
    /// `statfs`.
    fn statfs(&self) -> Result<Statfs, Errno>;
    /// `sync` / `syncfs`.
    fn sync_all(&self) -> Result<(), Errno>;
    /// getxattr, listxattr (their bytes), setxattr, removexattr (nothing), on a path or an open
    /// description.
    fn xattr(&self, target: XattrTarget<'_>, call: XattrCall<'_>) -> Result<Vec<u8>, Errno>;
}

fn core<T>(r: nosefs_core::Result<T>) -> Result<T, Errno> {
    r.map_err(|e| e.errno())
}

/// The calls run on a mounted `Fs` in this process, as `cred`. Handles are inode numbers; the
/// caller has checked that the description allows the call (read, write).
pub struct Local<'a> {
    /// The file system.
    pub fs: &'a Fs,
    /// Where the caller sees noseFS's root.
    pub prefix: &'a [u8],
    /// The caller's credentials, asked for only by the calls that check permissions (reads and
    /// writes of an open description, the hot path, never copy them).
    pub cred: &'a dyn Fn() -> Cred,
}

impl std::fmt::Debug for Local<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Local")
            .field("prefix", &String::from_utf8_lossy(self.prefix))
            .finish_non_exhaustive()
    }
}

impl Local<'_> {
    fn cred(&self) -> Cred {
        (self.cred)()
    }

    fn caller(&self, umask: u32) -> Caller {
        Caller {
            cred: self.cred(),
            umask,
        }
    }
}

impl Service for Local<'_> {
    fn walk(&self, path: Vec<u8>, follow_last: bool) -> Result<Walked, Errno> {
        vfs::walk(self.fs, &self.cred(), self.prefix, path, follow_last)
    }

    fn walk_in(
        &self,
        dir: Handle,
        dir_path: &[u8],
        name: &[u8],
        follow_last: bool,
    ) -> Result<Option<Found>, Errno> {
        vfs::walk_in(self.fs, &self.cred(), dir, dir_path, name, follow_last)
    }

    fn open(&self, found: &Found, flags: i32, mode: u32, umask: u32) -> Result<Opened, Errno> {
        let (attr, kind) = vfs::open(self.fs, &self.caller(umask), found, flags, mode)?;
        Ok(Opened {
            attr,
            kind,
            handle: attr.ino,
        })
    }

    fn close(&self, _handle: Handle) {}

    fn read(&self, handle: Handle, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        core(self.fs.read(handle, offset, buf))
    }

    fn write(&self, handle: Handle, offset: u64, data: &[u8], append: bool) -> Result<u64, Errno> {
        let at = (!append).then_some(offset);
        vfs::write_by(self.fs, || self.cred(), handle, at, data)
    }

    fn fsync(&self, handle: Handle) -> Result<(), Errno> {
        core(self.fs.fsync(handle))
    }

    fn ftruncate(&self, handle: Handle, size: u64) -> Result<(), Errno> {
        vfs::remove_privs(self.fs, || self.cred(), handle)?;
        core(self.fs.truncate(handle, size))
    }

    fn fstat(&self, handle: Handle) -> Result<Attr, Errno> {
        core(self.fs.getattr(handle))
    }

    fn fsetattr(&self, handle: Handle, change: &SetAttr, times_now: bool) -> Result<(), Errno> {
        vfs::setattr(self.fs, &self.cred(), handle, change, times_now).map(drop)
    }

    fn readdir(&self, handle: Handle, cookie: u64, max: usize) -> Result<Vec<DirEntry>, Errno> {
        let mut out = Vec::new();
        core(self.fs.readdir(handle, cookie, |e| {
            out.push(e);
            out.len() < max
        }))?;
        Ok(out)
    }

    fn fallocate(&self, handle: Handle, mode: i32, offset: i64, len: i64) -> Result<(), Errno> {
        vfs::remove_privs(self.fs, || self.cred(), handle)?;
        vfs::fallocate(self.fs, handle, mode, offset, len)
    }

    fn listing_end(&self, handle: Handle) -> Result<u64, Errno> {
        self.fs.listing_end(handle).map_err(|e| e.errno())
    }

    fn seek_hole(&self, handle: Handle, offset: u64, data: bool) -> Result<u64, Errno> {
        let what = if data {
            nosefs_core::file::holes::Seek::Data
        } else {
            nosefs_core::file::holes::Seek::Hole
        };
        self.fs.seek(handle, offset, what).map_err(|e| e.errno())
    }

    fn truncate(&self, found: &Found, size: i64) -> Result<(), Errno> {
        vfs::truncate(self.fs, &self.cred(), found, size)
    }

    fn data_map(
        &self,
        handle: Handle,
        start: u64,
        len: u64,
        max: usize,
    ) -> Result<Vec<DataExtent>, Errno> {
        core(self.fs.data_map(handle, start, len, max))
    }

    fn path_of(&self, handle: Handle) -> Result<Vec<u8>, Errno> {
        core(self.fs.path_of(handle))
    }

    fn mkdir(&self, found: &Found, mode: u32, umask: u32) -> Result<(), Errno> {
        vfs::mkdir(self.fs, &self.caller(umask), found, mode).map(drop)
    }

    fn mknod(&self, found: &Found, mode: u32, rdev: u64, umask: u32) -> Result<Attr, Errno> {
        vfs::mknod(self.fs, &self.caller(umask), found, mode, rdev)
    }

    fn symlink(&self, target: &[u8], found: &Found) -> Result<(), Errno> {
        vfs::symlink(self.fs, &self.cred(), target, found).map(drop)
    }

    fn readlink(&self, found: &Found) -> Result<Vec<u8>, Errno> {
        vfs::readlink(self.fs, found)
    }

    fn unlink(&self, found: &Found) -> Result<(), Errno> {
        vfs::unlink(self.fs, &self.cred(), found)
    }

    fn rmdir(&self, found: &Found, last: &[u8]) -> Result<(), Errno> {
        vfs::rmdir(self.fs, &self.cred(), found, last)
    }

    fn rename(&self, from: &Found, to: &Found, flags: u32) -> Result<(), Errno> {
        vfs::rename(self.fs, &self.cred(), from, to, flags)
    }

    fn link(&self, from: &Found, to: &Found) -> Result<(), Errno> {
        vfs::link(self.fs, &self.cred(), from, to).map(drop)
    }

    fn flink(&self, handle: Handle, to: &Found) -> Result<(), Errno> {
        vfs::flink(self.fs, &self.cred(), handle, to).map(drop)
    }

    fn setattr(&self, found: &Found, change: &SetAttr, times_now: bool) -> Result<(), Errno> {
        let ino = vfs::stat(found)?.ino;
        vfs::setattr(self.fs, &self.cred(), ino, change, times_now).map(drop)
    }

    fn statfs(&self) -> Result<Statfs, Errno> {
        let blocks = self.fs.image().geometry().data_block_count();
        let (used, free_pinodes) = self.fs.pinode_usage();
        Ok(Statfs {
            blocks,
            blocks_free: self.fs.free_data_blocks(),
            inodes: used + free_pinodes,
            inodes_free: free_pinodes,
        })
    }

    fn sync_all(&self) -> Result<(), Errno> {
        core(self.fs.sync_all())
    }

    fn xattr(&self, target: XattrTarget<'_>, call: XattrCall<'_>) -> Result<Vec<u8>, Errno> {
        let attr = match target {
            XattrTarget::Path(found) => vfs::stat(found)?,
            XattrTarget::Handle(handle) => core(self.fs.getattr(handle))?,
        };
        vfs::xattr(self.fs, &self.cred(), &attr, call)
    }
}

/// An open with O_CREAT whose name went away between the walk and the open (another thread,
/// process or client unlinked it) walks again and creates it, as the kernel's open retries its
/// lookup: ENOENT is no answer to O_CREAT while the directory exists. `open` walks (an error of
/// the walk is the answer: a missing directory is ENOENT at once, as from the kernel) and then
/// opens (its ENOENT is the race, retried); the daemon's open requests and the embedded shim's
/// opens go through here, once each.
pub fn open_again<T>(
    flags: i32,
    mut open: impl FnMut() -> Result<Result<T, Errno>, Errno>,
) -> Result<T, Errno> {
    let mut attempts = 0;
    loop {
        match open()? {
            Err(e) if e == Errno::ENOENT && flags & libc::O_CREAT != 0 && attempts < 100 => {
                // The name keeps going away: let whoever removes it run.
                attempts += 1;
                std::thread::yield_now();
            }
            result => return result,
        }
    }
}
