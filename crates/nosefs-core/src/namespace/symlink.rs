//! Symbolic links: the target is the link's data, one extent in one data block, created by one
//! directory-journal commit whose INSERT_DATA entry validates the extent and its block.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use smallvec::smallvec;
use zerocopy::little_endian::{I64, U16, U32, U64};

use super::ops::Owner;
use super::txn::Txn;
use super::{check_new_name, Attr};
use crate::error::{Errno, Result};
use crate::format::extent::{Extent, EXTENT_BYTES};
use crate::format::pinode::{self, Pinode};
use crate::format::BLOCK_SIZE;
use crate::fs::Fs;
use crate::inode::Inode;
use crate::mkfs::now_ns;

/// Longest symlink target (PATH_MAX less its terminating NUL).
pub const SYMLINK_MAX: usize = 4095;

/// The data a symlink holds: its extent slot and block.
struct LinkData {
    eno: u32,
    block: u64,
}

impl Fs {
    /// Creates a symbolic link `name` in `parent` pointing at `target`.
    pub fn symlink(&self, parent: u64, name: &[u8], target: &[u8], owner: Owner) -> Result<Attr> {
        self.writable()?;
        check_new_name(name)?;
        if target.is_empty() {
            return Err(Errno::ENOENT.into());
        }
        if target.len() > SYMLINK_MAX {
            return Err(Errno::ENAMETOOLONG.into());
        }
        if target.contains(&0) {
            return Err(Errno::EINVAL.into());
        }
        let dir = self.dir_inode(parent)?;
        let _locked = self.lock_inodes(&[&dir]);
        if dir.removed.load(Ordering::Acquire) {
            return Err(Errno::ENOENT.into());
        }
        let mut new = self.lock_free_name(parent, name)?;
        let ino = self.new_ino();
        let data = self.write_link_data(ino, target)?;
        let (slot, p, long) = match self.link_pinode(ino, parent, name, target.len(), &data, owner)
        {
            Ok(made) => made,
            Err(e) => {
                self.release_data(&[(data.eno, data.block, 1)]);
                return Err(e);
            }
        };
        let mut txn = Txn {
            inserts: smallvec![(slot, p)],
            data_inserts: smallvec![slot],
            long_names: long.into_iter().collect(),
            in_place: self
                .touch(dir.primary_slot(), now_ns())
                .into_iter()
                .collect(),
            ..Txn::default()
        };
        self.commit(&[new.bucket], &mut txn);
        self.inodes
            .insert(Arc::new(Inode::new(ino, slot, pinode::S_IFLNK, None)));
        self.list_name(&dir, &mut new, slot);
        Ok(Attr::from_pinode(&self.image.pinode(u64::from(slot))))
    }

    /// Writes the target into a fresh block and its extent (valid bit clear), both flushed or
    /// written non-temporally, so the commit's first fence makes them durable.
    fn write_link_data(&self, ino: u64, target: &[u8]) -> Result<LinkData> {
        let eno = self
            .alloc_or_settle(|| self.extents.alloc(&self.image))
            .ok_or(Errno::ENOSPC)?;
        let Some(block) = self.alloc_or_settle(|| self.blocks.alloc(1)) else {
            self.extents.free(eno);
            return Err(Errno::ENOSPC.into());
        };
        let g = self.image.geometry();
        self.image.region().copy_nt(g.block_offset(block), target);
        let mut e = Extent::zeroed_record();
        e.ino = U64::new(ino);
        e.start_block = U32::new(block as u32);
        e.length = U32::new(target.len() as u32);
        e.block_count = U16::new(1);
        let offset = g.extent_offset(u64::from(eno));
        self.image.region().write(offset, &e);
        self.image.region().flush(offset, EXTENT_BYTES);
        Ok(LinkData { eno, block })
    }

    #[allow(clippy::type_complexity)]
    fn link_pinode(
        &self,
        ino: u64,
        parent: u64,
        name: &[u8],
        len: usize,
        data: &LinkData,
        owner: Owner,
    ) -> Result<(u32, Pinode, super::ops::NewLongName)> {
        let slot = self.alloc_pinode()?;
        let now = now_ns();
        let mut p = Pinode::zeroed();
        p.ino = U64::new(ino);
        p.parent = U64::new(parent);
        p.flags = U32::new(pinode::FLAG_PRIMARY);
        p.mode = U32::new(pinode::S_IFLNK | 0o777);
        (p.uid, p.gid) = (U32::new(owner.uid), U32::new(owner.gid));
        p.nlink = U32::new(1);
        p.size = U64::new(len as u64);
        p.extent_head = U32::new(data.eno);
        (p.atime_ns, p.mtime_ns, p.ctime_ns) = (I64::new(now), I64::new(now), I64::new(now));
        match self.name_pinode(&mut p, name) {
            Ok(long) => Ok((slot, p, long)),
            Err(e) => {
                self.release(&[slot], &[]);
                Err(e)
            }
        }
    }

    /// The target of symbolic link `ino`.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let inode = self.inode(ino)?;
        let p = self.primary_pinode(&inode)?;
        if p.mode.get() & pinode::S_IFMT != pinode::S_IFLNK {
            return Err(Errno::EINVAL.into());
        }
        if p.size.get() > SYMLINK_MAX as u64 {
            return Err(crate::error::Error::corrupt(
                "pinode",
                "size",
                format!("symlink of {} bytes", p.size.get()),
            ));
        }
        let mut target = vec![0u8; p.size.get() as usize];
        let mut filled = 0;
        for (_, start, _) in self.data_of(&p) {
            let e_len = (target.len() - filled).min(BLOCK_SIZE as usize);
            self.image.region().read_bytes(
                self.image.geometry().block_offset(start),
                &mut target[filled..filled + e_len],
            );
            filled += e_len;
        }
        Ok(target)
    }

    /// The extents in a primary pinode's list, in file order, as (eno, record). Mount checked
    /// every list and only commits change them since; the bounds only keep a broken invariant
    /// from looping.
    pub(crate) fn extent_list(&self, p: &Pinode) -> Vec<(u32, Extent)> {
        let count = self.image.geometry().extent_count();
        let mut out = Vec::new();
        let mut eno = u64::from(p.extent_head.get());
        while eno != 0 && eno < count && (out.len() as u64) < count {
            let e = self.image.extent(eno);
            let next = u64::from(e.next.get());
            out.push((eno as u32, e));
            eno = next;
        }
        out
    }

    /// The extents and block runs in a primary pinode's list: (eno, start block, blocks).
    pub(crate) fn data_of(&self, p: &Pinode) -> Vec<(u32, u64, u64)> {
        self.extent_list(p)
            .into_iter()
            .map(|(eno, e)| {
                let (start, blocks) = (e.start_block.get(), e.block_count.get());
                (eno, u64::from(start), u64::from(blocks))
            })
            .collect()
    }

    /// Returns extent slots and block runs to their pools once a commit has released them and
    /// no unsettled log can name them ([`crate::settle`]).
    /// Extents of one list may share blocks (byte-granular file extents: an overwrite inside a
    /// block, small writes packed into one), so each block is returned once.
    pub(crate) fn release_data(&self, data: &[(u32, u64, u64)]) {
        let runs = block_runs_once(data.iter().map(|&(_, start, count)| (start, count)));
        self.hold_back(|limbo| {
            limbo.extents.extend(data.iter().map(|d| d.0));
            limbo.blocks.extend(runs);
        });
    }
}

/// Block runs `(start, count)` that may overlap, as disjoint runs (sorted; touching ones joined).
pub(crate) fn block_runs_once(runs: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = runs.into_iter().filter(|r| r.1 > 0).collect();
    runs.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(runs.len());
    for (start, count) in runs {
        match out.last_mut() {
            Some((s, n)) if start <= *s + *n => *n = (*n).max(start + count - *s),
            _ => out.push((start, count)),
        }
    }
    out
}

#[cfg(test)]
mod block_run_tests {
    #[test]
    fn shared_and_touching_runs_come_out_once() {
        let runs =
            super::block_runs_once([(7, 1), (3, 2), (7, 1), (4, 1), (9, 3), (12, 1), (0, 0)]);
        assert_eq!(runs, [(3, 2), (7, 1), (9, 4)]);
    }
}
