//! Zone geometry: where each zone lies, derived from the image size and mkfs options, and
//! validated from a superblock read off the media.
//!
//! Zones follow the two superblocks in the order of [`Zone::ALL`], each 4 KiB aligned:
//!
//! | zone          | record bytes | default count                         |
//! |---------------|-------------:|---------------------------------------|
//! | superblocks   |         4096 | 2 (primary, backup)                   |
//! | dir journal   |          512 | 256 logs                              |
//! | file journal  |          512 | 256 logs                              |
//! | hash table    |            8 | pinode count rounded up to a power of 2 |
//! | pinode table  |          128 | one per 8 KiB of image                |
//! | long names    |          256 | pinode count / 16                     |
//! | extent table  |           40 | one per 4 KiB of image                |
//! | bitmap        |     1 bit/block | ceil(data blocks / 8)              |
//! | data          |         4096 | the rest                              |

use super::extent::EXTENT_BYTES;
use super::hash_table::BUCKET_BYTES;
use super::journal::LOG_BYTES;
use super::long_name::LONG_NAME_BYTES;
use super::pinode::PINODE_BYTES;
use super::superblock::{self, Superblock, MAGIC, SUPERBLOCK_BYTES, VERSION};
use super::{align_up, BLOCK_SIZE};
use crate::error::{Error, Result};

/// The smallest image mkfs formats and mount accepts.
pub const MIN_IMAGE_BYTES: u64 = 1 << 20;
/// Data blocks are numbered with 32 bits in extents.
pub const MAX_DATA_BLOCKS: u64 = u32::MAX as u64;
/// Table slots (pinodes, extents, long names) are numbered with 32 bits.
pub const MAX_SLOTS: u64 = u32::MAX as u64;
/// Where the first zone after the two superblocks starts.
pub const FIRST_ZONE_OFFSET: u64 = 2 * BLOCK_SIZE;

/// Default bytes of image per pinode.
pub const DEFAULT_BYTES_PER_PINODE: u64 = 8192;
/// Default bytes of image per extent.
pub const DEFAULT_BYTES_PER_EXTENT: u64 = 4096;
/// Default number of logs in each journal.
pub const DEFAULT_LOGS: u64 = 256;

/// The zones after the superblocks, in on-media order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    /// Directory journal.
    DirJournal,
    /// File journal.
    FileJournal,
    /// NVM hash table.
    HashTable,
    /// Pinode table.
    PinodeTable,
    /// Long-name table.
    LongNames,
    /// Extent table.
    ExtentTable,
    /// Block bitmap.
    Bitmap,
    /// Data blocks.
    Data,
}

impl Zone {
    /// Every zone, in on-media order.
    pub const ALL: [Zone; 8] = [
        Zone::DirJournal,
        Zone::FileJournal,
        Zone::HashTable,
        Zone::PinodeTable,
        Zone::LongNames,
        Zone::ExtentTable,
        Zone::Bitmap,
        Zone::Data,
    ];

    /// The zone's name in `info` and error messages.
    pub fn name(self) -> &'static str {
        match self {
            Zone::DirJournal => "dir journal",
            Zone::FileJournal => "file journal",
            Zone::HashTable => "hash table",
            Zone::PinodeTable => "pinode table",
            Zone::LongNames => "long names",
            Zone::ExtentTable => "extent table",
            Zone::Bitmap => "bitmap",
            Zone::Data => "data",
        }
    }

    /// Bytes per record of the zone (the bitmap counts in bytes).
    pub fn record_bytes(self) -> u64 {
        match self {
            Zone::DirJournal | Zone::FileJournal => LOG_BYTES,
            Zone::HashTable => BUCKET_BYTES,
            Zone::PinodeTable => PINODE_BYTES,
            Zone::LongNames => LONG_NAME_BYTES,
            Zone::ExtentTable => EXTENT_BYTES,
            Zone::Bitmap => 1,
            Zone::Data => BLOCK_SIZE,
        }
    }
}

/// Where one zone lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneSpan {
    /// Byte offset in the image (4 KiB aligned).
    pub offset: u64,
    /// Number of records.
    pub count: u64,
}

impl ZoneSpan {
    /// Bytes the records occupy.
    pub fn bytes(&self, zone: Zone) -> u64 {
        self.count * zone.record_bytes()
    }
}

/// The validated geometry of an image: everything needed to find any record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    /// Size of the formatted image.
    pub image_bytes: u64,
    /// Seed of the name hash.
    pub hash_seed: u64,
    /// Pinode slot of the root directory.
    pub root_slot: u32,
    /// An unknown read-only-compatible feature is set: the image may only be read.
    pub read_only_features: bool,
    /// The image keeps high-water marks (`format::marks`): mount reads tables only below them.
    pub high_water_marks: bool,
    /// The image may hold extended attributes (`incompat` bit `INCOMPAT_XATTRS`).
    pub xattrs: bool,
    /// fallocate reservations survive a remount (`incompat` bit `INCOMPAT_RESERVATIONS`).
    pub reservations: bool,
    /// File logs may hold move entries (`incompat` bit `INCOMPAT_MOVES`).
    pub moves: bool,
    spans: [ZoneSpan; 8],
}

/// mkfs options; `None` takes the default derived from the image size.
#[derive(Debug, Clone, Default)]
pub struct MkfsParams {
    /// Image size in bytes.
    pub image_bytes: u64,
    /// Pinode slots (including the reserved slot 0).
    pub pinodes: Option<u64>,
    /// Hash buckets; rounded up to a power of two.
    pub buckets: Option<u64>,
    /// Logs in each journal (including the reserved log 0).
    pub logs: Option<u64>,
    /// Extent slots (including the reserved slot 0).
    pub extents: Option<u64>,
    /// Long-name records (including the reserved record 0).
    pub long_names: Option<u64>,
    /// Seed of the name hash (default: random). Fixed seeds make images reproducible for tests.
    pub hash_seed: Option<u64>,
    /// Write every metadata zone at mkfs so its pages are allocated now rather than on first use
    /// (benchmarks keep page faults out of timed regions this way). Not part of the format.
    pub prefault: bool,
    /// Leave out the high-water marks feature (images as earlier builds made them; tests use it
    /// to keep the full-scan mount path covered).
    pub without_marks: bool,
    /// Leave out the extended-attributes feature (images as earlier builds made them, which
    /// answer EOPNOTSUPP to setxattr).
    pub without_xattrs: bool,
    /// Leave out the move entries of file logs (images as earlier builds made them, whose
    /// overwrites of whole extents commit new extents; `nosefs fsck --upgrade` adds it).
    pub without_moves: bool,
}

impl Geometry {
    /// The span of `zone`.
    pub fn span(&self, zone: Zone) -> ZoneSpan {
        self.spans[zone as usize]
    }

    /// Number of pinode slots.
    pub fn pinode_count(&self) -> u64 {
        self.span(Zone::PinodeTable).count
    }

    /// Number of buckets (a power of two).
    pub fn bucket_count(&self) -> u64 {
        self.span(Zone::HashTable).count
    }

    /// Number of extent slots.
    pub fn extent_count(&self) -> u64 {
        self.span(Zone::ExtentTable).count
    }

    /// Number of long-name records.
    pub fn long_name_count(&self) -> u64 {
        self.span(Zone::LongNames).count
    }

    /// Number of logs in the directory journal.
    pub fn dir_log_count(&self) -> u64 {
        self.span(Zone::DirJournal).count
    }

    /// Number of logs in the file journal.
    pub fn file_log_count(&self) -> u64 {
        self.span(Zone::FileJournal).count
    }

    /// Number of data blocks.
    pub fn data_block_count(&self) -> u64 {
        self.span(Zone::Data).count
    }

    fn record_offset(&self, zone: Zone, index: u64) -> u64 {
        let span = self.span(zone);
        assert!(
            index < span.count,
            "{} index {index} out of {}",
            zone.name(),
            span.count
        );
        span.offset + index * zone.record_bytes()
    }

    /// Offset of pinode `slot`. Panics if out of range: validate slots read from media first.
    pub fn pinode_offset(&self, slot: u64) -> u64 {
        self.record_offset(Zone::PinodeTable, slot)
    }

    /// Offset of bucket `index`.
    pub fn bucket_offset(&self, index: u64) -> u64 {
        self.record_offset(Zone::HashTable, index)
    }

    /// Offset of extent `eno`.
    pub fn extent_offset(&self, eno: u64) -> u64 {
        self.record_offset(Zone::ExtentTable, eno)
    }

    /// Offset of long-name record `index`.
    pub fn long_name_offset(&self, index: u64) -> u64 {
        self.record_offset(Zone::LongNames, index)
    }

    /// Offset of directory log `index`.
    pub fn dir_log_offset(&self, index: u64) -> u64 {
        self.record_offset(Zone::DirJournal, index)
    }

    /// Offset of file log `index`.
    pub fn file_log_offset(&self, index: u64) -> u64 {
        self.record_offset(Zone::FileJournal, index)
    }

    /// Offset of data block `block`.
    pub fn block_offset(&self, block: u64) -> u64 {
        self.record_offset(Zone::Data, block)
    }

    /// Bytes the bitmap zone holds (at least one bit per data block).
    pub fn bitmap_bytes(&self) -> u64 {
        self.span(Zone::Bitmap).count
    }

    /// Bytes of all metadata: everything before the data zone.
    pub fn metadata_bytes(&self) -> u64 {
        self.span(Zone::Data).offset
    }

    /// Lays out a new image. Errors when the options do not fit the size.
    pub fn for_mkfs(params: &MkfsParams) -> Result<Geometry> {
        let image_bytes = params.image_bytes;
        if image_bytes < MIN_IMAGE_BYTES {
            return Err(Error::InvalidArgument(format!(
                "image size {image_bytes} bytes is below the minimum of {MIN_IMAGE_BYTES} bytes"
            )));
        }
        let pinodes = params
            .pinodes
            .unwrap_or(image_bytes / DEFAULT_BYTES_PER_PINODE)
            .max(64);
        let buckets = params
            .buckets
            .unwrap_or(pinodes)
            .max(64)
            .next_power_of_two();
        let logs = params.logs.unwrap_or(DEFAULT_LOGS);
        let extents = params
            .extents
            .unwrap_or(image_bytes / DEFAULT_BYTES_PER_EXTENT)
            .max(64);
        let long_names = params.long_names.unwrap_or(pinodes / 16).max(16);
        check_count("--pinodes", pinodes, 2, MAX_SLOTS)?;
        check_count("--buckets", buckets, 1, 1 << 32)?;
        check_count("--logs", logs, 2, 1 << 20)?;
        check_count("--extents", extents, 2, MAX_SLOTS)?;
        check_count("--long-names", long_names, 2, MAX_SLOTS)?;

        let mut spans = [ZoneSpan {
            offset: 0,
            count: 0,
        }; 8];
        let mut cursor = FIRST_ZONE_OFFSET;
        let counts = [logs, logs, buckets, pinodes, long_names, extents];
        for (zone, count) in Zone::ALL.iter().zip(counts) {
            spans[*zone as usize] = ZoneSpan {
                offset: cursor,
                count,
            };
            cursor = align_up(cursor + count * zone.record_bytes(), BLOCK_SIZE);
        }
        let data_blocks = data_blocks_fitting(image_bytes.saturating_sub(cursor));
        if data_blocks < 16 {
            return Err(Error::InvalidArgument(format!(
                "metadata zones take {cursor} of {image_bytes} bytes, leaving no room for data; \
                 use a larger --size or fewer --pinodes/--extents"
            )));
        }
        if data_blocks > MAX_DATA_BLOCKS {
            return Err(Error::InvalidArgument(format!(
                "{image_bytes} bytes is larger than the {} TiB a noseFS image can address",
                (MAX_DATA_BLOCKS * BLOCK_SIZE) >> 40
            )));
        }
        let bitmap_bytes = align_up(data_blocks.div_ceil(8), BLOCK_SIZE);
        spans[Zone::Bitmap as usize] = ZoneSpan {
            offset: cursor,
            count: bitmap_bytes,
        };
        spans[Zone::Data as usize] = ZoneSpan {
            offset: cursor + bitmap_bytes,
            count: data_blocks,
        };
        Ok(Geometry {
            image_bytes,
            hash_seed: 0,
            root_slot: 1,
            read_only_features: false,
            high_water_marks: !params.without_marks,
            xattrs: !params.without_xattrs,
            reservations: !params.without_xattrs,
            moves: !params.without_moves && extents <= superblock::MAX_MOVE_EXTENTS,
            spans,
        })
    }

    /// Fills the geometry fields of a superblock.
    pub fn write_into(&self, sb: &mut Superblock) {
        use zerocopy::little_endian::U64;
        let u = U64::new;
        sb.image_bytes = u(self.image_bytes);
        sb.hash_seed = u(self.hash_seed);
        sb.root_slot = u(u64::from(self.root_slot));
        let s = |z| self.span(z);
        (sb.dir_journal_offset, sb.dir_log_count) =
            (u(s(Zone::DirJournal).offset), u(s(Zone::DirJournal).count));
        (sb.file_journal_offset, sb.file_log_count) = (
            u(s(Zone::FileJournal).offset),
            u(s(Zone::FileJournal).count),
        );
        (sb.hash_table_offset, sb.bucket_count) =
            (u(s(Zone::HashTable).offset), u(s(Zone::HashTable).count));
        (sb.pinode_table_offset, sb.pinode_count) = (
            u(s(Zone::PinodeTable).offset),
            u(s(Zone::PinodeTable).count),
        );
        (sb.long_name_offset, sb.long_name_count) =
            (u(s(Zone::LongNames).offset), u(s(Zone::LongNames).count));
        (sb.extent_table_offset, sb.extent_count) = (
            u(s(Zone::ExtentTable).offset),
            u(s(Zone::ExtentTable).count),
        );
        (sb.bitmap_offset, sb.bitmap_bytes) = (u(s(Zone::Bitmap).offset), u(s(Zone::Bitmap).count));
        (sb.data_offset, sb.data_block_count) = (u(s(Zone::Data).offset), u(s(Zone::Data).count));
    }

    /// Validates a superblock read from an image of `region_bytes` and returns its geometry.
    /// Every failure names the superblock field at fault.
    pub fn from_superblock(sb: &Superblock, region_bytes: u64) -> Result<Geometry> {
        if sb.magic != MAGIC {
            return Err(Error::NotAnImage(format!(
                "bad magic {:02x?} (expected {:02x?})",
                sb.magic, MAGIC
            )));
        }
        let version = sb.version.get();
        if version != VERSION {
            return Err(Error::Unsupported(format!(
                "format version {version}; this build reads version {VERSION}"
            )));
        }
        let want = sb.compute_checksum();
        if sb.checksum.get() != want {
            return Err(Error::corrupt(
                "superblock",
                "checksum",
                format!("is {:#010x}, contents give {want:#010x}", sb.checksum.get()),
            ));
        }
        check_fixed(sb)?;
        let unknown_incompat = sb.incompat.get() & !superblock::KNOWN_INCOMPAT;
        if unknown_incompat != 0 {
            return Err(Error::Unsupported(format!(
                "incompatible features {unknown_incompat:#x} unknown to this build"
            )));
        }
        let read_only_features = sb.ro_compat.get() & !superblock::KNOWN_RO_COMPAT != 0;
        let image_bytes = sb.image_bytes.get();
        if image_bytes > region_bytes {
            return Err(Error::corrupt(
                "superblock",
                "image_bytes",
                format!(
                    "says {image_bytes} bytes but the image has only {region_bytes} (truncated?)"
                ),
            ));
        }
        if image_bytes < MIN_IMAGE_BYTES {
            return Err(Error::corrupt(
                "superblock",
                "image_bytes",
                format!("{image_bytes} is below the minimum image size {MIN_IMAGE_BYTES}"),
            ));
        }
        let spans = validate_zones(sb, image_bytes)?;
        let moves = sb.incompat.get() & superblock::INCOMPAT_MOVES != 0;
        let extents = spans[Zone::ExtentTable as usize].count;
        if moves && extents > superblock::MAX_MOVE_EXTENTS {
            return Err(Error::corrupt(
                "superblock",
                "incompat",
                format!(
                    "sets MOVES, which needs at most {} extents, with {extents}",
                    superblock::MAX_MOVE_EXTENTS
                ),
            ));
        }
        let root_slot = sb.root_slot.get();
        let pinodes = spans[Zone::PinodeTable as usize].count;
        if root_slot == 0 || root_slot >= pinodes {
            return Err(Error::corrupt(
                "superblock",
                "root_slot",
                format!("{root_slot} is not a pinode slot (1..{pinodes})"),
            ));
        }
        Ok(Geometry {
            image_bytes,
            hash_seed: sb.hash_seed.get(),
            root_slot: root_slot as u32,
            read_only_features,
            high_water_marks: sb.ro_compat.get() & super::marks::RO_COMPAT_HIGH_WATER_MARKS != 0,
            xattrs: sb.incompat.get() & superblock::INCOMPAT_XATTRS != 0,
            reservations: sb.incompat.get() & superblock::INCOMPAT_XATTRS != 0
                && sb.incompat.get() & superblock::INCOMPAT_RESERVATIONS != 0,
            moves,
            spans,
        })
    }
}

fn check_count(option: &str, value: u64, min: u64, max: u64) -> Result<()> {
    if value < min || value > max {
        return Err(Error::InvalidArgument(format!(
            "{option} {value} is out of range {min}..={max}"
        )));
    }
    Ok(())
}

/// The most data blocks that fit in `bytes` together with their 4 KiB-aligned bitmap.
fn data_blocks_fitting(bytes: u64) -> u64 {
    let mut blocks = bytes * 8 / (BLOCK_SIZE * 8 + 1);
    while blocks > 0 && align_up(blocks.div_ceil(8), BLOCK_SIZE) + blocks * BLOCK_SIZE > bytes {
        blocks -= 1;
    }
    blocks
}

fn check_fixed(sb: &Superblock) -> Result<()> {
    let fixed: [(&'static str, u32, u64); 6] = [
        ("header_bytes", sb.header_bytes.get(), SUPERBLOCK_BYTES),
        ("block_size", sb.block_size.get(), BLOCK_SIZE),
        ("pinode_size", sb.pinode_size.get(), PINODE_BYTES),
        ("extent_size", sb.extent_size.get(), EXTENT_BYTES),
        ("log_size", sb.log_size.get(), LOG_BYTES),
        ("long_name_size", sb.long_name_size.get(), LONG_NAME_BYTES),
    ];
    for (field, value, want) in fixed {
        if u64::from(value) != want {
            return Err(Error::corrupt(
                "superblock",
                field,
                format!("is {value}, format version {VERSION} requires {want}"),
            ));
        }
    }
    Ok(())
}

fn validate_zones(sb: &Superblock, image_bytes: u64) -> Result<[ZoneSpan; 8]> {
    let fields: [(&'static str, &'static str, u64, u64, u64); 8] = [
        (
            "dir_journal_offset",
            "dir_log_count",
            sb.dir_journal_offset.get(),
            sb.dir_log_count.get(),
            2,
        ),
        (
            "file_journal_offset",
            "file_log_count",
            sb.file_journal_offset.get(),
            sb.file_log_count.get(),
            2,
        ),
        (
            "hash_table_offset",
            "bucket_count",
            sb.hash_table_offset.get(),
            sb.bucket_count.get(),
            1,
        ),
        (
            "pinode_table_offset",
            "pinode_count",
            sb.pinode_table_offset.get(),
            sb.pinode_count.get(),
            2,
        ),
        (
            "long_name_offset",
            "long_name_count",
            sb.long_name_offset.get(),
            sb.long_name_count.get(),
            2,
        ),
        (
            "extent_table_offset",
            "extent_count",
            sb.extent_table_offset.get(),
            sb.extent_count.get(),
            2,
        ),
        (
            "bitmap_offset",
            "bitmap_bytes",
            sb.bitmap_offset.get(),
            sb.bitmap_bytes.get(),
            1,
        ),
        (
            "data_offset",
            "data_block_count",
            sb.data_offset.get(),
            sb.data_block_count.get(),
            1,
        ),
    ];
    let mut spans = [ZoneSpan {
        offset: 0,
        count: 0,
    }; 8];
    let mut cursor = FIRST_ZONE_OFFSET;
    for (zone, (offset_field, count_field, offset, count, min)) in Zone::ALL.iter().zip(fields) {
        let corrupt = |field, detail: String| Err(Error::corrupt("superblock", field, detail));
        if offset % BLOCK_SIZE != 0 {
            return corrupt(offset_field, format!("{offset} is not 4096-aligned"));
        }
        if offset < cursor {
            return corrupt(
                offset_field,
                format!(
                    "{} zone at {offset} overlaps the zone before it (ends at {cursor})",
                    zone.name()
                ),
            );
        }
        let max = match zone {
            Zone::Data => MAX_DATA_BLOCKS,
            Zone::HashTable => 1 << 32,
            _ => MAX_SLOTS,
        };
        if count < min || count > max {
            return corrupt(
                count_field,
                format!("{count} is out of range {min}..={max}"),
            );
        }
        if *zone == Zone::HashTable && !count.is_power_of_two() {
            return corrupt(count_field, format!("{count} is not a power of two"));
        }
        let end = offset.saturating_add(count * zone.record_bytes());
        if end > image_bytes {
            return corrupt(
                offset_field,
                format!(
                    "{} zone [{offset}, {end}) runs past the image end {image_bytes}",
                    zone.name()
                ),
            );
        }
        spans[*zone as usize] = ZoneSpan { offset, count };
        cursor = end;
    }
    let blocks = spans[Zone::Data as usize].count;
    if spans[Zone::Bitmap as usize].count < blocks.div_ceil(8) {
        return Err(Error::corrupt(
            "superblock",
            "bitmap_bytes",
            format!(
                "{} bytes cannot map {blocks} data blocks",
                spans[Zone::Bitmap as usize].count
            ),
        ));
    }
    Ok(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(image_bytes: u64) -> MkfsParams {
        MkfsParams {
            image_bytes,
            ..MkfsParams::default()
        }
    }

    #[test]
    fn zones_are_ordered_aligned_and_inside_the_image() {
        for size in [
            MIN_IMAGE_BYTES,
            3 << 20,
            1 << 30,
            64 << 30,
            (1 << 30) + 12345,
        ] {
            let g = Geometry::for_mkfs(&params(size)).unwrap();
            let mut cursor = FIRST_ZONE_OFFSET;
            for zone in Zone::ALL {
                let span = g.span(zone);
                assert_eq!(
                    span.offset % BLOCK_SIZE,
                    0,
                    "{size}: {} aligned",
                    zone.name()
                );
                assert!(span.offset >= cursor, "{size}: {} overlaps", zone.name());
                cursor = span.offset + span.bytes(zone);
            }
            assert!(cursor <= size, "{size}: zones end at {cursor}");
            // The data zone takes what is left: less than one block plus a bitmap block is wasted.
            assert!(
                size - cursor < 2 * BLOCK_SIZE,
                "{size}: {} bytes unused",
                size - cursor
            );
            assert!(g.bitmap_bytes() * 8 >= g.data_block_count());
            assert!(g.bucket_count().is_power_of_two());
        }
    }

    #[test]
    fn metadata_is_a_small_fraction_of_a_large_image() {
        let g = Geometry::for_mkfs(&params(64 << 30)).unwrap();
        let fraction = g.metadata_bytes() as f64 / g.image_bytes as f64;
        assert!(
            fraction < 0.05,
            "metadata takes {:.1}% of the image",
            fraction * 100.0
        );
    }

    #[test]
    fn options_that_cannot_fit_are_refused() {
        let too_many = MkfsParams {
            image_bytes: 2 << 20,
            pinodes: Some(1 << 20),
            ..MkfsParams::default()
        };
        assert!(matches!(
            Geometry::for_mkfs(&too_many),
            Err(Error::InvalidArgument(_))
        ));
        assert!(Geometry::for_mkfs(&params(MIN_IMAGE_BYTES - 1)).is_err());
        assert!(
            Geometry::for_mkfs(&params(1 << 50)).is_err(),
            "beyond 16 TiB of blocks"
        );
    }

    #[test]
    fn data_blocks_fitting_is_maximal() {
        for bytes in [0, 4096, 4097 * 8, 1 << 20, (1 << 30) + 777] {
            let blocks = data_blocks_fitting(bytes);
            let used = |b: u64| align_up(b.div_ceil(8), BLOCK_SIZE) + b * BLOCK_SIZE;
            assert!(blocks == 0 || used(blocks) <= bytes);
            assert!(
                used(blocks + 1) > bytes,
                "{bytes}: one more block would fit"
            );
        }
    }
}
