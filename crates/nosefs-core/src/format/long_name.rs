//! The long-name table: whole names longer than a pinode holds inline.
//!
//! | offset | size | field      | meaning                                  |
//! |-------:|-----:|------------|------------------------------------------|
//! |      0 |    1 | `name_len` | 41..=255 when in use                     |
//! |      1 |  255 | `name`     | the whole name; bytes past `name_len` 0  |
//!
//! Invariants:
//! - A record is in use iff exactly one valid pinode names it in `long_name`; there is no valid
//!   bit, so a record written for an operation that never committed is free again at mount.
//! - Its `name_len` equals the pinode's, and its first 40 bytes equal the pinode's inline `name`.
//! - Record 0 is reserved.

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::pinode::NAME_MAX;
use super::{record_layout, RecordLayout};

/// Size of a long-name record.
pub const LONG_NAME_BYTES: u64 = 256;

/// One long-name record.
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct LongName {
    pub name_len: u8,
    pub name: [u8; NAME_MAX],
}

const _: () = assert!(size_of::<LongName>() as u64 == LONG_NAME_BYTES);

/// The record's layout, tied to docs/format.md by a test.
pub const LAYOUT: RecordLayout = record_layout!("LongName", LongName, [name_len, name]);

impl LongName {
    /// A record holding `name` (at most 255 bytes).
    pub fn new(name: &[u8]) -> LongName {
        assert!(name.len() <= NAME_MAX, "name longer than NAME_MAX");
        let mut record = LongName::new_zeroed();
        record.name_len = name.len() as u8;
        record.name[..name.len()].copy_from_slice(name);
        record
    }

    /// The name it holds.
    pub fn name(&self) -> &[u8] {
        &self.name[..usize::from(self.name_len)]
    }
}
