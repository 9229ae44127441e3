//! The superblock: identity, geometry of every zone, and the mount state.
//!
//! | offset | size | field                 | meaning                                               |
//! |-------:|-----:|-----------------------|-------------------------------------------------------|
//! |      0 |    8 | `magic`               | `noseFS\r\n`                                          |
//! |      8 |    4 | `version`             | format version, 1                                     |
//! |     12 |    4 | `header_bytes`        | 512, the size of this record                          |
//! |     16 |   12 | `compat`, `ro_compat`, `incompat` | feature flags (see below)                 |
//! |     28 |    4 | `block_size`          | 4096                                                  |
//! |     32 |   16 | `uuid`                | random at mkfs                                        |
//! |     48 |   24 | `image_bytes`, `created_ns`, `hash_seed` |                                    |
//! |     72 |   16 | record sizes          | pinode 128, extent 40, log 512, long name 256         |
//! |     88 |  136 | zone offsets and counts, `root_slot` |                                        |
//! |    224 |  256 | `reserved`            | zero                                                  |
//! |    480 |    8 | `state`               | bit 0 clean; bits 1.. mount count; not checksummed    |
//! |    488 |   20 | `reserved_tail`       | zero                                                  |
//! |    508 |    4 | `checksum`            | CRC-32C of bytes 0..508 with `state` read as zero     |
//!
//! The full table is in docs/format.md. Invariants:
//! - The primary copy is at offset 0, a backup at offset 4096; mkfs writes both, and nothing but
//!   the `state` word ever changes afterwards, so the backup stays valid for repair.
//! - `state` is outside the checksum and changed only by one aligned 8-byte atomic store, so
//!   mount and unmount never leave a torn, unverifiable superblock.
//! - Zones are 4 KiB aligned, lie inside the image, and follow in the order of [`Zone::ALL`].
//! - Feature flags: an unknown `incompat` bit refuses the image, an unknown `ro_compat` bit allows
//!   only read-only use, an unknown `compat` bit is ignored. Defined: `ro_compat` bit 0,
//!   high-water marks (`format::marks`); `incompat` bit 0, extended attributes (`format::xattr`);
//!   `incompat` bit 1, fallocate reservations kept in attribute blobs.

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{record_layout, RecordLayout, BLOCK_SIZE};

/// The magic bytes at offset 0.
pub const MAGIC: [u8; 8] = *b"noseFS\r\n";
/// The format version this build reads and writes.
pub const VERSION: u32 = 2;
/// Size of the superblock record.
pub const SUPERBLOCK_BYTES: u64 = 512;
/// Offset of the primary superblock.
pub const PRIMARY_OFFSET: u64 = 0;
/// Offset of the backup superblock.
pub const BACKUP_OFFSET: u64 = BLOCK_SIZE;
/// Bytes covered by the checksum (everything before it).
pub const CHECKSUMMED_BYTES: usize = 508;

/// Bit 0 of `state`: the image was unmounted cleanly.
pub const STATE_CLEAN: u64 = 1;

/// Feature bits this build understands (none yet, in each class).
pub const KNOWN_COMPAT: u32 = 0;
/// Read-only-compatible feature bits this build understands: high-water marks
/// (`format::marks`).
pub const KNOWN_RO_COMPAT: u32 = super::marks::RO_COMPAT_HIGH_WATER_MARKS;
/// `incompat` bit 0: pinodes may carry `FLAG_XATTR` (extended attributes, `format::xattr`). A
/// build that does not know it would take an attribute pinode for a damaged name.
pub const INCOMPAT_XATTRS: u32 = 1 << 0;
/// `incompat` bit 1: attribute blobs may hold `format::xattr::RESERVED_NAME`, the ranges
/// fallocate reserved, which mount promises the file again. A build that does not know it would
/// refuse such a blob. Only with `INCOMPAT_XATTRS`.
pub const INCOMPAT_RESERVATIONS: u32 = 1 << 1;
/// `incompat` bit 2: file logs may hold *move* entries (`format::journal::FileMove`): an extent
/// keeps its number and its place in the file's list while its data moves to a new run of blocks,
/// the cheapest durable route for an overwrite of a whole extent. A build that does not know it
/// would take a move for an extent number past the table. Only on images whose extent table has
/// at most `MAX_MOVE_EXTENTS` slots (the entry's tag bit is bit 31 of the extent number).
pub const INCOMPAT_MOVES: u32 = 1 << 2;
/// Most extent slots an image with `INCOMPAT_MOVES` may have.
pub const MAX_MOVE_EXTENTS: u64 = 1 << 31;
/// Incompatible feature bits this build understands.
pub const KNOWN_INCOMPAT: u32 = INCOMPAT_XATTRS | INCOMPAT_RESERVATIONS | INCOMPAT_MOVES;

/// The superblock record. All integers little-endian.
#[repr(C)]
#[derive(Debug, Clone, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct Superblock {
    pub magic: [u8; 8],
    pub version: U32,
    pub header_bytes: U32,
    pub compat: U32,
    pub ro_compat: U32,
    pub incompat: U32,
    pub block_size: U32,
    pub uuid: [u8; 16],
    pub image_bytes: U64,
    pub created_ns: U64,
    pub hash_seed: U64,
    pub pinode_size: U32,
    pub extent_size: U32,
    pub log_size: U32,
    pub long_name_size: U32,
    pub dir_journal_offset: U64,
    pub dir_log_count: U64,
    pub file_journal_offset: U64,
    pub file_log_count: U64,
    pub hash_table_offset: U64,
    pub bucket_count: U64,
    pub pinode_table_offset: U64,
    pub pinode_count: U64,
    pub long_name_offset: U64,
    pub long_name_count: U64,
    pub extent_table_offset: U64,
    pub extent_count: U64,
    pub bitmap_offset: U64,
    pub bitmap_bytes: U64,
    pub data_offset: U64,
    pub data_block_count: U64,
    pub root_slot: U64,
    pub reserved: [u8; 256],
    pub state: U64,
    pub reserved_tail: [u8; 20],
    pub checksum: U32,
}

const _: () = assert!(size_of::<Superblock>() as u64 == SUPERBLOCK_BYTES);
const _: () = assert!(std::mem::offset_of!(Superblock, state) == 480);
const _: () = assert!(std::mem::offset_of!(Superblock, state) % 8 == 0);
const _: () = assert!(std::mem::offset_of!(Superblock, checksum) == CHECKSUMMED_BYTES);

/// Offset of the `state` word in the primary superblock (8-byte aligned, atomically stored).
pub const STATE_OFFSET: u64 = PRIMARY_OFFSET + std::mem::offset_of!(Superblock, state) as u64;

/// The superblock's layout, tied to docs/format.md by a test.
pub const LAYOUT: RecordLayout = record_layout!(
    "Superblock",
    Superblock,
    [
        magic,
        version,
        header_bytes,
        compat,
        ro_compat,
        incompat,
        block_size,
        uuid,
        image_bytes,
        created_ns,
        hash_seed,
        pinode_size,
        extent_size,
        log_size,
        long_name_size,
        dir_journal_offset,
        dir_log_count,
        file_journal_offset,
        file_log_count,
        hash_table_offset,
        bucket_count,
        pinode_table_offset,
        pinode_count,
        long_name_offset,
        long_name_count,
        extent_table_offset,
        extent_count,
        bitmap_offset,
        bitmap_bytes,
        data_offset,
        data_block_count,
        root_slot,
        reserved,
        state,
        reserved_tail,
        checksum,
    ]
);

impl Superblock {
    /// The CRC-32C this superblock should carry: bytes `0..508` with `state` taken as zero.
    pub fn compute_checksum(&self) -> u32 {
        let mut copy = self.clone();
        copy.state = U64::new(0);
        crc32c::crc32c(&copy.as_bytes()[..CHECKSUMMED_BYTES])
    }

    /// Sets `checksum` to match the other fields.
    pub fn seal(&mut self) {
        self.checksum = U32::new(self.compute_checksum());
    }

    /// Whether the mount state says the image was unmounted cleanly.
    pub fn is_clean(&self) -> bool {
        self.state.get() & STATE_CLEAN != 0
    }

    /// How many times the image has been mounted.
    pub fn mount_count(&self) -> u64 {
        self.state.get() >> 1
    }

    /// The UUID in its usual 8-4-4-4-12 text form.
    pub fn uuid_string(&self) -> String {
        let h: String = self.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

/// Encodes a mount state word.
pub fn state_word(clean: bool, mount_count: u64) -> u64 {
    (mount_count << 1) | u64::from(clean)
}
