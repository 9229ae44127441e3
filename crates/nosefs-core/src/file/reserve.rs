//! fallocate's reservation (mode 0 and KEEP_SIZE): the byte ranges of a file whose first writes
//! cannot fail with ENOSPC, kept on media so that a remount promises them again.
//!
//! A file's reserved ranges live in its attribute blob under `format::xattr::RESERVED_NAME`
//! (images with `INCOMPAT_RESERVATIONS`), changed by the attribute commit, so a crash keeps the
//! old list or the new. What is promised is derived, never stored: the blocks the holes inside
//! the ranges need ([`need_blocks`]), from the extent map the media holds. Mount computes it
//! again for every file with ranges, so a write that was lost by a crash gives its promise back
//! with its blocks, and a committed write has spent its share.
//!
//! In DRAM the file keeps its ranges and `promised`, a count of blocks taken from the
//! allocator's `available`; a write spends the promise only for the holes of the ranges it
//! fills ([`cap_blocks`]), so writes elsewhere cannot eat another range's share. A punch hole
//! drops the range it punches (ext4 frees those blocks), a truncate the ranges past the new size,
//! collapse and insert move them with the data; each then hands back what is no longer needed.
//! Images without the feature keep ranges in DRAM only, as before.
//!
//! Cost: nothing on the write path of a file without ranges; one attribute commit per fallocate
//! that adds a range (a range already reserved commits nothing).

use std::sync::atomic::Ordering;

use crate::error::{Errno, Result};
use crate::format::xattr::{BLOB_MAX, RESERVED_RANGES_MAX};
use crate::format::BLOCK_SIZE;
use crate::fs::Fs;
use crate::inode::{Inode, InodeData};

use super::filemap::FileMap;
use super::MAX_FILE_BYTES;

/// Sorted, disjoint, not touching byte ranges `[start, end)`.
pub(crate) type Ranges = Vec<(u64, u64)>;

/// Adds `[start, end)`, merging what it touches. Past [`RESERVED_RANGES_MAX`] ranges, the two
/// with the smallest gap between them merge (the gap is reserved too: more, never less).
pub(crate) fn add(ranges: &mut Ranges, start: u64, end: u64) {
    debug_assert!(start < end);
    let (mut start, mut end) = (start, end);
    ranges.retain(|&(s, e)| {
        let apart = e < start || s > end;
        if !apart {
            (start, end) = (start.min(s), end.max(e));
        }
        apart
    });
    let at = ranges.partition_point(|&(s, _)| s < start);
    ranges.insert(at, (start, end));
    while ranges.len() > RESERVED_RANGES_MAX {
        let closest = (1..ranges.len())
            .min_by_key(|&i| ranges[i].0 - ranges[i - 1].1)
            .expect("more than one range");
        ranges[closest - 1].1 = ranges[closest].1;
        ranges.remove(closest);
    }
}

/// Removes `[start, end)` from the ranges (a range straddling an edge keeps its outside part).
pub(crate) fn remove(ranges: &mut Ranges, start: u64, end: u64) {
    let mut out = Ranges::with_capacity(ranges.len() + 1);
    for &(s, e) in ranges.iter() {
        if e <= start || s >= end {
            out.push((s, e));
            continue;
        }
        if s < start {
            out.push((s, start));
        }
        if e > end {
            out.push((end, e));
        }
    }
    *ranges = out;
}

/// COLLAPSE_RANGE of `[offset, offset + len)`: that part goes, what follows moves down.
pub(crate) fn collapse(ranges: &mut Ranges, offset: u64, len: u64) {
    remove(ranges, offset, offset + len);
    let moved: Ranges = ranges
        .drain(..)
        .map(|(s, e)| {
            if s >= offset + len {
                (s - len, e - len)
            } else {
                (s, e)
            }
        })
        .collect();
    // Two ranges around the collapsed part now touch: one again.
    moved.into_iter().for_each(|(s, e)| add(ranges, s, e));
}

/// INSERT_RANGE of `len` bytes at `offset`: what lies at or after it moves up (the new hole is
/// not reserved); nothing goes past the largest file.
pub(crate) fn insert(ranges: &mut Ranges, offset: u64, len: u64) {
    let mut out = Ranges::with_capacity(ranges.len() + 1);
    for &(s, e) in ranges.iter() {
        if e <= offset {
            out.push((s, e));
            continue;
        }
        if s < offset {
            out.push((s, offset));
        }
        let (s, e) = (s.max(offset) + len, (e + len).min(MAX_FILE_BYTES));
        if s < e {
            out.push((s, e));
        }
    }
    *ranges = out;
}

/// Bytes of `[start, end)` that hold no data in `map`.
fn hole_bytes(map: &FileMap, start: u64, end: u64) -> u64 {
    let covered: u64 = map
        .overlapping(start, end)
        .map(|(o, p)| (o + p.len).min(end) - o.max(start))
        .sum();
    (end - start) - covered
}

/// Blocks the first writes of `bytes` hole bytes take: one more than they fill, since a write
/// may start inside a block.
fn blocks_for(bytes: u64) -> u64 {
    bytes.div_ceil(BLOCK_SIZE) + u64::from(bytes > 0)
}

/// Blocks the holes inside `ranges` need: what the file is promised.
pub(crate) fn need_blocks(ranges: &[(u64, u64)], map: &FileMap) -> u64 {
    ranges
        .iter()
        .map(|&(s, e)| blocks_for(hole_bytes(map, s, e)))
        .sum()
}

/// Most blocks of its promise a write of `[start, end)` may spend: those of the holes it fills
/// inside the ranges (computed before the write enters the map).
pub(crate) fn cap_blocks(ranges: &[(u64, u64)], map: &FileMap, start: u64, end: u64) -> u64 {
    ranges
        .iter()
        .filter(|&&(s, e)| s < end && e > start)
        .map(|&(s, e)| blocks_for(hole_bytes(map, s.max(start), e.min(end))))
        .sum()
}

impl Fs {
    /// fallocate mode 0 and KEEP_SIZE: reserves `[offset, offset + len)` of regular file `ino`.
    /// The blocks the first write of every byte of it that holds no data yet will take are
    /// promised to the file, so those writes cannot fail for want of space whatever other files
    /// do, also after a remount or a crash (on images with the feature); ENOSPC when they are
    /// not free. Covers first writes only: NCOW writes a rewrite of written bytes to new blocks,
    /// whose old ones come back at its commit. Durable on return.
    pub fn reserve_space(&self, ino: u64, offset: u64, len: u64) -> Result<()> {
        self.writable()?;
        let end = offset.checked_add(len).ok_or(Errno::EFBIG)?;
        if len == 0 {
            return Err(Errno::EINVAL.into());
        }
        if end > MAX_FILE_BYTES {
            return Err(Errno::EFBIG.into());
        }
        let inode = self.inode(ino)?;
        let file = self.file_of(&inode)?;
        let mut locked = self.lock_inodes(&[&inode]);
        if inode.removed.load(Ordering::Acquire) {
            return Err(Errno::ENOENT.into());
        }
        let mut state = file.lock();
        let before = state.reserved.clone();
        let mut ranges = before.clone();
        add(&mut ranges, offset, end);
        let need = need_blocks(&ranges, &state.map);
        let more = need.saturating_sub(state.promised);
        if self
            .alloc_or_settle(|| self.blocks.promise(more).then_some(()))
            .is_none()
        {
            return Err(Errno::ENOSPC.into());
        }
        state.promised += more;
        state.reserved.clone_from(&ranges);
        drop(state);
        if ranges == before || !self.image.geometry().reservations {
            return Ok(());
        }
        if let Err(e) = self.store_reservation(&inode, &mut locked[0].1, &ranges) {
            let mut state = file.lock();
            state.reserved = before;
            let keep = need_blocks(&state.reserved, &state.map);
            self.give_back_promise(&mut state, keep);
            return Err(e);
        }
        Ok(())
    }

    /// The ranges of regular file `ino` that fallocate reserved, as the file keeps them.
    pub fn reserved_ranges(&self, ino: u64) -> Result<Vec<(u64, u64)>> {
        let inode = self.inode(ino)?;
        let ranges = self.file_of(&inode)?.lock().reserved.clone();
        Ok(ranges)
    }

    /// After a punch, truncate, collapse or insert: `change` moves or cuts the file's ranges;
    /// the promise shrinks to what they need now, and the new list is stored. The caller holds
    /// the inode lock (`data`) and not the file lock.
    pub(super) fn change_reservation(
        &self,
        inode: &Inode,
        data: &mut InodeData,
        change: impl FnOnce(&mut Ranges),
    ) -> Result<()> {
        let file = self.file_of(inode)?;
        let mut state = file.lock();
        if state.reserved.is_empty() {
            return Ok(());
        }
        let mut ranges = state.reserved.clone();
        change(&mut ranges);
        if ranges == state.reserved {
            return Ok(());
        }
        state.reserved.clone_from(&ranges);
        let need = need_blocks(&ranges, &state.map);
        self.give_back_promise(&mut state, need);
        drop(state);
        if !self.image.geometry().reservations {
            return Ok(());
        }
        // A crash before this commit leaves the longer list: more reserved, never less.
        self.store_reservation(inode, data, &ranges)
    }

    /// Mount: promises a file the blocks the holes of its stored ranges need, as far as free
    /// blocks allow (they all do unless the image was damaged). Regular files only.
    pub(crate) fn restore_reservation(&self, inode: &Inode, ranges: Ranges) -> Result<()> {
        if !inode.is_file() {
            return Ok(());
        }
        let file = self.file_of(inode)?;
        let mut state = file.lock();
        let need = need_blocks(&ranges, &state.map);
        state.promised += self.blocks.promise_upto(need);
        state.reserved = ranges;
        Ok(())
    }

    /// Hands back the part of the file's promise above `keep` blocks.
    fn give_back_promise(&self, state: &mut super::FileState, keep: u64) {
        if state.promised > keep {
            self.blocks.release_promise(state.promised - keep);
            state.promised = keep;
        }
    }

    /// Stores `ranges` in the inode's attribute blob (one attribute commit).
    fn store_reservation(
        &self,
        inode: &Inode,
        data: &mut InodeData,
        ranges: &[(u64, u64)],
    ) -> Result<()> {
        let mut set = self.load_xattrs(inode)?;
        set.set_reserved(ranges);
        if set.blob_bytes() > BLOB_MAX {
            return Err(Errno::ENOSPC.into());
        }
        self.commit_xattrs(inode, data, &set, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_what_they_touch_and_stay_sorted() {
        let mut r = Ranges::new();
        add(&mut r, 100, 200);
        add(&mut r, 0, 10);
        add(&mut r, 300, 400);
        assert_eq!(r, [(0, 10), (100, 200), (300, 400)]);
        add(&mut r, 200, 300);
        assert_eq!(r, [(0, 10), (100, 400)]);
        add(&mut r, 5, 150);
        assert_eq!(r, [(0, 400)]);
    }

    #[test]
    fn too_many_ranges_merge_the_closest_pair() {
        let mut r = Ranges::new();
        for i in 0..RESERVED_RANGES_MAX as u64 {
            add(&mut r, i * 100, i * 100 + 10);
        }
        add(&mut r, 1_000_000, 1_000_010);
        assert_eq!(r.len(), RESERVED_RANGES_MAX);
        assert_eq!(r[0], (0, 110), "the first pair had the smallest gap");
        assert!(r.windows(2).all(|w| w[0].1 < w[1].0));
    }

    #[test]
    fn remove_collapse_and_insert_move_ranges_with_the_data() {
        let mut r: Ranges = vec![(0, 100), (200, 300)];
        remove(&mut r, 50, 250);
        assert_eq!(r, [(0, 50), (250, 300)]);
        let mut r: Ranges = vec![(0, 100), (200, 300)];
        collapse(&mut r, 100, 100);
        assert_eq!(r, [(0, 200)], "the two sides meet and merge");
        let mut r: Ranges = vec![(0, 100), (200, 300)];
        collapse(&mut r, 50, 200);
        assert_eq!(r, [(0, 100)]);
        let mut r: Ranges = vec![(0, 100), (200, 300)];
        insert(&mut r, 50, 1000);
        assert_eq!(r, [(0, 50), (1050, 1100), (1200, 1300)]);
        let mut r: Ranges = vec![(MAX_FILE_BYTES - 10, MAX_FILE_BYTES)];
        insert(&mut r, 0, 10);
        assert!(r.is_empty(), "nothing past the largest file");
    }

    #[test]
    fn the_need_counts_the_holes_inside_the_ranges() {
        use super::super::filemap::Piece;
        let mut map = FileMap::default();
        let piece = |len| Piece {
            addr: 0,
            len,
            eno: 0,
            fresh: true,
        };
        map.insert(0, piece(BLOCK_SIZE));
        let ranges = [(0, 4 * BLOCK_SIZE)];
        assert_eq!(need_blocks(&ranges, &map), 3 + 1);
        assert_eq!(cap_blocks(&ranges, &map, 0, BLOCK_SIZE), 0, "a rewrite");
        assert_eq!(cap_blocks(&ranges, &map, 5 * BLOCK_SIZE, 6 * BLOCK_SIZE), 0);
        assert_eq!(cap_blocks(&ranges, &map, BLOCK_SIZE, 2 * BLOCK_SIZE), 2);
        assert_eq!(need_blocks(&[], &map), 0);
    }

    mod through_the_api {
        use super::*;
        use crate::error::Errno;
        use crate::namespace::tests::{errno, fresh, Harness, OWNER};
        use crate::namespace::ROOT_INO;

        const RANGE_BYTES: u64 = 64 * BLOCK_SIZE;

        /// Writes 64 KiB chunks to `ino` at its end, committing each, until ENOSPC.
        fn fill(fs: &Fs, ino: u64) {
            let chunk = vec![7u8; 64 << 10];
            let mut at = fs.getattr(ino).unwrap().size;
            let err = loop {
                match fs.write(ino, at, &chunk).and_then(|_| fs.fsync(ino)) {
                    Ok(()) => at += chunk.len() as u64,
                    Err(e) => break e,
                }
            };
            assert_eq!(err.errno(), Errno::ENOSPC);
            // Smaller writes take what 64 KiB could not.
            while fs
                .write(ino, at, &[7; 4096])
                .and_then(|_| fs.fsync(ino))
                .is_ok()
            {
                at += 4096;
            }
        }

        /// Writes the whole reserved range of `ino`, block by block, and commits it.
        fn write_range(fs: &Fs, ino: u64) -> crate::error::Result<()> {
            write_blocks(fs, ino, 0)
        }

        /// Writes blocks `first..64` of `ino`'s reserved range and commits them.
        fn write_blocks(fs: &Fs, ino: u64, first: u64) -> crate::error::Result<()> {
            for i in first..RANGE_BYTES / BLOCK_SIZE {
                fs.write(ino, i * BLOCK_SIZE, &[i as u8; BLOCK_SIZE as usize])?;
            }
            fs.fsync(ino)?;
            let mut buf = vec![0u8; BLOCK_SIZE as usize];
            fs.read(ino, RANGE_BYTES - BLOCK_SIZE, &mut buf).unwrap();
            assert!(buf.iter().all(|&x| x == 63));
            Ok(())
        }

        fn two_files(h: &Harness) -> (u64, u64) {
            let fs = h.fs();
            let a = fs.create(ROOT_INO, b"a", 0o644, OWNER, true).unwrap();
            let b = fs.create(ROOT_INO, b"b", 0o644, OWNER, true).unwrap();
            (a.ino, b.ino)
        }

        #[test]
        fn space_reserved_by_fallocate_is_left_to_its_file() {
            let h = fresh(None);
            let fs = h.fs();
            let (a, b) = two_files(&h);
            let free = fs.free_data_blocks();
            fs.reserve_space(a, 0, RANGE_BYTES).unwrap();
            assert_eq!(
                fs.free_data_blocks(),
                free - 65 - 1,
                "the range's blocks, one for a straddle, and the block of the stored ranges"
            );
            fs.reserve_space(a, 0, RANGE_BYTES).unwrap();
            assert_eq!(
                fs.free_data_blocks(),
                free - 66,
                "already reserved: nothing more"
            );
            assert_eq!(errno(fs.reserve_space(b, 0, free * 4096)), Errno::ENOSPC);
            fill(fs, b);
            write_range(fs, a).unwrap();
            // Its name going gives back what it did not spend.
            fs.unlink(ROOT_INO, b"b").unwrap();
            fs.unlink(ROOT_INO, b"a").unwrap();
            fs.settle_all();
            assert_eq!(fs.free_data_blocks(), free);
        }

        #[test]
        fn a_reservation_survives_a_crash_and_a_clean_remount() {
            for clean in [false, true] {
                let mut h = fresh(None);
                let (a, b) = two_files(&h);
                h.fs().reserve_space(a, 0, RANGE_BYTES).unwrap();
                // Half written and committed, a quarter written and lost in the crash.
                for i in 0..32 {
                    h.fs().write(a, i * BLOCK_SIZE, &[1; 4096]).unwrap();
                }
                h.fs().fsync(a).unwrap();
                for i in 32..48 {
                    h.fs().write(a, i * BLOCK_SIZE, &[1; 4096]).unwrap();
                }
                let free_before = h.fs().free_data_blocks();
                h.remount(clean);
                let fs = h.fs();
                assert_eq!(fs.reserved_ranges(a).unwrap(), [(0, RANGE_BYTES)]);
                if !clean {
                    assert_eq!(
                        fs.free_data_blocks(),
                        free_before,
                        "the lost writes' blocks are promised again, the rest stays free"
                    );
                }
                assert!(fs.listxattr(a).unwrap().is_empty(), "no attribute to list");
                fill(fs, b);
                // The blocks the media holds no data for (a clean unmount committed the pending
                // writes; a rewrite of written bytes is not covered: NCOW puts it in new blocks).
                write_blocks(fs, a, if clean { 48 } else { 32 }).unwrap();
            }
        }

        #[test]
        fn without_the_reservation_the_same_writes_fail() {
            let h = fresh(None);
            let fs = h.fs();
            let (a, b) = two_files(&h);
            fill(fs, b);
            assert_eq!(errno(write_range(fs, a)), Errno::ENOSPC);
        }

        #[test]
        fn writes_outside_the_ranges_do_not_spend_them() {
            let h = fresh(None);
            let fs = h.fs();
            let (a, b) = two_files(&h);
            fs.reserve_space(a, 0, RANGE_BYTES).unwrap();
            // Past the range: ordinary space, while there is some.
            fs.write(a, RANGE_BYTES, &vec![3; 16 * BLOCK_SIZE as usize])
                .unwrap();
            fs.fsync(a).unwrap();
            fill(fs, b);
            assert_eq!(
                errno(
                    fs.write(a, 2 * RANGE_BYTES, &[3; 4096])
                        .and_then(|_| fs.fsync(a))
                ),
                Errno::ENOSPC,
                "outside the range nothing is promised"
            );
            write_range(fs, a).unwrap();
        }

        #[test]
        fn punch_truncate_collapse_and_insert_change_the_stored_ranges() {
            let mut h = fresh(None);
            let (a, _) = two_files(&h);
            let fs = h.fs();
            fs.truncate(a, 4 * RANGE_BYTES).unwrap();
            fs.reserve_space(a, 0, 4 * RANGE_BYTES).unwrap();
            let full = fs.free_data_blocks();
            fs.punch_hole(a, RANGE_BYTES, RANGE_BYTES).unwrap();
            assert_eq!(
                fs.reserved_ranges(a).unwrap(),
                [(0, RANGE_BYTES), (2 * RANGE_BYTES, 4 * RANGE_BYTES)]
            );
            assert!(
                fs.free_data_blocks() >= full + 63,
                "the punched part is free again"
            );
            fs.collapse_range(a, 0, BLOCK_SIZE).unwrap();
            fs.insert_range(a, 0, 2 * BLOCK_SIZE).unwrap();
            let expect = [
                (2 * BLOCK_SIZE, RANGE_BYTES + BLOCK_SIZE),
                (2 * RANGE_BYTES + BLOCK_SIZE, 4 * RANGE_BYTES + BLOCK_SIZE),
            ];
            assert_eq!(fs.reserved_ranges(a).unwrap(), expect);
            fs.truncate(a, 3 * RANGE_BYTES).unwrap();
            let cut = [expect[0], (expect[1].0, 3 * RANGE_BYTES)];
            assert_eq!(fs.reserved_ranges(a).unwrap(), cut);
            h.remount(false);
            assert_eq!(h.fs().reserved_ranges(a).unwrap(), cut, "as stored");
            h.fs().truncate(a, 0).unwrap();
            assert!(h.fs().reserved_ranges(a).unwrap().is_empty());
            h.remount(false);
            assert!(h.fs().reserved_ranges(a).unwrap().is_empty());
        }

        #[test]
        fn images_without_the_feature_keep_the_promise_until_unmount() {
            let params = crate::format::layout::MkfsParams {
                image_bytes: 8 << 20,
                without_xattrs: true,
                ..Default::default()
            };
            let g = crate::format::layout::Geometry::for_mkfs(&params).unwrap();
            assert!(!g.reservations);
            let region = crate::pmem::Region::recording(params.image_bytes).unwrap();
            crate::mkfs::format_region(&region, &g, (0, 0)).unwrap();
            let image = crate::image::Image::from_region(region).unwrap();
            let fs = Fs::mount_image(image, &Default::default()).unwrap();
            let (a, b) = {
                let a = fs.create(ROOT_INO, b"a", 0o644, OWNER, true).unwrap();
                let b = fs.create(ROOT_INO, b"b", 0o644, OWNER, true).unwrap();
                (a.ino, b.ino)
            };
            fs.reserve_space(a, 0, RANGE_BYTES).unwrap();
            assert_eq!(fs.reserved_ranges(a).unwrap(), [(0, RANGE_BYTES)]);
            fill(&fs, b);
            write_range(&fs, a).unwrap();
            let image = fs.unmount();
            let fs = Fs::mount_image(image, &Default::default()).unwrap();
            assert!(fs.reserved_ranges(a).unwrap().is_empty(), "nothing stored");
        }

        #[test]
        fn attributes_and_the_reservation_share_the_blob() {
            let mut h = fresh(None);
            let (a, _) = two_files(&h);
            let fs = h.fs();
            let any = crate::namespace::XattrMode::Any;
            fs.setxattr(a, b"user.x", b"1", any).unwrap();
            fs.reserve_space(a, 0, RANGE_BYTES).unwrap();
            fs.removexattr(a, b"user.x").unwrap();
            assert_eq!(
                errno(fs.getxattr(a, b"nosefs.reserved")),
                Errno(libc::EOPNOTSUPP)
            );
            assert_eq!(
                errno(fs.setxattr(a, b"nosefs.reserved", b"", any)),
                Errno(libc::EOPNOTSUPP)
            );
            h.remount(true);
            assert_eq!(h.fs().reserved_ranges(a).unwrap(), [(0, RANGE_BYTES)]);
            assert!(h.fs().listxattr(a).unwrap().is_empty());
        }
    }
}
