//! O_TMPFILE: a regular file created without a name (an `ORPHAN` pinode from the start, freed at
//! its last close or by the next mount like any file unlinked while open), which `linkat` with
//! `AT_EMPTY_PATH` may later give a name, unless it was created with O_EXCL.
//!
//! Naming it is one directory-journal commit: `REMOVE` of the orphan pinode (in no chain) and
//! `INSERT` of a new primary version carrying the name, the same attributes and the same extent
//! list, so the file's data never moves.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use smallvec::{smallvec, SmallVec};
use zerocopy::little_endian::{I64, U32, U64};

use super::ops::{held_mut, Owner};
use super::txn::Txn;
use super::{check_new_name, Attr};
use crate::error::{Errno, Result};
use crate::format::pinode::{self, Pinode};
use crate::fs::Fs;
use crate::inode::Inode;
use crate::mkfs::now_ns;

/// The name an unnamed file's orphan pinode carries (an orphan keeps a name it never uses):
/// never looked up, as orphans are in no chain.
const TMPFILE_NAME: &[u8] = b"#tmpfile";

impl Fs {
    /// Creates a regular file with no name in directory `dir` (O_TMPFILE), with permission bits
    /// `perm` (the umask, or the directory's default ACL, as for any create). `linkable` false
    /// (O_EXCL) means no later link may name it. The caller counts its open (`Fs::open`) at
    /// once: it is freed at its last close.
    pub fn create_tmpfile(
        &self,
        dir: u64,
        perm: u32,
        owner: Owner,
        linkable: bool,
    ) -> Result<Attr> {
        self.writable()?;
        let parent = self.dir_inode(dir)?;
        let _locked = self.lock_inodes(&[&parent]);
        if parent.removed.load(Ordering::Acquire) {
            return Err(Errno::ENOENT.into());
        }
        let (inherited, mode) =
            self.inherited_xattrs(&parent, pinode::S_IFREG | (perm & 0o7777), owner.umask)?;
        let ino = self.new_ino();
        let slot = self.alloc_pinode()?;
        let now = now_ns();
        let mut p = Pinode::zeroed();
        p.ino = U64::new(ino);
        p.parent = U64::new(dir);
        p.flags = U32::new(pinode::FLAG_PRIMARY | pinode::FLAG_ORPHAN);
        p.mode = U32::new(mode);
        (p.uid, p.gid) = (U32::new(owner.uid), U32::new(owner.gid));
        (p.atime_ns, p.mtime_ns, p.ctime_ns) = (I64::new(now), I64::new(now), I64::new(now));
        p.set_name(TMPFILE_NAME);
        // An orphan is in no chain; the commit goes through the log of the bucket its name
        // would have, as an unlink's orphan does.
        let mut buckets: SmallVec<[u64; 2]> =
            smallvec![self.bucket_index(self.hash(dir, TMPFILE_NAME))];
        let mut txn = Txn {
            inserts: smallvec![(slot, p)],
            orphan_inserts: smallvec![slot],
            ..Txn::default()
        };
        let mut xattr_slot = 0;
        if let Some(set) = &inherited {
            match self.write_xattr_pinode(ino, &set.encode(), now) {
                Ok((x, xp)) => {
                    txn.inserts.push((x, xp));
                    txn.data_inserts.push(x);
                    buckets.push(self.xattr_bucket(ino));
                    xattr_slot = x;
                }
                Err(e) => {
                    self.release(&[slot], &[]);
                    return Err(e);
                }
            }
        }
        let guards = self.lock_buckets(&buckets);
        self.commit(&buckets, &mut txn);
        drop(guards);
        let inode = Inode::new(ino, slot, mode, None);
        inode.data.lock().clear_names();
        inode.orphaned.store(true, Ordering::Release);
        let inode = Arc::new(inode);
        if let Some(set) = &inherited {
            self.note_new_xattrs(&inode, xattr_slot, set);
        }
        self.inodes.insert(inode);
        if linkable {
            self.linkable_tmpfiles.lock().insert(ino);
        }
        self.getattr(ino)
    }

    /// Whether `ino` is an unnamed file that a link may name (O_TMPFILE without O_EXCL).
    pub(super) fn is_linkable_tmpfile(&self, ino: u64) -> bool {
        self.linkable_tmpfiles.lock().contains(&ino)
    }

    /// Forgets an unnamed file's linkability (it was named, or freed).
    pub(crate) fn forget_tmpfile(&self, ino: u64) {
        self.linkable_tmpfiles.lock().remove(&ino);
    }

    /// `link` of an unnamed file (see [`Fs::link`]): its orphan pinode becomes its named
    /// primary in one commit. The caller holds `dir` and `target` locked, in `locked`, and has
    /// checked both still exist.
    pub(super) fn name_tmpfile(
        &self,
        target: &Inode,
        dir: &Inode,
        locked: &mut super::ops::Locked<'_>,
        new_name: &[u8],
    ) -> Result<Attr> {
        check_new_name(new_name)?;
        let mut new = self.lock_free_name(dir.ino, new_name)?;
        let orphan_slot = target.primary_slot();
        let orphan = self.primary_pinode(target)?;
        let mut named = orphan.clone();
        named.parent = U64::new(dir.ino);
        named.flags = U32::new(pinode::FLAG_PRIMARY);
        named.nlink = U32::new(1);
        let now = now_ns();
        named.ctime_ns = I64::new(now);
        let long = self.name_pinode(&mut named, new_name)?;
        let slot = match self.alloc_pinode() {
            Ok(slot) => slot,
            Err(e) => {
                let long: SmallVec<[u32; 1]> = long.iter().map(|l| l.0).collect();
                self.release(&[], &long);
                return Err(e);
            }
        };
        let mut txn = Txn {
            removes: smallvec![orphan_slot],
            inserts: smallvec![(slot, named)],
            long_names: long.into_iter().collect(),
            in_place: self.touch(dir.primary_slot(), now).into_iter().collect(),
            ..Txn::default()
        };
        self.commit(&[new.bucket], &mut txn);
        target.primary.store(slot, Ordering::Release);
        target.orphaned.store(false, Ordering::Release);
        self.change_time_moved(target);
        self.forget_tmpfile(target.ino);
        self.list_name(dir, &mut new, slot);
        held_mut(locked, target.ino).add_name(slot);
        self.release(&[orphan_slot], &[]);
        self.getattr(target.ino)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{errno, fresh, OWNER};
    use super::super::ROOT_INO;
    use crate::error::Errno;
    use crate::format::pinode;

    #[test]
    fn an_unnamed_file_is_written_then_named_and_survives() {
        let mut h = fresh(None);
        let fs = h.fs();
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
        let t = fs.create_tmpfile(d.ino, 0o640, OWNER, true).unwrap();
        fs.open(t.ino).unwrap();
        assert_eq!((t.nlink, t.mode), (0, pinode::S_IFREG | 0o640));
        fs.write(t.ino, 0, &[7u8; 6000]).unwrap();
        fs.fsync(t.ino).unwrap();
        let listed = |fs: &super::Fs| {
            let mut n = 0;
            fs.readdir(d.ino, 0, |_| {
                n += 1;
                true
            })
            .unwrap();
            n - 2
        };
        assert_eq!(listed(fs), 0, "no name yet");
        let named = fs.link(t.ino, d.ino, b"named").unwrap();
        assert_eq!((named.ino, named.nlink), (t.ino, 1));
        assert_eq!(fs.lookup(d.ino, b"named").unwrap().ino, t.ino);
        assert_eq!(errno(fs.link(t.ino, d.ino, b"named")), Errno::EEXIST);
        fs.link(t.ino, ROOT_INO, b"second").unwrap();
        fs.close(t.ino).unwrap();
        h.remount(false);
        let fs = h.fs();
        let a = fs.lookup(d.ino, b"named").unwrap();
        assert_eq!((a.ino, a.nlink, a.size), (t.ino, 2, 6000));
        let mut buf = vec![0u8; 6000];
        fs.read(a.ino, 0, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 7));
    }

    #[test]
    fn an_unnamed_file_is_freed_at_close_or_by_the_next_mount() {
        let mut h = fresh(None);
        let used = |fs: &super::Fs| (fs.pinode_usage().0, fs.free_data_blocks());
        let before = used(h.fs());
        let fs = h.fs();
        let t = fs.create_tmpfile(ROOT_INO, 0o600, OWNER, false).unwrap();
        fs.open(t.ino).unwrap();
        fs.write(t.ino, 0, &[1u8; 9000]).unwrap();
        fs.fsync(t.ino).unwrap();
        assert_eq!(
            errno(fs.link(t.ino, ROOT_INO, b"x")),
            Errno::ENOENT,
            "O_EXCL: never named"
        );
        fs.close(t.ino).unwrap();
        fs.settle_all();
        assert_eq!(used(fs), before);
        assert_eq!(errno(fs.getattr(t.ino)), Errno::ENOENT);
        let t = h.fs().create_tmpfile(ROOT_INO, 0o600, OWNER, true).unwrap();
        h.fs().open(t.ino).unwrap();
        h.fs().write(t.ino, 0, &[2u8; 9000]).unwrap();
        h.fs().fsync(t.ino).unwrap();
        let report = h.remount(false);
        assert_eq!(report.orphans_freed, 1);
        assert_eq!(used(h.fs()), before);
    }
}
