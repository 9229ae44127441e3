//! The words of a connection's size and generation boards: which file each follows, and for
//! how long.
//!
//! A word follows one file for one connection. Asked for by a size probe (`SIZE_WATCH`) or a
//! read that takes a copy of the file's pieces (`READ_MAPPED`), it is kept until the
//! connection ends: the client remembers it per description and per file, with nothing that
//! says when it stops using it. Given with a read-only open of a regular file, for `fstat`
//! answered from the attributes the open brought (`Service::fstat_cached`), it goes back at
//! the close of the last such description (unless a probe or a read asked for it meanwhile):
//! a process reading thousands of files (git checking objects out, a compiler's headers)
//! would otherwise fill the board with the first thousand.

use std::collections::HashMap;
use std::sync::Arc;

use nosefs_core::file::SizeSink;
use nosefs_core::Errno;

use super::{Conn, Shared};

/// One word's use.
#[derive(Debug, Clone, Copy)]
struct Watch {
    index: u32,
    /// The generation board follows the file too.
    generations: bool,
    /// Asked for by a probe or a read: kept until the connection ends.
    sticky: bool,
    /// Read-only descriptions of the file whose opens were given the word, not yet closed.
    stat_opens: u32,
}

/// A connection's words ([`Conn::watches`]).
#[derive(Debug, Default)]
pub(super) struct Watches {
    by_ino: HashMap<u64, Watch>,
    /// Words given back, for the next file.
    free: Vec<u32>,
    /// Words never given yet start here.
    next: u32,
    /// The descriptions (tokens) whose opens were given a word, and their files.
    stat_tokens: HashMap<u64, u64>,
}

impl Watches {
    /// `ino`'s word, or a new one; `None` when the board has no word left.
    fn word_for(&mut self, conn: &Conn, ino: u64) -> Option<(Watch, bool)> {
        if let Some(&w) = self.by_ino.get(&ino) {
            return Some((w, false));
        }
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                conn.area.size_word(self.next)?;
                self.next += 1;
                self.next - 1
            }
        };
        let watch = Watch {
            index,
            generations: false,
            sticky: false,
            stat_opens: 0,
        };
        Some((watch, true))
    }

    /// Gives back a word that was just taken and could not be used.
    fn give_back(&mut self, index: u32) {
        self.free.push(index);
    }
}

/// A word of `conn`'s size board that follows file `ino`'s size, kept until the connection
/// ends, or `u32::MAX` when the board is full; with `generations`, the same word of its
/// generation board follows the file's generation from now on.
pub(super) fn watch_size(
    shared: &Shared,
    conn: &Conn,
    ino: u64,
    generations: bool,
) -> Result<u32, Errno> {
    let mut watches = conn.watches.lock();
    let Some((mut watch, new)) = watches.word_for(conn, ino) else {
        return Ok(u32::MAX);
    };
    if new || (generations && !watch.generations) {
        let sink: Arc<dyn SizeSink> = conn.area.clone();
        let generations = generations || watch.generations;
        if let Err(e) = shared.fs.watch_size(ino, sink, watch.index, generations) {
            if new {
                watches.give_back(watch.index);
            }
            return Err(e.errno());
        }
        watch.generations = generations;
    }
    watch.sticky = true;
    watches.by_ino.insert(ino, watch);
    Ok(watch.index)
}

/// For the read-only open of regular file `ino` as description `token`: a word of `conn`'s
/// generation board that follows the file, and its generation now, or `None` when the board
/// is full or the file went. Attributes read after this hold while the word keeps that
/// generation; the word goes back at the close of the file's last such description
/// ([`closed`]).
pub(super) fn watch_for_stat(
    shared: &Shared,
    conn: &Conn,
    ino: u64,
    token: u64,
) -> Option<(u32, u64)> {
    let mut watches = conn.watches.lock();
    let (mut watch, new) = watches.word_for(conn, ino)?;
    let sink: Arc<dyn SizeSink> = conn.area.clone();
    // Watching again stores the size and generation again: the generation returned is the
    // word's now, whether or not the word followed generations already.
    let generation = match shared.fs.watch_size(ino, sink, watch.index, true) {
        Ok(generation) => generation,
        Err(_) => {
            if new {
                watches.give_back(watch.index);
            }
            return None;
        }
    };
    watch.generations = true;
    watch.stat_opens += 1;
    watches.by_ino.insert(ino, watch);
    watches.stat_tokens.insert(token, ino);
    Some((watch.index, generation))
}

/// Description `token` was closed on `conn`: the word its open was given goes back with the
/// file's last such description, unless kept for the connection's life.
pub(super) fn closed(shared: &Shared, conn: &Conn, token: u64) {
    let mut watches = conn.watches.lock();
    let Some(ino) = watches.stat_tokens.remove(&token) else {
        return;
    };
    let Some(watch) = watches.by_ino.get_mut(&ino) else {
        return;
    };
    watch.stat_opens -= 1;
    if watch.stat_opens > 0 || watch.sticky {
        return;
    }
    let index = watch.index;
    watches.by_ino.remove(&ino);
    let sink: Arc<dyn SizeSink> = conn.area.clone();
    shared.fs.unwatch_size(ino, &sink, index);
    watches.give_back(index);
}

/// Every word of `conn` stops following its file (the connection ended).
pub(super) fn unwatch_all(shared: &Shared, conn: &Conn) {
    let sink: Arc<dyn SizeSink> = conn.area.clone();
    let mut watches = conn.watches.lock();
    for (ino, watch) in watches.by_ino.drain() {
        shared.fs.unwatch_size(ino, &sink, watch.index);
    }
    watches.stat_tokens.clear();
}
