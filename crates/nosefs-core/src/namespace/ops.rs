//! Namespace operations that add, remove or change one name: create, mknod, mkdir, unlink,
//! rmdir, link, and attribute changes (chmod, chown, utimens). Each is one journal transaction.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::MutexGuard;
use zerocopy::little_endian::{I64, U32, U64};

use super::mirror::MirrorEntry;
use super::txn::{InPlace, Txn};
use super::{check_name_len, check_new_name, Attr};
use crate::error::{Errno, Result};
use crate::format::long_name::LongName;
use crate::format::pinode::{self, Pinode, INLINE_NAME_MAX};
use crate::fs::Fs;
use crate::inode::{Inode, InodeData};
use crate::mkfs::now_ns;
use smallvec::{smallvec, SmallVec};

/// Most links one inode may have (as ext4's LINK_MAX).
pub const LINK_MAX: u32 = 65_000;

/// Owner of a new inode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Owner {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// The creator's umask: cleared from the permission bits, unless the directory has a
    /// default ACL, which decides them instead (POSIX.1e). 0 when the caller applied it.
    pub umask: u32,
}

/// Attribute changes; `None` leaves a field as it is. The change time is set to now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits (the file type is kept).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New access time, nanoseconds since the epoch.
    pub atime_ns: Option<i64>,
    /// New modification time.
    pub mtime_ns: Option<i64>,
    /// New size (truncate), regular files only; committed before the other changes.
    pub size: Option<u64>,
}

impl SetAttr {
    /// Whether the change touches anything but the size.
    fn changes_pinode(&self) -> bool {
        self.mode.is_some()
            || self.uid.is_some()
            || self.gid.is_some()
            || self.atime_ns.is_some()
            || self.mtime_ns.is_some()
    }
}

/// Field offsets for in-place stores of derived state.
const MTIME_OFFSET: u64 = 48;
const CTIME_OFFSET: u64 = 56;
const NLINK_OFFSET: u64 = 64;

/// One inode's lock, held for an operation. It borrows the caller's `Arc<Inode>`, which keeps
/// the inode alive for as long as it is held.
pub(crate) type DataGuard<'a> = MutexGuard<'a, InodeData>;
/// Inode locks held by an operation, by inode number.
pub(crate) type Locked<'a> = SmallVec<[(u64, DataGuard<'a>); 4]>;
/// A new long-name record to write with a transaction.
pub(super) type NewLongName = Option<(u32, LongName)>;

/// The data of inode `ino`, which the operation holds locked.
pub(super) fn held<'l>(locked: &'l [(u64, DataGuard<'_>)], ino: u64) -> &'l InodeData {
    &locked
        .iter()
        .find(|(i, _)| *i == ino)
        .expect("inode is locked")
        .1
}

/// The data of inode `ino`, which the operation holds locked, for changing.
pub(super) fn held_mut<'l>(locked: &'l mut [(u64, DataGuard<'_>)], ino: u64) -> &'l mut InodeData {
    &mut locked
        .iter_mut()
        .find(|(i, _)| *i == ino)
        .expect("inode is locked")
        .1
}

/// A name about to be created: its hash, its bucket, and that bucket's lock.
pub(super) struct NewName<'a> {
    pub hash: u64,
    pub bucket: u64,
    pub guards: SmallVec<[(u64, super::mirror::BucketGuard<'a>); 6]>,
}

impl Fs {
    /// Locks inodes in ascending inode order, once each.
    pub(crate) fn lock_inodes<'a>(&self, inodes: &[&'a Arc<Inode>]) -> Locked<'a> {
        let mut sorted: SmallVec<[&'a Arc<Inode>; 4]> = SmallVec::from_slice(inodes);
        sorted.sort_by_key(|i| i.ino);
        sorted.dedup_by_key(|i| i.ino);
        sorted.into_iter().map(|i| (i.ino, i.data.lock())).collect()
    }

    /// Sets `p`'s name, allocating a long-name record for a name over 40 bytes.
    pub(super) fn name_pinode(&self, p: &mut Pinode, name: &[u8]) -> Result<NewLongName> {
        p.set_name(name);
        if name.len() <= INLINE_NAME_MAX {
            p.long_name = U32::new(0);
            return Ok(None);
        }
        let record = self
            .alloc_or_settle(|| self.long_names.alloc(&self.image))
            .ok_or(Errno::ENOSPC)?;
        p.long_name = U32::new(record);
        Ok(Some((record, LongName::new(name))))
    }

    /// Returns slots and long-name records that a committed transaction released, once no
    /// unsettled log can name them ([`crate::settle`]).
    pub(crate) fn release(&self, pinodes: &[u32], long_names: &[u32]) {
        self.hold_back(|limbo| {
            limbo.pinodes.extend_from_slice(pinodes);
            limbo
                .long_names
                .extend(long_names.iter().copied().filter(|&r| r != 0));
        });
    }

    /// In-place stores that set a pinode's mtime and ctime to `now`.
    pub(super) fn touch(&self, slot: u32, now: i64) -> [InPlace; 2] {
        let base = self.image.geometry().pinode_offset(u64::from(slot));
        let at = |offset| InPlace {
            offset: base + offset,
            value: now as u64,
            len: 8,
        };
        [at(MTIME_OFFSET), at(CTIME_OFFSET)]
    }

    /// In-place store of a pinode's ctime.
    pub(super) fn set_ctime(&self, slot: u32, now: i64) -> InPlace {
        let base = self.image.geometry().pinode_offset(u64::from(slot));
        InPlace {
            offset: base + CTIME_OFFSET,
            value: now as u64,
            len: 8,
        }
    }

    /// In-place store of a pinode's link count.
    pub(super) fn set_nlink(&self, slot: u32, nlink: u32) -> InPlace {
        let base = self.image.geometry().pinode_offset(u64::from(slot));
        InPlace {
            offset: base + NLINK_OFFSET,
            value: u64::from(nlink),
            len: 4,
        }
    }

    /// Locks the mirror bucket of (parent, name), a name about to be created, and checks it is
    /// free. Returns its hash, bucket and the lock.
    pub(super) fn lock_free_name(&self, parent: u64, name: &[u8]) -> Result<NewName<'_>> {
        self.lock_free_name_and(parent, name, None)
    }

    /// [`Fs::lock_free_name`], locking bucket `also` with it (in bucket order).
    pub(super) fn lock_free_name_and(
        &self,
        parent: u64,
        name: &[u8],
        also: Option<u64>,
    ) -> Result<NewName<'_>> {
        let hash = self.hash(parent, name);
        let bucket = self.bucket_index(hash);
        self.prefetch_nvm_bucket(bucket);
        let mut guards = match also {
            Some(also) => self.lock_buckets(&[bucket, also]),
            None => self.lock_buckets(&[bucket]),
        };
        if self
            .find_locked(self.guard_of(&mut guards, bucket), parent, name)
            .is_some()
        {
            return Err(Errno::EEXIST.into());
        }
        Ok(NewName {
            hash,
            bucket,
            guards,
        })
    }

    /// After the commit: lists the new name's slot in its directory and in the mirror.
    pub(super) fn list_name(&self, dir: &Inode, new: &mut NewName<'_>, slot: u32) {
        let state = dir.dir().expect("names are listed in directories");
        let seq = state.next_seq();
        self.guard_of(&mut new.guards, new.bucket)
            .insert(MirrorEntry {
                hash: new.hash,
                slot,
                seq,
            });
        state.children.insert(seq, slot);
    }

    /// Creates a regular file. With `exclusive` false an existing file is returned instead
    /// (O_CREAT without O_EXCL); an existing directory is EISDIR.
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        perm: u32,
        owner: Owner,
        exclusive: bool,
    ) -> Result<Attr> {
        match self.make_node(parent, name, pinode::S_IFREG | (perm & 0o7777), 0, owner) {
            Err(e) if !exclusive && e.errno() == Errno::EEXIST => {
                let existing = self.lookup(parent, name)?;
                if existing.is_dir() {
                    return Err(Errno::EISDIR.into());
                }
                Ok(existing)
            }
            other => other,
        }
    }

    /// Creates a directory.
    pub fn mkdir(&self, parent: u64, name: &[u8], perm: u32, owner: Owner) -> Result<Attr> {
        self.make_node(parent, name, pinode::S_IFDIR | (perm & 0o7777), 0, owner)
    }

    /// Creates a node of any type but directory and symlink: regular file, FIFO, socket,
    /// character or block device (`mode` carries the type).
    pub fn mknod(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        owner: Owner,
    ) -> Result<Attr> {
        match mode & pinode::S_IFMT {
            pinode::S_IFREG
            | pinode::S_IFIFO
            | pinode::S_IFSOCK
            | pinode::S_IFCHR
            | pinode::S_IFBLK => self.make_node(parent, name, mode, rdev, owner),
            _ => Err(Errno::EINVAL.into()),
        }
    }

    fn make_node(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        owner: Owner,
    ) -> Result<Attr> {
        check_new_name(name)?;
        let dir = self.dir_inode(parent)?;
        let mut locked = self.lock_inodes(&[&dir]);
        if dir.removed.load(Ordering::Acquire) {
            return Err(Errno::ENOENT.into());
        }
        let is_dir = mode & pinode::S_IFMT == pinode::S_IFDIR;
        // Under the directory's lock, so its default ACL cannot change meanwhile.
        let (inherited, mode) = self.inherited_xattrs(&dir, mode, owner.umask)?;
        // The attribute pinode's bucket depends on the inode number: known before the name's
        // lock only when there are attributes (a failed create otherwise burns no number).
        let early_ino = inherited.as_ref().map(|_| self.new_ino());
        let xattr_bucket = early_ino.map(|ino| self.xattr_bucket(ino));
        let mut new = self.lock_free_name_and(parent, name, xattr_bucket)?;
        self.writable()?; // after the name: an existing one is EEXIST, as Linux has it
        let slot = self.alloc_pinode()?;
        self.prefetch_pinode(slot);
        let now = now_ns();
        let ino = early_ino.unwrap_or_else(|| self.new_ino());
        let mut p = Pinode::zeroed();
        p.ino = U64::new(ino);
        p.parent = U64::new(parent);
        p.flags = U32::new(pinode::FLAG_PRIMARY);
        p.mode = U32::new(mode);
        (p.uid, p.gid, p.rdev) = (U32::new(owner.uid), U32::new(owner.gid), U32::new(rdev));
        p.nlink = U32::new(if is_dir { 2 } else { 1 });
        (p.atime_ns, p.mtime_ns, p.ctime_ns) = (I64::new(now), I64::new(now), I64::new(now));
        let long = match self.name_pinode(&mut p, name) {
            Ok(long) => long,
            Err(e) => {
                self.release(&[slot], &[]);
                return Err(e);
            }
        };
        let data = &mut locked[0].1;
        let parent_slot = dir.primary_slot();
        let mut txn = Txn {
            inserts: smallvec![(slot, p.clone())],
            long_names: long.into_iter().collect(),
            in_place: self.touch(parent_slot, now).into_iter().collect(),
            ..Txn::default()
        };
        if is_dir {
            txn.in_place
                .push(self.set_nlink(parent_slot, 2 + data.subdirs + 1));
        }
        let mut buckets: SmallVec<[u64; 2]> = smallvec![new.bucket];
        let mut xattr_slot = 0;
        if let (Some(set), Some(bucket)) = (&inherited, xattr_bucket) {
            match self.write_xattr_pinode(ino, &set.encode(), now) {
                Ok((x, xp)) => {
                    txn.inserts.push((x, xp));
                    txn.data_inserts.push(x);
                    buckets.push(bucket);
                    xattr_slot = x;
                }
                Err(e) => {
                    let long: SmallVec<[u32; 1]> = txn.long_names.iter().map(|l| l.0).collect();
                    self.release(&[slot], &long);
                    return Err(e);
                }
            }
        }
        self.commit(&buckets, &mut txn);
        if is_dir {
            data.subdirs += 1;
        }
        // The inode before its name, so whoever finds the name finds the inode.
        // A new file's data state is made by its first write (see Inode::file_state).
        let inode = Arc::new(Inode::new(ino, slot, mode, None));
        if let Some(set) = &inherited {
            self.note_new_xattrs(&inode, xattr_slot, set);
        }
        self.inodes.insert(inode);
        self.list_name(&dir, &mut new, slot);
        let mut attr = Attr::from_pinode(&self.image.pinode(u64::from(slot)));
        attr.acl = inherited.is_some_and(|set| set.get(super::acl::ACCESS).is_some());
        Ok(attr)
    }

    /// Finds (parent, name), locks `dir` and the inode it names, checks the name still names
    /// that inode (retrying when a concurrent operation moved it), and runs `then` with the name's
    /// entry, its inode and both locks.
    pub(super) fn with_name_locked<R>(
        &self,
        dir: &Arc<Inode>,
        name: &[u8],
        then: impl FnOnce(MirrorEntry, &Arc<Inode>, &mut Locked<'_>) -> Result<R>,
    ) -> Result<R> {
        let hash = self.hash(dir.ino, name);
        self.prefetch_nvm_bucket(self.bucket_index(hash));
        loop {
            let entry = self.find_hashed(dir.ino, name, hash).ok_or(Errno::ENOENT)?;
            let ino = self.image.pinode(u64::from(entry.slot)).ino.get();
            let Some(target) = self.inodes.get(ino) else {
                continue;
            };
            let mut locked = self.lock_inodes(&[dir, &target]);
            let still = self.find_hashed(dir.ino, name, hash);
            if still == Some(entry)
                && locked
                    .iter()
                    .any(|(i, g)| *i == ino && g.has_name(entry.slot))
            {
                return then(entry, &target, &mut locked);
            }
        }
    }

    /// Removes a name that is not a directory.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.writable()?;
        check_name_len(name)?;
        if name == b"." || name == b".." {
            return Err(Errno::EISDIR.into());
        }
        let dir = self.dir_inode(parent)?;
        self.with_name_locked(&dir, name, |entry, target, locked| {
            if target.dir().is_some() {
                return Err(Errno::EISDIR.into());
            }
            let now = now_ns();
            let mut plan = self.plan_drop_name(target, locked, entry, now)?;
            plan.txn
                .in_place
                .extend(self.touch(dir.primary_slot(), now));
            let mut guards = self.lock_buckets(&plan.buckets);
            self.commit(&plan.buckets, &mut plan.txn);
            let target_data = held_mut(locked, target.ino);
            self.finish_drop_name(&dir, target, target_data, entry, &plan, &mut guards);
            Ok(())
        })
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.writable()?;
        check_name_len(name)?;
        match name {
            b"." => return Err(Errno::EINVAL.into()),
            b".." => return Err(Errno::ENOTEMPTY.into()),
            _ => {}
        }
        let dir = self.dir_inode(parent)?;
        self.with_name_locked(&dir, name, |entry, target, locked| {
            let Some(state) = target.dir() else {
                return Err(Errno::ENOTDIR.into());
            };
            if !state.children.is_empty() {
                return Err(Errno::ENOTEMPTY.into());
            }
            let now = now_ns();
            let p = self.image.pinode(u64::from(entry.slot));
            let bucket = self.bucket_index(entry.hash);
            let dir_data = held_mut(locked, dir.ino);
            let mut txn = Txn {
                removes: smallvec![entry.slot],
                in_place: self.touch(dir.primary_slot(), now).into_iter().collect(),
                ..Txn::default()
            };
            txn.in_place
                .push(self.set_nlink(dir.primary_slot(), 2 + dir_data.subdirs - 1));
            let mut buckets: SmallVec<[u64; 2]> = smallvec![bucket];
            let xattrs = self.xattr_drop(target);
            if let Some(x) = &xattrs {
                x.add_to(&mut txn, &mut buckets);
            }
            let mut guards = self.lock_buckets(&buckets);
            self.commit(&buckets, &mut txn);
            dir_data.subdirs -= 1;
            self.keep_removed_dir(target, &p);
            self.guard_of(&mut guards, bucket).remove(entry.slot);
            dir.dir()
                .expect("parent is a directory")
                .children
                .remove(&entry.seq);
            target.removed.store(true, Ordering::Release);
            self.inodes.remove(target.ino);
            self.release(&[entry.slot], &[p.long_name.get()]);
            if let Some(x) = xattrs {
                self.release_xattr_pinode(&x);
            }
            Ok(())
        })
    }

    /// Adds the name (new_parent, new_name) to inode `ino`, which must not be a directory.
    pub fn link(&self, ino: u64, new_parent: u64, new_name: &[u8]) -> Result<Attr> {
        self.writable()?;
        check_new_name(new_name)?;
        let target = self.inode(ino)?;
        if target.dir().is_some() {
            return Err(Errno::EPERM.into());
        }
        let dir = self.dir_inode(new_parent)?;
        let mut locked = self.lock_inodes(&[&dir, &target]);
        let orphan = target.orphaned.load(Ordering::Acquire);
        let gone =
            target.removed.load(Ordering::Acquire) || (orphan && !self.is_linkable_tmpfile(ino));
        if gone || dir.removed.load(Ordering::Acquire) {
            return Err(Errno::ENOENT.into());
        }
        if orphan {
            // An unnamed file (O_TMPFILE) gets its first name.
            return self.name_tmpfile(&target, &dir, &mut locked, new_name);
        }
        let names = held(&locked, ino).name_count() as u32;
        if names >= LINK_MAX {
            return Err(Errno::EMLINK.into());
        }
        let mut new = self.lock_free_name(new_parent, new_name)?;
        let primary = self.primary_pinode(&target)?;
        let slot = self.alloc_pinode()?;
        let mut p = Pinode::zeroed();
        p.ino = primary.ino;
        p.parent = U64::new(new_parent);
        p.mode = primary.mode;
        let long = self
            .name_pinode(&mut p, new_name)
            .inspect_err(|_| self.release(&[slot], &[]))?;
        let now = now_ns();
        let primary_slot = target.primary_slot();
        let mut txn = Txn {
            inserts: smallvec![(slot, p)],
            long_names: long.into_iter().collect(),
            ..Txn::default()
        };
        txn.in_place.push(self.set_nlink(primary_slot, names + 1));
        txn.in_place.push(self.set_ctime(primary_slot, now));
        txn.in_place.extend(self.touch(dir.primary_slot(), now));
        self.commit(&[new.bucket], &mut txn);
        self.list_name(&dir, &mut new, slot);
        held_mut(&mut locked, ino).add_name(slot);
        self.change_time_moved(&target);
        self.getattr(ino)
    }

    /// Changes attributes (chmod, chown, utimens: a new version of the primary pinode; truncate:
    /// a file-journal commit).
    pub fn setattr(&self, ino: u64, change: &SetAttr) -> Result<Attr> {
        self.writable()?;
        if let Some(size) = change.size {
            self.truncate(ino, size)?;
        }
        if !change.changes_pinode() {
            return self.getattr(ino);
        }
        let inode = self.inode(ino)?;
        let mut locked = self.lock_inodes(&[&inode]);
        if inode.removed.load(Ordering::Acquire) {
            return Err(Errno::ENOENT.into());
        }
        let old_slot = inode.primary_slot();
        let old = self.image.pinode(u64::from(old_slot));
        let mut new = old.clone();
        if let Some(mode) = change.mode {
            new.mode = U32::new((old.mode.get() & pinode::S_IFMT) | (mode & 0o7777));
        }
        new.uid = change.uid.map_or(old.uid, U32::new);
        new.gid = change.gid.map_or(old.gid, U32::new);
        new.atime_ns = change.atime_ns.map_or(old.atime_ns, I64::new);
        new.mtime_ns = change.mtime_ns.map_or(old.mtime_ns, I64::new);
        new.ctime_ns = I64::new(now_ns());
        let acl_after_chmod = match change.mode {
            Some(_) => self.xattrs_after_chmod(&inode, new.mode.get())?,
            None => None,
        };
        let new_mode = new.mode.get();
        if let Some(set) = acl_after_chmod {
            // The access ACL's owner, mask and other entries follow the mode, in one commit.
            self.commit_xattrs(&inode, &mut locked[0].1, &set, Some(new))?;
        } else if inode.orphaned.load(Ordering::Acquire) {
            // A file open after losing its last name (fchmod, fchown, futimens on it). Its
            // ORPHAN pinode is in no chain and is freed at the next mount, so nothing about it
            // must survive a crash: its attributes change in place, with no commit. Only the
            // attribute fields differ from what is there.
            let offset = self.image.geometry().pinode_offset(u64::from(old_slot));
            self.image
                .region()
                .write_bytes(offset, zerocopy::IntoBytes::as_bytes(&new));
            self.image.region().flush(offset, pinode::PINODE_BYTES);
        } else {
            self.replace_version(&inode, &mut locked[0].1, old_slot, new)?;
        }
        inode.note_mode(new_mode);
        if let (Some(file), Some(mtime_ns)) = (inode.file_state(), change.mtime_ns) {
            file.lock().set_mtime(mtime_ns);
        }
        self.change_time_moved(&inode);
        drop(locked);
        self.getattr(ino)
    }

    /// Commits `new` as the next version of the pinode at `old_slot` (same name, same bucket)
    /// and updates the DRAM state. Returns the new slot.
    pub(super) fn replace_version(
        &self,
        inode: &Inode,
        data: &mut InodeData,
        old_slot: u32,
        mut new: Pinode,
    ) -> Result<u32> {
        let slot = self.alloc_pinode()?;
        new.flags = U32::new(new.flags.get() & !pinode::FLAG_VALID);
        let bucket = super::txn::bucket_of_pinode(&self.image, &new);
        let mut guards = self.lock_buckets(&[bucket]);
        let mut txn = Txn {
            removes: smallvec![old_slot],
            inserts: smallvec![(slot, new)],
            ..Txn::default()
        };
        self.commit(&[bucket], &mut txn);
        let guard = self.guard_of(&mut guards, bucket);
        let seq = guard.repoint(old_slot, slot);
        self.relist(slot, seq);
        if inode.primary_slot() == old_slot {
            inode.primary.store(slot, Ordering::Release);
        }
        data.repoint_name(old_slot, slot);
        self.release(&[old_slot], &[]);
        Ok(slot)
    }

    /// Points the parent's listing entry `seq` at a name's new slot.
    pub(super) fn relist(&self, slot: u32, seq: u64) {
        let parent = self.image.pinode(u64::from(slot)).parent.get();
        let Some(dir) = self.inodes.get(parent) else {
            return;
        };
        if let (Some(state), true) = (dir.dir(), seq != 0) {
            state.children.insert(seq, slot);
        }
    }
}

/// How dropping one name of an inode is committed.
pub(super) struct DropPlan {
    pub txn: Txn,
    pub buckets: SmallVec<[u64; 4]>,
    /// The name promoted to primary, with its new slot, when the primary name goes.
    pub promoted: Option<(u32, u32)>,
    /// Whether the inode loses its last name.
    pub last: bool,
    /// The data the inode loses with its last name: (extent, start block, blocks).
    pub data: Vec<(u32, u64, u64)>,
    /// The slot of the orphan version, when the last name goes while the file is open.
    pub orphan: Option<u32>,
    /// The removed name's long-name record (0: none), read before the commit: reading the
    /// pinode again after the commit wrote it back costs a stall.
    pub long_name: u32,
    /// The inode's attribute pinode, leaving with its last name.
    pub xattrs: Option<super::xattr::XattrDrop>,
}

impl Fs {
    /// Plans removing name `slot` of `target` (not a directory): the last name frees the inode;
    /// the primary name with others left promotes another name to primary in the same commit.
    pub(super) fn plan_drop_name(
        &self,
        target: &Inode,
        locked: &[(u64, DataGuard<'_>)],
        entry: MirrorEntry,
        now: i64,
    ) -> Result<DropPlan> {
        let data = held(locked, target.ino);
        let slot = entry.slot;
        let removed = self.image.pinode(u64::from(slot));
        // The mirror entry carries the name's hash: no need to hash the name again.
        let bucket = self.bucket_index(entry.hash);
        debug_assert_eq!(bucket, super::txn::bucket_of_pinode(&self.image, &removed));
        let mut plan = DropPlan {
            long_name: removed.long_name.get(),
            txn: Txn {
                removes: smallvec![slot],
                ..Txn::default()
            },
            buckets: smallvec![bucket],
            promoted: None,
            last: data.name_count() == 1,
            data: Vec::new(),
            orphan: None,
            xattrs: None,
        };
        if plan.last && target.open_count.load(Ordering::Acquire) > 0 {
            // Still open: the file lives on, nameless, until its last close.
            let mut orphan = self.image.pinode(u64::from(target.primary_slot()));
            let flags = orphan.flags.get() & !pinode::FLAG_VALID;
            orphan.flags = U32::new(flags | pinode::FLAG_ORPHAN);
            orphan.nlink = U32::new(0);
            orphan.ctime_ns = I64::new(now);
            let orphan_slot = self.alloc_pinode()?;
            plan.txn.inserts.push((orphan_slot, orphan));
            plan.txn.orphan_inserts.push(orphan_slot);
            plan.orphan = Some(orphan_slot);
            return Ok(plan);
        }
        if plan.last {
            let primary = self.image.pinode(u64::from(target.primary_slot()));
            plan.data = self.data_of(&primary);
            if !plan.data.is_empty() {
                plan.txn.data_removes.push(slot);
            }
            plan.xattrs = self.xattr_drop(target);
            if let Some(x) = &plan.xattrs {
                x.add_to(&mut plan.txn, &mut plan.buckets);
            }
            return Ok(plan);
        }
        let remaining = data.name_count() as u32 - 1;
        let primary_slot = target.primary_slot();
        if slot != primary_slot {
            plan.txn
                .in_place
                .push(self.set_nlink(primary_slot, remaining));
            plan.txn.in_place.push(self.set_ctime(primary_slot, now));
            return Ok(plan);
        }
        // The primary name goes: another name becomes primary, carrying the attributes.
        let heir = data
            .names()
            .find(|&s| s != slot)
            .expect("another name exists");
        let heir_pinode = self.image.pinode(u64::from(heir));
        let mut promoted = self.image.pinode(u64::from(primary_slot));
        promoted.parent = heir_pinode.parent;
        promoted.name = heir_pinode.name;
        promoted.name_len = heir_pinode.name_len;
        promoted.long_name = heir_pinode.long_name;
        let long = heir_pinode.flags.get() & pinode::FLAG_LONG_NAME;
        promoted.flags =
            U32::new((promoted.flags.get() & !pinode::FLAG_LONG_NAME & !pinode::FLAG_VALID) | long);
        promoted.nlink = U32::new(remaining);
        promoted.ctime_ns = I64::new(now);
        let new_slot = self.alloc_pinode()?;
        plan.buckets
            .push(super::txn::bucket_of_pinode(&self.image, &heir_pinode));
        plan.txn.removes.push(heir);
        plan.txn.inserts.push((new_slot, promoted));
        plan.promoted = Some((heir, new_slot));
        Ok(plan)
    }

    /// DRAM bookkeeping after a committed [`DropPlan`].
    pub(super) fn finish_drop_name(
        &self,
        dir: &Inode,
        target: &Inode,
        data: &mut InodeData,
        entry: MirrorEntry,
        plan: &DropPlan,
        guards: &mut [(u64, super::mirror::BucketGuard<'_>)],
    ) {
        self.change_time_moved(target);
        let long = plan.long_name;
        self.guard_of(guards, self.bucket_index(entry.hash))
            .remove(entry.slot);
        dir.dir()
            .expect("parent is a directory")
            .children
            .remove(&entry.seq);
        data.remove_name(entry.slot);
        let mut freed: SmallVec<[u32; 2]> = smallvec![entry.slot];
        if let Some((heir, new_slot)) = plan.promoted {
            let heir_bucket = plan.buckets[1];
            let guard = self.guard_of(guards, heir_bucket);
            let heir_seq = guard.repoint(heir, new_slot);
            self.relist(new_slot, heir_seq);
            data.repoint_name(heir, new_slot);
            target.primary.store(new_slot, Ordering::Release);
            freed.push(heir);
        }
        if let Some(orphan) = plan.orphan {
            // The orphan keeps the name (and its long-name record) until it is freed.
            target.primary.store(orphan, Ordering::Release);
            target.orphaned.store(true, Ordering::Release);
            data.clear_names();
            self.release(&freed, &[]);
            return;
        }
        if plan.last {
            target.removed.store(true, Ordering::Release);
            self.inodes.remove(target.ino);
        }
        if let Some(x) = &plan.xattrs {
            self.release_xattr_pinode(x);
        }
        self.release(&freed, &[long]);
        match (plan.last, target.file_state()) {
            (true, Some(file)) => {
                self.hold_back(|limbo| limbo.extents.extend(plan.data.iter().map(|d| d.0)));
                self.release_file_space(&mut file.lock());
            }
            _ => self.release_data(&plan.data),
        }
    }
}
