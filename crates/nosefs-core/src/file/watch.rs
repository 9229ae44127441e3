//! Size watchers: who is told a regular file's size the moment it changes, under the file's
//! lock, before the change's call returns. The daemon watches the files its clients probe with
//! `lseek(SEEK_END)` and keeps each size in a word of the client's shared memory, so that the
//! probe (PostgreSQL asks ten per transaction) reads memory instead of making a round trip.
//!
//! Beside the size a watcher is told the file's *generation*: a count, never reused, of the
//! changes to its size or to which bytes it holds where (writes, truncates, punches, collapses,
//! window rewrites, a mapping's shadow made, its space released). A client reading the file's
//! bytes itself from the image ([`super::direct`]) checks it before and after its copy.

use std::sync::Arc;

use smallvec::SmallVec;

use super::FileState;
use crate::fs::Fs;
use crate::Result;

/// Where a watched size goes: `store(index, size, generation)` is called with the file's lock
/// held, at every change and once when the watch starts, with the generation only for a watch
/// that follows generations. It must not block or take the file's locks, and must make the
/// generation visible no later than the size (a reader that sees the new size then sees the
/// new generation too).
pub trait SizeSink: Send + Sync {
    /// File size `size` (at generation `generation`, when given) for the watch at `index`.
    fn store(&self, index: u32, size: u64, generation: Option<u64>);
}

/// A file's watchers.
#[derive(Default)]
pub(crate) struct Watchers(SmallVec<[Watcher; 1]>);

/// One watch: where it goes, and whether it follows generations too (only a watch a copy of
/// the pieces was handed out for: telling every size watcher at every write cost PostgreSQL's
/// TPC-C 10% as daemon clients, each of its processes watching the sizes of the relations).
struct Watcher {
    sink: Arc<dyn SizeSink>,
    index: u32,
    generations: bool,
}

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|w| (w.index, w.generations)))
            .finish()
    }
}

impl Watchers {
    /// Tells every watcher, or with `generations_only` those that follow generations.
    fn tell(&self, size: u64, generation: u64, generations_only: bool) {
        for w in &self.0 {
            if w.generations {
                w.sink.store(w.index, size, Some(generation));
            } else if !generations_only {
                w.sink.store(w.index, size, None);
            }
        }
    }
}

impl FileState {
    /// Sets the size the file has for reads and stat, and tells the watchers.
    pub(crate) fn set_size(&mut self, size: u64) {
        self.size = size;
        self.generation += 1;
        self.watchers.tell(size, self.generation, false);
    }

    /// The file's bytes are about to move, go or appear where a copy of its pieces would not
    /// find them: a new generation, told to the watchers now, before any block the change frees
    /// can be taken by another file (a reader's check after its copy then sees it).
    pub(crate) fn changed(&mut self) {
        self.generation += 1;
        self.watchers.tell(self.size, self.generation, true);
    }
}

impl Fs {
    /// Tells `sink` regular file `ino`'s size at `index` now and at every change (with
    /// `generations`, its generation at every change of it too), until [`Fs::unwatch_size`]
    /// with the same sink and index (or until the file's space is released at its last close
    /// after its last name went). Watching again with `generations` adds them to a watch.
    pub fn watch_size(
        &self,
        ino: u64,
        sink: Arc<dyn SizeSink>,
        index: u32,
        generations: bool,
    ) -> Result<()> {
        let inode = self.inode(ino)?;
        let mut state = self.file_of(&inode)?.lock();
        sink.store(index, state.size, Some(state.generation));
        let same = |w: &&mut Watcher| {
            std::ptr::addr_eq(Arc::as_ptr(&w.sink), Arc::as_ptr(&sink)) && w.index == index
        };
        match state.watchers.0.iter_mut().find(same) {
            Some(w) => w.generations |= generations,
            None => state.watchers.0.push(Watcher {
                sink,
                index,
                generations,
            }),
        }
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
        file.lock().watchers.0.retain(|w| {
            !(std::ptr::addr_eq(Arc::as_ptr(&w.sink), Arc::as_ptr(sink)) && w.index == index)
        });
    }
}
