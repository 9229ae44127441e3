//! Open counts, and the last close of a file that lost its last name: one directory-journal
//! commit frees its orphan pinode (REMOVE_DATA), then its space goes back (the file-data side,
//! `Fs::release_file_space`).

use std::sync::atomic::Ordering;

use crate::error::{Errno, Result};
use crate::fs::Fs;

impl Fs {
    /// Notes that a frontend opened regular file or directory `ino` (one open file description).
    /// While any is open, a file outlives its last name, and a removed directory still answers
    /// getattr (with no links). Other types need no bookkeeping: Ok.
    pub fn open(&self, ino: u64) -> Result<()> {
        let inode = self.inode(ino)?;
        if inode.is_file() || inode.dir().is_some() {
            // Under the inode lock, which unlink holds while it decides between freeing the
            // inode and keeping it as an orphan by this count: an open that found the name just
            // before its last unlink either counts in time (the file stays, orphaned) or sees it
            // removed (ENOENT: the frontend walks again, `open_again`), never a freed inode.
            let _locked = inode.data.lock();
            if inode.removed.load(Ordering::Acquire) {
                return Err(Errno::ENOENT.into());
            }
            inode.open_count.fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Notes that a frontend closed (released) what [`Fs::open`] counted. The last close of a file that
    /// lost its last name frees it: one commit (REMOVE_DATA of the orphan), then its space.
    pub fn close(&self, ino: u64) -> Result<()> {
        let inode = match self.inode(ino) {
            Ok(inode) => inode,
            Err(e) => return self.close_removed_dir(ino).ok_or(e),
        };
        if inode.dir().is_some() {
            inode.open_count.fetch_sub(1, Ordering::AcqRel);
            return Ok(());
        }
        if !inode.is_file() {
            return Ok(());
        }
        let _locked = inode.data.lock();
        let before = inode.open_count.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "release without open of inode {ino}");
        if before > 1 || !inode.orphaned.load(Ordering::Acquire) {
            return Ok(());
        }
        let slot = inode.primary_slot();
        let p = self.image.pinode(u64::from(slot));
        let data = self.data_of(&p);
        let bucket = super::txn::bucket_of_pinode(&self.image, &p);
        let mut buckets: smallvec::SmallVec<[u64; 2]> = smallvec::smallvec![bucket];
        let mut txn = super::txn::Txn {
            removes: smallvec::smallvec![slot],
            ..super::txn::Txn::default()
        };
        if !data.is_empty() {
            txn.data_removes.push(slot);
        }
        let xattrs = self.xattr_drop(&inode);
        if let Some(x) = &xattrs {
            x.add_to(&mut txn, &mut buckets);
        }
        let guards = self.lock_buckets(&buckets);
        self.commit(&buckets, &mut txn);
        drop(guards);
        self.forget_tmpfile(ino);
        if let Some(x) = xattrs {
            self.release_xattr_pinode(&x);
        }
        inode.removed.store(true, Ordering::Release);
        self.inodes.remove(ino);
        self.release(&[slot], &[p.long_name.get()]);
        match inode.file_state() {
            // The state knows every block the file holds, committed or not.
            Some(file) => {
                self.hold_back(|limbo| limbo.extents.extend(data.iter().map(|d| d.0)));
                self.release_file_space(&mut file.lock());
            }
            // Never used since mount: the media's list is the whole file.
            None => self.release_data(&data),
        }
        Ok(())
    }
}
