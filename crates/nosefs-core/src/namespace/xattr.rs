//! Extended attributes: getxattr, setxattr, listxattr, removexattr, and the POSIX ACLs kept in
//! them (`system.posix_acl_access` decides permissions and sets the mode's bits;
//! `system.posix_acl_default` is what a directory's new inodes inherit).
//!
//! An inode's attributes are one blob (`format::xattr`), the data of a hidden pinode flagged
//! `XATTR` whose parent is the inode. Every change writes a new blob and pinode and swaps them
//! for the old in one directory-journal commit (REMOVE_DATA of the old, INSERT_DATA of the new,
//! and a new version of the owner's primary pinode when its mode changes), so a change is atomic
//! and durable on return like every metadata operation. The attribute pinode goes in the same
//! commit as its inode's last name, directory or orphan.
//!
//! These functions check the names, sizes and flags the system calls define, not the caller's
//! right to make them: the kernel checks those for the FUSE mount, and [`crate::vfs`] for the
//! shim's frontends.

use std::sync::atomic::Ordering;

use smallvec::SmallVec;
use zerocopy::little_endian::{I64, U16, U32, U64};

use super::acl::{self, Acl};
use super::txn::Txn;
use crate::error::{Errno, Error, Result};
use crate::format::extent::{Extent, EXTENT_BYTES};
use crate::format::pinode::{self, Pinode};
use crate::format::xattr::{
    is_valid_name, XattrSet, BLOB_MAX, LIST_MAX, NAME_MAX, VALUE_MAX, XATTR_PINODE_NAME,
};
use crate::format::BLOCK_SIZE;
use crate::fs::Fs;
use crate::inode::{Inode, InodeData};
use crate::mkfs::now_ns;

pub use crate::format::xattr::{BLOB_MAX as XATTR_BLOB_MAX, VALUE_MAX as XATTR_VALUE_MAX};

/// Blocks in one extent of a blob: the directory commit's checksum covers the data of extents
/// up to this size.
const BLOB_EXTENT_BLOCKS: u64 = 16;

/// How setxattr treats an attribute that exists (or does not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum XattrMode {
    /// Create or replace.
    #[default]
    Any,
    /// XATTR_CREATE: EEXIST if it exists.
    Create,
    /// XATTR_REPLACE: ENODATA if it does not.
    Replace,
}

impl XattrMode {
    /// From setxattr's `flags`: EINVAL for unknown bits or both.
    pub fn from_flags(flags: i32) -> Result<XattrMode> {
        match flags {
            0 => Ok(XattrMode::Any),
            libc::XATTR_CREATE => Ok(XattrMode::Create),
            libc::XATTR_REPLACE => Ok(XattrMode::Replace),
            _ => Err(Errno::EINVAL.into()),
        }
    }
}

/// An inode's attribute pinode, leaving with the inode in the caller's commit.
#[derive(Debug)]
pub(crate) struct XattrDrop {
    pub slot: u32,
    pub bucket: u64,
    /// Its data: (extent, start block, blocks).
    pub data: Vec<(u32, u64, u64)>,
}

impl XattrDrop {
    /// Adds the removal to a transaction and its buckets.
    pub fn add_to(&self, txn: &mut Txn, buckets: &mut impl Extend<u64>) {
        txn.removes.push(self.slot);
        txn.data_removes.push(self.slot);
        buckets.extend([self.bucket]);
    }
}

/// ERANGE for an empty or over-long name (as the kernel answers), EOPNOTSUPP outside the
/// namespaces Linux defines.
fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(Errno(libc::ERANGE).into());
    }
    // Of `system.*`, only the POSIX ACLs are kept (as ext4 has it).
    let other_system = name.starts_with(b"system.") && name != acl::ACCESS && name != acl::DEFAULT;
    if !is_valid_name(name) || other_system {
        return Err(Errno(libc::EOPNOTSUPP).into());
    }
    Ok(())
}

impl Fs {
    /// The NVM bucket of inode `ino`'s attribute pinode.
    pub(crate) fn xattr_bucket(&self, ino: u64) -> u64 {
        self.bucket_index(self.hash(ino, XATTR_PINODE_NAME))
    }

    /// The value of attribute `name` of inode `ino`; ENODATA when it has none.
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        check_name(name)?;
        let inode = self.inode(ino)?;
        if inode.xattrs.load(Ordering::Acquire) == 0 {
            return Err(Errno(libc::ENODATA).into());
        }
        let _locked = inode.data.lock();
        let set = self.load_xattrs(&inode)?;
        set.get(name)
            .map(<[u8]>::to_vec)
            .ok_or(Errno(libc::ENODATA).into())
    }

    /// The names of inode `ino`'s attributes, each followed by a NUL (listxattr's format).
    pub fn listxattr(&self, ino: u64) -> Result<Vec<u8>> {
        let inode = self.inode(ino)?;
        if inode.xattrs.load(Ordering::Acquire) == 0 {
            return Ok(Vec::new());
        }
        let _locked = inode.data.lock();
        let set = self.load_xattrs(&inode)?;
        let mut out = Vec::with_capacity(set.list_bytes());
        for name in set.names() {
            out.extend_from_slice(name);
            out.push(0);
        }
        Ok(out)
    }

    /// Sets attribute `name` of inode `ino` to `value`. `system.posix_acl_access` is validated,
    /// sets the mode's permission bits in the same commit, and is not stored when the mode says
    /// all it does; `system.posix_acl_default` is for directories only. An empty value for
    /// either removes it, as the kernel has it.
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], mode: XattrMode) -> Result<()> {
        check_name(name)?;
        if value.len() > VALUE_MAX {
            return Err(Errno(libc::E2BIG).into());
        }
        self.writable()?;
        if !self.image.geometry().xattrs {
            return Err(Errno(libc::EOPNOTSUPP).into());
        }
        let inode = self.inode(ino)?;
        let mut locked = self.lock_inodes(&[&inode]);
        if inode.removed.load(Ordering::Acquire) {
            return Err(Errno::ENOENT.into());
        }
        let mut set = self.load_xattrs(&inode)?;
        match (mode, set.get(name).is_some()) {
            (XattrMode::Create, true) => return Err(Errno::EEXIST.into()),
            (XattrMode::Replace, false) => return Err(Errno(libc::ENODATA).into()),
            _ => {}
        }
        let mut new_primary = None;
        if name == acl::ACCESS || name == acl::DEFAULT {
            let primary = self.primary_pinode(&inode)?;
            if name == acl::DEFAULT && !primary.is_dir() {
                return Err(Errno::EACCES.into());
            }
            if value.is_empty() {
                set.remove(name);
            } else {
                let parsed = Acl::parse(value)?;
                if name == acl::ACCESS {
                    let mut p = primary.clone();
                    p.mode = U32::new((primary.mode.get() & !0o777) | parsed.mode_bits());
                    new_primary = Some(p);
                }
                if name == acl::ACCESS && parsed.is_equivalent_to_mode() {
                    set.remove(name);
                } else {
                    set.set(name, &parsed.encode());
                }
            }
        } else {
            set.set(name, value);
        }
        if set.blob_bytes() > BLOB_MAX || set.list_bytes() > LIST_MAX {
            return Err(Errno::ENOSPC.into());
        }
        self.commit_xattrs(&inode, &mut locked[0].1, &set, new_primary)
    }

    /// Removes attribute `name` of inode `ino`; ENODATA when it has none.
    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        check_name(name)?;
        self.writable()?;
        let inode = self.inode(ino)?;
        let mut locked = self.lock_inodes(&[&inode]);
        if inode.removed.load(Ordering::Acquire) {
            return Err(Errno::ENOENT.into());
        }
        let mut set = self.load_xattrs(&inode)?;
        if !set.remove(name) {
            return Err(Errno(libc::ENODATA).into());
        }
        self.commit_xattrs(&inode, &mut locked[0].1, &set, None)
    }

    /// Checks `mask` (rwx bits) for `cred` on `attr`: against its access ACL when it has one
    /// (`posix_acl_permission`), else the mode bits ([`super::perm::check`]). Root is decided
    /// by the mode, as the kernel's capability checks do.
    pub fn check_permission(
        &self,
        attr: &super::Attr,
        cred: &super::perm::Cred,
        mask: u32,
    ) -> Result<()> {
        if !attr.acl || cred.is_root() || cred.uid == attr.uid {
            return super::perm::check(attr, cred, mask);
        }
        let acl = self.access_acl(attr.ino)?;
        super::perm::check_acl(attr, acl.as_ref(), cred, mask)
    }

    /// The access ACL of inode `ino`, if it has one (for permission checks).
    pub fn access_acl(&self, ino: u64) -> Result<Option<Acl>> {
        let inode = self.inode(ino)?;
        if !inode.has_acl() {
            return Ok(None);
        }
        let _locked = inode.data.lock();
        match self.load_xattrs(&inode)?.get(acl::ACCESS) {
            Some(value) => Ok(Some(Acl::parse(value)?)),
            None => Ok(None),
        }
    }

    /// The attributes of `inode`, read from its blob. The caller holds the inode lock, so the
    /// blob cannot be swapped while it is read. Media content: bad bytes are an error.
    pub(crate) fn load_xattrs(&self, inode: &Inode) -> Result<XattrSet> {
        let slot = inode.xattrs.load(Ordering::Acquire);
        if slot == 0 {
            return Ok(XattrSet::default());
        }
        let corrupt =
            |why: String| Error::corrupt("xattr", "blob", format!("inode {}: {why}", inode.ino));
        let p = self.image.pinode(u64::from(slot));
        let size = p.size.get();
        if !p.is_valid() || p.flags.get() & pinode::FLAG_XATTR == 0 || p.parent.get() != inode.ino {
            return Err(corrupt(format!("slot {slot} is not its attribute pinode")));
        }
        if size > BLOB_MAX as u64 {
            return Err(corrupt(format!("{size} bytes")));
        }
        let blob = self.read_blob(&p)?;
        XattrSet::decode(&blob).map_err(corrupt)
    }

    /// The bytes of an attribute pinode's blob, from its extents.
    fn read_blob(&self, p: &Pinode) -> Result<Vec<u8>> {
        let g = self.image.geometry();
        let mut blob = vec![0u8; p.size.get() as usize];
        for (_, e) in self.extent_list(p) {
            let (at, len) = (e.file_offset.get(), u64::from(e.length.get()));
            let start = u64::from(e.start_block.get());
            let end = at.checked_add(len).filter(|&end| end <= blob.len() as u64);
            let blocks = Extent::blocks_needed(u64::from(e.block_offset.get()), len);
            let (Some(end), true) = (end, start + blocks <= g.data_block_count()) else {
                return Err(Error::corrupt(
                    "xattr",
                    "extent",
                    "outside the blob or the data zone",
                ));
            };
            let from = g.block_offset(start) + u64::from(e.block_offset.get());
            self.image
                .region()
                .read_bytes(from, &mut blob[at as usize..end as usize]);
        }
        Ok(blob)
    }

    /// Commits `set` as the inode's attributes and, when given, `primary` as the next version
    /// of its primary pinode (a mode an ACL changed), in one directory-journal commit; the
    /// change time becomes now.
    pub(crate) fn commit_xattrs(
        &self,
        inode: &Inode,
        data: &mut InodeData,
        set: &XattrSet,
        primary: Option<Pinode>,
    ) -> Result<()> {
        let now = now_ns();
        let old_slot = inode.xattrs.load(Ordering::Acquire);
        let mut txn = Txn::default();
        let mut buckets: SmallVec<[u64; 4]> = SmallVec::new();
        let old = (old_slot != 0).then(|| XattrDrop {
            slot: old_slot,
            bucket: self.xattr_bucket(inode.ino),
            data: self.data_of(&self.image.pinode(u64::from(old_slot))),
        });
        if let Some(old) = &old {
            old.add_to(&mut txn, &mut buckets);
        }
        let mut new_slot = 0;
        if !set.is_empty() {
            let (slot, p) = self.write_xattr_pinode(inode.ino, &set.encode(), now)?;
            txn.inserts.push((slot, p));
            txn.data_inserts.push(slot);
            buckets.push(self.xattr_bucket(inode.ino));
            new_slot = slot;
        }
        let primary_slot = inode.primary_slot();
        let mut primary_version = None;
        match primary {
            Some(mut p) if !inode.orphaned.load(Ordering::Acquire) => {
                p.ctime_ns = I64::new(now);
                p.flags = U32::new(p.flags.get() & !pinode::FLAG_VALID);
                let slot = match self.alloc_pinode() {
                    Ok(slot) => slot,
                    Err(e) => {
                        self.forget_uncommitted(&txn, new_slot);
                        return Err(e);
                    }
                };
                buckets.push(super::txn::bucket_of_pinode(&self.image, &p));
                txn.removes.push(primary_slot);
                txn.inserts.push((slot, p));
                primary_version = Some(slot);
            }
            primary => {
                if let Some(mut p) = primary {
                    // An open file that lost its last name: nothing about it survives a crash,
                    // so its attributes change in place, as setattr does.
                    p.ctime_ns = I64::new(now);
                    self.store_orphan_version(primary_slot, &p);
                }
                txn.in_place.push(self.set_ctime(primary_slot, now));
            }
        }
        if txn.removes.is_empty() && txn.inserts.is_empty() {
            // Nothing stored before or after (an ACL the mode says all of, on an orphan).
            self.store_in_place_now(&txn);
            self.change_time_moved(inode);
            return Ok(());
        }
        let mut guards = self.lock_buckets(&buckets);
        self.commit(&buckets, &mut txn);
        self.change_time_moved(inode);
        if let Some(slot) = primary_version {
            let bucket = *buckets.last().expect("the primary's bucket");
            let seq = self
                .guard_of(&mut guards, bucket)
                .repoint(primary_slot, slot);
            self.relist(slot, seq);
            inode.primary.store(slot, Ordering::Release);
            inode.note_mode(self.image.pinode(u64::from(slot)).mode.get());
            data.repoint_name(primary_slot, slot);
            self.release(&[primary_slot], &[]);
        }
        inode.xattrs.store(new_slot, Ordering::Release);
        inode.note_acl(set.get(acl::ACCESS).is_some());
        drop(guards);
        if let Some(old) = old {
            self.release_xattr_pinode(&old);
        }
        Ok(())
    }

    /// Returns a committed-away attribute pinode and its data to the pools (after settling).
    pub(crate) fn release_xattr_pinode(&self, old: &XattrDrop) {
        self.release(&[old.slot], &[]);
        self.release_data(&old.data);
    }

    /// The attribute pinode of `inode`, to go in the commit that removes the inode.
    pub(crate) fn xattr_drop(&self, inode: &Inode) -> Option<XattrDrop> {
        let slot = inode.xattrs.load(Ordering::Acquire);
        (slot != 0).then(|| XattrDrop {
            slot,
            bucket: self.xattr_bucket(inode.ino),
            data: self.data_of(&self.image.pinode(u64::from(slot))),
        })
    }

    /// Frees what a transaction that will not be committed allocated: a new attribute pinode's
    /// slot and data.
    fn forget_uncommitted(&self, txn: &Txn, new_slot: u32) {
        if let Some((slot, p)) = txn.inserts.iter().find(|(s, _)| *s == new_slot) {
            self.release(&[*slot], &[]);
            self.release_data(&self.data_of_list(p.extent_head.get()));
        }
    }

    /// (extent, start block, blocks) of an extent list not yet valid.
    fn data_of_list(&self, head: u32) -> Vec<(u32, u64, u64)> {
        let mut p = Pinode::zeroed();
        p.extent_head = U32::new(head);
        self.data_of(&p)
    }

    fn store_orphan_version(&self, slot: u32, p: &Pinode) {
        let offset = self.image.geometry().pinode_offset(u64::from(slot));
        self.image
            .region()
            .write_bytes(offset, zerocopy::IntoBytes::as_bytes(p));
        self.image.region().flush(offset, pinode::PINODE_BYTES);
    }

    fn store_in_place_now(&self, txn: &Txn) {
        for field in &txn.in_place {
            let bytes = field.value.to_le_bytes();
            let len = usize::from(field.len);
            self.image.region().write_bytes(field.offset, &bytes[..len]);
            self.image.region().flush(field.offset, len as u64);
        }
        self.image.region().fence();
    }

    /// Writes `blob` to fresh blocks, its extents (valid bit clear) and a new attribute pinode
    /// for inode `owner` (valid bit clear), all flushed or written non-temporally: the commit's
    /// first fence makes them durable. Returns the pinode's slot and record.
    pub(super) fn write_xattr_pinode(
        &self,
        owner: u64,
        blob: &[u8],
        now: i64,
    ) -> Result<(u32, Pinode)> {
        let ino = self.new_ino();
        let head = self.write_blob_extents(ino, blob)?;
        let slot = match self.alloc_pinode() {
            Ok(slot) => slot,
            Err(e) => {
                self.release_data(&self.data_of_list(head));
                return Err(e);
            }
        };
        let mut p = Pinode::zeroed();
        p.ino = U64::new(ino);
        p.parent = U64::new(owner);
        p.flags = U32::new(pinode::FLAG_PRIMARY | pinode::FLAG_XATTR);
        p.mode = U32::new(pinode::S_IFREG);
        p.nlink = U32::new(1);
        p.size = U64::new(blob.len() as u64);
        p.extent_head = U32::new(head);
        (p.atime_ns, p.mtime_ns, p.ctime_ns) = (I64::new(now), I64::new(now), I64::new(now));
        p.set_name(XATTR_PINODE_NAME);
        Ok((slot, p))
    }

    /// Writes `blob` into runs of fresh blocks of at most [`BLOB_EXTENT_BLOCKS`] and links their
    /// extents into a list owned by `ino`. Returns the list's head.
    fn write_blob_extents(&self, ino: u64, blob: &[u8]) -> Result<u32> {
        let g = self.image.geometry();
        let mut pieces: Vec<(u32, u64, u64, usize, usize)> = Vec::new(); // eno, start, blocks, at, len
        let mut at = 0;
        while at < blob.len() {
            let want = ((blob.len() - at) as u64).div_ceil(BLOCK_SIZE);
            let run =
                self.alloc_or_settle(|| self.blocks.alloc_upto(None, want.min(BLOB_EXTENT_BLOCKS)));
            let eno = run.and_then(|_| self.alloc_or_settle(|| self.extents.alloc(&self.image)));
            let (Some((start, blocks)), Some(eno)) = (run, eno) else {
                if let Some((start, blocks)) = run {
                    self.blocks.free(start, blocks);
                }
                self.release_data(&pieces.iter().map(|p| (p.0, p.1, p.2)).collect::<Vec<_>>());
                return Err(Errno::ENOSPC.into());
            };
            let len = ((blocks * BLOCK_SIZE) as usize).min(blob.len() - at);
            self.image
                .region()
                .copy_nt(g.block_offset(start), &blob[at..at + len]);
            pieces.push((eno, start, blocks, at, len));
            at += len;
        }
        for (i, &(eno, start, _, at, len)) in pieces.iter().enumerate() {
            let mut e = Extent::zeroed_record();
            e.ino = U64::new(ino);
            e.file_offset = U64::new(at as u64);
            e.start_block = U32::new(start as u32);
            e.length = U32::new(len as u32);
            e.block_count = U16::new(Extent::blocks_needed(0, len as u64) as u16);
            e.prev = U32::new(if i == 0 { 0 } else { pieces[i - 1].0 });
            e.next = U32::new(pieces.get(i + 1).map_or(0, |p| p.0));
            let offset = g.extent_offset(u64::from(eno));
            self.image.region().write(offset, &e);
            self.image.region().flush(offset, EXTENT_BYTES);
        }
        Ok(pieces.first().map_or(0, |p| p.0))
    }

    /// The attributes a new inode of `mode` in directory `parent` inherits from its default ACL,
    /// and the permission bits it gets: `perm & !umask` when the directory has no default ACL;
    /// else the default ACL masked by `perm` (the umask is ignored, as POSIX.1e says), and for a
    /// directory the default ACL itself.
    pub(super) fn inherited_xattrs(
        &self,
        parent: &Inode,
        mode: u32,
        umask: u32,
    ) -> Result<(Option<XattrSet>, u32)> {
        let masked = mode & !(umask & 0o777);
        if parent.xattrs.load(Ordering::Acquire) == 0 || mode & pinode::S_IFMT == pinode::S_IFLNK {
            return Ok((None, masked));
        }
        let parent_set = self.load_xattrs(parent)?;
        let Some(default) = parent_set.get(acl::DEFAULT) else {
            return Ok((None, masked));
        };
        let default = Acl::parse(default)?;
        let (access, bits) = default.inherit(mode & 0o7777);
        let mut set = XattrSet::default();
        if let Some(access) = access {
            set.set(acl::ACCESS, &access.encode());
        }
        if mode & pinode::S_IFMT == pinode::S_IFDIR {
            set.set(acl::DEFAULT, &default.encode());
        }
        Ok((
            (!set.is_empty()).then_some(set),
            (mode & pinode::S_IFMT) | bits,
        ))
    }

    /// Marks a new inode's attributes as committed (see [`Fs::inherited_xattrs`]).
    pub(super) fn note_new_xattrs(&self, inode: &Inode, slot: u32, set: &XattrSet) {
        inode.xattrs.store(slot, Ordering::Release);
        inode.note_acl(set.get(acl::ACCESS).is_some());
    }

    /// The inode's ACL after a chmod to `mode`, as attributes to commit with the new mode;
    /// `None` when it has no access ACL.
    pub(super) fn xattrs_after_chmod(&self, inode: &Inode, mode: u32) -> Result<Option<XattrSet>> {
        if !inode.has_acl() {
            return Ok(None);
        }
        let mut set = self.load_xattrs(inode)?;
        let Some(value) = set.get(acl::ACCESS) else {
            return Ok(None);
        };
        let updated = Acl::parse(value)?.chmod(mode);
        set.set(acl::ACCESS, &updated.encode());
        Ok(Some(set))
    }
}

#[cfg(test)]
mod tests {
    use super::super::acl::{GROUP, GROUP_OBJ, MASK, OTHER, USER, USER_OBJ};
    use super::super::tests::{errno, fresh, OWNER};
    use super::super::{Owner, SetAttr, ROOT_INO};
    use super::*;
    use crate::format::pinode::{S_IFDIR, S_IFREG};

    fn acl_value(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = 2u32.to_le_bytes().to_vec();
        for &(tag, perm, id) in entries {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&perm.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    const NAMED: &[(u16, u16, u32)] = &[
        (USER_OBJ, 7, 0),
        (USER, 6, 2000),
        (GROUP_OBJ, 5, 0),
        (GROUP, 4, 300),
        (MASK, 7, 0),
        (OTHER, 0, 0),
    ];

    fn names(list: &[u8]) -> Vec<&[u8]> {
        list.split(|&b| b == 0).filter(|n| !n.is_empty()).collect()
    }

    #[test]
    fn attributes_are_set_read_listed_replaced_and_removed_durably() {
        let mut h = fresh(None);
        let f = h.fs().create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap();
        let ctime = f.ctime_ns;
        assert_eq!(
            errno(h.fs().getxattr(f.ino, b"user.a")),
            Errno(libc::ENODATA)
        );
        assert!(h.fs().listxattr(f.ino).unwrap().is_empty());
        h.fs()
            .setxattr(f.ino, b"user.a", b"one", XattrMode::Any)
            .unwrap();
        h.fs()
            .setxattr(f.ino, b"trusted.t", &[7u8; 5000], XattrMode::Create)
            .unwrap();
        h.fs()
            .setxattr(f.ino, b"user.empty", b"", XattrMode::Any)
            .unwrap();
        assert!(h.fs().getattr(f.ino).unwrap().ctime_ns >= ctime);
        assert_eq!(
            errno(h.fs().setxattr(f.ino, b"user.a", b"x", XattrMode::Create)),
            Errno::EEXIST
        );
        assert_eq!(
            errno(h.fs().setxattr(f.ino, b"user.b", b"x", XattrMode::Replace)),
            Errno(libc::ENODATA)
        );
        h.fs()
            .setxattr(f.ino, b"user.a", b"two", XattrMode::Replace)
            .unwrap();
        for clean in [true, false] {
            h.remount(clean);
            assert_eq!(h.fs().getxattr(f.ino, b"user.a").unwrap(), b"two");
            assert_eq!(
                h.fs().getxattr(f.ino, b"trusted.t").unwrap(),
                vec![7u8; 5000]
            );
            assert_eq!(h.fs().getxattr(f.ino, b"user.empty").unwrap(), b"");
            let list = h.fs().listxattr(f.ino).unwrap();
            assert_eq!(names(&list), [&b"user.a"[..], b"trusted.t", b"user.empty"]);
        }
        h.fs().removexattr(f.ino, b"user.a").unwrap();
        assert_eq!(
            errno(h.fs().removexattr(f.ino, b"user.a")),
            Errno(libc::ENODATA)
        );
        h.fs().removexattr(f.ino, b"trusted.t").unwrap();
        h.fs().removexattr(f.ino, b"user.empty").unwrap();
        assert_eq!(
            h.fs()
                .image()
                .pinode(u64::from(
                    h.fs().inode(f.ino).unwrap().xattrs.load(Ordering::Relaxed)
                ))
                .ino
                .get(),
            0,
            "no attribute pinode left"
        );
        h.remount(false);
        assert!(h.fs().listxattr(f.ino).unwrap().is_empty());
    }

    #[test]
    fn names_and_sizes_are_checked_as_the_man_pages_say() {
        let h = fresh(None);
        let f = h.fs().create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap();
        let set =
            |name: &[u8], value: &[u8]| errno(h.fs().setxattr(f.ino, name, value, XattrMode::Any));
        assert_eq!(set(b"", b"v"), Errno(libc::ERANGE));
        assert_eq!(set(&[b'a'; 256], b"v"), Errno(libc::ERANGE));
        assert_eq!(set(b"nonsense.x", b"v"), Errno(libc::EOPNOTSUPP));
        assert_eq!(set(b"system.other", b"v"), Errno(libc::EOPNOTSUPP));
        assert_eq!(
            set(b"user.big", &vec![0u8; VALUE_MAX + 1]),
            Errno(libc::E2BIG)
        );
        let mut long = b"user.".to_vec();
        long.resize(255, b'n');
        h.fs()
            .setxattr(f.ino, &long, &vec![1u8; VALUE_MAX], XattrMode::Any)
            .unwrap();
        assert_eq!(h.fs().getxattr(f.ino, &long).unwrap().len(), VALUE_MAX);
        // One inode's attributes together are bounded: ENOSPC, as ext4 answers when full.
        let mut i = 0;
        let e = loop {
            let r = h.fs().setxattr(
                f.ino,
                format!("user.v{i}").as_bytes(),
                &vec![2u8; VALUE_MAX],
                XattrMode::Any,
            );
            if let Err(e) = r {
                break e;
            }
            i += 1;
        };
        assert_eq!(e.errno(), Errno::ENOSPC);
        assert!(i >= 14, "{i} values of 64 KiB fit");
        assert_eq!(XattrMode::from_flags(3).unwrap_err().errno(), Errno::EINVAL);
    }

    #[test]
    fn attributes_go_with_their_inode_however_it_goes() {
        let mut h = fresh(None);
        let fs = h.fs();
        let used = |fs: &Fs| (fs.pinode_usage().0, fs.free_data_blocks());
        let before = used(fs);
        let a = fs.create(ROOT_INO, b"a", 0o644, OWNER, true).unwrap();
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
        let e = fs.mkdir(ROOT_INO, b"e", 0o755, OWNER).unwrap();
        let b = fs.create(ROOT_INO, b"b", 0o644, OWNER, true).unwrap();
        let o = fs.create(ROOT_INO, b"o", 0o644, OWNER, true).unwrap();
        for ino in [a.ino, d.ino, e.ino, b.ino, o.ino] {
            fs.setxattr(ino, b"user.k", &[9u8; 9000], XattrMode::Any)
                .unwrap();
        }
        fs.unlink(ROOT_INO, b"a").unwrap();
        fs.rmdir(ROOT_INO, b"d").unwrap();
        fs.mkdir(ROOT_INO, b"e2", 0o755, OWNER).unwrap();
        fs.rename(ROOT_INO, b"e2", ROOT_INO, b"e", Default::default())
            .unwrap();
        fs.create(ROOT_INO, b"b2", 0o644, OWNER, true).unwrap();
        fs.rename(ROOT_INO, b"b2", ROOT_INO, b"b", Default::default())
            .unwrap();
        fs.open(o.ino).unwrap();
        fs.unlink(ROOT_INO, b"o").unwrap();
        assert_eq!(
            fs.getxattr(o.ino, b"user.k").unwrap().len(),
            9000,
            "an open orphan keeps them"
        );
        fs.close(o.ino).unwrap();
        fs.unlink(ROOT_INO, b"b").unwrap();
        fs.rmdir(ROOT_INO, b"e").unwrap();
        fs.settle_all();
        assert_eq!(used(fs), before, "every slot and block is back");
        h.remount(false);
        assert_eq!(used(h.fs()), before);
    }

    #[test]
    fn an_orphan_s_attributes_are_freed_by_the_next_mount() {
        let mut h = fresh(None);
        let before = (h.fs().pinode_usage().0, h.fs().free_data_blocks());
        let f = h.fs().create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap();
        h.fs()
            .setxattr(f.ino, b"user.k", &[1u8; 6000], XattrMode::Any)
            .unwrap();
        h.fs().open(f.ino).unwrap();
        h.fs().unlink(ROOT_INO, b"f").unwrap();
        let report = h.remount(false);
        assert_eq!(report.orphans_freed, 1);
        assert_eq!((h.fs().pinode_usage().0, h.fs().free_data_blocks()), before);
    }

    #[test]
    fn an_access_acl_sets_the_mode_decides_access_and_follows_chmod() {
        let mut h = fresh(None);
        let f = h.fs().create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap();
        let value = acl_value(NAMED);
        h.fs()
            .setxattr(f.ino, acl::ACCESS, &value, XattrMode::Any)
            .unwrap();
        let attr = h.fs().getattr(f.ino).unwrap();
        assert_eq!(attr.mode, S_IFREG | 0o770, "group bits are the mask");
        assert!(attr.acl);
        assert_eq!(h.fs().getxattr(f.ino, acl::ACCESS).unwrap(), value);
        let user = |uid, gid, groups: &[u32]| super::super::perm::Cred {
            uid,
            gid,
            groups: SmallVec::from_slice(groups),
        };
        assert!(h
            .fs()
            .check_permission(&attr, &user(2000, 1, &[]), 6)
            .is_ok());
        assert!(h
            .fs()
            .check_permission(&attr, &user(2001, 1, &[]), 4)
            .is_err());
        assert!(h
            .fs()
            .check_permission(&attr, &user(5, 1, &[300]), 4)
            .is_ok());
        assert!(h
            .fs()
            .check_permission(&attr, &user(5, 1, &[300]), 2)
            .is_err());
        // chmod rewrites the mask, which now limits the named user.
        h.fs()
            .setattr(
                f.ino,
                &SetAttr {
                    mode: Some(0o740),
                    ..SetAttr::default()
                },
            )
            .unwrap();
        let attr = h.fs().getattr(f.ino).unwrap();
        assert_eq!(attr.mode, S_IFREG | 0o740);
        assert!(h
            .fs()
            .check_permission(&attr, &user(2000, 1, &[]), 2)
            .is_err());
        assert!(h
            .fs()
            .check_permission(&attr, &user(2000, 1, &[]), 4)
            .is_ok());
        h.remount(false);
        let attr = h.fs().getattr(f.ino).unwrap();
        assert!(attr.acl && attr.mode == S_IFREG | 0o740);
        let kept = Acl::parse(&h.fs().getxattr(f.ino, acl::ACCESS).unwrap()).unwrap();
        assert_eq!(kept.mode_bits(), 0o740);
        // An ACL the mode says all of is not kept: only the mode changes.
        let minimal = acl_value(&[(USER_OBJ, 6, 0), (GROUP_OBJ, 0, 0), (OTHER, 0, 0)]);
        h.fs()
            .setxattr(f.ino, acl::ACCESS, &minimal, XattrMode::Any)
            .unwrap();
        let attr = h.fs().getattr(f.ino).unwrap();
        assert_eq!((attr.mode, attr.acl), (S_IFREG | 0o600, false));
        assert_eq!(
            errno(h.fs().getxattr(f.ino, acl::ACCESS)),
            Errno(libc::ENODATA)
        );
        assert_eq!(
            errno(
                h.fs()
                    .setxattr(f.ino, acl::ACCESS, &[1, 2, 3], XattrMode::Any)
            ),
            Errno::EINVAL
        );
        assert_eq!(
            errno(h.fs().setxattr(f.ino, acl::DEFAULT, &value, XattrMode::Any)),
            Errno::EACCES,
            "default ACLs are for directories"
        );
    }

    #[test]
    fn new_inodes_inherit_a_directory_s_default_acl_instead_of_the_umask() {
        let mut h = fresh(None);
        let d = h.fs().mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
        h.fs()
            .setxattr(d.ino, acl::DEFAULT, &acl_value(NAMED), XattrMode::Any)
            .unwrap();
        let with_umask = Owner {
            umask: 0o077,
            ..OWNER
        };
        let f = h.fs().create(d.ino, b"f", 0o666, with_umask, true).unwrap();
        assert_eq!(
            f.mode,
            S_IFREG | 0o660,
            "the ACL masked by 0666, the umask ignored"
        );
        assert!(f.acl);
        let access = Acl::parse(&h.fs().getxattr(f.ino, acl::ACCESS).unwrap()).unwrap();
        assert_eq!(access.mode_bits(), 0o660);
        assert_eq!(
            errno(h.fs().getxattr(f.ino, acl::DEFAULT)),
            Errno(libc::ENODATA)
        );
        let sub = h.fs().mkdir(d.ino, b"sub", 0o777, with_umask).unwrap();
        assert_eq!(sub.mode, S_IFDIR | 0o770);
        assert_eq!(
            h.fs().getxattr(sub.ino, acl::DEFAULT).unwrap(),
            acl_value(NAMED)
        );
        // Outside it, the umask applies.
        let g = h
            .fs()
            .create(ROOT_INO, b"g", 0o666, with_umask, true)
            .unwrap();
        assert_eq!((g.mode, g.acl), (S_IFREG | 0o600, false));
        h.remount(false);
        assert!(h.fs().getattr(f.ino).unwrap().acl);
        assert_eq!(
            h.fs().getxattr(sub.ino, acl::DEFAULT).unwrap(),
            acl_value(NAMED)
        );
    }

    #[test]
    fn images_without_the_feature_refuse_attributes() {
        let params = crate::format::layout::MkfsParams {
            image_bytes: 8 << 20,
            without_xattrs: true,
            ..Default::default()
        };
        let g = crate::format::layout::Geometry::for_mkfs(&params).unwrap();
        let region = crate::pmem::Region::recording(params.image_bytes).unwrap();
        crate::mkfs::format_region(&region, &g, (0, 0)).unwrap();
        let image = crate::image::Image::from_region(region).unwrap();
        let fs = Fs::mount_image(image, &Default::default()).unwrap();
        let f = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap();
        assert_eq!(
            errno(fs.setxattr(f.ino, b"user.a", b"v", XattrMode::Any)),
            Errno(libc::EOPNOTSUPP)
        );
        assert_eq!(errno(fs.getxattr(f.ino, b"user.a")), Errno(libc::ENODATA));
    }
}
