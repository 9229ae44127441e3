//! A file's data in DRAM: its pieces by file offset (the paper's per-file index tree, kept as a
//! [`ChunkMap`]), and the blocks of the data zone they share (to decide when a block is free).
//!
//! A *piece* is `len` bytes of the file at some file offset, stored at data-zone byte address
//! `addr` (block × 4096 + offset in the block). A committed piece is exactly one extent on the
//! media (`eno` ≠ 0); a pending one exists only here until the next fsync writes it as an extent.
//!
//! Invariants, checked by [`FileMap::check`] in tests:
//! - pieces never overlap in the file, and each has `len > 0`;
//! - pieces never overlap in the data zone either: every byte of the zone belongs to at most one
//!   piece of the map. Non-Copy-On-Write keeps this true: an overwrite puts its bytes in fresh
//!   space, and the pieces an overwrite splits keep disjoint parts of their old bytes;
//! - `refs` counts, for each block, the pieces that touch it without covering all of it
//!   ([`BlockRefs`]);
//! - a piece marked `fresh` holds only bytes written since the last commit, which no committed
//!   extent holds;
//! - `pending_count` is the number of pieces with `eno == 0`, and `pending` holds the file offset
//!   of each of them, in any order, possibly repeated and possibly beside offsets of pieces that
//!   have since been removed or committed: recording a pending piece is one push, not a tree
//!   insert, and [`FileMap::pending`] sorts out the stale entries once per commit.

use std::collections::BTreeMap;

use smallvec::SmallVec;

use super::blockrefs::BlockRefs;
use super::chunkmap::ChunkMap;

/// One contiguous piece of file data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Data-zone byte address of the first byte.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// The extent that holds it on the media; 0 while pending.
    pub eno: u32,
    /// Written since the last commit: no committed extent holds any of its bytes, so when it
    /// drops bytes, only pending pieces can still be using their blocks. A pending piece split
    /// off a committed one is not fresh.
    pub fresh: bool,
}

impl Piece {
    /// The piece's last data-zone byte address plus one.
    pub fn addr_end(&self) -> u64 {
        self.addr + self.len
    }
}

/// Disjoint byte ranges of the data zone: address → length.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Space {
    ranges: BTreeMap<u64, u64>,
}

impl Space {
    /// Adds a range unless it overlaps one already held (for media content, which is not
    /// trusted); returns whether it was added.
    pub fn try_add(&mut self, addr: u64, len: u64) -> bool {
        let end = match addr.checked_add(len) {
            Some(end) if len > 0 => end,
            _ => return false,
        };
        let before = self.ranges.range(..=addr).next_back();
        if before.is_some_and(|(&a, &l)| a + l > addr) {
            return false;
        }
        if self.ranges.range(addr..end).next().is_some() {
            return false;
        }
        self.ranges.insert(addr, len);
        true
    }
}

/// What a punch took out of the map.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Punched {
    /// Committed pieces that left the map, whole: (eno, addr, len). Their extents must be removed
    /// by the next commit, even where a fragment of them stays as a new pending piece.
    pub removed: SmallVec<[(u32, u64, u64); 4]>,
    /// Data-zone ranges (addr, len, fresh) that no piece refers to any more; `fresh` tells
    /// whether the piece they were cut from was fresh (see [`Piece::fresh`]).
    pub dropped: SmallVec<[(u64, u64, bool); 4]>,
}

/// A file's pieces.
#[derive(Debug, Default, Clone)]
pub struct FileMap {
    pieces: ChunkMap<Piece>,
    /// Bytes the pieces hold (what the file stores, holes excluded).
    bytes: u64,
    refs: BlockRefs,
    pending: Vec<u64>,
    pending_count: usize,
    /// A piece was inserted since [`FileMap::take_inserted`] last asked: only then can a window
    /// hold more pieces than at the last commit ([`FileMap::replace`] does not count).
    inserted: bool,
}

impl FileMap {
    /// Adds a piece at file offset `offset`; it must overlap nothing (punch first).
    pub fn insert(&mut self, offset: u64, piece: Piece) {
        assert!(piece.len > 0, "empty piece");
        debug_assert!(
            self.overlapping(offset, offset + piece.len)
                .next()
                .is_none(),
            "piece at {offset} overlaps the map"
        );
        self.refs.add(piece.addr, piece.len);
        if piece.eno == 0 {
            self.note_pending(offset);
        }
        self.bytes += piece.len;
        self.inserted = true;
        self.pieces.insert(offset, piece);
    }

    /// Whether a piece was inserted since the last [`FileMap::take_inserted`].
    pub fn inserted(&self) -> bool {
        self.inserted
    }

    /// Whether a piece was inserted since the last call, which forgets it (a commit, once
    /// durable).
    pub fn take_inserted(&mut self) -> bool {
        std::mem::take(&mut self.inserted)
    }

    fn note_pending(&mut self, offset: u64) {
        self.pending.push(offset);
        self.pending_count += 1;
    }

    fn forget_pending(&mut self) {
        self.pending_count -= 1;
        if self.pending_count == 0 {
            self.pending.clear();
        }
    }

    /// Bytes the pieces hold: the file's data, holes excluded.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Removes the piece at exactly `offset` and returns it.
    pub fn remove(&mut self, offset: u64) -> Piece {
        let piece = self.pieces.remove(offset).expect("a piece at the offset");
        self.bytes -= piece.len;
        self.refs.remove(piece.addr, piece.len);
        if piece.eno == 0 {
            self.forget_pending();
        }
        piece
    }

    /// Puts `piece` (pending) in the place of the piece at exactly `offset` if that one is as long,
    /// and returns the one it replaced: the result of a punch of its bytes and an insert, for
    /// the commonest overwrite (a page rewritten where it was last written) at one lookup.
    pub fn replace(&mut self, offset: u64, piece: Piece) -> Option<Piece> {
        debug_assert_eq!(piece.eno, 0, "a replacement is pending");
        let slot = self.pieces.get_mut(offset)?;
        if slot.len != piece.len {
            return None;
        }
        let old = std::mem::replace(slot, piece);
        self.refs.remove(old.addr, old.len);
        self.refs.add(piece.addr, piece.len);
        if old.eno != 0 {
            self.note_pending(offset);
        }
        Some(old)
    }

    /// Removes the file bytes `[start, end)`, splitting the pieces that straddle either edge
    /// (paper Fig. 3): the parts outside the range stay, as pending pieces over the same bytes.
    pub fn punch(&mut self, start: u64, end: u64, out: &mut Punched) {
        if start >= end {
            return;
        }
        let hit: SmallVec<[(u64, Piece); 4]> = self.overlapping(start, end).collect();
        for (offset, piece) in hit {
            if piece.eno != 0 {
                out.removed.push((piece.eno, piece.addr, piece.len));
            }
            let piece_end = offset + piece.len;
            let cut_start = start.max(offset);
            let cut_end = end.min(piece_end);
            out.dropped.push((
                piece.addr + (cut_start - offset),
                cut_end - cut_start,
                piece.fresh,
            ));
            if offset < start {
                // The left part keeps the piece's file offset and data-zone address: shrink it
                // where it is instead of removing it and inserting it again.
                self.shrink(offset, start - offset);
            } else {
                self.remove(offset);
            }
            if piece_end > end {
                let right = Piece {
                    addr: piece.addr + (end - offset),
                    len: piece_end - end,
                    eno: 0,
                    fresh: piece.fresh,
                };
                self.insert(end, right);
            }
        }
    }

    /// Splits the piece that straddles file offset `at`, if one does, into two pending pieces
    /// over the same bytes (nothing is copied); a committed piece's extent goes to `removed`.
    pub fn split_at(&mut self, at: u64, removed: &mut impl Extend<(u32, u64, u64)>) {
        let Some((offset, piece)) = self.overlapping(at, at + 1).next() else {
            return;
        };
        if offset >= at {
            return; // a piece starts there: nothing straddles it
        }
        if piece.eno != 0 {
            removed.extend([(piece.eno, piece.addr, piece.len)]);
        }
        self.remove(offset);
        let left = at - offset;
        self.insert(
            offset,
            Piece {
                len: left,
                eno: 0,
                ..piece
            },
        );
        self.insert(
            at,
            Piece {
                addr: piece.addr + left,
                len: piece.len - left,
                eno: 0,
                fresh: piece.fresh,
            },
        );
    }

    /// Makes the committed piece at `offset` pending again over the same bytes (nothing is
    /// copied), so the next commit writes it as a new extent; its extent goes to `removed`.
    pub fn reissue(&mut self, offset: u64, removed: &mut impl Extend<(u32, u64, u64)>) {
        let piece = self.get(offset).expect("a piece at the offset");
        assert!(piece.eno != 0, "piece at {offset} is pending already");
        removed.extend([(piece.eno, piece.addr, piece.len)]);
        self.set_eno(offset, 0);
    }

    /// Moves every piece at or after file offset `from` by `delta` bytes, as pending pieces over
    /// the same bytes (their data stays where it is: only their file offsets change); committed
    /// pieces' extents go to `removed`. No piece may straddle `from` ([`FileMap::split_at`]
    /// first), and where the pieces land must be empty (a collapse punches it first). O(pieces
    /// moved).
    pub fn shift_from(
        &mut self,
        from: u64,
        delta: i64,
        removed: &mut impl Extend<(u32, u64, u64)>,
    ) {
        let moved: Vec<(u64, Piece)> = self.overlapping(from, u64::MAX).collect();
        for &(offset, piece) in &moved {
            assert!(offset >= from, "piece at {offset} straddles {from}");
            if piece.eno != 0 {
                removed.extend([(piece.eno, piece.addr, piece.len)]);
            }
            self.remove(offset);
        }
        for (offset, piece) in moved {
            let to = offset
                .checked_add_signed(delta)
                .expect("a shift stays inside the file");
            self.insert(to, Piece { eno: 0, ..piece });
        }
    }

    /// Cuts the piece at `offset` down to its first `len` bytes, as a pending piece.
    fn shrink(&mut self, offset: u64, len: u64) {
        let piece = self.pieces.get_mut(offset).expect("a piece at the offset");
        assert!(
            len > 0 && len < piece.len,
            "shrinking to {len} of {}",
            piece.len
        );
        let (addr, old_len) = (piece.addr, piece.len);
        piece.len = len;
        self.bytes -= old_len - len;
        let was_committed = piece.eno != 0;
        piece.eno = 0;
        self.refs.remove(addr, old_len);
        self.refs.add(addr, len);
        if was_committed {
            self.note_pending(offset);
        }
    }

    /// Pieces overlapping file bytes `[start, end)`, in file order.
    pub fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = (u64, Piece)> + '_ {
        self.pieces
            .range_from_before(start)
            .skip_while(move |&(o, p)| o < start && o + p.len <= start)
            .take_while(move |&(o, _)| o < end)
    }

    /// The piece before file offset `offset` (starting strictly before it).
    pub fn before(&self, offset: u64) -> Option<(u64, Piece)> {
        self.pieces.before(offset)
    }

    /// The piece after file offset `offset` (starting strictly after it).
    pub fn after(&self, offset: u64) -> Option<(u64, Piece)> {
        self.pieces.after(offset)
    }

    /// The piece at exactly `offset`.
    pub fn get(&self, offset: u64) -> Option<Piece> {
        self.pieces.get(offset)
    }

    /// Sets the extent number of the piece at `offset` (a pending piece being committed, or back).
    pub fn set_eno(&mut self, offset: u64, eno: u32) {
        let piece = self.pieces.get_mut(offset).expect("a piece at the offset");
        let was_pending = piece.eno == 0;
        piece.eno = eno;
        if eno != 0 {
            piece.fresh = false;
        }
        match (was_pending, eno == 0) {
            (true, false) => self.forget_pending(),
            (false, true) => self.note_pending(offset),
            _ => {}
        }
    }

    /// File offsets of the pending pieces, in order (dropping the stale entries of the record).
    pub fn pending(&mut self) -> SmallVec<[u64; 8]> {
        self.pending.sort_unstable();
        // Every pending piece has an entry, so a record as long as the count holds no stale or
        // repeated one, and a commit asking again (merge, window rewrite, commit) costs a sort of
        // sorted offsets, not a tree lookup per entry.
        if self.pending.len() != self.pending_count {
            let pieces = &self.pieces;
            self.pending.dedup();
            self.pending
                .retain(|&offset| pieces.get(offset).is_some_and(|p| p.eno == 0));
        }
        debug_assert_eq!(self.pending.len(), self.pending_count);
        SmallVec::from_slice(&self.pending)
    }

    /// Number of pending pieces.
    pub fn pending_count(&self) -> usize {
        self.pending_count
    }

    /// All pieces in file order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Piece)> + '_ {
        self.pieces.iter()
    }

    /// The last piece.
    pub fn last(&self) -> Option<(u64, Piece)> {
        self.pieces.last()
    }

    /// Number of pieces.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// Whether the file holds no data.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The blocks the pieces share ([`BlockRefs`]).
    pub fn refs(&self) -> &BlockRefs {
        &self.refs
    }

    /// Panics if an invariant of the module doc does not hold.
    #[cfg(test)]
    pub fn check(&self) {
        let mut end = 0;
        let mut space = Space::default();
        let mut refs = BlockRefs::default();
        self.pieces.check();
        for (offset, piece) in self.pieces.iter() {
            assert!(piece.len > 0, "empty piece at {offset}");
            assert!(offset >= end, "piece at {offset} overlaps the previous");
            assert!(
                !(piece.fresh && piece.eno != 0),
                "committed piece {offset} marked fresh"
            );
            end = offset + piece.len;
            assert!(
                space.try_add(piece.addr, piece.len),
                "data-zone bytes at {} held twice",
                piece.addr
            );
            refs.add(piece.addr, piece.len);
            if piece.eno == 0 {
                assert!(
                    self.pending.contains(&offset),
                    "pending piece {offset} not recorded"
                );
            }
        }
        assert_eq!(refs, self.refs, "block counts out of step");
        assert_eq!(
            self.bytes,
            self.pieces.iter().map(|(_, p)| p.len).sum::<u64>(),
            "byte count out of step"
        );
        assert_eq!(
            self.pending_count,
            self.pieces.iter().filter(|(_, p)| p.eno == 0).count()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A committed piece, or (eno 0) one just written.
    fn piece(addr: u64, len: u64, eno: u32) -> Piece {
        let fresh = eno == 0;
        Piece {
            addr,
            len,
            eno,
            fresh,
        }
    }

    /// A map with committed pieces [0,100) @1000, [100,300) @5000, [300,400) @9000.
    fn three() -> FileMap {
        let mut m = FileMap::default();
        m.insert(0, piece(1000, 100, 1));
        m.insert(100, piece(5000, 200, 2));
        m.insert(300, piece(9000, 100, 3));
        m.check();
        m
    }

    fn layout(m: &FileMap) -> Vec<(u64, u64, u64, u32)> {
        m.iter().map(|(o, p)| (o, p.addr, p.len, p.eno)).collect()
    }

    #[test]
    fn punch_before_all_pieces_changes_nothing() {
        let mut m = FileMap::default();
        m.insert(500, piece(0, 10, 1));
        let mut out = Punched::default();
        m.punch(0, 500, &mut out);
        assert_eq!(out, Punched::default());
        assert_eq!(layout(&m), vec![(500, 0, 10, 1)]);
    }

    #[test]
    fn punch_inside_one_piece_splits_it_in_three_places() {
        let mut m = three();
        let mut out = Punched::default();
        m.punch(150, 160, &mut out);
        m.check();
        assert_eq!(out.removed.as_slice(), &[(2, 5000, 200)]);
        assert_eq!(out.dropped.as_slice(), &[(5050, 10, false)]);
        assert_eq!(
            layout(&m),
            vec![
                (0, 1000, 100, 1),
                (100, 5000, 50, 0),
                (160, 5060, 140, 0),
                (300, 9000, 100, 3)
            ]
        );
    }

    #[test]
    fn punch_at_a_piece_start_keeps_only_its_right_part() {
        let mut m = three();
        let mut out = Punched::default();
        m.punch(100, 120, &mut out);
        m.check();
        assert_eq!(out.dropped.as_slice(), &[(5000, 20, false)]);
        assert_eq!(layout(&m)[1], (120, 5020, 180, 0));
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn punch_at_a_piece_end_keeps_only_its_left_part() {
        let mut m = three();
        let mut out = Punched::default();
        m.punch(280, 300, &mut out);
        m.check();
        assert_eq!(out.dropped.as_slice(), &[(5180, 20, false)]);
        assert_eq!(layout(&m)[1], (100, 5000, 180, 0));
        assert_eq!(
            layout(&m)[2],
            (300, 9000, 100, 3),
            "the next piece is untouched"
        );
    }

    #[test]
    fn punch_exactly_covering_one_piece_removes_it_whole() {
        let mut m = three();
        let mut out = Punched::default();
        m.punch(100, 300, &mut out);
        m.check();
        assert_eq!(out.removed.as_slice(), &[(2, 5000, 200)]);
        assert_eq!(out.dropped.as_slice(), &[(5000, 200, false)]);
        assert_eq!(layout(&m), vec![(0, 1000, 100, 1), (300, 9000, 100, 3)]);
    }

    #[test]
    fn punch_spanning_several_pieces_trims_both_ends() {
        let mut m = three();
        let mut out = Punched::default();
        m.punch(50, 350, &mut out);
        m.check();
        let removed: Vec<u32> = out.removed.iter().map(|r| r.0).collect();
        assert_eq!(removed, vec![1, 2, 3]);
        assert_eq!(
            out.dropped.as_slice(),
            &[(1050, 50, false), (5000, 200, false), (9000, 50, false)]
        );
        assert_eq!(layout(&m), vec![(0, 1000, 50, 0), (350, 9050, 50, 0)]);
    }

    #[test]
    fn punch_exactly_covering_many_pieces_empties_the_map() {
        let mut m = three();
        let mut out = Punched::default();
        m.punch(0, 400, &mut out);
        m.check();
        assert!(m.is_empty());
        assert_eq!(*m.refs(), BlockRefs::default());
        assert_eq!(out.removed.len(), 3);
        assert_eq!(out.dropped.iter().map(|d| d.1).sum::<u64>(), 400);
    }

    #[test]
    fn punch_in_a_hole_and_past_the_end_touch_nothing() {
        let mut m = FileMap::default();
        m.insert(0, piece(0, 10, 0));
        m.insert(100, piece(4096, 10, 0));
        let mut out = Punched::default();
        m.punch(20, 90, &mut out);
        m.punch(200, u64::MAX, &mut out);
        assert_eq!(out, Punched::default());
        assert_eq!(m.len(), 2);
        assert_eq!(m.pending_count(), 2);
    }

    #[test]
    fn pending_pieces_split_leave_no_removed_extent() {
        let mut m = FileMap::default();
        m.insert(0, piece(0, 4096, 0));
        let mut out = Punched::default();
        m.punch(1024, 2048, &mut out);
        m.check();
        assert!(out.removed.is_empty(), "nothing committed was touched");
        assert_eq!(out.dropped.as_slice(), &[(1024, 1024, true)]);
        assert_eq!(m.pending().as_slice(), [0, 2048]);
        let remnants: Vec<bool> = m.iter().map(|(_, p)| p.fresh).collect();
        assert_eq!(
            remnants,
            vec![true, true],
            "remnants of a fresh piece stay fresh"
        );
    }

    #[test]
    fn pending_lists_exactly_the_pending_pieces_whatever_the_record_holds() {
        let mut m = FileMap::default();
        m.insert(100, piece(4096, 10, 0));
        m.insert(0, piece(0, 10, 0));
        assert_eq!(
            m.pending().as_slice(),
            [0, 100],
            "an exact record, only sorted"
        );
        m.remove(0);
        assert_eq!(
            m.pending().as_slice(),
            [100],
            "a removed piece's entry is dropped"
        );
        m.insert(0, piece(0, 10, 0));
        m.set_eno(100, 7);
        assert_eq!(
            m.pending().as_slice(),
            [0],
            "a committed piece's entry is dropped"
        );
        m.set_eno(100, 0);
        m.insert(50, piece(8192, 10, 0));
        m.remove(50);
        m.insert(50, piece(8192, 10, 0));
        assert_eq!(
            m.pending().as_slice(),
            [0, 50, 100],
            "a repeated offset is listed once"
        );
        m.check();
    }

    #[test]
    fn remnants_of_a_committed_piece_are_not_fresh() {
        let mut m = three();
        m.punch(150, 160, &mut Punched::default());
        m.check();
        assert!(m.iter().all(|(_, p)| !p.fresh));
        assert_eq!(m.pending().as_slice(), [100, 160]);
    }
}
