//! Access times: by default the `relatime` rule, with one 8-byte store in place per update and
//! no commit (seed 001 keeps atime the same way). An access time is a hint no program may
//! depend on surviving a crash, so the store is flushed but pays no fence of its own: the next
//! fence of the thread (any commit) orders it.

use std::sync::atomic::Ordering;

use crate::fs::Fs;
use crate::inode::Inode;
use crate::mkfs::now_ns;

/// When reads update access times (the `noatime`, `relatime`, `strictatime` mount options).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AtimeMode {
    /// Update an access time older than the last change (mtime or ctime) or than a day: what
    /// `find -atime`, mail readers and tmpwatch need, at most one store per change or day.
    #[default]
    Relatime,
    /// Never update access times on reads.
    Noatime,
    /// Update the access time on every read.
    Strictatime,
}

/// Offset of `atime_ns` in a pinode (docs/format.md).
const ATIME_OFFSET: u64 = 40;
const DAY_NS: i64 = 86_400 * 1_000_000_000;

impl Fs {
    /// For how long from now reads of `inode` need not be noted, by the mount's rule, while its
    /// data and times stay as they are: under relatime until its access time is a day old (then
    /// the next read moves it); always without access times; never under strictatime. What a
    /// copy of a file's pieces handed to a daemon client for its own reads is good for
    /// (`file::direct`): reads from it are not noted.
    pub(crate) fn access_holds_ns(&self, inode: &Inode) -> u64 {
        match self.atime {
            AtimeMode::Noatime => u64::MAX,
            _ if self.is_read_only() => u64::MAX,
            AtimeMode::Strictatime => 0,
            AtimeMode::Relatime => {
                let p = self.image.pinode(u64::from(inode.primary_slot()));
                let (atime, mtime, ctime) = (p.atime_ns.get(), p.mtime_ns.get(), p.ctime_ns.get());
                if atime <= mtime || atime <= ctime {
                    return 0; // the next read is noted
                }
                atime.saturating_add(DAY_NS).saturating_sub(now_ns()).max(0) as u64
            }
        }
    }

    /// `inode`'s change time moved without its data (chmod, chown, times, links, names,
    /// extended attributes): relatime notes the next read after that, so the copies of a
    /// regular file's pieces handed to daemon clients for reads of their own (`file::direct`)
    /// end here, and their next read asks the daemon, which notes it. The caller may hold the
    /// inode's lock (a file's lock is taken after it), not the file's.
    pub(crate) fn change_time_moved(&self, inode: &Inode) {
        if let Some(file) = inode.file_state() {
            file.lock().changed();
        }
    }

    /// Notes a read of `inode`'s data or a listing of it: its access time becomes now when the
    /// mount's rule says so. The caller holds no lock of the inode.
    pub(crate) fn note_access(&self, inode: &Inode) {
        if self.atime == AtimeMode::Noatime || self.is_read_only() {
            return;
        }
        let p = self.image.pinode(u64::from(inode.primary_slot()));
        let (atime, mtime, ctime) = (p.atime_ns.get(), p.mtime_ns.get(), p.ctime_ns.get());
        let now = now_ns();
        let due = match self.atime {
            AtimeMode::Strictatime => atime != now,
            _ => atime <= mtime || atime <= ctime || now.saturating_sub(atime) >= DAY_NS,
        };
        if !due {
            return;
        }
        // Under the inode lock the primary pinode cannot move to another slot (every new version
        // is committed under it), so the store lands on this inode's pinode, never on a slot
        // freed and reused meanwhile.
        let _locked = inode.data.lock();
        if inode.removed.load(Ordering::Acquire) {
            return;
        }
        let offset = self
            .image
            .geometry()
            .pinode_offset(u64::from(inode.primary_slot()))
            + ATIME_OFFSET;
        self.image.region().store_u64(offset, now as u64);
        self.image.region().flush(offset, 8);
    }
}
