//! Formatting an image.
//!
//! The time mkfs takes is proportional to the metadata zones, never to the data zone: a regular
//! file is truncated to zero and re-extended (so it reads as zeros at no cost), and a device has
//! only its metadata zones zeroed, with non-temporal stores. Data blocks are free because the
//! bitmap says so; their old contents are never read.
//!
//! Crash safety: the old primary superblock is invalidated first and the new one is written last,
//! so an interrupted mkfs leaves an image that every command rejects as "not a noseFS image"
//! rather than one whose superblock describes zones that were half zeroed.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use zerocopy::little_endian::{I64, U32, U64};
use zerocopy::FromZeros;

use crate::error::{Error, Result};
use crate::format::hash_table::{bucket_of, Bucket};
use crate::format::layout::{Geometry, MkfsParams, Zone, FIRST_ZONE_OFFSET};
use crate::format::marks::{Marks, MARKS_BYTES, MARKS_OFFSET, RO_COMPAT_HIGH_WATER_MARKS};
use crate::format::pinode::{Pinode, FLAG_PRIMARY, FLAG_VALID, S_IFDIR};
use crate::format::superblock::{
    self, Superblock, BACKUP_OFFSET, MAGIC, PRIMARY_OFFSET, SUPERBLOCK_BYTES, VERSION,
};
use crate::format::{extent, journal, long_name, pinode, BLOCK_SIZE};
use crate::pmem::{Region, RegionOptions};

/// The root directory's inode number.
pub const ROOT_INO: u64 = 1;

/// Formats the image at `path` (creating it if needed) and returns its geometry.
/// `params.image_bytes == 0` means "the existing file's or device's size".
pub fn mkfs(path: &Path, params: &MkfsParams) -> Result<Geometry> {
    let size = (params.image_bytes != 0).then_some(params.image_bytes);
    if size.is_none() && !path.exists() {
        return Err(Error::InvalidArgument(format!(
            "{} does not exist: give --size to create it",
            path.display()
        )));
    }
    if let Some(size) = size {
        // Refuse impossible options before touching an existing file.
        Geometry::for_mkfs(&MkfsParams {
            image_bytes: size,
            ..params.clone()
        })?;
    }
    let region = Region::create(path, size, &RegionOptions::default())?;
    let mut geometry = Geometry::for_mkfs(&MkfsParams {
        image_bytes: region.len(),
        ..params.clone()
    })?;
    geometry.hash_seed = match params.hash_seed {
        Some(seed) => seed,
        None => random_u64()?,
    };
    let owner = std::fs::metadata(path)
        .map(|m| (m.uid(), m.gid()))
        .map_err(|e| Error::io(format!("cannot stat {}", path.display()), e))?;
    if params.prefault {
        region.zero_nt(
            FIRST_ZONE_OFFSET,
            geometry.metadata_bytes() - FIRST_ZONE_OFFSET,
        );
        region.fence();
    }
    format_region(&region, &geometry, owner)?;
    Ok(geometry)
}

/// Formats an already-mapped region (also used for in-memory images in tests).
pub fn format_region(region: &Region, geometry: &Geometry, owner: (u32, u32)) -> Result<()> {
    // 1. Invalidate any old superblock, durably, before anything it describes changes.
    region.fill(PRIMARY_OFFSET, SUPERBLOCK_BYTES, 0);
    region.persist(PRIMARY_OFFSET, SUPERBLOCK_BYTES);
    // 2. Zero the metadata zones unless the region is known to read as zeros.
    if !region.info().zero_filled {
        let start = FIRST_ZONE_OFFSET;
        region.zero_nt(start, geometry.metadata_bytes() - start);
        region.fence();
    }
    // 3. The root directory, linked into its bucket, and the marks that say where it is.
    write_root(region, geometry, owner);
    if geometry.high_water_marks {
        write_marks(region, geometry);
    }
    // 4. The backup superblock, then the primary: the image becomes valid at this last step.
    let sb = new_superblock(geometry)?;
    region.write(BACKUP_OFFSET, &sb);
    region.persist(BACKUP_OFFSET, SUPERBLOCK_BYTES);
    region.write(PRIMARY_OFFSET, &sb);
    region.persist(PRIMARY_OFFSET, SUPERBLOCK_BYTES);
    Ok(())
}

fn write_root(region: &Region, geometry: &Geometry, (uid, gid): (u32, u32)) {
    let now = now_ns();
    let mut root = Pinode::zeroed();
    root.ino = U64::new(ROOT_INO);
    root.parent = U64::new(0);
    root.flags = U32::new(FLAG_VALID | FLAG_PRIMARY);
    root.mode = U32::new(S_IFDIR | 0o755);
    root.uid = U32::new(uid);
    root.gid = U32::new(gid);
    root.nlink = U32::new(2);
    (root.atime_ns, root.mtime_ns, root.ctime_ns) = (I64::new(now), I64::new(now), I64::new(now));
    let root_slot = u64::from(geometry.root_slot);
    let pinode_offset = geometry.pinode_offset(root_slot);
    region.write(pinode_offset, &root);
    region.flush(pinode_offset, pinode::PINODE_BYTES);
    let bucket = bucket_of(geometry.hash_seed, geometry.bucket_count(), 0, b"");
    let head = Bucket {
        head: U32::new(geometry.root_slot),
        reserved: U32::new(0),
    };
    let bucket_offset = geometry.bucket_offset(bucket);
    region.store_u64(bucket_offset, head.to_word());
    region.flush(bucket_offset, 8);
    region.fence();
}

/// The marks of a fresh image: the root's slot is the only one in use.
fn write_marks(region: &Region, geometry: &Geometry) {
    let marks = Marks {
        pinode_high: U64::new(u64::from(geometry.root_slot) + 1),
        long_name_high: U64::new(1),
        extent_high: U64::new(1),
        reserved: [0; 40],
    };
    region.write(MARKS_OFFSET, &marks);
    region.persist(MARKS_OFFSET, MARKS_BYTES);
}

fn new_superblock(geometry: &Geometry) -> Result<Superblock> {
    let mut sb = Superblock::new_zeroed();
    sb.magic = MAGIC;
    sb.version = U32::new(VERSION);
    sb.header_bytes = U32::new(SUPERBLOCK_BYTES as u32);
    sb.block_size = U32::new(BLOCK_SIZE as u32);
    sb.pinode_size = U32::new(pinode::PINODE_BYTES as u32);
    sb.extent_size = U32::new(extent::EXTENT_BYTES as u32);
    sb.log_size = U32::new(journal::LOG_BYTES as u32);
    sb.long_name_size = U32::new(long_name::LONG_NAME_BYTES as u32);
    let mut uuid = [0u8; 16];
    random_bytes(&mut uuid)?;
    uuid[6] = (uuid[6] & 0x0f) | 0x40; // version 4
    uuid[8] = (uuid[8] & 0x3f) | 0x80; // RFC 4122 variant
    sb.uuid = uuid;
    sb.created_ns = U64::new(now_ns().max(0) as u64);
    geometry.write_into(&mut sb);
    if geometry.high_water_marks {
        sb.ro_compat = U32::new(RO_COMPAT_HIGH_WATER_MARKS);
    }
    if geometry.xattrs {
        sb.incompat = U32::new(superblock::INCOMPAT_XATTRS);
    }
    if geometry.reservations {
        sb.incompat = U32::new(sb.incompat.get() | superblock::INCOMPAT_RESERVATIONS);
    }
    if geometry.moves {
        sb.incompat = U32::new(sb.incompat.get() | superblock::INCOMPAT_MOVES);
    }
    sb.state = U64::new(superblock::state_word(true, 0));
    sb.seal();
    debug_assert_eq!(geometry.span(Zone::Data).count, sb.data_block_count.get());
    Ok(sb)
}

fn random_bytes(buf: &mut [u8]) -> Result<()> {
    getrandom::getrandom(buf).map_err(|e| {
        let os = e.raw_os_error().map(std::io::Error::from_raw_os_error);
        Error::io(
            "cannot read random bytes",
            os.unwrap_or_else(|| std::io::Error::other(e.to_string())),
        )
    })
}

fn random_u64() -> Result<u64> {
    let mut bytes = [0u8; 8];
    random_bytes(&mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

/// Nanoseconds since the Unix epoch (negative before it).
pub fn now_ns() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}
