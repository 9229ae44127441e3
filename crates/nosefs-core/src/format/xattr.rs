//! Extended attributes: every attribute of one inode in one *blob*, kept as the data of a hidden
//! pinode (flag `XATTR`, named [`XATTR_PINODE_NAME`], parent = the owner's `ino`).
//!
//! Blob layout (all integers little-endian):
//!
//! | offset | size | field     | meaning                                                   |
//! |-------:|-----:|-----------|-----------------------------------------------------------|
//! |      0 |    4 | `magic`   | `NXA1` (4e 58 41 31)                                      |
//! |      4 |    4 | `count`   | attributes in the blob                                    |
//! |      8 |    4 | `bytes`   | the blob's length, header included (the pinode's `size`) |
//! |     12 |    4 | `crc`     | CRC-32C of bytes 16..`bytes`                              |
//!
//! then `count` entries, unpadded, each an [`XattrEntry`] header followed by the name's bytes,
//! then the value's:
//!
//! | offset | size | field       | meaning                                       |
//! |-------:|-----:|-------------|-----------------------------------------------|
//! |      0 |    4 | `value_len` | 0..=65536                                     |
//! |      4 |    1 | `name_len`  | 1..=255: the whole name, namespace prefix too |
//! |      5 |    3 | `reserved`  | zero                                          |
//!
//! Invariants: names are unique, hold no NUL, and start with a known namespace prefix, or are
//! [`RESERVED_NAME`] (the file's fallocate reservation, below); the entries end exactly at
//! `bytes`.
//!
//! The value of [`RESERVED_NAME`] (only on images with `INCOMPAT_RESERVATIONS`) is a list of
//! byte ranges of the file that fallocate reserved, sorted, disjoint and not touching, at most
//! [`RESERVED_RANGES_MAX`], each 16 bytes:
//!
//! | offset | size | field   | meaning                                  |
//! |-------:|-----:|---------|------------------------------------------|
//! |      0 |    8 | `start` | first byte of the range                  |
//! |      8 |    8 | `end`   | the byte after it; `start < end <= 2^53` | The blob is never changed in place: a change writes a new
//! blob to fresh blocks under a new hidden pinode and swaps the two in one directory-journal
//! commit, so a crash leaves the old set or the new, never a mix.

use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{record_layout, RecordLayout};

/// The name of every attribute pinode. It holds a `/`, which no file name may, so it can never
/// be a directory entry's name.
pub const XATTR_PINODE_NAME: &[u8] = b"/xattrs";

/// The blob's first four bytes.
pub const MAGIC: [u8; 4] = *b"NXA1";
/// Longest attribute name, namespace prefix included (XATTR_NAME_MAX).
pub const NAME_MAX: usize = 255;
/// Largest value (XATTR_SIZE_MAX).
pub const VALUE_MAX: usize = 65536;
/// Most bytes a listing of one inode's names may take, a NUL after each (XATTR_LIST_MAX).
pub const LIST_MAX: usize = 65536;
/// Largest blob: one inode's attributes together. A change rewrites the blob, so this bounds
/// what one setxattr copies.
pub const BLOB_MAX: usize = 1 << 20;

/// Size of the blob header.
pub const HEADER_BYTES: usize = 16;
/// Size of an entry header.
pub const ENTRY_BYTES: usize = 8;

/// The blob header.
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct XattrBlob {
    pub magic: [u8; 4],
    pub count: U32,
    pub bytes: U32,
    pub crc: U32,
}

/// The header of one entry.
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct XattrEntry {
    pub value_len: U32,
    pub name_len: u8,
    pub reserved: [u8; 3],
}

const _: () = assert!(size_of::<XattrBlob>() == HEADER_BYTES);
const _: () = assert!(size_of::<XattrEntry>() == ENTRY_BYTES);

/// The blob header's layout, tied to docs/format.md by a test.
pub const BLOB_LAYOUT: RecordLayout =
    record_layout!("XattrBlob", XattrBlob, [magic, count, bytes, crc]);
/// The entry header's layout, tied to docs/format.md by a test.
pub const ENTRY_LAYOUT: RecordLayout =
    record_layout!("XattrEntry", XattrEntry, [value_len, name_len, reserved]);

/// The name under which a blob keeps the ranges fallocate reserved in a regular file. It is in
/// no namespace Linux defines, so no attribute call can name it, and listings leave it out.
pub const RESERVED_NAME: &[u8] = b"nosefs.reserved";
/// Most ranges one file's reservation keeps; past it the two closest merge (see
/// `file::reserve`).
pub const RESERVED_RANGES_MAX: usize = 256;
/// Bytes of one reserved range in the value.
pub const RESERVED_RANGE_BYTES: usize = 16;
/// The largest byte offset a reserved range may end at (the largest file).
pub const RESERVED_END_MAX: u64 = 1 << 53;

/// The value of [`RESERVED_NAME`] for `ranges` (sorted, disjoint: the caller's invariant).
pub fn encode_reserved(ranges: &[(u64, u64)]) -> Vec<u8> {
    debug_assert!(check_ranges(ranges).is_ok(), "{ranges:?}");
    let mut out = Vec::with_capacity(ranges.len() * RESERVED_RANGE_BYTES);
    for &(start, end) in ranges {
        out.extend_from_slice(&start.to_le_bytes());
        out.extend_from_slice(&end.to_le_bytes());
    }
    out
}

/// Reads the value of [`RESERVED_NAME`] (media content: checked, an error names what is wrong).
pub fn decode_reserved(value: &[u8]) -> Result<Vec<(u64, u64)>, String> {
    if value.len() % RESERVED_RANGE_BYTES != 0 {
        return Err(format!("reserved ranges: {} bytes", value.len()));
    }
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let ranges: Vec<(u64, u64)> = value
        .chunks_exact(RESERVED_RANGE_BYTES)
        .map(|r| (word(&r[..8]), word(&r[8..])))
        .collect();
    check_ranges(&ranges)?;
    Ok(ranges)
}

fn check_ranges(ranges: &[(u64, u64)]) -> Result<(), String> {
    if ranges.is_empty() || ranges.len() > RESERVED_RANGES_MAX {
        return Err(format!("{} reserved ranges", ranges.len()));
    }
    let mut after = None;
    for &(start, end) in ranges {
        if start >= end || end > RESERVED_END_MAX || after.is_some_and(|a| start <= a) {
            return Err(format!(
                "reserved range {start}..{end} is empty, too far or unsorted"
            ));
        }
        after = Some(end);
    }
    Ok(())
}

/// The namespaces Linux defines; a name outside them is EOPNOTSUPP.
pub const NAMESPACES: [&[u8]; 4] = [b"user.", b"trusted.", b"security.", b"system."];

/// Whether `name` is an attribute name a blob may hold: 1-255 bytes, no NUL, in a known
/// namespace with something after the prefix.
pub fn is_valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && !name.contains(&0)
        && NAMESPACES
            .iter()
            .any(|ns| name.starts_with(ns) && name.len() > ns.len())
}

/// One inode's attributes, in the order they were first set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XattrSet {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl XattrSet {
    /// The value of `name`.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// Sets `name` to `value`, replacing an existing value in place (its listing position kept).
    pub fn set(&mut self, name: &[u8], value: &[u8]) {
        match self.entries.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value.to_vec(),
            None => self.entries.push((name.to_vec(), value.to_vec())),
        }
    }

    /// Removes `name`; returns whether it was there.
    pub fn remove(&mut self, name: &[u8]) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(n, _)| n != name);
        self.entries.len() != before
    }

    /// The names attribute calls see, in order (not [`RESERVED_NAME`]).
    pub fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.entries
            .iter()
            .map(|(n, _)| n.as_slice())
            .filter(|n| *n != RESERVED_NAME)
    }

    /// Whether the blob holds no attribute an attribute call sees.
    pub fn is_empty_to_users(&self) -> bool {
        self.names().next().is_none()
    }

    /// The ranges fallocate reserved (empty when none). The blob was checked when decoded.
    pub fn reserved(&self) -> Vec<(u64, u64)> {
        self.get(RESERVED_NAME).map_or(Vec::new(), |v| {
            decode_reserved(v).expect("checked when decoded or set")
        })
    }

    /// Keeps `ranges` as the reservation; empty removes it.
    pub fn set_reserved(&mut self, ranges: &[(u64, u64)]) {
        if ranges.is_empty() {
            self.remove(RESERVED_NAME);
        } else {
            self.set(RESERVED_NAME, &encode_reserved(ranges));
        }
    }

    /// Whether there are no attributes.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes a listing of the names takes (each followed by a NUL).
    pub fn list_bytes(&self) -> usize {
        self.names().map(|n| n.len() + 1).sum()
    }

    /// Bytes the encoded blob takes.
    pub fn blob_bytes(&self) -> usize {
        HEADER_BYTES
            + self
                .entries
                .iter()
                .map(|(n, v)| ENTRY_BYTES + n.len() + v.len())
                .sum::<usize>()
    }

    /// The blob holding these attributes. The caller keeps it within [`BLOB_MAX`].
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.blob_bytes());
        out.extend_from_slice(&[0; HEADER_BYTES]);
        for (name, value) in &self.entries {
            let entry = XattrEntry {
                value_len: U32::new(value.len() as u32),
                name_len: name.len() as u8,
                reserved: [0; 3],
            };
            out.extend_from_slice(entry.as_bytes());
            out.extend_from_slice(name);
            out.extend_from_slice(value);
        }
        let header = XattrBlob {
            magic: MAGIC,
            count: U32::new(self.entries.len() as u32),
            bytes: U32::new(out.len() as u32),
            crc: U32::new(crc32c::crc32c(&out[HEADER_BYTES..])),
        };
        out[..HEADER_BYTES].copy_from_slice(header.as_bytes());
        out
    }

    /// Reads a blob (media content: every field is checked; bad bytes give an error naming
    /// what is wrong, never a panic).
    pub fn decode(blob: &[u8]) -> Result<XattrSet, String> {
        let (header, mut rest) = XattrBlob::read_from_prefix(blob)
            .map_err(|_| format!("{} bytes: shorter than the header", blob.len()))?;
        if header.magic != MAGIC {
            return Err(format!("magic {:02x?}", header.magic));
        }
        if header.bytes.get() as usize != blob.len() || blob.len() > BLOB_MAX {
            return Err(format!(
                "says {} bytes, holds {}",
                header.bytes.get(),
                blob.len()
            ));
        }
        if crc32c::crc32c(rest) != header.crc.get() {
            return Err("checksum mismatch".into());
        }
        let mut set = XattrSet::default();
        for i in 0..header.count.get() {
            let (entry, after) = XattrEntry::read_from_prefix(rest)
                .map_err(|_| format!("entry {i}: past the end"))?;
            let (name_len, value_len) = (usize::from(entry.name_len), entry.value_len.get());
            if value_len as usize > VALUE_MAX || after.len() < name_len + value_len as usize {
                return Err(format!("entry {i}: lengths past the end"));
            }
            let (name, after) = after.split_at(name_len);
            let (value, after) = after.split_at(value_len as usize);
            let internal = name == RESERVED_NAME;
            if !(is_valid_name(name) || internal)
                || set.get(name).is_some()
                || entry.reserved != [0; 3]
            {
                return Err(format!("entry {i}: bad or repeated name"));
            }
            if internal {
                decode_reserved(value).map_err(|e| format!("entry {i}: {e}"))?;
            }
            set.entries.push((name.to_vec(), value.to_vec()));
            rest = after;
        }
        if !rest.is_empty() {
            return Err(format!("{} bytes after the last entry", rest.len()));
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_decodes_to_what_was_encoded() {
        let mut set = XattrSet::default();
        set.set(b"user.a", b"1");
        set.set(b"trusted.overlay.opaque", b"y");
        set.set(b"user.empty", b"");
        set.set(b"user.a", b"replaced");
        let blob = set.encode();
        assert_eq!(blob.len(), set.blob_bytes());
        let back = XattrSet::decode(&blob).unwrap();
        assert_eq!(back, set);
        assert_eq!(
            back.names().collect::<Vec<_>>(),
            [&b"user.a"[..], b"trusted.overlay.opaque", b"user.empty"]
        );
        assert_eq!(back.get(b"user.a"), Some(&b"replaced"[..]));
        assert_eq!(set.list_bytes(), 7 + 23 + 11);
    }

    #[test]
    fn damaged_blobs_are_errors() {
        let mut set = XattrSet::default();
        set.set(b"user.x", b"value");
        let blob = set.encode();
        for i in 0..blob.len() {
            for bit in 0..8 {
                let mut bad = blob.clone();
                bad[i] ^= 1 << bit;
                assert!(
                    XattrSet::decode(&bad).is_err(),
                    "flip of byte {i} bit {bit}"
                );
            }
        }
        assert!(XattrSet::decode(&blob[..blob.len() - 1]).is_err());
        assert!(XattrSet::decode(&[]).is_err());
    }

    #[test]
    fn a_reservation_is_kept_in_the_blob_but_never_listed() {
        let mut set = XattrSet::default();
        set.set(b"user.a", b"1");
        set.set_reserved(&[(0, 4096), (8192, 1 << 20)]);
        let back = XattrSet::decode(&set.encode()).unwrap();
        assert_eq!(back.reserved(), [(0, 4096), (8192, 1 << 20)]);
        assert_eq!(back.names().collect::<Vec<_>>(), [&b"user.a"[..]]);
        assert_eq!(back.list_bytes(), 7);
        let mut only = XattrSet::default();
        only.set_reserved(&[(1, 2)]);
        assert!(only.is_empty_to_users() && !only.is_empty());
        only.set_reserved(&[]);
        assert!(only.is_empty());
        assert!(
            !is_valid_name(RESERVED_NAME),
            "no attribute call can name it"
        );
    }

    #[test]
    fn bad_reserved_ranges_are_errors() {
        let bad: [&[(u64, u64)]; 5] = [
            &[],
            &[(5, 5)],
            &[(0, 10), (10, 20)],
            &[(20, 30), (0, 10)],
            &[(0, RESERVED_END_MAX + 1)],
        ];
        for ranges in bad {
            let value: Vec<u8> = ranges
                .iter()
                .flat_map(|&(s, e)| [s.to_le_bytes(), e.to_le_bytes()])
                .flatten()
                .collect();
            assert!(decode_reserved(&value).is_err(), "{ranges:?}");
            let mut set = XattrSet::default();
            set.set(RESERVED_NAME, &value);
            assert!(XattrSet::decode(&set.encode()).is_err(), "{ranges:?}");
        }
        assert!(decode_reserved(&[0; 15]).is_err());
    }

    #[test]
    fn only_names_in_a_namespace_are_valid() {
        assert!(is_valid_name(b"user.x"));
        assert!(is_valid_name(b"system.posix_acl_access"));
        for bad in [&b""[..], b"user.", b"foo.bar", b"user.a\0b", &[b'u'; 256]] {
            assert!(!is_valid_name(bad), "{bad:?}");
        }
    }
}
