//! rename(2) with RENAME_NOREPLACE and RENAME_EXCHANGE, as one journal transaction.
//!
//! The moved name gets a new pinode version with its new parent and name; its inode number, and
//! therefore every child of a moved directory, stays untouched. Only moves of a directory to
//! another parent take the topology lock, so that two such moves cannot together build a cycle
//! (Linux serialises them the same way); every other rename locks only its inodes and buckets.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use smallvec::{smallvec, SmallVec};
use zerocopy::little_endian::{I64, U32, U64};

use super::mirror::MirrorEntry;
use super::ops::{held, held_mut, DataGuard, DropPlan, NewLongName};
use super::txn::Txn;
use super::{check_name_len, check_new_name, ROOT_INO};
use crate::error::{Errno, Result};
use crate::format::pinode::{self, Pinode};
use crate::fs::Fs;
use crate::inode::Inode;
use crate::mkfs::now_ns;

/// rename(2) flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// Fail with EEXIST rather than replace an existing target.
    pub noreplace: bool,
    /// Swap source and target, which must both exist.
    pub exchange: bool,
    /// RENAME_WHITEOUT: leave a whiteout (a character device 0:0, what overlayfs reads as "this
    /// name is deleted") owned by this owner at the source's name, in the same commit.
    pub whiteout: Option<super::Owner>,
}

/// The two names of a rename, found and locked.
struct Sides {
    from: Arc<Inode>,
    to: Arc<Inode>,
    src: MirrorEntry,
    src_inode: Arc<Inode>,
    dst: Option<(MirrorEntry, Arc<Inode>)>,
}

impl Fs {
    /// Renames (p1, n1) to (p2, n2).
    pub fn rename(&self, p1: u64, n1: &[u8], p2: u64, n2: &[u8], flags: RenameFlags) -> Result<()> {
        self.writable()?;
        check_name_len(n1)?;
        if n1 == b"." || n1 == b".." {
            return Err(Errno::EINVAL.into());
        }
        check_new_name(n2).map_err(|e| {
            if e.errno() == Errno::EEXIST {
                Errno::EINVAL.into()
            } else {
                e
            }
        })?;
        if flags.exchange && (flags.noreplace || flags.whiteout.is_some()) {
            return Err(Errno::EINVAL.into());
        }
        let from = self.dir_inode(p1)?;
        // Most renames stay in one directory: look it up once.
        let to = if p2 == p1 {
            from.clone()
        } else {
            self.dir_inode(p2)?
        };
        let (h1, h2) = (self.hash(p1, n1), self.hash(p2, n2));
        let (b1, b2) = (
            self.bucket_index(h1) as usize,
            self.bucket_index(h2) as usize,
        );
        // Both names' NVM buckets start missing now; reading both mirror buckets' sequences
        // below does the same for the DRAM side, so the four misses overlap.
        self.prefetch_nvm_bucket(b1 as u64);
        self.prefetch_nvm_bucket(b2 as u64);
        loop {
            // The buckets' sequences before the lookups: unchanged and even after the inodes are
            // locked, they say that neither name changed in between, without looking again.
            let seqs = (self.mirror[b1].sequence(), self.mirror[b2].sequence());
            let src = self.find_hashed(p1, n1, h1).ok_or(Errno::ENOENT)?;
            let Some(src_inode) = self
                .inodes
                .get(self.image.pinode(u64::from(src.slot)).ino.get())
            else {
                continue;
            };
            let dst = match self.find_hashed(p2, n2, h2) {
                Some(e) => match self
                    .inodes
                    .get(self.image.pinode(u64::from(e.slot)).ino.get())
                {
                    Some(i) => Some((e, i)),
                    None => continue,
                },
                None => None,
            };
            let moves_dir = |i: &Inode| i.dir().is_some() && p1 != p2;
            let topology = (moves_dir(&src_inode)
                || dst
                    .as_ref()
                    .is_some_and(|(_, d)| flags.exchange && moves_dir(d)))
            .then(|| self.topology.lock());
            let sides = Sides {
                from: from.clone(),
                to: to.clone(),
                src,
                src_inode,
                dst,
            };
            let mut locked = {
                let mut all: SmallVec<[&Arc<Inode>; 4]> =
                    smallvec![&sides.from, &sides.to, &sides.src_inode];
                if let Some((_, d)) = &sides.dst {
                    all.push(d);
                }
                self.lock_inodes(&all)
            };
            let unchanged = seqs.0 % 2 == 0
                && seqs.1 % 2 == 0
                && (self.mirror[b1].sequence(), self.mirror[b2].sequence()) == seqs;
            if !unchanged
                && (self.find_hashed(p1, n1, h1) != Some(src)
                    || self.find_hashed(p2, n2, h2) != sides.dst.as_ref().map(|(e, _)| *e))
            {
                continue;
            }
            if from.removed.load(Ordering::Acquire) || to.removed.load(Ordering::Acquire) {
                return Err(Errno::ENOENT.into());
            }
            let result = self.rename_locked(&sides, (n1, h1), (n2, h2), flags, &mut locked);
            drop(topology);
            return result;
        }
    }

    /// The rename once its names are found and locked. Each name comes with the hash the caller
    /// looked it up by (`h1`: `n1` in `from`; `h2`: `n2` in `to`), so nothing is hashed twice.
    fn rename_locked(
        &self,
        s: &Sides,
        (n1, h1): (&[u8], u64),
        (n2, h2): (&[u8], u64),
        flags: RenameFlags,
        locked: &mut [(u64, DataGuard<'_>)],
    ) -> Result<()> {
        // Linux's order: the flags against the target first, then "same file: nothing to do",
        // then the type and emptiness checks.
        match &s.dst {
            None if flags.exchange => return Err(Errno::ENOENT.into()),
            Some(_) if flags.noreplace => return Err(Errno::EEXIST.into()),
            Some((dst, d_inode)) if dst.slot == s.src.slot || d_inode.ino == s.src_inode.ino => {
                return Ok(()); // the same name, or two names of one file
            }
            _ => {}
        }
        debug_assert_eq!(
            (h1, h2),
            (self.hash(s.from.ino, n1), self.hash(s.to.ino, n2))
        );
        self.check_rename(s, flags)?;
        let now = now_ns();
        let mut txn = Txn::default();
        let mut buckets: SmallVec<[u64; 6]> = smallvec![self.bucket_index(s.src.hash)];
        let (moved, moved_long) = self.moved_version(s.src.slot, s.to.ino, n2, now)?;
        buckets.push(self.bucket_index(h2));
        txn.removes.push(s.src.slot);
        txn.inserts.push(moved);
        txn.long_names.extend(moved_long);
        let mut drop_plan: Option<DropPlan> = None;
        let mut dir_xattrs = None;
        if let Some((dst, d_inode)) = &s.dst {
            buckets.push(self.bucket_index(dst.hash));
            if flags.exchange {
                let (back, back_long) = self.moved_version(dst.slot, s.from.ino, n1, now)?;
                buckets.push(self.bucket_index(h1));
                txn.removes.push(dst.slot);
                txn.inserts.push(back);
                txn.long_names.extend(back_long);
            } else if d_inode.dir().is_some() {
                txn.removes.push(dst.slot);
                dir_xattrs = self.xattr_drop(d_inode);
                if let Some(x) = &dir_xattrs {
                    x.add_to(&mut txn, &mut buckets);
                }
            } else {
                let plan = self.plan_drop_name(d_inode, locked, *dst, now)?;
                buckets.extend(plan.buckets.iter().copied());
                txn.removes.extend(plan.txn.removes.iter().copied());
                txn.data_removes
                    .extend(plan.txn.data_removes.iter().copied());
                txn.orphan_inserts
                    .extend(plan.txn.orphan_inserts.iter().copied());
                txn.inserts.extend(plan.txn.inserts.iter().cloned());
                txn.in_place.extend(plan.txn.in_place.iter().cloned());
                drop_plan = Some(plan);
            }
        }
        let whiteout = match flags.whiteout {
            Some(owner) => {
                let (slot, p, long) = self.whiteout_pinode(s.from.ino, n1, owner, now)?;
                buckets.push(self.bucket_index(h1));
                txn.inserts.push((slot, p));
                txn.long_names.extend(long);
                Some(slot)
            }
            None => None,
        };
        let (from_delta, to_delta) = self.subdir_deltas(s, flags);
        self.stage_dir_updates(s, locked, (from_delta, to_delta), now, &mut txn);
        let mut guards = self.lock_buckets(&buckets);
        self.commit(&buckets, &mut txn);
        self.finish_rename(
            s,
            flags,
            &txn,
            drop_plan,
            locked,
            (from_delta, to_delta),
            (h1, h2),
            &mut guards,
        );
        if let Some(slot) = whiteout {
            self.list_whiteout(&s.from, slot, h1, &mut guards);
        }
        if let Some(x) = dir_xattrs {
            self.release_xattr_pinode(&x);
        }
        Ok(())
    }

    /// The pinode of a whiteout named `name` in directory `parent`: a character device 0:0
    /// with no permission bits, as Linux's file systems make it. Its slot is allocated.
    fn whiteout_pinode(
        &self,
        parent: u64,
        name: &[u8],
        owner: super::Owner,
        now: i64,
    ) -> Result<(u32, Pinode, NewLongName)> {
        let slot = self.alloc_pinode()?;
        let mut p = Pinode::zeroed();
        p.ino = U64::new(self.new_ino());
        p.parent = U64::new(parent);
        p.flags = U32::new(pinode::FLAG_PRIMARY);
        p.mode = U32::new(pinode::S_IFCHR);
        (p.uid, p.gid) = (U32::new(owner.uid), U32::new(owner.gid));
        p.nlink = U32::new(1);
        (p.atime_ns, p.mtime_ns, p.ctime_ns) = (I64::new(now), I64::new(now), I64::new(now));
        let long = self
            .name_pinode(&mut p, name)
            .inspect_err(|_| self.release(&[slot], &[]))?;
        Ok((slot, p, long))
    }

    /// The DRAM side of a committed whiteout at `slot`, named with hash `hash` in `dir`.
    fn list_whiteout(
        &self,
        dir: &Inode,
        slot: u32,
        hash: u64,
        guards: &mut [(u64, super::mirror::BucketGuard<'_>)],
    ) {
        let p = self.image.pinode(u64::from(slot));
        self.inodes
            .insert(Arc::new(Inode::new(p.ino.get(), slot, p.mode.get(), None)));
        let state = dir.dir().expect("directory");
        let seq = state.next_seq();
        self.guard_of(guards, self.bucket_index(hash))
            .insert(MirrorEntry { hash, slot, seq });
        state.children.insert(seq, slot);
    }

    /// The checks after the flags, in Linux's order: ancestry (EINVAL, or ENOTEMPTY for a target
    /// containing the source) before types and emptiness (ENOTDIR, EISDIR, ENOTEMPTY).
    fn check_rename(&self, s: &Sides, flags: RenameFlags) -> Result<()> {
        let src_dir = s.src_inode.dir().is_some();
        if src_dir && self.is_ancestor_or_self(s.src_inode.ino, s.to.ino)? {
            return Err(Errno::EINVAL.into());
        }
        let Some((_, d)) = &s.dst else { return Ok(()) };
        // A target that contains the source: EINVAL for an exchange, ENOTEMPTY for a rename
        // (Linux's "target should not be an ancestor of source"), before the type checks.
        if d.dir().is_some() && self.is_ancestor_or_self(d.ino, s.from.ino)? {
            let errno = if flags.exchange {
                Errno::EINVAL
            } else {
                Errno::ENOTEMPTY
            };
            return Err(errno.into());
        }
        if flags.exchange {
            return Ok(());
        }
        match (src_dir, d.dir()) {
            (true, None) => Err(Errno::ENOTDIR.into()),
            (false, Some(_)) => Err(Errno::EISDIR.into()),
            (true, Some(state)) if !state.children.is_empty() => Err(Errno::ENOTEMPTY.into()),
            _ => Ok(()),
        }
    }

    /// Whether directory `ancestor` is `dir` or one of its ancestors.
    fn is_ancestor_or_self(&self, ancestor: u64, dir: u64) -> Result<bool> {
        let mut at = dir;
        loop {
            if at == ancestor {
                return Ok(true);
            }
            if at == ROOT_INO {
                return Ok(false);
            }
            at = self.parent_of(&*self.inode(at)?)?;
        }
    }

    /// A new version of the pinode at `slot`, named `name` in directory `parent`.
    fn moved_version(
        &self,
        slot: u32,
        parent: u64,
        name: &[u8],
        now: i64,
    ) -> Result<((u32, Pinode), NewLongName)> {
        let mut p = self.image.pinode(u64::from(slot));
        p.parent = U64::new(parent);
        p.flags = U32::new(p.flags.get() & !pinode::FLAG_VALID);
        if p.is_primary() {
            p.ctime_ns = I64::new(now);
        }
        let new_slot = self.alloc_pinode()?;
        self.prefetch_pinode(new_slot);
        let long = self
            .name_pinode(&mut p, name)
            .inspect_err(|_| self.release(&[new_slot], &[]))?;
        Ok(((new_slot, p), long))
    }

    /// Change in subdirectory counts of (from, to).
    fn subdir_deltas(&self, s: &Sides, flags: RenameFlags) -> (i64, i64) {
        let src_dir = i64::from(s.src_inode.dir().is_some());
        let (mut from, mut to) = (-src_dir, src_dir);
        if let Some((_, d)) = &s.dst {
            let dst_dir = i64::from(d.dir().is_some());
            if flags.exchange {
                (from, to) = (from + dst_dir, to - dst_dir);
            } else {
                to -= dst_dir;
            }
        }
        if s.from.ino == s.to.ino {
            (from + to, 0)
        } else {
            (from, to)
        }
    }

    fn stage_dir_updates(
        &self,
        s: &Sides,
        locked: &[(u64, DataGuard<'_>)],
        deltas: (i64, i64),
        now: i64,
        txn: &mut Txn,
    ) {
        for (dir, delta) in [(&s.from, deltas.0), (&s.to, deltas.1)] {
            let slot = dir.primary_slot();
            if dir.ino == s.to.ino
                && s.from.ino == s.to.ino
                && delta == 0
                && !std::ptr::eq(dir, &s.from)
            {
                continue;
            }
            txn.in_place.extend(self.touch(slot, now));
            if delta != 0 {
                let data = held(locked, dir.ino);
                let nlink = (2 + i64::from(data.subdirs) + delta) as u32;
                txn.in_place.push(self.set_nlink(slot, nlink));
            }
        }
    }

    /// The DRAM side once the rename is committed. `hashes` are those of the names in their new
    /// directories: the source's old name `n1` in `from` (where an exchanged target goes) and
    /// the target name `n2` in `to`.
    #[allow(clippy::too_many_arguments)]
    fn finish_rename(
        &self,
        s: &Sides,
        flags: RenameFlags,
        txn: &Txn,
        drop_plan: Option<DropPlan>,
        locked: &mut [(u64, DataGuard<'_>)],
        deltas: (i64, i64),
        hashes: (u64, u64),
        guards: &mut [(u64, super::mirror::BucketGuard<'_>)],
    ) {
        let old_src = self.image.pinode(u64::from(s.src.slot));
        let mut freed: SmallVec<[u32; 2]> = smallvec![s.src.slot];
        let mut freed_long: SmallVec<[u32; 2]> = smallvec![old_src.long_name.get()];
        self.move_entry(
            s.src,
            txn.inserts[0].0,
            hashes.1,
            &s.from,
            &s.to,
            &s.src_inode,
            locked,
            guards,
        );
        if let Some((dst, d_inode)) = &s.dst {
            if flags.exchange {
                freed.push(dst.slot);
                freed_long.push(self.image.pinode(u64::from(dst.slot)).long_name.get());
                self.move_entry(
                    *dst,
                    txn.inserts[1].0,
                    hashes.0,
                    &s.to,
                    &s.from,
                    d_inode,
                    locked,
                    guards,
                );
            } else if let Some(plan) = drop_plan {
                let data = held_mut(locked, d_inode.ino);
                self.finish_drop_name(&s.to, d_inode, data, *dst, &plan, guards);
            } else {
                // A removed directory's record keeps its bytes (only its valid bit is clear)
                // until the slot is reused, after a settle.
                let dst_pinode = self.image.pinode(u64::from(dst.slot));
                freed.push(dst.slot);
                freed_long.push(dst_pinode.long_name.get());
                self.guard_of(guards, self.bucket_index(dst.hash))
                    .remove(dst.slot);
                s.to.dir().expect("directory").children.remove(&dst.seq);
                self.keep_removed_dir(d_inode, &dst_pinode);
                d_inode.removed.store(true, Ordering::Release);
                self.inodes.remove(d_inode.ino);
            }
        }
        for (dir, delta) in [(&s.from, deltas.0), (&s.to, deltas.1)] {
            let data = held_mut(locked, dir.ino);
            data.subdirs = (i64::from(data.subdirs) + delta) as u32;
        }
        self.release(&freed, &freed_long);
    }

    /// Moves a name's mirror entry and listing entry to its new slot in `to`, where the name
    /// hashes to `hash`.
    #[allow(clippy::too_many_arguments)]
    fn move_entry(
        &self,
        old: MirrorEntry,
        new_slot: u32,
        hash: u64,
        from: &Inode,
        to: &Inode,
        inode: &Inode,
        locked: &mut [(u64, DataGuard<'_>)],
        guards: &mut [(u64, super::mirror::BucketGuard<'_>)],
    ) {
        self.guard_of(guards, self.bucket_index(old.hash))
            .remove(old.slot);
        from.dir().expect("directory").children.remove(&old.seq);
        let to_state = to.dir().expect("directory");
        let seq = to_state.next_seq();
        self.guard_of(guards, self.bucket_index(hash))
            .insert(MirrorEntry {
                hash,
                slot: new_slot,
                seq,
            });
        to_state.children.insert(seq, new_slot);
        let data = held_mut(locked, inode.ino);
        data.repoint_name(old.slot, new_slot);
        if inode.primary_slot() == old.slot {
            inode.primary.store(new_slot, Ordering::Release);
            self.change_time_moved(inode);
        }
    }
}
