//! An opened image: its region, its validated superblock and geometry, and typed record access.
//!
//! Every accessor takes an index that the caller has checked against the geometry (an index read
//! from the media is validated first, see `fsck`); an index out of range is a bug and panics.

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::extent::Extent;
use crate::format::hash_table::Bucket;
use crate::format::journal::{DirLog, FileLog};
use crate::format::layout::{Geometry, Zone};
use crate::format::long_name::LongName;
use crate::format::marks::Table;
use crate::format::pinode::Pinode;
use crate::format::superblock::{
    self, Superblock, BACKUP_OFFSET, PRIMARY_OFFSET, STATE_OFFSET, SUPERBLOCK_BYTES,
};
use crate::pmem::{Access, Region, RegionOptions};

/// A noseFS image with a valid superblock.
#[derive(Debug)]
pub struct Image {
    region: Region,
    superblock: Superblock,
    geometry: Geometry,
}

/// Reads the superblock copy at `offset`, if the region is large enough to hold one.
pub fn read_superblock(region: &Region, offset: u64) -> Option<Superblock> {
    (region.len() >= offset + SUPERBLOCK_BYTES).then(|| region.read::<Superblock>(offset))
}

impl Image {
    /// Opens the image at `path` and validates its primary superblock.
    pub fn open(path: &Path, access: Access) -> Result<Image> {
        let options = RegionOptions {
            access,
            ..RegionOptions::default()
        };
        let region = Region::open(path, &options)?;
        Image::from_region(region).map_err(|e| match e {
            Error::TooSmall {
                minimum_bytes,
                size_bytes,
                ..
            } => Error::TooSmall {
                path: path.to_path_buf(),
                size_bytes,
                minimum_bytes,
            },
            other => other,
        })
    }

    /// Validates the primary superblock of a region.
    pub fn from_region(region: Region) -> Result<Image> {
        let Some(superblock) = read_superblock(&region, PRIMARY_OFFSET) else {
            return Err(Error::TooSmall {
                path: Default::default(),
                size_bytes: region.len(),
                minimum_bytes: crate::format::layout::MIN_IMAGE_BYTES,
            });
        };
        Image::with_superblock(region, superblock)
    }

    /// Validates `superblock` (the primary or the backup copy) against a region.
    pub fn with_superblock(region: Region, superblock: Superblock) -> Result<Image> {
        let geometry = Geometry::from_superblock(&superblock, region.len())?;
        Ok(Image {
            region,
            superblock,
            geometry,
        })
    }

    /// The region (for the core's own modules).
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Gives the region back.
    pub fn into_region(self) -> Region {
        self.region
    }

    /// The superblock as validated at open (the `state` word as it was then).
    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }

    /// The validated geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The current mount-state word.
    pub fn state(&self) -> u64 {
        self.region.load_u64(STATE_OFFSET)
    }

    /// Sets the mount-state word with one persisted 8-byte store.
    pub fn set_state(&self, clean: bool, mount_count: u64) {
        self.region
            .store_u64_persist(STATE_OFFSET, superblock::state_word(clean, mount_count));
    }

    /// How far into `table` records may be in use: its high-water mark when the image keeps
    /// marks (read as stored; mount validates it), else the whole table.
    pub fn mark(&self, table: Table) -> u64 {
        if self.geometry.high_water_marks {
            self.region.load_u64(table.mark_offset())
        } else {
            self.table_count(table)
        }
    }

    /// Raises `table`'s mark to `value` with one persisted 8-byte store (`format::marks`).
    pub fn raise_mark(&self, table: Table, value: u64) {
        assert!(
            self.geometry.high_water_marks,
            "raising a mark the image does not keep"
        );
        assert!(
            value <= self.table_count(table),
            "mark {value} past the end of the {table:?} table"
        );
        self.region.store_u64_persist(table.mark_offset(), value);
    }

    /// Has the image's file hold the pages of records `[from, to)` of `table` (`fallocate`),
    /// about to be handed out fresh: a store into a hole its file system cannot fill is SIGBUS,
    /// this is ENOSPC. `Ok` where nothing can be reserved (no file of its own, a file system
    /// without `fallocate`).
    pub fn reserve_records(&self, table: Table, from: u64, to: u64) -> std::io::Result<()> {
        let zone = match table {
            Table::Pinodes => Zone::PinodeTable,
            Table::LongNames => Zone::LongNames,
            Table::Extents => Zone::ExtentTable,
        };
        let span = self.geometry.span(zone);
        let size = zone.record_bytes();
        let to = to.min(span.count);
        if from >= to {
            return Ok(());
        }
        reserve(self.region(), span.offset + from * size, (to - from) * size)
    }

    /// The number of records in `table`.
    pub fn table_count(&self, table: Table) -> u64 {
        match table {
            Table::Pinodes => self.geometry.pinode_count(),
            Table::LongNames => self.geometry.long_name_count(),
            Table::Extents => self.geometry.extent_count(),
        }
    }

    /// The backup superblock, if the image holds one.
    pub fn backup_superblock(&self) -> Option<Superblock> {
        read_superblock(&self.region, BACKUP_OFFSET)
    }

    /// Pinode `slot`.
    pub fn pinode(&self, slot: u64) -> Pinode {
        self.region.read(self.geometry.pinode_offset(slot))
    }

    /// Bucket `index`.
    pub fn bucket(&self, index: u64) -> Bucket {
        Bucket::from_word(self.region.load_u64(self.geometry.bucket_offset(index)))
    }

    /// Extent `eno`.
    pub fn extent(&self, eno: u64) -> Extent {
        self.region.read(self.geometry.extent_offset(eno))
    }

    /// Starts loading extent `eno`'s record into the cache, for a read of it soon after.
    pub fn prefetch_extent(&self, eno: u64) {
        self.region.prefetch(self.geometry.extent_offset(eno));
    }

    /// Long-name record `index`.
    pub fn long_name(&self, index: u64) -> LongName {
        self.region.read(self.geometry.long_name_offset(index))
    }

    /// Directory log `index`.
    pub fn dir_log(&self, index: u64) -> DirLog {
        self.region.read(self.geometry.dir_log_offset(index))
    }

    /// File log `index`.
    pub fn file_log(&self, index: u64) -> FileLog {
        self.region.read(self.geometry.file_log_offset(index))
    }

    /// A copy of the whole block bitmap.
    pub fn bitmap(&self) -> Vec<u8> {
        let span = self.geometry.span(Zone::Bitmap);
        let mut bytes = vec![0u8; span.count as usize];
        self.region.read_bytes(span.offset, &mut bytes);
        bytes
    }
}

/// `fallocate` of `[offset, offset + len)` in the region's file, where it has one; a file
/// system that cannot reserve counts as done (as before reservations), ENOSPC does not.
pub(crate) fn reserve(region: &crate::pmem::Region, offset: u64, len: u64) -> std::io::Result<()> {
    let Some(file) = region.backing_file() else {
        return Ok(());
    };
    loop {
        match file.reserve(offset, len) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if crate::pmem::cannot_reserve(&e) => return Ok(()),
            other => return other,
        }
    }
}
