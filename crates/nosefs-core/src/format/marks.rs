//! High-water marks: how far into each table valid records reach, so that mount reads only the
//! part of a table that has ever been used (feature `ro_compat` bit 0, `HIGH_WATER_MARKS`).
//!
//! The record lies at offset 1024 of block 0, after the primary superblock, on its own cache line.
//!
//! | offset | size | field            | meaning                                               |
//! |-------:|-----:|------------------|-------------------------------------------------------|
//! |      0 |    8 | `pinode_high`    | every valid pinode's slot is below this               |
//! |      8 |    8 | `long_name_high` | every long-name record a valid pinode names is below  |
//! |     16 |    8 | `extent_high`    | every valid extent's slot is below this               |
//! |     24 |   40 | `reserved`       | zero                                                  |
//!
//! Invariants (fsck checks each):
//! - `1 <= mark <= count` of its table; mkfs writes 2 (the root), 1 and 1.
//! - A mark only grows, and by one aligned 8-byte atomic store made durable *before* the
//!   allocator hands out any slot at or above the old value; so after any crash every record a
//!   journal commit can have made valid lies below the durable mark.
//! - The allocator raises a mark in steps (an eighth of it, at least [`MIN_STEP`]), so raising
//!   costs one fence per step, not per allocation, and the slack mount reads stays small.
//!
//! Why an `ro_compat` feature: a build that does not know the marks could still read the image,
//! but if it wrote it, it would allocate above a mark without raising it, hiding those records
//! from the next mount.

use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{record_layout, RecordLayout};

/// Offset of the marks record in the image (block 0, after the primary superblock).
pub const MARKS_OFFSET: u64 = 1024;
/// Size of the marks record.
pub const MARKS_BYTES: u64 = 64;
/// `ro_compat` bit: the image keeps high-water marks.
pub const RO_COMPAT_HIGH_WATER_MARKS: u32 = 1 << 0;
/// The smallest step by which the allocator raises a mark.
pub const MIN_STEP: u64 = 256;

/// The marks record. All integers little-endian.
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct Marks {
    pub pinode_high: U64,
    pub long_name_high: U64,
    pub extent_high: U64,
    pub reserved: [u8; 40],
}

const _: () = assert!(size_of::<Marks>() as u64 == MARKS_BYTES);
const _: () = assert!(MARKS_OFFSET % 64 == 0);

/// The record's layout, tied to docs/format.md by a test.
pub const LAYOUT: RecordLayout = record_layout!(
    "Marks",
    Marks,
    [pinode_high, long_name_high, extent_high, reserved]
);

/// The tables that have a mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// The pinode table.
    Pinodes,
    /// The long-name table.
    LongNames,
    /// The extent table.
    Extents,
}

impl Table {
    /// Every marked table.
    pub const ALL: [Table; 3] = [Table::Pinodes, Table::LongNames, Table::Extents];

    /// Offset of this table's mark in the image.
    pub fn mark_offset(self) -> u64 {
        MARKS_OFFSET
            + match self {
                Table::Pinodes => std::mem::offset_of!(Marks, pinode_high),
                Table::LongNames => std::mem::offset_of!(Marks, long_name_high),
                Table::Extents => std::mem::offset_of!(Marks, extent_high),
            } as u64
    }

    /// The mark's field name, for fsck and error messages.
    pub fn field(self) -> &'static str {
        match self {
            Table::Pinodes => "pinode_high",
            Table::LongNames => "long_name_high",
            Table::Extents => "extent_high",
        }
    }
}

/// The smallest legal value of `table`'s mark: above the root's slot for pinodes, else 1.
pub fn lowest(table: Table, root_slot: u32) -> u64 {
    match table {
        Table::Pinodes => u64::from(root_slot) + 1,
        Table::LongNames | Table::Extents => 1,
    }
}

/// The value a mark is raised to so that slot `needed - 1` lies below it: a step of an eighth of
/// the current mark (at least [`MIN_STEP`]), never past the table's `count`.
pub fn raised(current: u64, needed: u64, count: u64) -> u64 {
    let step = (current / 8).max(MIN_STEP);
    needed.max(current + step).min(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_steps_geometrically_and_stops_at_the_table_end() {
        assert_eq!(raised(2, 3, 1_000_000), 2 + MIN_STEP);
        assert_eq!(raised(80_000, 80_001, 1_000_000), 90_000);
        assert_eq!(raised(999_990, 999_991, 1_000_000), 1_000_000);
        assert_eq!(raised(10, 5_000, 1_000_000), 5_000);
        // Raising a million slots one at a time costs a logarithmic number of fences.
        let (mut mark, mut raises) = (2, 0);
        for slot in 1..1_000_000u64 {
            if slot >= mark {
                mark = raised(mark, slot + 1, 1_000_000);
                raises += 1;
            }
        }
        assert!(raises < 80, "{raises} raises");
    }
}
