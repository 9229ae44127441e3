//! The directory and file journals: arrays of 512-byte logs of 8-byte entries.
//!
//! Directory log:
//!
//! | offset | size | field     | meaning                                                   |
//! |-------:|-----:|-----------|-----------------------------------------------------------|
//! |      0 |    8 | `tail`    | bits 0..32 entries (1-63), 32..64 CRC-32C; 0 = empty. Commit point |
//! |      8 |  504 | `entries` | 63 entries: `op << 56 \| slot` (bits 32..56 zero); ops 1-5  |
//!
//! File log:
//!
//! | offset | size | field      | meaning                                                  |
//! |-------:|-----:|------------|----------------------------------------------------------|
//! |      0 |    8 | `tail`     | bits 0..32 entries (≥ 1), 32..64 CRC-32C; 0 = empty. Commit point |
//! |      8 |    8 | `ino`      | the file                                                 |
//! |     16 |    8 | `size`     | the file's size after the commit                         |
//! |     24 |    8 | `mtime_ns` | its modification and change time after the commit        |
//! |     32 |    4 | `slot`     | its primary pinode's slot                                |
//! |     36 |    4 | `head`     | its first extent after the commit; 0 = none              |
//! |     40 |    4 | `last`     | its last extent after the commit; 0 = none               |
//! |     44 |    4 | `flags`    | bit 0 `DATA_FENCED`: new data was fenced before the commit |
//! |     48 |    8 | `overflow` | first overflow block + 1; 0 = none                       |
//! |     56 |  456 | `entries`  | 57 entries: `old eno \| new eno << 32`; 0 = none           |
//!
//! With `incompat` bit `MOVES`, the pairs may be followed by *moves* ([`FileMove`]), three words
//! each: `MOVE \| eno \| new start block << 32`, then `old start block \| MOVE << 32`
//! (`MOVE` = bit 31 of a half), then `old length \| new length << 32`. Extent `eno` stays in
//! the file's list, unchanged but for its `start_block`, `length` and `block_count`: its data
//! moves to a new run (a page rewritten), grows in place (an append) or shrinks (a truncate).
//!
//! An overflow block (a data block lent to the log until it is cleared, never in the bitmap)
//! holds 511 more entries and, in its last 8 bytes, the next overflow block + 1.
//!
//! Protocol (the paper's address-only redo journal): new pinodes or extents are written with
//! their valid bit clear; entries naming their *slots* (never their contents) are written; one
//! aligned 8-byte store of the tail commits, carrying the entry count and a CRC-32C of the entries
//! and the new records, so one fence makes records, entries and tail durable together; the apply
//! step sets valid bits and links; a second 8-byte store of zero clears the log (a directory log's
//! clear is left in the cache and settled lazily, see docs/format.md). At mount every log with a
//! nonzero tail whose checksum matches is replayed (replay is idempotent, so a crash during replay
//! is replayed again); one whose checksum fails was torn by a crash and is discarded. The full
//! protocol and the checksum's coverage are in docs/format.md and `namespace::txn::commit`.
//!
//! Invariants: a directory log's entry count is 1 to 63 when its tail is nonzero, and each of its
//! entries has a known op and a slot in the pinode table; a file log's committed count is at most
//! 62 times the logs in its chain, and each pair names extents in the extent table (or
//! `u32::MAX`); each move names a valid extent of the log's file and two runs in the data zone.
//! Log 0 of each journal is reserved.

use zerocopy::little_endian::{I64, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{record_layout, RecordLayout};

/// Size of one log in either journal.
pub const LOG_BYTES: u64 = 512;
/// Entries in a directory log after its tail.
pub const DIR_LOG_ENTRIES: usize = 63;
/// Entries in a file log after its header.
pub const FILE_LOG_ENTRIES: usize = 57;
/// Entries in one overflow block of a file log, before its `next` word.
pub const FILE_OVERFLOW_ENTRIES: usize = 511;

/// Directory-log operation: make the pinode at `slot` valid and link it into its bucket.
pub const DIR_OP_INSERT: u8 = 1;
/// Directory-log operation: unlink the pinode at `slot` from its bucket and clear its valid bit.
pub const DIR_OP_REMOVE: u8 = 2;
/// Directory-log operation: as INSERT, and the pinode brings new data: set the valid bits of the
/// extents in its list and their blocks in the bitmap.
pub const DIR_OP_INSERT_DATA: u8 = 3;
/// Directory-log operation: as REMOVE, and the inode's data goes: clear the valid bits of the
/// extents in its list and their blocks in the bitmap.
pub const DIR_OP_REMOVE_DATA: u8 = 4;
/// Directory-log operation: make the pinode at `slot` (flagged `ORPHAN`) valid without linking it
/// into any bucket: the file lost its last name while open and lives on until its last close.
pub const DIR_OP_ORPHAN: u8 = 5;

/// File-log flag: the commit's new data was made durable by a fence before the commit point, so
/// the checksum does not cover it.
pub const FILE_LOG_DATA_FENCED: u32 = 1 << 0;
/// Every file-log flag this version defines.
pub const FILE_LOG_KNOWN_FLAGS: u32 = FILE_LOG_DATA_FENCED;

/// A directory log.
#[repr(C)]
#[derive(Debug, Clone, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct DirLog {
    pub tail: U64,
    pub entries: [U64; DIR_LOG_ENTRIES],
}

/// A file log.
#[repr(C)]
#[derive(Debug, Clone, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct FileLog {
    pub tail: U64,
    pub ino: U64,
    pub size: U64,
    pub mtime_ns: I64,
    pub slot: U32,
    pub head: U32,
    pub last: U32,
    pub flags: U32,
    pub overflow: U64,
    pub entries: [U64; FILE_LOG_ENTRIES],
}

const _: () = assert!(size_of::<DirLog>() as u64 == LOG_BYTES);
const _: () = assert!(size_of::<FileLog>() as u64 == LOG_BYTES);
const _: () = assert!(std::mem::offset_of!(DirLog, tail) == 0);
const _: () = assert!(std::mem::offset_of!(FileLog, tail) == 0);
const _: () = assert!(std::mem::offset_of!(FileLog, entries) == 56);

/// The directory log's layout, tied to docs/format.md by a test.
pub const DIR_LOG_LAYOUT: RecordLayout = record_layout!("DirLog", DirLog, [tail, entries]);
/// The file log's layout, tied to docs/format.md by a test.
pub const FILE_LOG_LAYOUT: RecordLayout = record_layout!(
    "FileLog",
    FileLog,
    [tail, ino, size, mtime_ns, slot, head, last, flags, overflow, entries]
);

/// A decoded directory-log entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntry {
    /// [`DIR_OP_INSERT`], [`DIR_OP_REMOVE`], [`DIR_OP_INSERT_DATA`], [`DIR_OP_REMOVE_DATA`] or
    /// [`DIR_OP_ORPHAN`] (others are rejected by [`DirEntry::decode`]).
    pub op: u8,
    /// The pinode slot the operation applies to.
    pub slot: u32,
}

impl DirEntry {
    /// Whether the entry inserts a pinode (with or without data, or as an orphan).
    pub fn is_insert(self) -> bool {
        self.op == DIR_OP_INSERT || self.op == DIR_OP_INSERT_DATA || self.op == DIR_OP_ORPHAN
    }

    /// Whether the entry carries data in or out.
    pub fn moves_data(self) -> bool {
        self.op == DIR_OP_INSERT_DATA || self.op == DIR_OP_REMOVE_DATA
    }

    /// Encodes the entry as its 8-byte word.
    pub fn encode(self) -> u64 {
        (u64::from(self.op) << 56) | u64::from(self.slot)
    }

    /// Decodes a word, or says what is wrong with it.
    pub fn decode(word: u64) -> Result<DirEntry, String> {
        let op = (word >> 56) as u8;
        if !(DIR_OP_INSERT..=DIR_OP_ORPHAN).contains(&op) {
            return Err(format!("unknown operation {op}"));
        }
        if (word >> 32) & 0x00ff_ffff != 0 {
            return Err(format!("reserved bits set in {word:#018x}"));
        }
        Ok(DirEntry {
            op,
            slot: word as u32,
        })
    }
}

/// A decoded file-log entry: an extent leaving the file, one joining it, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileEntry {
    /// The extent that leaves the file's list; 0 when the entry only adds `new`.
    pub old: u32,
    /// The extent that joins it; 0 when the entry only removes `old`.
    pub new: u32,
}

impl FileEntry {
    /// Encodes the entry as its 8-byte word.
    pub fn encode(self) -> u64 {
        u64::from(self.old) | (u64::from(self.new) << 32)
    }

    /// Decodes a word.
    pub fn decode(word: u64) -> FileEntry {
        FileEntry {
            old: word as u32,
            new: (word >> 32) as u32,
        }
    }
}

/// The tag bit of a move's words (bit 31 of the low half of the first, of the high half of the
/// second): extent numbers stay below it on an image with moves.
pub const FILE_ENTRY_MOVE: u32 = 1 << 31;

/// A decoded move: extent `eno`'s data goes from `old_length` bytes in the run at `old_start`
/// to `new_length` bytes in the run at `new_start` (its `block_offset` unchanged, its
/// `block_count` following the length); nothing else of it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMove {
    /// The extent that moves.
    pub eno: u32,
    /// Its first block before the commit.
    pub old_start: u32,
    /// Its first block after the commit.
    pub new_start: u32,
    /// Its length before the commit.
    pub old_length: u32,
    /// Its length after the commit.
    pub new_length: u32,
}

/// Words a move takes in a file log.
pub const FILE_MOVE_WORDS: usize = 3;

impl FileMove {
    /// Encodes the move as its three 8-byte words.
    pub fn encode(self) -> [u64; FILE_MOVE_WORDS] {
        assert!(
            self.eno & FILE_ENTRY_MOVE == 0,
            "extent {} past the tag",
            self.eno
        );
        [
            u64::from(FILE_ENTRY_MOVE | self.eno) | (u64::from(self.new_start) << 32),
            u64::from(self.old_start) | (u64::from(FILE_ENTRY_MOVE) << 32),
            u64::from(self.old_length) | (u64::from(self.new_length) << 32),
        ]
    }
}

/// Decodes a file log's words: the pairs, then the moves. Media content: a move cut short, its
/// first two words out of place, or a pair after a move is an error.
pub fn decode_file_words(words: &[u64]) -> Result<(Vec<FileEntry>, Vec<FileMove>), String> {
    let is_first = |w: u64| (w as u32) & FILE_ENTRY_MOVE != 0;
    let is_second = |w: u64| (w >> 32) as u32 == FILE_ENTRY_MOVE;
    let pairs = words.iter().take_while(|&&w| !is_first(w)).count();
    let entries = words[..pairs]
        .iter()
        .map(|&w| FileEntry::decode(w))
        .collect();
    let mut moves = Vec::with_capacity((words.len() - pairs) / FILE_MOVE_WORDS);
    for (k, chunk) in words[pairs..].chunks(FILE_MOVE_WORDS).enumerate() {
        let at = pairs + FILE_MOVE_WORDS * k;
        match *chunk {
            [first, second, lengths] if is_first(first) && is_second(second) => {
                moves.push(FileMove {
                    eno: first as u32 & !FILE_ENTRY_MOVE,
                    old_start: second as u32,
                    new_start: (first >> 32) as u32,
                    old_length: lengths as u32,
                    new_length: (lengths >> 32) as u32,
                })
            }
            _ => return Err(format!("entry {at} is not a whole move")),
        }
    }
    Ok((entries, moves))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_entries_round_trip_and_reject_garbage() {
        let e = DirEntry {
            op: DIR_OP_REMOVE,
            slot: 0xffff_fffe,
        };
        assert_eq!(DirEntry::decode(e.encode()), Ok(e));
        assert!(DirEntry::decode(0).is_err(), "op 0 is not an operation");
        assert!(DirEntry::decode((9u64 << 56) | 5).is_err());
        assert!(DirEntry::decode((1u64 << 56) | (1 << 40) | 5).is_err());
    }

    #[test]
    fn file_entries_round_trip() {
        let e = FileEntry {
            old: 17,
            new: 0xffff_fffe,
        };
        assert_eq!(FileEntry::decode(e.encode()), e);
    }

    #[test]
    fn moves_follow_pairs_and_reject_garbage() {
        let pair = FileEntry { old: 3, new: 9 };
        let m = FileMove {
            eno: 0x7fff_fffe,
            old_start: 0xffff_fffe,
            new_start: 12,
            old_length: 4096,
            new_length: 0xffff_ffff,
        };
        let [a, b, c] = m.encode();
        assert_eq!(
            decode_file_words(&[pair.encode(), a, b, c]),
            Ok((vec![pair], vec![m]))
        );
        assert_eq!(decode_file_words(&[a, b, c]), Ok((vec![], vec![m])));
        assert!(decode_file_words(&[a, b]).is_err(), "part of a move");
        assert!(
            decode_file_words(&[a, pair.encode(), c]).is_err(),
            "no second word"
        );
        assert!(
            decode_file_words(&[a, b, c, pair.encode()]).is_err(),
            "a pair after a move"
        );
        assert!(
            decode_file_words(&[a, b, c, b, a, c]).is_err(),
            "words out of place"
        );
    }
}
