//! The fragmentation policy's test of a window (issue 24, issue 41): a 64 KiB window of a file
//! holding more than [`WINDOW_MAX_PIECES`] pieces is *crowded*, and is rewritten as one piece
//! (at the commit, `Fs::defragment`, or by the compactor, `compact`); while the file pins too
//! much space, at half as many. Both counts are read, never computed: the pieces of one window
//! from the map, the unused bytes of the blocks the file shares from its block counts.

use super::{FileState, WINDOW_BYTES, WINDOW_MAX_PIECES};

/// Whether `window` of the file holds more than [`WINDOW_MAX_PIECES`] pieces, or, while the
/// file pins too much space ([`pins_too_much`]), more than half as many.
pub(super) fn crowded(state: &FileState, window: u64) -> bool {
    let limit = if pins_too_much(state) {
        WINDOW_MAX_PIECES / 2
    } else {
        WINDOW_MAX_PIECES
    };
    pieces_over(state, window, limit)
}

/// Whether the blocks the file's pieces share hold more unused bytes than
/// [`SPARE_BYTES_MAX_PER_BYTE`] of its size. Each overwrite that starts or ends inside a block
/// leaves the old block's other bytes in use, so random small overwrites pin space until their
/// windows are rewritten: with the piece limit alone, 1.7x the file after 4 KiB overwrites at
/// byte offsets (docs/benchmarks.md). Windows rewritten at half the limit while this holds keep
/// the file near its bound, paying the earlier rewrites only where space grows.
fn pins_too_much(state: &FileState) -> bool {
    let (over, per) = SPARE_BYTES_MAX_PER_BYTE;
    state.map.refs().unused_bytes() * per > state.size * over
}

/// Unused bytes of shared blocks a file may pin per byte of its size (a fraction: over, per)
/// before its windows are rewritten at half the piece limit: 0.45, under the 1.5x issue 41 asks,
/// for the blocks a window's rewrite takes before the old ones go. Every rewrite it forces costs
/// a window copy: random 4 and 8 KiB overwrites at byte offsets pay ~10% for the bound (0.40
/// cost the same in steady state and more while a file first fills up; docs/benchmarks.md).
const SPARE_BYTES_MAX_PER_BYTE: (u64, u64) = (9, 20);

/// Whether `window` of the file holds more than `limit` pieces.
pub(super) fn pieces_over(state: &FileState, window: u64, limit: usize) -> bool {
    let (start, end) = (window * WINDOW_BYTES, (window + 1) * WINDOW_BYTES);
    state.map.overlapping(start, end).nth(limit).is_some()
}
