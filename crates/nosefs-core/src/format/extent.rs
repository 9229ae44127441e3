//! The extent: a byte-granular piece of a file's data in a run of 4 KiB blocks.
//!
//! | offset | size | field          | meaning                                                 |
//! |-------:|-----:|----------------|---------------------------------------------------------|
//! |      0 |    8 | `ino`          | the file this extent belongs to                         |
//! |      8 |    8 | `file_offset`  | byte offset in the file of the extent's first byte      |
//! |     16 |    4 | `flags`        | `VALID`                                                 |
//! |     20 |    4 | `next`         | next extent of the file, by file offset; 0 ends it      |
//! |     24 |    4 | `prev`         | previous extent of the file; 0 at the head              |
//! |     28 |    4 | `start_block`  | first data block of the run (index in the data zone)    |
//! |     32 |    4 | `length`       | bytes of file data                                      |
//! |     36 |    2 | `block_offset` | offset of the data in `start_block`, below 4096         |
//! |     38 |    2 | `block_count`  | blocks in the run                                       |
//!
//! The paper's 40-byte record, with the owner named by `ino` rather than by pinode slot, so that
//! a new pinode version (chmod, rename) leaves the file's extents untouched.
//!
//! Invariants:
//! - `length > 0`; `block_count == ceil((block_offset + length) / 4096)`;
//!   `start_block + block_count <= data_block_count`.
//! - A file's valid extents form one list from its primary pinode's `extent_head`, in increasing
//!   `file_offset`, never overlapping, with `prev`/`next` mutually consistent.
//! - Several extents may point into one block (NCOW splits); a block is allocated in the bitmap
//!   iff some valid extent's run covers it.
//! - Extent 0 is reserved.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{record_layout, RecordLayout, BLOCK_SIZE};

/// Size of an extent.
pub const EXTENT_BYTES: u64 = 40;
/// The slot is in use.
pub const FLAG_VALID: u32 = 1 << 0;
/// Every flag bit this version defines.
pub const KNOWN_FLAGS: u32 = FLAG_VALID;
/// Most blocks one extent's run may span.
pub const MAX_BLOCKS: u64 = u16::MAX as u64;

/// One extent.
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct Extent {
    pub ino: U64,
    pub file_offset: U64,
    pub flags: U32,
    pub next: U32,
    pub prev: U32,
    pub start_block: U32,
    pub length: U32,
    pub block_offset: U16,
    pub block_count: U16,
}

const _: () = assert!(size_of::<Extent>() as u64 == EXTENT_BYTES);

/// The extent's layout, tied to docs/format.md by a test.
pub const LAYOUT: RecordLayout = record_layout!(
    "Extent",
    Extent,
    [
        ino,
        file_offset,
        flags,
        next,
        prev,
        start_block,
        length,
        block_offset,
        block_count
    ]
);

impl Extent {
    /// An all-zero (free) extent.
    pub fn zeroed_record() -> Extent {
        <Extent as zerocopy::FromZeros>::new_zeroed()
    }

    /// Whether the slot is in use.
    pub fn is_valid(&self) -> bool {
        self.flags.get() & FLAG_VALID != 0
    }

    /// Blocks a run needs to hold `length` bytes starting `block_offset` into its first block.
    pub fn blocks_needed(block_offset: u64, length: u64) -> u64 {
        (block_offset + length).div_ceil(BLOCK_SIZE)
    }

    /// End of the extent in the file (exclusive), or `None` if it overflows.
    pub fn file_end(&self) -> Option<u64> {
        self.file_offset
            .get()
            .checked_add(u64::from(self.length.get()))
    }
}
