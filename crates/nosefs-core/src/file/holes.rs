//! Holes: punching them (`fallocate` PUNCH_HOLE and ZERO_RANGE) and finding them (`lseek`
//! SEEK_DATA and SEEK_HOLE, and the map of where the data is, for FIEMAP).
//!
//! A hole is a range of a file that no piece covers: it reads as zeros and holds no space. The
//! byte-granular map makes punching cheap: the pieces that overlap the range are cut at its
//! edges (their bytes outside it stay where they are, as an overwrite leaves them) and the rest
//! is dropped, in one file commit, so a punch is atomic and durable on return like a truncate,
//! and costs O(pieces in the range), not O(bytes).

use crate::error::{Errno, Result};
use crate::fs::Fs;
use crate::mkfs::now_ns;

use super::filemap::Punched;
use super::MAX_FILE_BYTES;

/// What `lseek` looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seek {
    /// SEEK_DATA: the first byte at or after the offset that a piece holds.
    Data,
    /// SEEK_HOLE: the first byte at or after the offset that none holds (the end of the file
    /// counts as a hole).
    Hole,
}

/// One run of a file's data, as FIEMAP reports it: file bytes `[logical, logical + length)`
/// are stored contiguously at byte `physical` of the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataExtent {
    /// File offset of the first byte.
    pub logical: u64,
    /// Image offset of the first byte.
    pub physical: u64,
    /// Bytes.
    pub length: u64,
    /// The file's last run of data.
    pub last: bool,
    /// Written since the last commit (durable at the next fsync).
    pub pending: bool,
}

impl Fs {
    /// Where regular file `ino`'s data in `[start, start + len)` is, run by run (pieces that
    /// follow each other in the file and in the image are one run), at most `max` runs.
    pub fn data_map(&self, ino: u64, start: u64, len: u64, max: usize) -> Result<Vec<DataExtent>> {
        let inode = self.inode(ino)?;
        self.take_mapped_writes(&inode, None)?;
        let file = self.file_of(&inode)?;
        let state = file.lock();
        let end = start.saturating_add(len).min(state.size);
        let base = self.image.geometry().block_offset(0);
        let last_piece = state.map.last().map(|(o, _)| o);
        let mut out: Vec<DataExtent> = Vec::new();
        for (offset, piece) in state.map.overlapping(start, end) {
            let physical = base + piece.addr;
            let pending = piece.eno == 0;
            let is_last = Some(offset) == last_piece;
            if let Some(run) = out.last_mut() {
                if run.logical + run.length == offset
                    && run.physical + run.length == physical
                    && run.pending == pending
                {
                    run.length += piece.len;
                    run.last = is_last;
                    continue;
                }
            }
            if out.len() == max {
                break;
            }
            out.push(DataExtent {
                logical: offset,
                physical,
                length: piece.len,
                last: is_last,
                pending,
            });
        }
        Ok(out)
    }

    /// Makes bytes `[offset, offset + len)` of regular file `ino` a hole (they read as zeros
    /// and hold no space); the size does not change. Durable and atomic on return.
    pub fn punch_hole(&self, ino: u64, offset: u64, len: u64) -> Result<()> {
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
        let mut locked = inode.data.lock();
        if inode.removed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Errno::ENOENT.into());
        }
        let mut state = file.lock();
        // A punched range is no longer reserved (ext4 frees its blocks), also past the size.
        let unreserve = (offset, end);
        let end = end.min(state.size);
        if offset < end {
            let mut punched = Punched::default();
            state.changed();
            state.map.punch(offset, end, &mut punched);
            state.removed.extend(punched.removed);
            state.punched = true;
            self.free_dropped(&mut state, &punched.dropped);
            state.mtime_ns = now_ns();
        }
        self.commit_file(&inode, &mut state)?;
        drop(state);
        self.change_reservation(&inode, &mut locked, |r| {
            super::reserve::remove(r, unreserve.0, unreserve.1)
        })?;
        drop(locked);
        // A mapped file's shadow reads the zeros too.
        if offset < end {
            self.write_shadowed(ino, offset, &vec![0; (end - offset) as usize])?;
        }
        Ok(())
    }

    /// `lseek(SEEK_DATA)` and `lseek(SEEK_HOLE)` on regular file `ino`: ENXIO at or past the end
    /// of the file, as the kernel answers.
    pub fn seek(&self, ino: u64, offset: u64, what: Seek) -> Result<u64> {
        let inode = self.inode(ino)?;
        // Stores through mappings are data too: into the map first (pending, not committed).
        self.take_mapped_writes(&inode, None)?;
        let file = self.file_of(&inode)?;
        let state = file.lock();
        if offset >= state.size {
            return Err(Errno(libc::ENXIO).into());
        }
        let mut at = offset;
        for (start, piece) in state.map.overlapping(offset, state.size) {
            if start > at {
                // A gap before this piece: a hole at `at`, data at `start`.
                return Ok(match what {
                    Seek::Hole => at,
                    Seek::Data => start,
                });
            }
            if what == Seek::Data {
                return Ok(at);
            }
            at = at.max(start + piece.len);
        }
        match what {
            Seek::Hole => Ok(at.min(state.size)),
            Seek::Data => Err(Errno(libc::ENXIO).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::namespace::tests::{fresh, OWNER};
    use crate::namespace::ROOT_INO;

    #[test]
    fn the_data_map_merges_contiguous_pieces_and_skips_holes() {
        let h = fresh(None);
        let fs = h.fs();
        let f = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap();
        fs.write(f.ino, 0, &[1u8; 8192]).unwrap();
        fs.write(f.ino, 8192, &[2u8; 100]).unwrap(); // appended after it: one run
        fs.write(f.ino, 65536, &[3u8; 4096]).unwrap();
        fs.fsync(f.ino).unwrap();
        let runs = fs.data_map(f.ino, 0, u64::MAX, 16).unwrap();
        let shape: Vec<(u64, u64, bool)> =
            runs.iter().map(|r| (r.logical, r.length, r.last)).collect();
        assert_eq!(shape, [(0, 8292, false), (65536, 4096, true)]);
        assert!(runs.iter().all(|r| !r.pending), "committed");
        // A range inside the hole maps nothing; `max` bounds the answer.
        assert!(fs.data_map(f.ino, 20_000, 4096, 16).unwrap().is_empty());
        assert_eq!(fs.data_map(f.ino, 0, u64::MAX, 1).unwrap().len(), 1);
        fs.write(f.ino, 100, &[9u8; 10]).unwrap();
        let runs = fs.data_map(f.ino, 0, 200, 16).unwrap();
        assert!(
            runs.iter().any(|r| r.pending),
            "a write since the commit shows as pending"
        );
    }
}
