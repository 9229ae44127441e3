//! [`Fs`], a mounted noseFS file system: the one API every frontend calls. It is `Send + Sync`;
//! handles are inode numbers; errors carry POSIX errno values. Every metadata operation is
//! atomic and durable on return; file data is durable at fsync/fdatasync/msync (or at every
//! write with [`MountOptions::sync`]).
//!
//! This module holds what the file system as a whole owns: mount (journal replay and the DRAM
//! state rebuilt, in `crate::recovery`), unmount, the options and the tables. Its
//! operations live with their concern: names, directories, attributes and links in
//! [`crate::namespace`], file data in [`crate::file`], the system-call layer (paths,
//! permissions) in [`crate::vfs`].
//!
//! Lock order, always: the topology lock (only for moving a directory to another parent) ->
//! directory `live` locks (by ascending inode number) -> inode locks (ascending inode number) ->
//! mirror buckets (ascending bucket) -> directory logs (ascending log). Lookups take one mirror
//! bucket's shared lock and nothing else.

use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;

use crate::error::{Errno, Error, Result};
use crate::image::Image;
use crate::namespace::AtimeMode;

/// What mount does with an image whose invariants fail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnDamage {
    /// Refuse to mount, saying "run nosefs fsck" (the default).
    #[default]
    Refuse,
    /// Mount, read-only, a copy repaired in this process's memory (`-o errors=ro`): the image is
    /// never written, and `nosefs fsck --repair` remains the way to fix it.
    ReadOnly,
}

/// Mount options.
#[derive(Debug, Clone, Default)]
pub struct MountOptions {
    /// Serve reads only: the image is mapped private copy-on-write, so even recovery's stores
    /// (journal replay) stay in this process and the image is never written. Every change
    /// fails with EROFS.
    pub read_only: bool,
    /// What to do when the image's invariants fail.
    pub errors: OnDamage,
    /// Find the pages written through shared mappings by comparing them with the file at each
    /// sync, even where the kernel could track them (for tests and for kernels whose tracking
    /// misbehaves). See [`crate::file::mmap`].
    pub compare_mapped_pages: bool,
    /// The ablation of dirty tracking (benchmarks only): every sync of a mapped file writes back
    /// every page of it, as NOVA's msync does (seed 001, Table I).
    pub msync_whole_file: bool,
    /// When reads update access times (default relatime).
    pub atime: AtimeMode,
    /// CPUs to keep pools for (default: the machine's).
    pub cpus: Option<usize>,
    /// Pre-fault the whole mapping (`MAP_POPULATE`), so no page fault lands in a timed region.
    /// For benchmarks on images whose pages exist; on a sparse file it allocates every page.
    pub populate: bool,
    /// Commit every write before it returns (the `sync` mount option), as if fsync followed it.
    pub sync: bool,
    /// Keep the image's descriptor at or above this number (see `RegionOptions::fd_floor`).
    pub fd_floor: Option<i32>,
    /// Map the image through this open descriptor of it (see `RegionOptions::image_fd`).
    pub image_fd: Option<i32>,
}

/// What mount found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountReport {
    /// Directory logs replayed.
    pub logs_replayed: u64,
    /// Directory logs whose commit a crash tore (checksum mismatch), discarded.
    pub logs_discarded: u64,
    /// Orphans (unlinked while open) freed.
    pub orphans_freed: u64,
    /// Link counts corrected (left stale by a crash between commit and update).
    pub nlinks_fixed: u64,
    /// File logs replayed.
    pub file_logs_replayed: u64,
    /// File logs whose commit a crash tore, discarded.
    pub file_logs_discarded: u64,
    /// File logs holding an applied commit of a file a later directory commit moved or
    /// removed, skipped (`file::journal::superseded`).
    pub file_logs_superseded: u64,
    /// Bitmap bits that disagree with the extents (none unless something is broken; fsck
    /// reports and repairs them). Mount never hands out a block either side marks as used.
    pub bitmap_mismatches: u64,
    /// Whether the image had been unmounted cleanly.
    pub was_clean: bool,
    /// Set when the image was damaged and `errors=ro` mounted a copy repaired in memory.
    pub damage: Option<DamageReport>,
}

/// Why a mount is read-only over a repaired copy (see [`OnDamage::ReadOnly`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamageReport {
    /// The error a read-write mount stopped at.
    pub refused: String,
    /// Problems the in-memory repair settled (the image still has them).
    pub repaired_in_memory: usize,
}

/// A mounted noseFS file system.
#[derive(Debug)]
pub struct Fs {
    pub(crate) image: Image,
    pub(crate) mirror: crate::namespace::mirror::Buckets,
    pub(crate) inodes: crate::inode::InodeTable,
    pub(crate) pinodes: crate::pool::SlotPools,
    pub(crate) long_names: crate::pool::SlotPools,
    pub(crate) extents: crate::pool::SlotPools,
    pub(crate) blocks: crate::alloc::BlockAllocator,
    pub(crate) logs: Vec<crate::padded::CachePadded<Mutex<()>>>,
    /// Which logs of both journals may hold a replayable record, and what is held back meanwhile.
    pub(crate) settler: crate::settle::Settler,
    pub(crate) file_logs: crate::pool::SlotPools,
    pub(crate) sync_writes: bool,
    /// Mounted read-only ([`MountOptions::read_only`]).
    pub(crate) read_only: bool,
    /// When reads update access times.
    pub(crate) atime: AtimeMode,
    /// Mapped files' shadows ([`crate::file::mmap`]).
    pub(crate) shadows: crate::file::mmap::Shadows,
    pub(crate) next_ino: AtomicU64,
    /// Serialises moves of a directory to another parent, so two of them cannot build a cycle.
    pub(crate) topology: Mutex<()>,
    /// Directories removed while open: their last attributes (no links), served by getattr
    /// until the last close, with the count of descriptions still open.
    pub(crate) removed_dirs: Mutex<std::collections::HashMap<u64, (crate::namespace::Attr, u32)>>,
    /// Unnamed files (O_TMPFILE without O_EXCL) that a link may still name.
    pub(crate) linkable_tmpfiles: Mutex<std::collections::HashSet<u64>>,
    /// The background compactor ([`crate::file::compact`]).
    pub(crate) compactor: crate::file::compact::Compactor,
    pub(crate) report: MountReport,
}

impl Fs {
    /// Mounts the image at `path`: replays the journal, rebuilds DRAM state, marks it in use.
    pub fn mount(path: &std::path::Path, options: &MountOptions) -> Result<Fs> {
        let region_options = crate::pmem::RegionOptions {
            populate: options.populate,
            fd_floor: options.fd_floor,
            image_fd: options.image_fd,
            access: if options.read_only {
                crate::pmem::Access::PrivateCopy
            } else {
                crate::pmem::Access::ReadWrite
            },
            ..crate::pmem::RegionOptions::default()
        };
        let region = crate::pmem::Region::open(path, &region_options)?;
        match Image::from_region(region).and_then(|image| Fs::mount_image(image, options)) {
            // Unsupported too: a damaged version field reads as a newer format. An image that
            // really is newer fails again below, as fsck cannot read it either.
            Err(
                damage @ (Error::Corrupt { .. } | Error::NotAnImage(_) | Error::Unsupported(_)),
            ) if options.errors == OnDamage::ReadOnly => {
                Fs::mount_repaired_copy(path, options, &damage)
            }
            other => other,
        }
    }

    /// `errors=ro`: mounts, read-only, a copy of the damaged image at `path` that fsck repaired
    /// in this process's memory. The image is not written.
    fn mount_repaired_copy(
        path: &std::path::Path,
        options: &MountOptions,
        damage: &Error,
    ) -> Result<Fs> {
        let (fsck, image) = crate::fsck::repaired_private_copy(path, options.fd_floor)?;
        let read_only = MountOptions {
            read_only: true,
            errors: OnDamage::Refuse,
            ..options.clone()
        };
        let mut fs = Fs::mount_image(image, &read_only)?;
        fs.report.damage = Some(DamageReport {
            refused: damage.to_string(),
            repaired_in_memory: fsck.repaired.len(),
        });
        Ok(fs)
    }

    /// Whether the file system was mounted read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// EROFS on a read-only mount: every operation that changes the file system asks first.
    pub(crate) fn writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Errno::EROFS.into());
        }
        Ok(())
    }

    /// Mounts an opened image (any backend, including a recording one).
    pub fn mount_image(image: Image, options: &MountOptions) -> Result<Fs> {
        if !options.populate && !options.read_only {
            crate::alloc::reserve_metadata(&image)?;
        }
        let fs = crate::recovery::mount(image, options)?;
        if !options.populate && !options.read_only {
            fs.reserve_backing();
            fs.populate_ahead();
        }
        Ok(fs)
    }

    /// Hands out data blocks only on pages the image's file holds (`alloc::Backing`), where the
    /// image is a sparse file mapped without being populated: a full file system then answers
    /// ENOSPC instead of SIGBUS.
    fn reserve_backing(&self) {
        let g = self.image.geometry();
        if let Some(file) = self.image.region().backing_file() {
            let backing = crate::alloc::Backing::new(file, g.block_offset(0), g.data_block_count());
            self.blocks.reserve_backing(backing);
        }
    }

    /// Has the pages just ahead of where blocks are handed out made ready in the background
    /// (`pmem::Populator`), where the region is a shared file mapping.
    fn populate_ahead(&self) {
        let g = self.image.geometry();
        let data_offset = g.block_offset(0);
        if g.data_block_count() < 2 || g.block_offset(1) != data_offset + crate::format::BLOCK_SIZE
        {
            return;
        }
        if let Some(populator) = crate::pmem::Populator::start(self.image.region()) {
            self.blocks.populate_ahead(populator, data_offset);
        }
    }

    /// Commits every file's pending writes, marks the image cleanly unmounted and gives it back.
    /// A file whose commit fails (no space for its extents) keeps its last committed state.
    pub fn unmount(self) -> Image {
        self.stop_compactor();
        let _ = self.sync_all(); // settles the directory logs too
        self.blocks.stop_populating();
        let count = self.image.superblock().mount_count() + 1;
        self.image.set_state(true, count);
        self.image
    }

    /// Data blocks used since mount or in use at mount (below the allocator's high-water
    /// marks): on an image in /dev/shm, what the data zone holds of memory, at most.
    pub fn data_blocks_touched(&self) -> u64 {
        self.blocks.touched_blocks()
    }

    /// Bytes of the image made ready ahead of the block allocator so far (`pmem::Populator`):
    /// zero where the image was populated at mount, or is not a shared file mapping.
    pub fn populated_ahead_bytes(&self) -> u64 {
        self.blocks.populated_bytes()
    }

    /// What mount found.
    pub fn mount_report(&self) -> &MountReport {
        &self.report
    }

    /// The image (for fsck of a recording region, and for tests).
    pub fn image(&self) -> &Image {
        &self.image
    }

    /// Free data blocks, as the allocator sees them (blocks files reserve as their partly used
    /// tail block are not free, nor blocks fallocate promised to a file).
    /// Blocks held back by directory commits count as free: an allocation that needs them gets
    /// them.
    pub fn free_data_blocks(&self) -> u64 {
        self.blocks.available_blocks() + self.settler.held_blocks()
    }

    /// Data blocks no file holds, promised by fallocate or not: what a remount finds free in the
    /// bitmap (less the files' tail blocks). A promise is recomputed from the holes at mount, so
    /// [`Fs::free_data_blocks`] may differ across a remount where this must not.
    pub fn unallocated_data_blocks(&self) -> u64 {
        self.blocks.free_blocks() + self.settler.held_blocks()
    }

    /// Counts for `nosefs info`-like reports and tests: (pinodes in use, free pinode slots).
    pub fn pinode_usage(&self) -> (u64, u64) {
        let total = self.image.geometry().pinode_count() - 1;
        let free = (self.pinodes.free_count() + self.settler.held_pinodes()) as u64;
        (total - free, free)
    }
}
