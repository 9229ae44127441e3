//! Size watchers: who is told a regular file's size the moment it changes, under the file's
//! lock, before the change's call returns. The daemon watches the files its clients probe with
//! `lseek(SEEK_END)` and keeps each size in a word of the client's shared memory, so that the
//! probe (PostgreSQL asks ten per transaction) reads memory instead of making a round trip.
//!
//! The word holds the file's *generation* beside its size ([`board_word`]): a count of the
//! changes to which bytes the file holds where (writes, truncates, punches, collapses, window
//! rewrites, a mapping's shadow made). A client reading the file's bytes itself from the image
//! ([`super::direct`]) checks it before and after its copy.

use std::sync::Arc;

use smallvec::SmallVec;

use super::FileState;
use crate::fs::Fs;
use crate::Result;

/// Where a watched size goes: `store(index, word)` is called with the file's lock held, at every
/// change and once when the watch starts, with the file's [`board_word`]. It must not block or
/// take the file's locks.
pub trait SizeSink: Send + Sync {
    /// Board word `word` (size and generation) for the watch at `index`.
    fn store(&self, index: u32, word: u64);
}

/// Bits of a board word that hold the size (files end at [`super::MAX_FILE_BYTES`], 2^46); the
/// 17 above them hold the generation's low bits. A reader compares whole words: a generation
/// that wrapped back to an old value while one copy ran would take 131,072 changes.
pub const BOARD_SIZE_BITS: u32 = 47;
const BOARD_SIZE_MASK: u64 = (1 << BOARD_SIZE_BITS) - 1;

/// The board word of a file of `size` bytes at `generation`.
pub fn board_word(size: u64, generation: u32) -> u64 {
    debug_assert!(size <= BOARD_SIZE_MASK, "a file past the largest size");
    (size & BOARD_SIZE_MASK) | u64::from(generation) << BOARD_SIZE_BITS
}

/// The size a board word holds.
pub fn board_size(word: u64) -> u64 {
    word & BOARD_SIZE_MASK
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
    fn tell(&self, word: u64) {
        for (sink, index) in &self.0 {
            sink.store(*index, word);
        }
    }
}

impl FileState {
    /// Sets the size the file has for reads and stat, and tells the watchers.
    pub(crate) fn set_size(&mut self, size: u64) {
        self.size = size;
        self.watchers.tell(self.board_word());
    }

    /// The file's bytes are about to move, go or appear where a copy of its pieces would not
    /// find them: a new generation, told to the watchers now, before any block the change frees
    /// can be taken by another file (a reader's check after its copy then sees it).
    pub(crate) fn changed(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.watchers.tell(self.board_word());
    }

    /// The file's size and generation as a board word.
    pub(crate) fn board_word(&self) -> u64 {
        board_word(self.size, self.generation)
    }
}

impl Fs {
    /// Tells `sink` regular file `ino`'s size at `index` now and at every change, until
    /// [`Fs::unwatch_size`] with the same sink and index (or until the file's space is
    /// released at its last close after its last name went).
    pub fn watch_size(&self, ino: u64, sink: Arc<dyn SizeSink>, index: u32) -> Result<()> {
        let inode = self.inode(ino)?;
        let mut state = self.file_of(&inode)?.lock();
        sink.store(index, state.board_word());
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
