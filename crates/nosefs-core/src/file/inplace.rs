//! A crowded window rewritten into the blocks it already holds: the fragmentation policy's
//! cheap route (issue 41).
//!
//! A window crowds the same way again and again: one run of blocks holds most of it (the last
//! rewrite's copy, or a slice of a file written in order), cut into pieces by small overwrites
//! whose bytes sit elsewhere. The bytes of that *base* run under the overwrites are dead: no
//! committed extent and no piece holds them. The plain rewrite ([`Fs::defragment_window`])
//! reads the whole window (cold: the write-backs evicted it) and copies all of it to fresh
//! blocks; this route copies only the overwrites' bytes into the dead ranges of the base run
//! and makes the window one piece over it again, so the bytes that stay (most of the window)
//! are neither read nor written, and no blocks are taken or freed.
//!
//! Safe because a byte is written here only where nothing holds it: not a piece of the file
//! (pending or committed), not an extent the pending commit retires (which the media holds until
//! then, and a crash before the commit point keeps), not the tail block's free bytes; and the
//! base run's blocks belong to this file alone, which the block counts prove (every block is
//! touched by a committed range of the window, and the counts of the pieces and committed
//! extents touching each block are exactly the window's own). A crash before the commit point
//! leaves the last commit's state, which holds none of the bytes written. Only the last commit
//! of a file can be replayed (`settle`), and it is that state. The new piece's bytes are made
//! durable by the commit as any pending piece's: flushed here, then fenced or checksummed
//! (the bytes of the new extent that no retired extent held).
//!
//! Pieces written since the last commit over bytes the base still holds for the media (the
//! writes being synced) stay as they are, and the base's new pieces go around them.

use smallvec::SmallVec;

use crate::format::BLOCK_SIZE;
use crate::fs::Fs;

use super::filemap::{Piece, Punched};
use super::{fits_one_extent, FileState, WINDOW_MAX_PIECES};

/// Most pieces a window may keep after an in-place rewrite; past it the window is copied whole.
const KEPT_PIECES_MAX: usize = WINDOW_MAX_PIECES / 4;

/// A window is rewritten in place only when at most this share of it (one in three bytes) is
/// copied: scattered copies into cold lines of the run cost more per byte than one sequential
/// copy of the whole window to fresh blocks (measured: windows of 1 KiB overwrites, ~15 KiB
/// copied, gain; windows of 4 KiB overwrites, most of the window copied, lose).
const COPY_SHARE_MAX: u64 = 3;

/// Most extents the pending commit may retire for the window to be rewritten in place.
const REMOVED_MAX: usize = 64;

/// Rewrites done in place, for tests that must reach this route.
#[cfg(test)]
pub(super) static REWRITES_IN_PLACE: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// A part of the window's span: its file range, and what the rewrite does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The base holds the right bytes already (a piece at the base's offset).
    InPlace,
    /// The bytes at `addr` (`None`: a hole, zeros) are copied into the base's dead range.
    Copy(Option<u64>),
    /// Left as it is: a piece whose range in the base something still holds.
    Kept,
}

/// What [`plan`] decided for a window: the base (file offset `f` is at data-zone address
/// `f + delta`), and the span's parts in file order.
struct Plan {
    delta: i64,
    parts: SmallVec<[(u64, u64, Part); 40]>,
}

impl Fs {
    /// Rewrites the window span `[from, to)` into its base run when the window has one and the
    /// blocks allow it (see the module doc); false, with nothing changed, when it does not.
    pub(super) fn rewrite_window_in_place(
        &self,
        state: &mut FileState,
        from: u64,
        to: u64,
    ) -> bool {
        let Some(plan) = plan(state, from, to) else {
            return false;
        };
        state.changed();
        #[cfg(test)]
        REWRITES_IN_PLACE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let copied = self.copy_into_base(&plan);
        let mut punched = Punched::default();
        let mut segments: SmallVec<[(u64, u64); 8]> = SmallVec::new();
        for run in plan
            .parts
            .chunk_by(|a, b| (a.2 == Part::Kept) == (b.2 == Part::Kept))
        {
            if run[0].2 == Part::Kept {
                continue;
            }
            let (start, end) = (run[0].0, run[run.len() - 1].1);
            state.map.punch(start, end, &mut punched);
            segments.push((start, end));
        }
        for &(start, end) in &segments {
            let addr = base_addr(start, plan.delta);
            debug_assert!(fits_one_extent(addr, end - start));
            let piece = Piece {
                addr,
                len: end - start,
                eno: 0,
                // Committed extents hold some of its bytes until the commit.
                fresh: false,
            };
            state.map.insert(start, piece);
        }
        state.removed.extend(punched.removed);
        // After the inserts: a block the new pieces use is never free.
        self.free_dropped(state, &punched.dropped);
        // The commit frees a block that lost bytes unless a piece touches part of it; a block
        // the new pieces cover whole lost bytes here (the base's own pieces, punched) and is
        // theirs (usually every block of the run but the first and last).
        let covered_whole = |block: u64| {
            segments.iter().any(|&(start, end)| {
                let (addr, addr_end) = (base_addr(start, plan.delta), base_addr(end, plan.delta));
                addr <= block * BLOCK_SIZE && (block + 1) * BLOCK_SIZE <= addr_end
            })
        };
        state.deferred.retain(|&block| !covered_whole(block));
        state.dirty_bytes += copied;
        true
    }

    /// Copies the parts that need it into the base run, written back; returns the bytes copied.
    /// Ordinary stores: the parts start at any byte of cold lines, and the non-temporal copy's
    /// partial lines (shared with its ordinary head and tail) measured slower (15.7-16.0 us per
    /// rewrite of ~17 parts of 1 KiB, against 11.6 us).
    fn copy_into_base(&self, plan: &Plan) -> u64 {
        thread_local! {
            static BYTES: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let zone = self.image.geometry().block_offset(0);
        let region = self.image.region();
        BYTES.with_borrow_mut(|bytes| {
            let mut copied = 0u64;
            for &(start, end, part) in &plan.parts {
                let Part::Copy(source) = part else {
                    continue;
                };
                let len = (end - start) as usize;
                bytes.clear();
                bytes.resize(len, 0);
                if let Some(addr) = source {
                    region.read_bytes(zone + addr, bytes);
                }
                let to = zone + base_addr(start, plan.delta);
                region.write_bytes(to, bytes);
                region.flush(to, len as u64);
                copied += len as u64;
            }
            copied
        })
    }
}

/// Data-zone address of file offset `offset` in a base at `delta`.
fn base_addr(offset: u64, delta: i64) -> u64 {
    offset
        .checked_add_signed(delta)
        .expect("planned inside the zone")
}

/// The in-place rewrite of `[from, to)`, if the window has a base run that may take it.
fn plan(state: &FileState, from: u64, to: u64) -> Option<Plan> {
    if state.removed.len() > REMOVED_MAX {
        return None; // each part's range is checked against every retired extent
    }
    let pieces: SmallVec<[(u64, Piece); 40]> = state.map.overlapping(from, to).collect();
    let delta = base_delta(&pieces, from, to)?;
    let (first, last) = (
        from.checked_add_signed(delta)?,
        to.checked_add_signed(delta)?,
    );
    // Every byte something holds in or beside the base's blocks: the window's pieces, the
    // extents the pending commit retires, the tail's free bytes.
    let mut held: SmallVec<[(u64, u64); 48]> =
        pieces.iter().map(|(_, p)| (p.addr, p.len)).collect();
    held.extend(state.removed.iter().map(|&(_, addr, len)| (addr, len)));
    held.extend(state.tail.map(|(next, end)| (next, end - next)));
    if !base_blocks_are_the_window_s(state, &pieces, first, last) {
        return None;
    }
    let free = |addr: u64, len: u64| !held.iter().any(|&(a, l)| a < addr + len && addr < a + l);
    // A hole reads as zeros: they are copied where its base range is free.
    let hole = |start: u64, end: u64| {
        if free(base_addr(start, delta), end - start) {
            Part::Copy(None)
        } else {
            Part::Kept
        }
    };
    let mut parts: SmallVec<[(u64, u64, Part); 40]> = SmallVec::new();
    let mut at = from;
    for &(offset, piece) in &pieces {
        let (start, end) = (offset.max(from), (offset + piece.len).min(to));
        if at < start {
            parts.push((at, start, hole(at, start)));
        }
        let part = if piece.addr.checked_add_signed(-delta) == Some(offset) {
            Part::InPlace
        } else if free(base_addr(start, delta), end - start) {
            Part::Copy(Some(piece.addr + (start - offset)))
        } else {
            Part::Kept
        };
        parts.push((start, end, part));
        at = end;
    }
    if at < to {
        parts.push((at, to, hole(at, to)));
    }
    let kept = parts.iter().filter(|p| p.2 == Part::Kept).count();
    let copy_bytes: u64 = parts
        .iter()
        .filter(|p| matches!(p.2, Part::Copy(_)))
        .map(|p| p.1 - p.0)
        .sum();
    let worth_it = COPY_SHARE_MAX * copy_bytes <= to - from;
    (worth_it && kept <= KEPT_PIECES_MAX && kept < parts.len()).then_some(Plan { delta, parts })
}

/// The offset (data-zone address minus file offset) at which most of the span's bytes lie,
/// if that is at least half of them.
fn base_delta(pieces: &[(u64, Piece)], from: u64, to: u64) -> Option<i64> {
    let mut bytes_at: SmallVec<[(i64, u64); 40]> = SmallVec::new();
    for &(offset, piece) in pieces {
        let delta = piece.addr as i64 - offset as i64;
        let len = (offset + piece.len).min(to) - offset.max(from);
        match bytes_at.iter_mut().find(|(d, _)| *d == delta) {
            Some((_, n)) => *n += len,
            None => bytes_at.push((delta, len)),
        }
    }
    let &(delta, bytes) = bytes_at.iter().max_by_key(|(_, n)| *n)?;
    (2 * bytes >= to - from).then_some(delta)
}

/// Whether the blocks of data-zone bytes `[first, last)` belong to the window alone: each is
/// touched by a piece of the window and by a committed range (a committed piece of the window,
/// or an extent the pending commit retires: so it is allocated to this file, and no fresh
/// piece's drop frees it), and the pieces touching part of it are exactly the window's (so no
/// other piece of the file holds a byte there; every committed extent is a piece or retired by
/// the pending commit, which [`plan`] keeps clear of). A block a window piece covers whole has
/// no other range in it, and costs no lookup in the file's block counts. (A block of the run
/// that only a retired extent touches was freed and taken again, by another window's bytes:
/// the counts would not be looked up there, so it is refused.)
fn base_blocks_are_the_window_s(
    state: &FileState,
    pieces: &[(u64, Piece)],
    first: u64,
    last: u64,
) -> bool {
    let first_block = first / BLOCK_SIZE;
    let blocks = (last.div_ceil(BLOCK_SIZE) - first_block) as usize;
    // Per block of the base: touched by a window piece, by a committed range, and how many
    // window pieces touch part of it.
    const MOST: usize = (super::WINDOW_BYTES / BLOCK_SIZE) as usize + 1;
    let (mut window, mut committed, mut partly) = ([false; MOST], [false; MOST], [0usize; MOST]);
    if blocks > MOST {
        return false;
    }
    let mut visit = |addr: u64, len: u64, is_committed: bool, is_piece: bool| {
        let end = addr + len;
        let from = (addr / BLOCK_SIZE).max(first_block);
        let to = end.div_ceil(BLOCK_SIZE).min(first_block + blocks as u64);
        for block in from..to {
            let i = (block - first_block) as usize;
            window[i] |= is_piece;
            committed[i] |= is_committed;
            let whole = addr <= block * BLOCK_SIZE && (block + 1) * BLOCK_SIZE <= end;
            partly[i] += usize::from(is_piece && !whole);
        }
    };
    for (_, p) in pieces {
        visit(p.addr, p.len, p.eno != 0, true);
    }
    for &(_, addr, len) in &state.removed {
        visit(addr, len, true, false);
    }
    (0..blocks).all(|i| {
        window[i]
            && committed[i]
            && (partly[i] == 0 || state.map.refs().count(first_block + i as u64) == partly[i])
    })
}
