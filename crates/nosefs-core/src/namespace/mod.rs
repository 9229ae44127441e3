//! The namespace: pinodes in one global hash table keyed by (parent, name), with a DRAM mirror,
//! per-bucket locks, per-CPU pinode pools and the directory journal (seed 001, III-B, C, E):
//! lookup, create, unlink, rename, link, symlinks, attributes, extended attributes, and mount's
//! recovery. [`crate::fs::Fs`] owns the tables; this module implements its name operations.
//! Every namespace operation is atomic and durable on return. The lock order is in
//! [`crate::fs`].
//!
//! Derived state is kept out of the journal: link counts and directory timestamps are updated in
//! place with atomic stores after the commit, and mount recomputes link counts from the tree, so a
//! crash between the commit and those stores is repaired.

pub mod acl;
mod atime;

pub(crate) mod mirror;
mod open;
mod ops;
pub mod perm;
mod privs;
mod rename;
mod symlink;
mod tmpfile;
pub mod txn;
pub(crate) mod xattr;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::MutexGuard;
use smallvec::SmallVec;

use crate::error::{Errno, Result};
use crate::format::hash_table::name_hash;
use crate::format::pinode::{self, Pinode, INLINE_NAME_MAX, NAME_MAX};
use crate::format::BLOCK_SIZE;
use crate::fs::Fs;
use crate::inode::Inode;
use crate::settle::Journal;
use mirror::{BucketGuard, MirrorEntry};

pub use atime::AtimeMode;
pub use ops::{Owner, SetAttr, LINK_MAX};
pub use rename::RenameFlags;
pub use symlink::SYMLINK_MAX;
pub use xattr::{XattrMode, XATTR_BLOB_MAX, XATTR_VALUE_MAX};

/// Symbolic links followed in one path resolution before ELOOP.
pub const MAX_SYMLINKS: u32 = 40;

/// The root directory's inode number.
pub const ROOT_INO: u64 = crate::mkfs::ROOT_INO;

/// Attributes of an inode, as stat reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// File type and permission bits.
    pub mode: u32,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Device number of a device node.
    pub rdev: u32,
    /// Access time, nanoseconds since the epoch.
    pub atime_ns: i64,
    /// Modification time.
    pub mtime_ns: i64,
    /// Status change time.
    pub ctime_ns: i64,
    /// Space the file holds, in 512-byte units (`st_blocks`): its data bytes in whole 4 KiB
    /// blocks, so a hole holds none. ([`Attr::from_pinode`] counts a file as dense;
    /// [`Fs::getattr`] counts what it holds.)
    pub blocks: u64,
    /// An access ACL (`system.posix_acl_access`) decides permissions, not the mode alone
    /// (see [`Fs::check_permission`]).
    pub acl: bool,
}

impl Attr {
    fn from_pinode(p: &Pinode) -> Attr {
        let is_dir = p.is_dir();
        Attr {
            ino: p.ino.get(),
            mode: p.mode.get(),
            nlink: p.nlink.get(),
            uid: p.uid.get(),
            gid: p.gid.get(),
            size: if is_dir { BLOCK_SIZE } else { p.size.get() },
            rdev: p.rdev.get(),
            atime_ns: p.atime_ns.get(),
            mtime_ns: p.mtime_ns.get(),
            ctime_ns: p.ctime_ns.get(),
            blocks: if is_dir {
                BLOCK_SIZE / 512
            } else {
                p.size.get().div_ceil(BLOCK_SIZE) * (BLOCK_SIZE / 512)
            },
            acl: false,
        }
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & pinode::S_IFMT == pinode::S_IFDIR
    }
}

/// One directory entry from [`Fs::readdir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The name.
    pub name: Vec<u8>,
    /// Its inode number.
    pub ino: u64,
    /// Its file type (`S_IFMT` bits of the mode).
    pub file_type: u32,
    /// Pass this to the next `readdir` call to continue after this entry.
    pub cookie: u64,
}

impl Fs {
    pub(crate) fn bucket_index(&self, hash: u64) -> u64 {
        hash & (self.image.geometry().bucket_count() - 1)
    }

    fn hash(&self, parent: u64, name: &[u8]) -> u64 {
        name_hash(self.image.geometry().hash_seed, parent, name)
    }

    fn name_matches(&self, slot: u32, parent: u64, name: &[u8]) -> bool {
        let p = self.image.pinode(u64::from(slot));
        if p.parent.get() != parent || usize::from(p.name_len) != name.len() {
            return false;
        }
        let inline = name.len().min(INLINE_NAME_MAX);
        p.name[..inline] == name[..inline]
            && (name.len() <= INLINE_NAME_MAX
                || txn::with_full_name(&self.image, &p, |n| n == name))
    }

    /// The mirror entry of (parent, name), without locking anything but its bucket, shared.
    fn find(&self, parent: u64, name: &[u8]) -> Option<MirrorEntry> {
        self.find_hashed(parent, name, self.hash(parent, name))
    }

    /// [`Fs::find`] with the name's hash already computed, for callers that look a name up
    /// several times (a lookup, then the check under locks that it still holds).
    fn find_hashed(&self, parent: u64, name: &[u8], hash: u64) -> Option<MirrorEntry> {
        self.mirror[self.bucket_index(hash) as usize]
            .candidates(hash, |e| self.name_matches(e.slot, parent, name))
    }

    /// The mirror entry of (parent, name) under its bucket's write lock.
    fn find_locked(
        &self,
        guard: &BucketGuard<'_>,
        parent: u64,
        name: &[u8],
    ) -> Option<MirrorEntry> {
        let hash = self.hash(parent, name);
        guard.find(hash, |e| self.name_matches(e.slot, parent, name))
    }

    pub(crate) fn inode(&self, ino: u64) -> Result<Arc<Inode>> {
        self.inodes.get(ino).ok_or(Errno::ENOENT.into())
    }

    /// One path of inode `ino` from the root (`/a/b`; `/` for the root), read up through one of
    /// its names and its directories' names: how a frontend finds a file by name again after the
    /// name it opened it by changed (the kernel's `d_path`). Each name is read under its inode's
    /// lock, so it is one the inode had; a rename further up between two reads can still make the
    /// path stale, so a caller that opens it checks what it got. ENOENT for an inode with no name
    /// (unlinked, or an O_TMPFILE never linked).
    pub fn path_of(&self, ino: u64) -> Result<Vec<u8>> {
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut path_bytes = 0;
        let mut at = ino;
        while at != ROOT_INO {
            let inode = self.inode(at)?;
            let data = inode.data.lock();
            let slot = data.names().next().ok_or(Errno::ENOENT)?;
            let p = self.image.pinode(u64::from(slot));
            let name = txn::full_name(&self.image, &p);
            drop(data);
            path_bytes += name.len() + 1;
            if path_bytes >= libc::PATH_MAX as usize {
                return Err(Errno::ENAMETOOLONG.into());
            }
            names.push(name);
            at = p.parent.get();
        }
        if names.is_empty() {
            return Ok(b"/".to_vec());
        }
        Ok(names.iter().rev().fold(Vec::new(), |mut path, name| {
            path.push(b'/');
            path.extend_from_slice(name);
            path
        }))
    }

    /// A directory's inode, or ENOENT / ENOTDIR.
    fn dir_inode(&self, ino: u64) -> Result<Arc<Inode>> {
        let inode = self.inode(ino)?;
        if inode.dir().is_none() {
            return Err(Errno::ENOTDIR.into());
        }
        Ok(inode)
    }

    /// The primary pinode of an inode, read consistently with concurrent new versions.
    pub(crate) fn primary_pinode(&self, inode: &Inode) -> Result<Pinode> {
        loop {
            let slot = inode.primary_slot();
            let p = self.image.pinode(u64::from(slot));
            if p.is_valid() && p.ino.get() == inode.ino && p.is_primary() {
                return Ok(p);
            }
            if inode.removed.load(Ordering::Acquire) {
                return Err(Errno::ENOENT.into());
            }
            if inode.primary_slot() == slot {
                // The slot is mid-replacement; the new primary is published right after commit.
                std::thread::yield_now();
            }
        }
    }

    /// Attributes of inode `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let inode = match self.inode(ino) {
            Ok(inode) => inode,
            Err(e) => return self.removed_dir_attr(ino).ok_or(e),
        };
        let mut attr = Attr::from_pinode(&self.primary_pinode(&inode)?);
        attr.acl = inode.has_acl();
        if let Some(file) = inode.file_state() {
            // Writes since the last commit live in DRAM until fsync; stat sees them.
            let state = file.lock();
            let (size, mtime_ns) = state.size_and_mtime();
            attr.blocks = state.allocated_blocks() * (BLOCK_SIZE / 512);
            drop(state);
            attr.size = size;
            attr.mtime_ns = mtime_ns;
            attr.ctime_ns = attr.ctime_ns.max(mtime_ns);
        } else if inode.is_file() && attr.size > 0 {
            attr.blocks = self.unloaded_file_blocks(&inode)? * (BLOCK_SIZE / 512);
        }
        Ok(attr)
    }

    /// Whether inode `ino`'s mode has set-user-id or set-group-id (kept in DRAM beside the
    /// mode: cheaper than [`Fs::getattr`] where that is all a caller asks).
    pub fn has_setid(&self, ino: u64) -> Result<bool> {
        Ok(self.inode(ino)?.has_setid())
    }

    /// Looks `name` up in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        let dir = self.dir_inode(parent)?;
        match name {
            b"." => return self.getattr(parent),
            b".." => return self.getattr(self.parent_of(&dir)?),
            _ => {}
        }
        check_name_len(name)?;
        let entry = self.find(parent, name).ok_or(Errno::ENOENT)?;
        let ino = self.image.pinode(u64::from(entry.slot)).ino.get();
        self.getattr(ino)
    }

    /// A directory removed while open keeps answering getattr until its last close, as on
    /// Linux: its attributes at removal (`primary`, read before the commit that removed it),
    /// with no links. Called under the directory's inode lock, after that commit.
    pub(crate) fn keep_removed_dir(&self, dir: &Inode, primary: &Pinode) {
        let open = dir.open_count.load(Ordering::Acquire);
        if open == 0 {
            return;
        }
        let mut attr = Attr::from_pinode(primary);
        attr.nlink = 0;
        attr.ctime_ns = crate::mkfs::now_ns();
        self.removed_dirs.lock().insert(dir.ino, (attr, open));
    }

    fn removed_dir_attr(&self, ino: u64) -> Option<Attr> {
        self.removed_dirs.lock().get(&ino).map(|(attr, _)| *attr)
    }

    /// The close of a description of a removed directory; `None` when `ino` is none.
    pub(crate) fn close_removed_dir(&self, ino: u64) -> Option<()> {
        let mut dirs = self.removed_dirs.lock();
        let (_, open) = dirs.get_mut(&ino)?;
        *open -= 1;
        if *open == 0 {
            dirs.remove(&ino);
        }
        Some(())
    }

    fn parent_of(&self, dir: &Inode) -> Result<u64> {
        if dir.ino == ROOT_INO {
            return Ok(ROOT_INO);
        }
        Ok(self.primary_pinode(dir)?.parent.get())
    }

    /// Where a listing of directory `dir` opened now should end: the first cookie a name added
    /// (or moved in, or renamed) later will get. A reader that stops there ends, however many
    /// names are renamed under it as it reads (btrfs's rule; POSIX leaves it open whether such
    /// names are returned again, not whether the listing ends).
    pub fn listing_end(&self, dir: u64) -> Result<u64> {
        let inode = self.dir_inode(dir)?;
        Ok(inode.dir().expect("dir_inode checked").listing_end())
    }

    /// Lists directory `dir` from `cookie` (0 to start), calling `emit` for each entry until it
    /// returns false. "." and ".." come first. Entries created or removed during the listing may or
    /// may not appear; every entry present throughout appears exactly once.
    pub fn readdir(
        &self,
        dir: u64,
        cookie: u64,
        mut emit: impl FnMut(DirEntry) -> bool,
    ) -> Result<()> {
        let inode = self.dir_inode(dir)?;
        if cookie == 0 {
            self.note_access(&inode); // a listing reads the directory
        }
        let state = inode.dir().expect("dir_inode checked");
        let dots: [(&[u8], u64, u64); 2] = [(b".", dir, 1), (b"..", self.parent_of(&inode)?, 2)];
        for (name, ino, c) in dots {
            if cookie < c {
                let entry = DirEntry {
                    name: name.to_vec(),
                    ino,
                    file_type: pinode::S_IFDIR,
                    cookie: c,
                };
                if !emit(entry) {
                    return Ok(());
                }
            }
        }
        let start = cookie.max(crate::inode::FIRST_ENTRY_SEQ - 1) + 1;
        let mut next = start;
        loop {
            let batch = state.children.batch_from(next, 64);
            let Some(&(last, _)) = batch.last() else {
                break;
            };
            for (seq, slot) in batch {
                let p = self.image.pinode(u64::from(slot));
                // A slot freed and reused since the batch was read is no longer this entry.
                if !p.is_valid() || p.parent.get() != dir {
                    continue;
                }
                let entry = DirEntry {
                    name: txn::full_name(&self.image, &p),
                    ino: p.ino.get(),
                    file_type: p.mode.get() & pinode::S_IFMT,
                    cookie: seq,
                };
                if !emit(entry) {
                    return Ok(());
                }
            }
            next = last + 1;
        }
        Ok(())
    }

    /// Resolves `path`, absolute or relative to directory `start`, component by component,
    /// following symbolic links in every component and, when `follow_last` is set, in the last.
    ///
    /// Each component takes only its bucket's shared lock. A rename elsewhere in the path can
    /// change several buckets between two components, so the walk records each bucket's sequence
    /// (the per-bucket seqlock) and walks again if any changed before it finished.
    pub fn resolve(&self, start: u64, path: &[u8], follow_last: bool) -> Result<Attr> {
        const ATTEMPTS: usize = 8;
        let mut last = Err(Errno::ENOENT.into());
        for _ in 0..ATTEMPTS {
            let mut seen = Vec::new();
            let mut budget = MAX_SYMLINKS;
            last = self.walk(start, path, follow_last, &mut budget, &mut seen);
            let stable = seen
                .iter()
                .all(|&(b, seq)| seq % 2 == 0 && self.mirror[b as usize].sequence() == seq);
            if stable {
                return last;
            }
        }
        last
    }

    fn walk(
        &self,
        start: u64,
        path: &[u8],
        follow_last: bool,
        budget: &mut u32,
        seen: &mut Vec<(u64, u64)>,
    ) -> Result<Attr> {
        if path.is_empty() {
            return Err(Errno::ENOENT.into());
        }
        let mut attr = self.getattr(if path[0] == b'/' { ROOT_INO } else { start })?;
        let components: Vec<&[u8]> = path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .collect();
        for (i, component) in components.iter().enumerate() {
            if !attr.is_dir() {
                return Err(Errno::ENOTDIR.into());
            }
            let dir = attr.ino;
            let bucket = self.bucket_index(self.hash(dir, component));
            seen.push((bucket, self.mirror[bucket as usize].sequence()));
            attr = self.lookup(dir, component)?;
            let last = i + 1 == components.len();
            if attr.mode & pinode::S_IFMT == pinode::S_IFLNK && (!last || follow_last) {
                *budget = budget.checked_sub(1).ok_or(Errno::ELOOP)?;
                let target = self.readlink(attr.ino)?;
                attr = self.walk(dir, &target, true, budget, seen)?;
            }
        }
        if path.ends_with(b"/") && !attr.is_dir() {
            return Err(Errno::ENOTDIR.into());
        }
        Ok(attr)
    }

    /// Allocates a pinode slot, or ENOSPC.
    fn alloc_pinode(&self) -> Result<u32> {
        self.alloc_or_settle(|| self.pinodes.alloc(&self.image))
            .ok_or(Errno::ENOSPC.into())
    }

    /// Starts fetching NVM bucket `bucket`, which the commit reads (its head) and writes: the
    /// miss then overlaps the mirror bucket's.
    fn prefetch_nvm_bucket(&self, bucket: u64) {
        let offset = self.image.geometry().bucket_offset(bucket);
        self.image.region().prefetch(offset);
    }

    /// Starts fetching both cache lines of pinode `slot`, about to be written.
    fn prefetch_pinode(&self, slot: u32) {
        let offset = self.image.geometry().pinode_offset(u64::from(slot));
        self.image.region().prefetch(offset);
        self.image.region().prefetch(offset + 64);
    }

    fn new_ino(&self) -> u64 {
        self.next_ino.fetch_add(1, Ordering::Relaxed)
    }

    /// Commits `txn`, whose pinodes live in `buckets` (held locked by the caller), through the
    /// highest-numbered of their directory logs, holding all of their logs in ascending order.
    /// The log is left unsettled ([`crate::settle`]); the log of the last commit that touched one of the
    /// buckets, if that commit is still unsettled, is settled first, so it can never be replayed
    /// over this one.
    pub(crate) fn commit(&self, buckets: &[u64], txn: &mut txn::Txn) {
        let log_count = self.image.geometry().dir_log_count();
        let mut logs: SmallVec<[u64; 6]> =
            buckets.iter().map(|b| 1 + b % (log_count - 1)).collect();
        logs.sort_unstable();
        logs.dedup();
        let _held: SmallVec<[MutexGuard<'_, ()>; 6]> =
            logs.iter().map(|&l| self.logs[l as usize].lock()).collect();
        let target = *logs.last().expect("a transaction touches a bucket");
        let marked: SmallVec<[u64; 6]> = buckets
            .iter()
            .filter_map(|&b| {
                let last = self.mirror[b as usize].last_commit();
                self.settler.unsettled_log_of(last)
            })
            .filter(|&log| log != target)
            .collect();
        if !marked.is_empty() && !txn::fault::active(txn::fault::Fault::SkipSettle) {
            let released = self.settler.settle(&self.image, &marked);
            self.return_to_pools(&released);
        }
        txn::commit(&self.image, target, txn);
        let commit = self.settler.cleared_lazily(Journal::Dir, target);
        for &b in buckets {
            self.mirror[b as usize].set_last_commit(commit);
        }
    }

    /// Locks the mirror buckets of NVM buckets `buckets` in ascending order, once each. The
    /// guards are keyed by [`Buckets::key`](mirror::Buckets::key); find one with
    /// [`Fs::guard_of`].
    pub(crate) fn lock_buckets(&self, buckets: &[u64]) -> SmallVec<[(u64, BucketGuard<'_>); 6]> {
        let mut sorted: SmallVec<[u64; 6]> = buckets.iter().map(|&b| self.mirror.key(b)).collect();
        sorted.sort_unstable();
        sorted.dedup();
        sorted
            .into_iter()
            .map(|b| (b, self.mirror[b as usize].lock()))
            .collect()
    }

    /// The guard of NVM bucket `bucket` among those [`Fs::lock_buckets`] took.
    fn guard_of<'a, 'b>(
        &self,
        guards: &'a mut [(u64, BucketGuard<'b>)],
        bucket: u64,
    ) -> &'a mut BucketGuard<'b> {
        let key = self.mirror.key(bucket);
        &mut guards
            .iter_mut()
            .find(|(b, _)| *b == key)
            .expect("bucket is locked")
            .1
    }
}

/// ENAMETOOLONG for names over NAME_MAX; ENOENT for the empty name.
fn check_name_len(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return Err(Errno::ENOENT.into());
    }
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG.into());
    }
    Ok(())
}

/// Validates a name for a new entry: length, no '/' or NUL, not "." or "..".
fn check_new_name(name: &[u8]) -> Result<()> {
    check_name_len(name)?;
    if name == b"." || name == b".." {
        return Err(Errno::EEXIST.into());
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL.into());
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
