//! The NVM hash table: an array of 8-byte bucket heads, keyed by (parent ino, name).
//!
//! | offset | size | field      | meaning                                          |
//! |-------:|-----:|------------|--------------------------------------------------|
//! |      0 |    4 | `head`     | slot of the first pinode in the chain; 0 = empty |
//! |      4 |    4 | `reserved` | zero                                             |
//!
//! Invariants:
//! - `bucket_count` is a power of two; a key's bucket is `name_hash(seed, parent, name) &
//!   (bucket_count - 1)`, with the function below, which is part of the format.
//! - A bucket is changed only by one aligned 8-byte atomic store (the journal's apply step).
//! - Chains (through `Pinode::hash_next`) are acyclic, hold only valid pinodes, and each pinode in
//!   a chain hashes to that chain's bucket.

use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{record_layout, RecordLayout};

/// Size of a bucket.
pub const BUCKET_BYTES: u64 = 8;

/// One bucket head.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
pub struct Bucket {
    pub head: U32,
    pub reserved: U32,
}

const _: () = assert!(size_of::<Bucket>() as u64 == BUCKET_BYTES);

/// The bucket's layout, tied to docs/format.md by a test.
pub const LAYOUT: RecordLayout = record_layout!("Bucket", Bucket, [head, reserved]);

impl Bucket {
    /// The bucket as the 8-byte word it is atomically stored as.
    pub fn to_word(self) -> u64 {
        u64::from(self.head.get()) | (u64::from(self.reserved.get()) << 32)
    }

    /// The bucket encoded in an 8-byte word.
    pub fn from_word(word: u64) -> Bucket {
        Bucket {
            head: U32::new(word as u32),
            reserved: U32::new((word >> 32) as u32),
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The hash of a (parent, name) key: FNV-1a over the parent's ino (8 bytes, little-endian) and the
/// name bytes, starting from the FNV offset basis XOR the image's `hash_seed`, then the MurmurHash3
/// 64-bit finaliser so that the low bits, which select the bucket, depend on every input bit.
pub fn name_hash(seed: u64, parent_ino: u64, name: &[u8]) -> u64 {
    let mut h = FNV_OFFSET ^ seed;
    for &b in parent_ino.to_le_bytes().iter().chain(name) {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The bucket of a key in a table of `bucket_count` (a power of two) buckets.
pub fn bucket_of(seed: u64, bucket_count: u64, parent_ino: u64, name: &[u8]) -> u64 {
    debug_assert!(bucket_count.is_power_of_two());
    name_hash(seed, parent_ino, name) & (bucket_count - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_across_builds() {
        // The bucket of every name on every existing image depends on these exact values; they
        // were computed independently from the description in docs/format.md.
        assert_eq!(name_hash(0, 0, b""), 0x7bd3_144f_29c0_cc9e);
        assert_eq!(name_hash(7, 1, b"hello"), 0x5930_a97a_bc60_c2a2);
        assert_eq!(name_hash(0x1234, 1, &[b'a'; 255]), 0xdaca_f999_8217_af11);
        let a = name_hash(7, 1, b"hello");
        assert_eq!(a, name_hash(7, 1, b"hello"));
        assert_ne!(a, name_hash(8, 1, b"hello"), "the seed changes the hash");
        assert_ne!(a, name_hash(7, 2, b"hello"), "the parent changes the hash");
        assert_ne!(a, name_hash(7, 1, b"hellp"), "the name changes the hash");
    }

    #[test]
    fn buckets_spread_sequential_names() {
        let buckets = 1024u64;
        let mut counts = vec![0u32; buckets as usize];
        for i in 0..(buckets * 16) {
            let name = format!("f{i:08}");
            counts[bucket_of(42, buckets, 1, name.as_bytes()) as usize] += 1;
        }
        let max = *counts.iter().max().unwrap();
        assert!(max < 48, "a bucket got {max} of 16 expected names");
    }

    #[test]
    fn bucket_word_round_trips() {
        let b = Bucket {
            head: U32::new(0xdead_beef),
            reserved: U32::new(0),
        };
        assert_eq!(Bucket::from_word(b.to_word()), b);
        assert_eq!(
            b.to_word().to_le_bytes(),
            *zerocopy::IntoBytes::as_bytes(&b)
        );
    }
}
