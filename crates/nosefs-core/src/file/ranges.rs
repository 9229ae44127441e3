//! `fallocate` COLLAPSE_RANGE and INSERT_RANGE: remove a range and close the gap, or open a
//! hole and push the rest of the file along.
//!
//! Byte-granular pieces make both cheap: no data moves. The pieces after the range only change
//! their file offsets (each becomes a new extent record over the same bytes), a piece that
//! straddles an edge is split in two over the same bytes, and a collapse drops the range's
//! pieces as a punch does. One file commit makes it atomic and durable on return; it costs
//! O(pieces after the range), not O(bytes), and no block is allocated (a commit of more than 57
//! extents borrows overflow blocks for its log, and gives them back).

use std::sync::atomic::Ordering;

use crate::error::{Errno, Result};
use crate::format::BLOCK_SIZE;
use crate::fs::Fs;
use crate::mkfs::now_ns;

use super::filemap::Punched;
use super::MAX_FILE_BYTES;

/// Which way the rest of the file moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shift {
    /// COLLAPSE_RANGE: the range goes, the rest moves towards the start.
    Collapse,
    /// INSERT_RANGE: a hole opens, the rest moves towards the end.
    Insert,
}

impl Fs {
    /// Removes bytes `[offset, offset + len)` of regular file `ino` and moves the rest of the
    /// file down by `len` (COLLAPSE_RANGE). Both must be multiples of the block size, and the
    /// range must end before the end of the file (EINVAL otherwise, as ext4 answers).
    pub fn collapse_range(&self, ino: u64, offset: u64, len: u64) -> Result<()> {
        self.shift_range(ino, offset, len, Shift::Collapse)
    }

    /// Moves the bytes of regular file `ino` from `offset` on up by `len`, leaving a hole of
    /// `len` bytes at `offset` (INSERT_RANGE). Both must be multiples of the block size and
    /// `offset` before the end of the file (EINVAL), and the file may not grow past the largest
    /// size (EFBIG).
    pub fn insert_range(&self, ino: u64, offset: u64, len: u64) -> Result<()> {
        self.shift_range(ino, offset, len, Shift::Insert)
    }

    fn shift_range(&self, ino: u64, offset: u64, len: u64, shift: Shift) -> Result<()> {
        self.writable()?;
        if len == 0 || offset % BLOCK_SIZE != 0 || len % BLOCK_SIZE != 0 {
            return Err(Errno::EINVAL.into());
        }
        let end = offset.checked_add(len).ok_or(Errno::EINVAL)?;
        let inode = self.inode(ino)?;
        // Stores through mappings are data too: into the map first, so they move with it.
        self.take_mapped_writes(&inode, None)?;
        let file = self.file_of(&inode)?;
        let mut locked = inode.data.lock();
        if inode.removed.load(Ordering::Acquire) {
            return Err(Errno::ENOENT.into());
        }
        let mut state = file.lock();
        let size = state.size;
        match shift {
            Shift::Collapse if end >= size => return Err(Errno::EINVAL.into()),
            Shift::Insert if offset >= size => return Err(Errno::EINVAL.into()),
            Shift::Insert if size.checked_add(len).map_or(true, |s| s > MAX_FILE_BYTES) => {
                return Err(Errno::EFBIG.into())
            }
            _ => {}
        }
        let mut removed = Vec::new();
        state.changed();
        match shift {
            Shift::Collapse => {
                let mut punched = Punched::default();
                state.map.punch(offset, end, &mut punched);
                state.punched = true;
                removed.extend(punched.removed);
                self.free_dropped(&mut state, &punched.dropped);
                state.map.shift_from(end, -(len as i64), &mut removed);
                state.set_size(size - len);
            }
            Shift::Insert => {
                state.map.split_at(offset, &mut removed);
                state.map.shift_from(offset, len as i64, &mut removed);
                state.set_size(size + len);
            }
        }
        state.removed.extend(removed);
        state.mtime_ns = now_ns();
        self.commit_file(&inode, &mut state)?;
        // A mapped file's shadow moves too: its bytes from `offset` on are read again.
        let new_size = state.size;
        let moved = self.shadow_exists(ino).then(|| {
            let mut bytes = vec![0u8; (new_size - offset) as usize];
            let n = self.read_locked(&state, offset, &mut bytes);
            bytes.truncate(n);
            bytes
        });
        drop(state);
        self.change_reservation(&inode, &mut locked, |r| match shift {
            Shift::Collapse => super::reserve::collapse(r, offset, len),
            Shift::Insert => super::reserve::insert(r, offset, len),
        })?;
        if let Some(bytes) = moved {
            self.truncate_shadowed(ino, new_size)?;
            self.write_shadowed(ino, offset, &bytes)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::error::Errno;
    use crate::namespace::tests::{errno, fresh, OWNER};
    use crate::namespace::ROOT_INO;

    const B: usize = 4096;

    /// Asserts the file holds `want`, naming the first byte that differs.
    fn assert_holds(fs: &crate::fs::Fs, ino: u64, want: &[u8]) {
        let got = content(fs, ino);
        assert_eq!(got.len(), want.len(), "size");
        if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
            panic!("byte {i}: {} where {} was expected", got[i], want[i]);
        }
    }

    fn content(fs: &crate::fs::Fs, ino: u64) -> Vec<u8> {
        let size = fs.getattr(ino).unwrap().size as usize;
        let mut buf = vec![0u8; size];
        assert_eq!(fs.read(ino, 0, &mut buf).unwrap(), size);
        buf
    }

    /// Ten blocks, block i filled with i + 1; committed in pieces of mixed sizes.
    fn file(h: &crate::namespace::tests::Harness) -> (u64, Vec<u8>) {
        let fs = h.fs();
        let f = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap();
        let mut model = Vec::new();
        for i in 0..10u8 {
            model.extend(std::iter::repeat(i + 1).take(B));
        }
        fs.write(f.ino, 0, &model[..3 * B + 100]).unwrap();
        fs.fsync(f.ino).unwrap();
        fs.write(f.ino, (3 * B + 100) as u64, &model[3 * B + 100..])
            .unwrap();
        fs.fsync(f.ino).unwrap();
        fs.write(f.ino, 5000, &model[5000..5100]).unwrap(); // a byte-offset piece, pending
        (f.ino, model)
    }

    #[test]
    fn collapse_removes_the_range_and_closes_the_gap_durably() {
        let mut h = fresh(None);
        let (ino, mut model) = file(&h);
        let blocks_before = h.fs().free_data_blocks();
        h.fs().collapse_range(ino, B as u64, 2 * B as u64).unwrap();
        model.drain(B..3 * B);
        assert_holds(h.fs(), ino, &model);
        assert!(
            h.fs().free_data_blocks() > blocks_before,
            "the range's blocks are free"
        );
        h.remount(false);
        assert_holds(h.fs(), ino, &model);
    }

    #[test]
    fn insert_opens_a_hole_and_moves_the_rest_durably() {
        let mut h = fresh(None);
        let (ino, mut model) = file(&h);
        let blocks_before = h.fs().free_data_blocks();
        // At 12 KiB: inside the piece that straddles it (the 3 * 4096 + 100 boundary).
        h.fs()
            .insert_range(ino, 3 * B as u64, 2 * B as u64)
            .unwrap();
        model.splice(3 * B..3 * B, vec![0u8; 2 * B]);
        assert_holds(h.fs(), ino, &model);
        assert_eq!(
            h.fs().free_data_blocks(),
            blocks_before,
            "no data moved or was added"
        );
        assert_eq!(
            h.fs()
                .seek(ino, 3 * B as u64, crate::file::holes::Seek::Data)
                .unwrap(),
            5 * B as u64
        );
        h.remount(false);
        assert_holds(h.fs(), ino, &model);
    }

    #[test]
    fn ranges_are_checked_as_ext4_checks_them() {
        let h = fresh(None);
        let (ino, _) = file(&h);
        let fs = h.fs();
        let size = 10 * B as u64;
        assert_eq!(errno(fs.collapse_range(ino, 100, B as u64)), Errno::EINVAL);
        assert_eq!(errno(fs.collapse_range(ino, 0, 100)), Errno::EINVAL);
        assert_eq!(
            errno(fs.collapse_range(ino, 8 * B as u64, 2 * B as u64)),
            Errno::EINVAL
        );
        assert_eq!(errno(fs.insert_range(ino, size, B as u64)), Errno::EINVAL);
        assert_eq!(errno(fs.insert_range(ino, 0, 1 << 62)), Errno::EFBIG);
        assert_eq!(fs.getattr(ino).unwrap().size, size, "nothing changed");
    }

    #[test]
    fn many_pieces_move_in_one_commit() {
        let mut h = fresh(None);
        let fs = h.fs();
        let f = fs.create(ROOT_INO, b"many", 0o644, OWNER, true).unwrap();
        // 200 pieces: more extents than one file log holds (57), so overflow blocks are lent.
        let mut model = vec![0u8; 199 * 2 * B + 40];
        for i in 0..200usize {
            let at = i * 2 * B + 10;
            let data = vec![(i % 250) as u8 + 1; 30];
            fs.write(f.ino, at as u64, &data).unwrap();
            model[at..at + 30].copy_from_slice(&data);
        }
        fs.fsync(f.ino).unwrap();
        fs.insert_range(f.ino, 0, B as u64).unwrap();
        model.splice(0..0, vec![0u8; B]);
        assert_holds(fs, f.ino, &model);
        fs.collapse_range(f.ino, 0, 2 * B as u64).unwrap();
        model.drain(0..2 * B);
        assert_holds(h.fs(), f.ino, &model);
        h.remount(false);
        assert_holds(h.fs(), f.ino, &model);
    }
}
