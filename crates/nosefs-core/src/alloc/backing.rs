//! The image file's pages under the data blocks, reserved before blocks on them are handed out.
//!
//! An image file mapped without being populated (what `nosefs mount` and `nosefs run` do) is
//! sparse: its file system gives it a page at the first store into a hole. Where that file system
//! is full (a /dev/shm smaller than the image, or other files filling it) the store cannot be
//! served and the kernel kills the process with SIGBUS: the writing program, or the daemon with
//! every client. So the allocator has the pages of each chunk of the data zone reserved
//! (`fallocate`, [`crate::pmem::BackingFile`]) before it hands out a block in it, once per chunk
//! and mount, and an allocation in a chunk the file system has no room for fails: the write gets
//! ENOSPC and nothing is lost. The metadata is reserved the same way ([`reserve_metadata`] at a
//! writable mount, fresh table slots as the pools hand them out), so what runs out answers
//! ENOSPC; the data leaves [`MARGIN_BYTES`] free (or the metadata's holes, if fewer), so that
//! names can still be made once the data has filled the file system. A file system without
//! `fallocate` reserves nothing (as before).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::format::layout::Zone;
use crate::format::marks::Table;
use crate::format::BLOCK_SIZE;
use crate::image::{reserve, Image};
use crate::pmem::BackingFile;

/// Has the image's file hold, before a writable mount's recovery stores anything, the pages of
/// the metadata it stores into anywhere (the journals, the hash table, the bitmap) and of the
/// tables below their high-water marks (a slot there may have been handed out and never
/// written): a store into a hole its file system cannot fill is SIGBUS, and the room may have
/// been taken by the image's own data or by another program. Slots past a mark are reserved as
/// they are handed out (`pool::SlotPools`). ENOSPC, naming what it needed, when the file system has no
/// room; a mount read-only needs none.
pub(crate) fn reserve_metadata(image: &Image) -> Result<()> {
    let g = image.geometry();
    let mut ranges: Vec<(u64, u64)> = [Zone::DirJournal, Zone::FileJournal, Zone::HashTable]
        .into_iter()
        .chain(std::iter::once(Zone::Bitmap))
        .map(|zone| {
            let span = g.span(zone);
            (span.offset, span.count * zone.record_bytes())
        })
        .collect();
    if g.high_water_marks {
        for table in Table::ALL {
            let zone = match table {
                Table::Pinodes => Zone::PinodeTable,
                Table::LongNames => Zone::LongNames,
                Table::Extents => Zone::ExtentTable,
            };
            let span = g.span(zone);
            ranges.push((
                span.offset,
                image.mark(table).min(span.count) * zone.record_bytes(),
            ));
        }
    }
    for (offset, len) in ranges {
        reserve(image.region(), offset, len).map_err(|e| {
            let bytes: u64 = len;
            Error::io(
                format!(
                    "the file system holding the image has no room for its metadata \
                     ({} KiB at offset {offset}): free space there, or mount read-only",
                    bytes.div_ceil(1024)
                ),
                e,
            )
        })?;
    }
    Ok(())
}

/// Blocks reserved at once: 1 MiB.
pub(super) const CHUNK_BLOCKS: u64 = 256;

/// Room the data leaves free for the metadata's growth: pinode pages for thousands of names.
/// (All of the metadata's holes, as before, kept an image much larger than its file system
/// from writing any data at all.)
pub(super) const MARGIN_BYTES: u64 = 1 << 20;

/// Which chunks of the data zone the image's file holds pages for.
pub(crate) struct Backing {
    file: Box<dyn BackingFile>,
    /// Bytes kept free for the metadata: [`MARGIN_BYTES`], or its holes at mount if fewer.
    margin_bytes: u64,
    /// Byte offset of data block 0 in the image.
    data_offset: u64,
    /// One bit per chunk: reserved since mount.
    reserved: Vec<AtomicU64>,
    /// The file system cannot reserve (no `fallocate`): every block passes, as without this.
    unsupported: AtomicBool,
}

impl std::fmt::Debug for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backing")
            .field("data_offset", &self.data_offset)
            .field("margin_bytes", &self.margin_bytes)
            .field("unsupported", &self.unsupported)
            .finish_non_exhaustive()
    }
}

impl Backing {
    /// Reservations in `file` for a data zone of `blocks` blocks at `data_offset`, the metadata
    /// zones before it.
    pub(crate) fn new(file: Box<dyn BackingFile>, data_offset: u64, blocks: u64) -> Backing {
        let chunks = blocks.div_ceil(CHUNK_BLOCKS);
        // Unknown holes count as none: the margin is a courtesy, not a promise.
        let holes = file.hole_bytes(0, data_offset).unwrap_or(0);
        Backing {
            file,
            margin_bytes: holes.min(MARGIN_BYTES),
            data_offset,
            reserved: (0..chunks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            unsupported: AtomicBool::new(false),
        }
    }

    /// Whether blocks `[start, start + count)` lie on reserved pages, reserving the chunks that
    /// are not yet; false when the file system has no room for one.
    pub(super) fn hold(&self, start: u64, count: u64) -> bool {
        if count == 0 {
            return true;
        }
        let (first, last) = (start / CHUNK_BLOCKS, (start + count - 1) / CHUNK_BLOCKS);
        (first..=last).all(|chunk| self.hold_chunk(chunk))
    }

    fn hold_chunk(&self, chunk: u64) -> bool {
        let (word, bit) = (&self.reserved[(chunk / 64) as usize], 1u64 << (chunk % 64));
        if word.load(Ordering::Acquire) & bit != 0 || self.unsupported.load(Ordering::Relaxed) {
            return true;
        }
        let (offset, len) = (
            self.data_offset + chunk * CHUNK_BLOCKS * BLOCK_SIZE,
            CHUNK_BLOCKS * BLOCK_SIZE,
        );
        loop {
            match self.reserve_chunk(offset, len) {
                Ok(()) => {
                    word.fetch_or(bit, Ordering::Release);
                    return true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if crate::pmem::cannot_reserve(&e) => {
                    self.unsupported.store(true, Ordering::Relaxed);
                    return true;
                }
                Err(_) => return false,
            }
        }
    }

    /// Reserves the chunk's holes, if the file system has room for them and the margin.
    fn reserve_chunk(&self, offset: u64, len: u64) -> std::io::Result<()> {
        let holes = self.file.hole_bytes(offset, len)?;
        if holes == 0 {
            return Ok(()); // its pages are there already (used before this mount)
        }
        if self.file.free_bytes()? < holes.saturating_add(self.margin_bytes) {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.file.reserve(offset, len)
    }
}
