//! Direct reads (issue 39): a daemon client the image's owner trusts reads the bytes of a file
//! it has open from its own read-only view of the image ([`ImageView`]), following a copy of
//! the file's pieces ([`DirectMap`]) that the daemon gave it with an earlier read
//! ([`Fs::read_mapped`]), instead of asking the daemon for every read.
//!
//! A copy of the pieces is good while the file's *generation* ([`super::watch`], which the
//! daemon keeps in the client's shared memory beside its size) is the one the copy was taken
//! at. The reader loads the generation, then the size, copies the bytes, and loads the
//! generation again (a seqlock's reader); any difference, or a read outside what the copy
//! describes, sends the read back to the daemon. Why bytes returned this way are the file's:
//! - every change to where the file's bytes are (a write, truncate, punch, collapse or insert,
//!   a window rewrite, a mapping's shadow made, the file's space released) takes a new
//!   generation under the file's lock *before* it frees a block (`FileState::changed`), and
//!   it is stored then; a block freed by it can be taken by another file only after, so a copy
//!   that read such a block's new bytes loads the new generation after it;
//! - a size change takes a new generation too, stored no later than the size: a reader that
//!   saw the new size sees the new generation at its second load;
//! - generations are 64-bit counts: one is never seen again once passed;
//! - bytes the pieces hold were stored before the daemon's lock on the file was released (the
//!   unlock is a locked instruction, which waits for the data's non-temporal stores), and the
//!   copy was handed out after that;
//! - a mapped file's stores sit in its shadow, not in the image: no copy is given while it has
//!   one, and making one takes a new generation.
//!
//! Access times: the daemon's read that hands out a copy counts as the access, and the copy
//! says for how long later reads from it may go unnoted ([`DirectMap::access_holds_ns`]):
//! under relatime, until the access time is a day old; the client then asks the daemon again,
//! whose read notes the access. The rule's other trigger, a change time or modification time
//! after the access, ends every copy: a change of the data takes a new generation anyway, and
//! a change of attributes alone (chmod, chown, times, links, names, extended attributes) takes
//! one too (`Fs::change_time_moved`). Under `strictatime` no copy is handed out.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::error::{Errno, Result};
use crate::fs::Fs;
use crate::namespace::AtimeMode;
use crate::pmem::Region;

use super::{FileState, MAX_FILE_BYTES};

/// The most pieces a copy holds: a file of more is described around the read's offset only.
pub const DIRECT_MAP_MAX_PIECES: usize = 128;

/// A copy of the pieces of a file over file offsets `[start, end)`: every byte there is in one
/// of `pieces` or a hole. See the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectMap {
    /// The file's generation when the pieces were taken.
    pub generation: u64,
    /// The file offsets the pieces describe.
    pub start: u64,
    pub end: u64,
    /// (file offset, data-zone address, length), ascending and disjoint.
    pub pieces: Vec<(u64, u64, u64)>,
    /// For how long from its handout reads from the copy may go without noting the access
    /// (`u64::MAX`: always), by the mount's access-time rule.
    pub access_holds_ns: u64,
}

/// A read-only view of the image a daemon serves, with where its data zone lies.
#[derive(Debug)]
pub struct ImageView {
    region: Region,
    /// The data zone's offset in the image, and its length.
    zone_offset: u64,
    zone_bytes: u64,
}

impl ImageView {
    /// Maps the image behind `file` (closing the descriptor); `zone_offset` and `zone_bytes`
    /// (from the daemon) must lie inside it.
    pub fn new(file: std::os::fd::OwnedFd, zone_offset: u64, zone_bytes: u64) -> Result<Self> {
        let region = Region::view(file)?;
        let inside = zone_offset
            .checked_add(zone_bytes)
            .is_some_and(|end| end <= region.len());
        if !inside {
            return Err(Errno::EINVAL.into());
        }
        Ok(ImageView {
            region,
            zone_offset,
            zone_bytes,
        })
    }
}

impl DirectMap {
    /// A copy as decoded from a daemon's reply: `None` unless `start <= end` and its pieces
    /// are nonempty, ascending and disjoint, with no range that overflows.
    pub fn new(
        generation: u64,
        (start, end): (u64, u64),
        pieces: Vec<(u64, u64, u64)>,
        access_holds_ns: u64,
    ) -> Option<Self> {
        let mut at = 0;
        for &(offset, addr, len) in &pieces {
            addr.checked_add(len)?;
            if len == 0 || offset < at {
                return None;
            }
            at = offset.checked_add(len)?;
        }
        (start <= end).then_some(DirectMap {
            generation,
            start,
            end,
            pieces,
            access_holds_ns,
        })
    }

    /// Reads up to `buf.len()` bytes at `offset` as [`Fs::read`] would, from `view`, while
    /// `generation` (the file's, as its watcher stores it) holds [`DirectMap::generation`],
    /// with `size` the size stored beside it; `None` when this copy cannot answer (the file
    /// changed, or the range is outside what it describes): ask the daemon.
    pub fn read(
        &self,
        view: &ImageView,
        words: (&AtomicU64, &AtomicU64),
        offset: u64,
        buf: &mut [u8],
    ) -> Option<usize> {
        self.read_then(view, words, offset, buf, || ())
    }

    /// [`DirectMap::read`], running `after_copy` between the copy and the generation's second
    /// load: the window a change must not slip through, which the tests land a change in.
    fn read_then(
        &self,
        view: &ImageView,
        (size, generation): (&AtomicU64, &AtomicU64),
        offset: u64,
        buf: &mut [u8],
        after_copy: impl FnOnce(),
    ) -> Option<usize> {
        let before = generation.load(Ordering::Acquire);
        if before != self.generation || offset > MAX_FILE_BYTES {
            return None;
        }
        let size = size.load(Ordering::Acquire);
        if offset >= size {
            return Some(0);
        }
        let end = size.min(offset.checked_add(buf.len() as u64)?);
        if offset < self.start || end > self.end {
            return None;
        }
        let first = self.pieces.partition_point(|p| p.0 + p.2 <= offset);
        let mut at = offset;
        for &(piece_offset, addr, len) in &self.pieces[first..] {
            if piece_offset >= end {
                break;
            }
            let from = piece_offset.max(offset);
            let to = (piece_offset + len).min(end);
            let src = addr + (from - piece_offset);
            if src + (to - from) > view.zone_bytes {
                return None; // not a piece of this image: never read outside it
            }
            buf[(at - offset) as usize..(from - offset) as usize].fill(0);
            let dst = &mut buf[(from - offset) as usize..(to - offset) as usize];
            view.region.read_bytes(view.zone_offset + src, dst);
            at = to;
        }
        buf[(at - offset) as usize..(end - offset) as usize].fill(0);
        after_copy();
        fence(Ordering::Acquire);
        (generation.load(Ordering::Acquire) == before).then_some((end - offset) as usize)
    }
}

impl Fs {
    /// Reads as [`Fs::read`] does and, unless the file has a mapping's shadow or access times
    /// are strict, hands out a copy of its pieces around `offset` with the generation they
    /// hold at (see the module doc). The caller (the daemon) has made sure the reader's board
    /// follows the file ([`Fs::watch_size`]) before asking.
    pub fn read_mapped(
        &self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(usize, Option<DirectMap>)> {
        if offset > MAX_FILE_BYTES || self.atime == AtimeMode::Strictatime {
            return Ok((self.read(ino, offset, buf)?, None));
        }
        let inode = self.inode(ino)?;
        let state = self.file_of(&inode)?.lock();
        if self.shadow_exists(ino) {
            drop(state);
            return Ok((self.read(ino, offset, buf)?, None));
        }
        let n = self.read_locked(&state, offset, buf);
        let mut map = direct_map(&state, offset);
        drop(state);
        self.note_access(&inode);
        map.access_holds_ns = self.access_holds_ns(&inode);
        Ok((n, Some(map)))
    }

    /// The user owning the image file (`None`: no file, an in-memory region).
    pub fn image_owner(&self) -> Option<u32> {
        let fd = self.image.region().descriptor()?;
        let st = rustix::fs::stat(format!("/proc/self/fd/{fd}").as_str()).ok()?;
        Some(st.st_uid)
    }

    /// The image's descriptor, opened again read-only, and where its data zone lies (offset,
    /// bytes): what a trusted daemon client maps ([`ImageView::new`]).
    pub fn image_for_reading(&self) -> Result<(std::os::fd::OwnedFd, u64, u64)> {
        let fd = self.image.region().descriptor().ok_or(Errno::EOPNOTSUPP)?;
        let path = format!("/proc/self/fd/{fd}");
        let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC;
        let file = rustix::fs::open(path.as_str(), flags, rustix::fs::Mode::empty())
            .map_err(|e| Errno(e.raw_os_error()))?;
        let geometry = self.image.geometry();
        let zone_bytes = geometry.data_block_count() * crate::format::BLOCK_SIZE;
        Ok((file, geometry.block_offset(0), zone_bytes))
    }
}

/// The pieces of `state` around `offset`: all of them when there are few enough, else the
/// first [`DIRECT_MAP_MAX_PIECES`] from the one holding `offset` (or the next) on.
fn direct_map(state: &FileState, offset: u64) -> DirectMap {
    let generation = state.generation;
    if state.map.len() <= DIRECT_MAP_MAX_PIECES {
        let pieces = state
            .map
            .iter()
            .map(|(at, p)| (at, p.addr, p.len))
            .collect();
        return DirectMap {
            generation,
            start: 0,
            end: u64::MAX,
            pieces,
            access_holds_ns: 0,
        };
    }
    let pieces: Vec<(u64, u64, u64)> = state
        .map
        .overlapping(offset, u64::MAX)
        .take(DIRECT_MAP_MAX_PIECES)
        .map(|(at, p)| (at, p.addr, p.len))
        .collect();
    let end = match pieces.len() {
        DIRECT_MAP_MAX_PIECES => pieces.last().map_or(offset, |p| p.0 + p.2),
        _ => u64::MAX, // every piece from `offset` on
    };
    DirectMap {
        generation,
        start: offset,
        end: end.max(offset),
        pieces,
        access_holds_ns: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::layout::MkfsParams;
    use crate::fs::MountOptions;
    use crate::namespace::tests::OWNER;
    use crate::namespace::ROOT_INO;
    use std::sync::Arc;

    /// A size board of one watch, as a daemon client's: size and generation.
    struct Board(AtomicU64, AtomicU64);

    impl crate::file::SizeSink for Board {
        fn store(&self, _index: u32, size: u64, generation: Option<u64>) {
            if let Some(generation) = generation {
                self.1.store(generation, Ordering::Release);
            }
            self.0.store(size, Ordering::Release);
        }
    }

    impl Board {
        fn words(&self) -> (&AtomicU64, &AtomicU64) {
            (&self.0, &self.1)
        }
    }

    fn read_directly(fs: &Fs, ino: u64, board: &Board, view: &ImageView) -> Vec<u8> {
        let mut first = [0u8; 1];
        let (_, map) = fs.read_mapped(ino, 0, &mut first).unwrap();
        let map = map.expect("a copy of the pieces");
        let mut all = vec![0xee; 1 << 20];
        let n = map
            .read(view, board.words(), 0, &mut all)
            .expect("the copy answers");
        all.truncate(n);
        all
    }

    /// A file system on a 64 MiB image file (a view needs a file to map), in a directory kept
    /// as long as the caller keeps it.
    fn mounted() -> (tempfile::TempDir, Fs) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image");
        let params = MkfsParams {
            image_bytes: 64 << 20,
            ..MkfsParams::default()
        };
        crate::mkfs::mkfs(&path, &params).unwrap();
        let fs = Fs::mount(&path, &MountOptions::default()).unwrap();
        (dir, fs)
    }

    /// File `f`, its size and generation followed on a board as a daemon client's are, and a
    /// view of the image.
    fn watched_file(fs: &Fs) -> (u64, Arc<Board>, ImageView) {
        let ino = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap().ino;
        let board = Arc::new(Board(AtomicU64::new(0), AtomicU64::new(0)));
        fs.watch_size(ino, board.clone(), 0, true).unwrap();
        let (image, zone_offset, zone_bytes) = fs.image_for_reading().unwrap();
        let view = ImageView::new(image, zone_offset, zone_bytes).unwrap();
        (ino, board, view)
    }

    #[test]
    fn reads_from_a_view_follow_the_file_and_stop_at_any_change() {
        let (_dir, fs) = mounted();
        let (ino, board, view) = watched_file(&fs);

        // Committed and pending pieces, and a hole between them.
        fs.write(ino, 0, &[1u8; 10_000]).unwrap();
        fs.fsync(ino).unwrap();
        fs.write(ino, 20_000, &[2u8; 3_000]).unwrap();
        let mut expected = vec![1u8; 10_000];
        expected.resize(20_000, 0);
        expected.resize(23_000, 2);
        assert_eq!(read_directly(&fs, ino, &board, &view), expected);

        // A copy taken before a change never answers after it: writes, truncates, punches.
        let mut probe = [0u8; 1];
        let (_, stale) = fs.read_mapped(ino, 0, &mut probe).unwrap();
        let stale = stale.unwrap();
        let mut buf = [0u8; 100];
        assert_eq!(stale.read(&view, board.words(), 5, &mut buf), Some(100));
        fs.write(ino, 5, &[3u8; 10]).unwrap();
        assert_eq!(stale.read(&view, board.words(), 5, &mut buf), None);
        expected[5..15].fill(3);
        assert_eq!(read_directly(&fs, ino, &board, &view), expected);

        let (_, stale) = fs.read_mapped(ino, 0, &mut probe).unwrap();
        fs.truncate(ino, 15_000).unwrap();
        assert_eq!(stale.unwrap().read(&view, board.words(), 0, &mut buf), None);
        expected.truncate(15_000);
        assert_eq!(read_directly(&fs, ino, &board, &view), expected);

        let (_, stale) = fs.read_mapped(ino, 0, &mut probe).unwrap();
        fs.punch_hole(ino, 4096, 4096).unwrap();
        assert_eq!(stale.unwrap().read(&view, board.words(), 0, &mut buf), None);
        expected[4096..8192].fill(0);
        assert_eq!(read_directly(&fs, ino, &board, &view), expected);

        // Past the end: nothing, as a read of the file gives.
        let (_, copy) = fs.read_mapped(ino, 0, &mut probe).unwrap();
        assert_eq!(
            copy.unwrap().read(&view, board.words(), 15_000, &mut buf),
            Some(0)
        );
    }

    /// The reader's second look at the generation: a change made while the bytes are being
    /// copied (here a rewrite whose old block another file then takes) makes the read ask
    /// again, even though the copy's first look found the generation unchanged.
    #[test]
    fn a_change_while_the_bytes_are_copied_makes_the_read_ask_again() {
        let (_dir, fs) = mounted();
        let (ino, board, view) = watched_file(&fs);
        let other = fs.create(ROOT_INO, b"g", 0o644, OWNER, true).unwrap().ino;
        fs.write(ino, 0, &[1u8; 4096]).unwrap();
        fs.fsync(ino).unwrap();
        let mut probe = [0u8; 1];
        let (_, copy) = fs.read_mapped(ino, 0, &mut probe).unwrap();
        let copy = copy.unwrap();
        let mut buf = [0u8; 4096];
        let answered = copy.read_then(&view, board.words(), 0, &mut buf, || {
            fs.write(ino, 0, &[2u8; 4096]).unwrap();
            fs.fsync(ino).unwrap();
            fs.write(other, 0, &[9u8; 4096]).unwrap();
            fs.fsync(other).unwrap();
        });
        assert_eq!(answered, None, "a copy made stale mid-read answered");
        // Unchanged files keep answering through the same path.
        let (_, copy) = fs.read_mapped(ino, 0, &mut probe).unwrap();
        let answered = copy
            .unwrap()
            .read_then(&view, board.words(), 0, &mut buf, || ());
        assert_eq!((answered, buf), (Some(4096), [2u8; 4096]));
    }

    #[test]
    fn a_fragmented_file_is_described_around_the_read_and_a_mapped_one_not_at_all() {
        let (_dir, fs) = mounted();
        let ino = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap().ino;
        // Every other 100 bytes rewritten: ~4,000 pieces.
        fs.write(ino, 0, &[7u8; 400_000]).unwrap();
        fs.fsync(ino).unwrap();
        for k in 0..2000u64 {
            fs.write(ino, k * 200, &[k as u8; 100]).unwrap();
        }
        let mut buf = vec![0u8; 100];
        let (_, copy) = fs.read_mapped(ino, 200_000, &mut buf).unwrap();
        let copy = copy.unwrap();
        assert_eq!(copy.pieces.len(), DIRECT_MAP_MAX_PIECES);
        assert!(copy.start <= 200_000 && copy.end > 200_000 && copy.end < 400_000);
        assert_eq!(buf, vec![1000u64 as u8; 100]);
        // A shadow (a mapping's memory) holds stores the image does not: no copy.
        let _mapping = fs.map(ino, 0, 4096, true).unwrap();
        let (n, copy) = fs.read_mapped(ino, 0, &mut buf).unwrap();
        assert_eq!((n, copy), (100, None));
    }

    #[test]
    fn a_copy_stands_for_the_access_until_relatime_would_note_the_next_read() {
        const DAY_NS: u64 = 86_400_000_000_000;
        let (dir, fs) = mounted();
        let ino = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap().ino;
        fs.write(ino, 0, b"bytes").unwrap();
        let mut buf = [0u8; 5];
        // Written after its access time: the read notes the access, and a copy holds a day.
        let (_, copy) = fs.read_mapped(ino, 0, &mut buf).unwrap();
        let holds = copy.unwrap().access_holds_ns;
        assert!(
            holds <= DAY_NS && holds > DAY_NS - 60_000_000_000,
            "{holds}"
        );
        // An access time set an hour ahead (after the change time, so not due): a day from it.
        let now = crate::mkfs::now_ns();
        let hour_ns = 3_600_000_000_000i64;
        let ahead = crate::namespace::SetAttr {
            atime_ns: Some(now + hour_ns),
            ..Default::default()
        };
        fs.setattr(ino, &ahead).unwrap();
        let (_, copy) = fs.read_mapped(ino, 0, &mut buf).unwrap();
        let holds = copy.unwrap().access_holds_ns;
        assert!(
            holds > DAY_NS && holds <= DAY_NS + hour_ns as u64,
            "{holds}"
        );
        // Times 23 hours old, the access the last (as a clock 23 hours behind would have left
        // them): the copy holds the hour left; a change time after the access, none.
        let inode = fs.inode(ino).unwrap();
        let pinode = fs
            .image()
            .geometry()
            .pinode_offset(u64::from(inode.primary_slot()));
        let store = |field: u64, ns: i64| fs.image().region().store_u64(pinode + field, ns as u64);
        let (atime, mtime, ctime) = (40, 48, 56); // docs/format.md, Pinode
        store(mtime, now - 24 * hour_ns);
        store(ctime, now - 24 * hour_ns);
        store(atime, now - 23 * hour_ns);
        let holds = fs.access_holds_ns(&inode);
        assert!(
            holds <= hour_ns as u64 && holds > hour_ns as u64 - 60_000_000_000,
            "{holds}"
        );
        store(ctime, now - 22 * hour_ns);
        assert_eq!(fs.access_holds_ns(&inode), 0);
        // Without access times a copy holds for ever.
        drop((inode, fs));
        let quiet = MountOptions {
            atime: AtimeMode::Noatime,
            ..MountOptions::default()
        };
        let fs = Fs::mount(&dir.path().join("image"), &quiet).unwrap();
        let (_, copy) = fs.read_mapped(ino, 0, &mut buf).unwrap();
        assert_eq!(copy.unwrap().access_holds_ns, u64::MAX);
    }

    #[test]
    fn a_change_of_attributes_alone_ends_a_copy_as_relatime_notes_the_next_read() {
        let (_dir, fs) = mounted();
        let (ino, board, view) = watched_file(&fs);
        fs.write(ino, 0, b"bytes").unwrap();
        let mut buf = [0u8; 5];
        type Change = fn(&Fs, u64);
        let changes: [(&str, Change); 5] = [
            ("chmod", |fs, ino| {
                let mode = crate::namespace::SetAttr {
                    mode: Some(0o600),
                    ..Default::default()
                };
                fs.setattr(ino, &mode).unwrap();
            }),
            ("a link", |fs, ino| {
                fs.link(ino, ROOT_INO, b"g").unwrap();
            }),
            ("the link's unlink", |fs, _| {
                fs.unlink(ROOT_INO, b"g").unwrap()
            }),
            ("a rename", |fs, _| {
                let flags = crate::namespace::RenameFlags::default();
                fs.rename(ROOT_INO, b"f", ROOT_INO, b"h", flags).unwrap();
            }),
            ("an extended attribute", |fs, ino| {
                let mode = crate::namespace::XattrMode::default();
                fs.setxattr(ino, b"user.x", b"1", mode).unwrap();
            }),
        ];
        for (what, change) in changes {
            let (_, copy) = fs.read_mapped(ino, 0, &mut buf).unwrap();
            let copy = copy.unwrap();
            assert_eq!(copy.read(&view, board.words(), 0, &mut buf), Some(5));
            change(&fs, ino);
            assert_eq!(
                copy.read(&view, board.words(), 0, &mut buf),
                None,
                "after {what}"
            );
        }
    }
}
