//! A file's data in DRAM: its pieces by file offset (the paper's per-file index tree), and the
//! bytes of the data zone they hold (to decide when a block is free).
//!
//! A *piece* is `len` bytes of the file at some file offset, stored at data-zone byte address
//! `addr` (block × 4096 + offset in the block). A committed piece is exactly one extent on the
//! media (`eno` ≠ 0); a pending one exists only here until the next fsync writes it as an extent.
//!
//! Invariants, checked by [`FileMap::check`] in tests:
//! - pieces never overlap in the file, and each has `len > 0`;
//! - pieces never overlap in the data zone either: every byte of the zone belongs to at most one
//!   piece of the map. Non-Copy-On-Write keeps this true: an overwrite puts its bytes in fresh
//!   space, and the pieces an overwrite splits keep disjoint parts of their old bytes. It is what
//!   lets [`Space::covers_block`] answer from one predecessor lookup;
//! - `space` holds exactly the (addr, len) of every piece, and `pending` exactly the file offsets
//!   of pieces with `eno == 0`.

use std::collections::{BTreeMap, BTreeSet};

use smallvec::SmallVec;

use crate::format::BLOCK_SIZE;

/// One contiguous piece of file data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Data-zone byte address of the first byte.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// The extent that holds it on the media; 0 while pending.
    pub eno: u32,
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
    /// Adds a range that overlaps none already held.
    pub fn add(&mut self, addr: u64, len: u64) {
        debug_assert!(len > 0);
        let clash = self.ranges.insert(addr, len);
        assert!(clash.is_none(), "data-zone byte {addr} held twice");
    }

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

    /// Removes the range that starts at `addr`.
    pub fn remove(&mut self, addr: u64) {
        let gone = self.ranges.remove(&addr);
        assert!(gone.is_some(), "no range starts at data-zone byte {addr}");
    }

    /// Whether any held byte lies in `block`. Ranges are disjoint, so only the last one starting
    /// before the block's end can reach into it.
    pub fn covers_block(&self, block: u64) -> bool {
        let (first, end) = (block * BLOCK_SIZE, (block + 1) * BLOCK_SIZE);
        self.ranges
            .range(..end)
            .next_back()
            .is_some_and(|(&addr, &len)| addr + len > first)
    }

    /// Ranges held, by address.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&a, &l)| (a, l))
    }

    /// Whether no ranges are held.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// What a punch took out of the map.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Punched {
    /// Committed pieces that left the map, whole: (eno, addr, len). Their extents must be removed
    /// by the next commit, even where a fragment of them stays as a new pending piece.
    pub removed: SmallVec<[(u32, u64, u64); 4]>,
    /// Data-zone ranges (addr, len) that no piece refers to any more.
    pub dropped: SmallVec<[(u64, u64); 4]>,
}

/// A file's pieces.
#[derive(Debug, Default, Clone)]
pub struct FileMap {
    pieces: BTreeMap<u64, Piece>,
    space: Space,
    pending: BTreeSet<u64>,
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
        self.space.add(piece.addr, piece.len);
        if piece.eno == 0 {
            self.pending.insert(offset);
        }
        self.pieces.insert(offset, piece);
    }

    /// Removes the piece at exactly `offset` and returns it.
    pub fn remove(&mut self, offset: u64) -> Piece {
        let piece = self.pieces.remove(&offset).expect("a piece at the offset");
        self.space.remove(piece.addr);
        if piece.eno == 0 {
            self.pending.remove(&offset);
        }
        piece
    }

    /// Removes the file bytes `[start, end)`, splitting the pieces that straddle either edge
    /// (paper Fig. 3): the parts outside the range stay, as pending pieces over the same bytes.
    pub fn punch(&mut self, start: u64, end: u64, out: &mut Punched) {
        if start >= end {
            return;
        }
        let hit: SmallVec<[(u64, Piece); 4]> = self.overlapping(start, end).collect();
        for (offset, piece) in hit {
            self.remove(offset);
            if piece.eno != 0 {
                out.removed.push((piece.eno, piece.addr, piece.len));
            }
            let piece_end = offset + piece.len;
            let cut_start = start.max(offset);
            let cut_end = end.min(piece_end);
            out.dropped
                .push((piece.addr + (cut_start - offset), cut_end - cut_start));
            if offset < start {
                let left = Piece {
                    addr: piece.addr,
                    len: start - offset,
                    eno: 0,
                };
                self.insert(offset, left);
            }
            if piece_end > end {
                let right = Piece {
                    addr: piece.addr + (end - offset),
                    len: piece_end - end,
                    eno: 0,
                };
                self.insert(end, right);
            }
        }
    }

    /// Pieces overlapping file bytes `[start, end)`, in file order.
    pub fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = (u64, Piece)> + '_ {
        let before = self
            .pieces
            .range(..start)
            .next_back()
            .filter(|(&o, p)| o + p.len > start);
        before
            .into_iter()
            .chain(self.pieces.range(start..end))
            .map(|(&o, &p)| (o, p))
    }

    /// The piece before file offset `offset` (starting strictly before it).
    pub fn before(&self, offset: u64) -> Option<(u64, Piece)> {
        self.pieces
            .range(..offset)
            .next_back()
            .map(|(&o, &p)| (o, p))
    }

    /// The piece after file offset `offset` (starting strictly after it).
    pub fn after(&self, offset: u64) -> Option<(u64, Piece)> {
        use std::ops::Bound::{Excluded, Unbounded};
        self.pieces
            .range((Excluded(offset), Unbounded))
            .next()
            .map(|(&o, &p)| (o, p))
    }

    /// The piece at exactly `offset`.
    pub fn get(&self, offset: u64) -> Option<Piece> {
        self.pieces.get(&offset).copied()
    }

    /// Sets the extent number of the piece at `offset` (a pending piece being committed, or back).
    pub fn set_eno(&mut self, offset: u64, eno: u32) {
        let piece = self.pieces.get_mut(&offset).expect("a piece at the offset");
        piece.eno = eno;
        if eno == 0 {
            self.pending.insert(offset);
        } else {
            self.pending.remove(&offset);
        }
    }

    /// File offsets of the pending pieces, in order.
    pub fn pending(&self) -> impl Iterator<Item = u64> + '_ {
        self.pending.iter().copied()
    }

    /// Number of pending pieces.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// All pieces in file order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Piece)> + '_ {
        self.pieces.iter().map(|(&o, &p)| (o, p))
    }

    /// The last piece.
    pub fn last(&self) -> Option<(u64, Piece)> {
        self.pieces.iter().next_back().map(|(&o, &p)| (o, p))
    }

    /// Number of pieces.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// Whether the file holds no data.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The data-zone bytes the pieces hold.
    pub fn space(&self) -> &Space {
        &self.space
    }

    /// Panics if an invariant of the module doc does not hold.
    #[cfg(test)]
    pub fn check(&self) {
        let mut end = 0;
        let mut space = Space::default();
        for (&offset, piece) in &self.pieces {
            assert!(piece.len > 0, "empty piece at {offset}");
            assert!(offset >= end, "piece at {offset} overlaps the previous");
            end = offset + piece.len;
            space.add(piece.addr, piece.len);
            assert_eq!(piece.eno == 0, self.pending.contains(&offset));
        }
        let mut last_end = 0;
        for (addr, len) in space.iter() {
            assert!(addr >= last_end, "data-zone bytes at {addr} held twice");
            last_end = addr + len;
        }
        assert_eq!(space, self.space, "space index out of step");
        assert_eq!(
            self.pending.len(),
            self.pieces.values().filter(|p| p.eno == 0).count()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(addr: u64, len: u64, eno: u32) -> Piece {
        Piece { addr, len, eno }
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
        assert_eq!(out.dropped.as_slice(), &[(5050, 10)]);
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
        assert_eq!(out.dropped.as_slice(), &[(5000, 20)]);
        assert_eq!(layout(&m)[1], (120, 5020, 180, 0));
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn punch_at_a_piece_end_keeps_only_its_left_part() {
        let mut m = three();
        let mut out = Punched::default();
        m.punch(280, 300, &mut out);
        m.check();
        assert_eq!(out.dropped.as_slice(), &[(5180, 20)]);
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
        assert_eq!(out.dropped.as_slice(), &[(5000, 200)]);
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
            &[(1050, 50), (5000, 200), (9000, 50)]
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
        assert!(m.space().is_empty());
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
        assert_eq!(out.dropped.as_slice(), &[(1024, 1024)]);
        assert_eq!(m.pending().collect::<Vec<_>>(), vec![0, 2048]);
    }

    #[test]
    fn space_covers_blocks_reached_by_any_piece() {
        let mut s = Space::default();
        s.add(4096 + 100, 10); // inside block 1
        s.add(3 * 4096 - 1, 2); // the last byte of block 2 and the first of block 3
        assert!(!s.covers_block(0));
        assert!(s.covers_block(1));
        assert!(s.covers_block(2));
        assert!(s.covers_block(3));
        assert!(!s.covers_block(4));
        s.remove(4096 + 100);
        assert!(!s.covers_block(1));
    }
}
