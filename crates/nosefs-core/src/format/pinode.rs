//! The pinode: all metadata of one name (inode and dentry in one 128-byte record).
//!
//! | offset | size | field         | meaning                                                      |
//! |-------:|-----:|---------------|--------------------------------------------------------------|
//! |      0 |    8 | `ino`         | file identity (`st_ino`), shared by every name of a file     |
//! |      8 |    8 | `parent`      | `ino` of the parent directory; 0 for the root                |
//! |     16 |    4 | `flags`       | `VALID`, `PRIMARY`, `LONG_NAME`, `ORPHAN`                    |
//! |     20 |    4 | `mode`        | `st_mode`: file type and permission bits                     |
//! |     24 |    8 | `uid`, `gid`  | owner                                                        |
//! |     32 |    8 | `size`        | file size in bytes (primary only)                            |
//! |     40 |   24 | `atime_ns`, `mtime_ns`, `ctime_ns` | signed nanoseconds since the epoch      |
//! |     64 |    4 | `nlink`       | link count (primary only)                                    |
//! |     68 |    4 | `hash_next`   | next slot in this bucket's chain; 0 ends it                  |
//! |     72 |    4 | `extent_head` | first extent of the file's list; 0 if none (primary only)    |
//! |     76 |    4 | `long_name`   | slot in the long-name table; 0 when the name is inline       |
//! |     80 |    4 | `rdev`        | device number of a device node                               |
//! |     84 |    1 | `name_len`    | name length, 0..=255 (0 only for the root)                   |
//! |     85 |    3 | `reserved`    | zero                                                         |
//! |     88 |   40 | `name`        | the name if `name_len <= 40`, else its first 40 bytes        |
//!
//! Invariants (fsck checks each):
//! - A slot is in use iff `VALID` is set; slot 0 is reserved; the root is the pinode of `ino` 1.
//! - Every valid pinode is in exactly one hash chain: the bucket of `(parent, name)`.
//! - Each file has exactly one `PRIMARY` pinode, which holds size, times, link count and the extent
//!   list; other names of it (hard links) carry the same `ino` and only their own name and parent.
//! - `LONG_NAME` is set iff `name_len > 40`, and then `long_name` names a long-name record holding
//!   the whole name, whose first 40 bytes equal `name`.
//! - `parent` is the `ino` of a valid directory; following parents from any directory reaches the
//!   root without a cycle.
//!
//! Why `ino` is not the slot: a new version of a pinode (rename, chmod) is written to a fresh slot
//! and committed by the journal, and POSIX requires `st_ino` not to change. Inode numbers are
//! never reused; mount finds the next one as the largest in use plus one.

use zerocopy::little_endian::{I64, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{record_layout, RecordLayout};

/// Size of a pinode.
pub const PINODE_BYTES: u64 = 128;
/// Longest name kept entirely inside the pinode.
pub const INLINE_NAME_MAX: usize = 40;
/// Longest name (NAME_MAX).
pub const NAME_MAX: usize = 255;

/// The slot is in use.
pub const FLAG_VALID: u32 = 1 << 0;
/// This pinode holds the file's attributes and data (the first-created name of the file).
pub const FLAG_PRIMARY: u32 = 1 << 1;
/// The name is longer than [`INLINE_NAME_MAX`] and lives in the long-name table.
pub const FLAG_LONG_NAME: u32 = 1 << 2;
/// Unlinked while still open: in no hash chain; freed at close, or at the next mount.
pub const FLAG_ORPHAN: u32 = 1 << 3;
/// Holds the extended attributes of inode `parent` (`format::xattr`): named
/// `format::xattr::XATTR_PINODE_NAME`, in the hash table like a name but in no listing; its data
/// is the attribute blob. Always with `PRIMARY` (it owns its data), never with `ORPHAN`.
pub const FLAG_XATTR: u32 = 1 << 4;
/// Every flag bit this version defines.
pub const KNOWN_FLAGS: u32 = FLAG_VALID | FLAG_PRIMARY | FLAG_LONG_NAME | FLAG_ORPHAN | FLAG_XATTR;

/// One pinode. All integers little-endian.
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct Pinode {
    pub ino: U64,
    pub parent: U64,
    pub flags: U32,
    pub mode: U32,
    pub uid: U32,
    pub gid: U32,
    pub size: U64,
    pub atime_ns: I64,
    pub mtime_ns: I64,
    pub ctime_ns: I64,
    pub nlink: U32,
    pub hash_next: U32,
    pub extent_head: U32,
    pub long_name: U32,
    pub rdev: U32,
    pub name_len: u8,
    pub reserved: [u8; 3],
    pub name: [u8; INLINE_NAME_MAX],
}

const _: () = assert!(size_of::<Pinode>() as u64 == PINODE_BYTES);
// Fields that are updated in place with one atomic 8-byte store must be 8-byte aligned.
const _: () = assert!(std::mem::offset_of!(Pinode, size) % 8 == 0);
const _: () = assert!(std::mem::offset_of!(Pinode, mtime_ns) % 8 == 0);
const _: () = assert!(std::mem::offset_of!(Pinode, atime_ns) % 8 == 0);
const _: () = assert!(std::mem::offset_of!(Pinode, extent_head) == 72);

/// The pinode's layout, tied to docs/format.md by a test.
pub const LAYOUT: RecordLayout = record_layout!(
    "Pinode",
    Pinode,
    [
        ino,
        parent,
        flags,
        mode,
        uid,
        gid,
        size,
        atime_ns,
        mtime_ns,
        ctime_ns,
        nlink,
        hash_next,
        extent_head,
        long_name,
        rdev,
        name_len,
        reserved,
        name,
    ]
);

/// Set-user-id bit.
pub const S_ISUID: u32 = 0o4000;
/// Set-group-id bit.
pub const S_ISGID: u32 = 0o2000;
/// Sticky bit (restricted deletion in a directory).
pub const S_ISVTX: u32 = 0o1000;
/// File type bits of `mode`.
pub const S_IFMT: u32 = 0o170000;
/// Directory.
pub const S_IFDIR: u32 = 0o040000;
/// Regular file.
pub const S_IFREG: u32 = 0o100000;
/// Symbolic link.
pub const S_IFLNK: u32 = 0o120000;
/// Character device.
pub const S_IFCHR: u32 = 0o020000;
/// Block device.
pub const S_IFBLK: u32 = 0o060000;
/// FIFO.
pub const S_IFIFO: u32 = 0o010000;
/// Socket.
pub const S_IFSOCK: u32 = 0o140000;

/// Whether `mode` carries one of the seven POSIX file types.
pub fn is_valid_file_type(mode: u32) -> bool {
    matches!(
        mode & S_IFMT,
        S_IFDIR | S_IFREG | S_IFLNK | S_IFCHR | S_IFBLK | S_IFIFO | S_IFSOCK
    )
}

impl Pinode {
    /// An all-zero (free) pinode.
    pub fn zeroed() -> Pinode {
        Pinode::new_zeroed()
    }

    /// Whether the slot is in use.
    pub fn is_valid(&self) -> bool {
        self.flags.get() & FLAG_VALID != 0
    }

    /// Whether this pinode holds the file's attributes and data.
    pub fn is_primary(&self) -> bool {
        self.flags.get() & FLAG_PRIMARY != 0
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode.get() & S_IFMT == S_IFDIR
    }

    /// The inline part of the name (the whole name unless `LONG_NAME`).
    pub fn inline_name(&self) -> &[u8] {
        let len = usize::from(self.name_len).min(INLINE_NAME_MAX);
        &self.name[..len]
    }

    /// Stores `name` inline (up to [`INLINE_NAME_MAX`] bytes) and sets `name_len` and the
    /// `LONG_NAME` flag; a longer name's record slot must be set in `long_name` by the caller.
    pub fn set_name(&mut self, name: &[u8]) {
        assert!(name.len() <= NAME_MAX, "name longer than NAME_MAX");
        let inline = name.len().min(INLINE_NAME_MAX);
        self.name = [0; INLINE_NAME_MAX];
        self.name[..inline].copy_from_slice(&name[..inline]);
        self.name_len = name.len() as u8;
        let flags = self.flags.get() & !FLAG_LONG_NAME;
        let long = if name.len() > INLINE_NAME_MAX {
            FLAG_LONG_NAME
        } else {
            0
        };
        self.flags = U32::new(flags | long);
    }
}
