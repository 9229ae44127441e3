//! The on-media format: one module per structure, each opening with its byte layout.
//!
//! `docs/format.md` is the authoritative description; `tests/format_doc.rs` checks that its tables
//! match the [`RecordLayout`]s exported here, field by field.
//!
//! Every record is `#[repr(C)]` and built only from byte-aligned little-endian types
//! (`zerocopy::little_endian`), so it has no padding, the same bytes on every host, and compile-time
//! size and offset asserts. Index 0 of every table (pinodes, extents, long names, logs) is reserved
//! so that 0 can mean "none" in every link field.

pub mod bitmap;
pub mod extent;
pub mod hash_table;
pub mod journal;
pub mod layout;
pub mod long_name;
pub mod marks;
pub mod pinode;
pub mod superblock;
pub mod xattr;

/// Size of a data block and the alignment of every zone.
pub const BLOCK_SIZE: u64 = 4096;

/// The field names and offsets of one on-media record, for the format-doc test and for `info`.
#[derive(Debug, Clone, Copy)]
pub struct RecordLayout {
    /// The record's name as docs/format.md titles it.
    pub name: &'static str,
    /// Total size in bytes.
    pub size: usize,
    /// `(field, offset)` in increasing offset order; a field's size runs to the next offset.
    pub fields: &'static [(&'static str, usize)],
}

impl RecordLayout {
    /// `(field, offset, size)` for every field.
    pub fn rows(&self) -> Vec<(&'static str, usize, usize)> {
        let mut rows = Vec::with_capacity(self.fields.len());
        for (i, &(name, offset)) in self.fields.iter().enumerate() {
            let end = self.fields.get(i + 1).map_or(self.size, |&(_, o)| o);
            rows.push((name, offset, end - offset));
        }
        rows
    }
}

/// Builds a [`RecordLayout`] from a record type and its fields in declaration order. Records have
/// no padding (zerocopy's `IntoBytes` derive refuses it), so each field runs to the next offset.
macro_rules! record_layout {
    ($name:literal, $ty:ty, [$($field:ident),+ $(,)?]) => {
        $crate::format::RecordLayout {
            name: $name,
            size: ::core::mem::size_of::<$ty>(),
            fields: &[$((stringify!($field), ::core::mem::offset_of!($ty, $field))),+],
        }
    };
}
pub(crate) use record_layout;

/// Every record layout, for the format-doc test and `nosefs info --format`.
pub const ALL_LAYOUTS: &[RecordLayout] = &[
    superblock::LAYOUT,
    pinode::LAYOUT,
    hash_table::LAYOUT,
    long_name::LAYOUT,
    extent::LAYOUT,
    journal::DIR_LOG_LAYOUT,
    journal::FILE_LOG_LAYOUT,
    marks::LAYOUT,
    xattr::BLOB_LAYOUT,
    xattr::ENTRY_LAYOUT,
];

/// Round `value` up to a multiple of `align` (a power of two).
pub const fn align_up(value: u64, align: u64) -> u64 {
    (value + align - 1) & !(align - 1)
}
