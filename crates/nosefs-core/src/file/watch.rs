//! Size watchers: who is told a regular file's size the moment it changes, under the file's
//! lock, before the change's call returns. The daemon watches the files its clients probe with
//! `lseek(SEEK_END)` and keeps each size in a word of the client's shared memory, so that the
//! probe (PostgreSQL asks ten per transaction) reads memory instead of making a round trip.

use std::sync::Arc;

use smallvec::SmallVec;

use super::FileState;
use crate::fs::Fs;
use crate::Result;

/// Where a watched size goes: `store(index, size)` is called with the file's lock held, at every
/// change and once when the watch starts. It must not block or take the file's locks.
pub trait SizeSink: Send + Sync {
    /// File size `size` for the watch at `index`.
    fn store(&self, index: u32, size: u64);
}

/// A file's watchers.
#[derive(Default)]
pub(crate) struct Watchers(SmallVec<[(Arc<dyn SizeSink>, u32); 1]>);

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(_, index)| index))
            .finish()
    }
}

impl Watchers {
    fn tell(&self, size: u64) {
        for (sink, index) in &self.0 {
            sink.store(*index, size);
        }
    }
}

impl FileState {
    /// Sets the size the file has for reads and stat, and tells the watchers.
    pub(crate) fn set_size(&mut self, size: u64) {
        self.size = size;
        self.watchers.tell(size);
    }
}

impl Fs {
    /// Tells `sink` regular file `ino`'s size at `index` now and at every change, until
    /// [`Fs::unwatch_size`] with the same sink and index (or until the file's space is
    /// released at its last close after its last name went).
    pub fn watch_size(&self, ino: u64, sink: Arc<dyn SizeSink>, index: u32) -> Result<()> {
        let inode = self.inode(ino)?;
        let mut state = self.file_of(&inode)?.lock();
        sink.store(index, state.size);
        state.watchers.0.push((sink, index));
        Ok(())
    }

    /// Ends the watch of `ino` by `sink` at `index`; nothing if there is none.
    pub fn unwatch_size(&self, ino: u64, sink: &Arc<dyn SizeSink>, index: u32) {
        let Ok(inode) = self.inode(ino) else {
            return;
        };
        let Some(file) = inode.file_state() else {
            return;
        };
        file.lock().watchers.0.retain(|(s, i)| {
            !(std::ptr::addr_eq(Arc::as_ptr(s), Arc::as_ptr(sink)) && *i == index)
        });
    }
}
