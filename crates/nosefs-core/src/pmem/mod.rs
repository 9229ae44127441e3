//! The persistent-memory layer: the one module that stores to, flushes and fences the image.
//!
//! Every other module reaches persistent memory through [`Region`]; this module alone holds
//! `unsafe` code (`#![deny(unsafe_code)]` everywhere else in the workspace).
//!
//! # Crash model
//!
//! This is the model every journal commit in noseFS is written against, and the model the
//! recording backend lets the crash checker enumerate.
//!
//! 1. **Volatile until written back.** A store lands in the CPU cache. It is *not* durable until
//!    its 64-byte cache line has been written back ([`Region::flush`]: `clwb`, else `clflushopt`,
//!    else `clflush`) **and** a store fence ([`Region::fence`]: `sfence`) has executed after that
//!    write-back. [`Region::persist`] does both.
//! 2. **No order without a fence.** Between two fences, any subset of the in-flight stores may have
//!    reached the media when power is lost, in any order across cache lines. A flush alone orders
//!    nothing.
//! 3. **Within one cache line, program order.** Stores to the same cache line reach the media in
//!    the order they were issued (the line is written back as a whole, with all earlier stores in
//!    it). A crash may still leave any *prefix* of them.
//! 4. **Atomicity is 8 bytes.** An aligned 8-byte store is never torn: after a crash the media holds
//!    the old or the new 8 bytes. Larger stores may be torn at any 8-byte boundary. This is why
//!    every journal commit point is a single aligned 8-byte store ([`Region::store_u64_persist`]).
//! 5. **Non-temporal stores** ([`Region::copy_nt`], [`Region::zero_nt`]) bypass the cache; they are
//!    durable after the next fence, with no flush needed, and are unordered until then.
//! 6. **What the image lives on.** On a DAX file mapped with `MAP_SYNC`, or on device-dax, the model
//!    above is the hardware's. On a file in `/dev/shm` (the default on machines without persistent
//!    memory) the image survives a process crash, not a power loss; flushes and fences still run so
//!    that costs are measured honestly.
//!
//! # Backends
//!
//! - A **mapped** region: a regular file (default: `/dev/shm`), a file on a DAX mount (mapped with
//!   `MAP_SHARED_VALIDATE | MAP_SYNC` when the kernel accepts it, detected at run time), or a
//!   device-dax character device. The image is locked with `flock` while it is open.
//! - A **recording** region ([`Region::recording`]): anonymous memory that logs every store, flush
//!   and fence, in order, tagged with the operation that issued it ([`Recorder`]). It has exactly
//!   the interface of a mapped region, so the same file-system code runs on both. A [`Trace`]
//!   keeps what it recorded per operation and replays it on a mapped region with nothing else
//!   around it: the persistence floor the benchmark reports.
//!
//! # Counters
//!
//! Each thread counts the cache-line flushes and fences it issued ([`counters`]), so a benchmark or
//! a test can report them per operation without shared atomic traffic on the hot path.

#![allow(unsafe_code)]

mod copy;
mod flush;
mod mapping;
mod populate;
mod recorder;
mod trace;

use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use zerocopy::{FromBytes, Immutable, IntoBytes};

pub use copy::copy_nonoverlapping;
pub use flush::FlushKind;
pub use mapping::{Access, MapInfo, MappingKind};
pub use populate::Populator;
pub use recorder::{Event, Recorder};
pub use trace::Trace;

use crate::error::Result;
use mapping::Mapping;

/// Size of a CPU cache line, the unit of write-back.
pub const CACHE_LINE: u64 = 64;

/// Options for opening or creating a mapped region.
#[derive(Debug, Clone, Default)]
pub struct RegionOptions {
    /// How the region may be used; see [`Access`].
    pub access: Access,
    /// Force a flush instruction instead of detecting one (`None`: the `NOSEFS_FLUSH` environment
    /// variable if set, else the best the CPU offers).
    pub flush: Option<FlushKind>,
    /// Pre-fault the whole mapping (`MAP_POPULATE`), so page faults stay out of timed regions.
    pub populate: bool,
    /// Keep the image's descriptor at or above this number (the preload shim: the program owns
    /// the low numbers and may `dup2` over any of them).
    pub fd_floor: Option<i32>,
    /// Map the image through this open descriptor of it instead of opening the path (the
    /// preload shim's inherited one, in a process whose credentials may no longer open it). The
    /// descriptor is duplicated; the caller keeps it open for the call.
    pub image_fd: Option<i32>,
}

/// Flushes and fences issued by one thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Cache lines written back (one per line per [`Region::flush`]).
    pub flushes: u64,
    /// Store fences.
    pub fences: u64,
}

impl Counters {
    /// The counts issued since `earlier`, a snapshot taken on the same thread.
    pub fn since(self, earlier: Counters) -> Counters {
        Counters {
            flushes: self.flushes - earlier.flushes,
            fences: self.fences - earlier.fences,
        }
    }
}

thread_local! {
    static COUNTERS: Cell<Counters> = const { Cell::new(Counters { flushes: 0, fences: 0 }) };
}

/// A snapshot of this thread's flush and fence counters.
pub fn counters() -> Counters {
    COUNTERS.with(Cell::get)
}

fn count(flushes: u64, fences: u64) {
    COUNTERS.with(|c| {
        let mut v = c.get();
        v.flushes += flushes;
        v.fences += fences;
        c.set(v);
    });
}

/// The image's file under a mapping, as the block allocator reserves its pages
/// (`alloc::Backing`).
pub trait BackingFile: Send + Sync {
    /// Has the file system give the file `[offset, offset + len)` now (`fallocate`).
    fn reserve(&self, offset: u64, len: u64) -> std::io::Result<()>;
    /// Bytes the file system can still give.
    fn free_bytes(&self) -> std::io::Result<u64>;
    /// Bytes of `[offset, offset + len)` the file system has yet to give (holes).
    fn hole_bytes(&self, offset: u64, len: u64) -> std::io::Result<u64>;
}

/// Whether a [`BackingFile::reserve`] failed because the file system cannot reserve at all (no
/// `fallocate` for this file): then nothing is reserved, as before reservations existed.
pub fn cannot_reserve(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::ENODEV | libc::EINVAL)
    )
}

/// [`BackingFile`] of a mapped image file.
struct ImageFile(std::sync::Arc<Mapping>);

impl BackingFile for ImageFile {
    fn reserve(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.0.reserve(offset, len)
    }

    fn free_bytes(&self) -> std::io::Result<u64> {
        self.0.backing_free_bytes()
    }

    fn hole_bytes(&self, offset: u64, len: u64) -> std::io::Result<u64> {
        self.0.hole_bytes(offset, len)
    }
}

/// A persistent-memory region: the whole image, mapped, with typed access and persistence
/// primitives. `Send + Sync`; callers keep concurrent writers to disjoint bytes (the file system's
/// locks do that), exactly as with any shared memory mapping.
#[derive(Debug)]
pub struct Region {
    mapping: std::sync::Arc<Mapping>,
    flush_kind: FlushKind,
    recorder: Option<Mutex<Recorder>>,
}

impl Region {
    /// Maps an existing image. Fails with [`crate::Error::InUse`] when another process holds it.
    pub fn open(path: &Path, options: &RegionOptions) -> Result<Region> {
        let mapping = Mapping::open(path, options)?;
        Ok(Region::from_mapping(mapping, options.flush))
    }

    /// Creates (or reuses) the image file at `path` with exactly `size_bytes` and maps it for
    /// formatting. A regular file is truncated to zero first, so every byte reads as zero
    /// afterwards ([`MapInfo::zero_filled`]); a device keeps its old contents.
    pub fn create(path: &Path, size_bytes: Option<u64>, options: &RegionOptions) -> Result<Region> {
        let mapping = Mapping::create(path, size_bytes, options)?;
        Ok(Region::from_mapping(mapping, options.flush))
    }

    /// A read-only view of the whole image behind `file`, with no lock taken and the descriptor
    /// closed once mapped: a daemon client's view of its daemon's image (`file::direct`).
    pub fn view(file: std::os::fd::OwnedFd) -> Result<Region> {
        let mapping = Mapping::view(file)?;
        Ok(Region::from_mapping(mapping, Some(FlushKind::None)))
    }

    /// An in-memory region of `size_bytes` (zero-filled) that records every store, flush and fence.
    pub fn recording(size_bytes: u64) -> Result<Region> {
        let mapping = Mapping::anonymous(size_bytes)?;
        let mut region = Region::from_mapping(mapping, Some(FlushKind::None));
        region.recorder = Some(Mutex::new(Recorder::default()));
        Ok(region)
    }

    /// An in-memory recording region that starts as a copy of `image`.
    pub fn recording_from(image: &[u8]) -> Result<Region> {
        let region = Region::recording(image.len() as u64)?;
        // SAFETY: the mapping is `image.len()` bytes long, freshly created and private to us.
        unsafe {
            std::ptr::copy_nonoverlapping(image.as_ptr(), region.mapping.base(), image.len())
        };
        Ok(region)
    }

    fn from_mapping(mapping: Mapping, flush: Option<FlushKind>) -> Region {
        let flush_kind = flush.unwrap_or_else(FlushKind::from_env_or_detect);
        Region {
            mapping: std::sync::Arc::new(mapping),
            flush_kind,
            recorder: None,
        }
    }

    /// Length of the region in bytes.
    pub fn len(&self) -> u64 {
        self.mapping.len()
    }

    /// Whether the region is empty (never true for a usable image).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What was mapped and how.
    pub fn info(&self) -> &MapInfo {
        self.mapping.info()
    }

    /// The pages of the image's file in `[offset, offset + len)` that hold data, as sorted,
    /// disjoint `(offset, len)` runs (`SEEK_DATA`, `SEEK_HOLE`: a call per run, whatever the
    /// range's size), for a shared
    /// mapping of a regular file; `None` when that cannot be known (a device, anonymous memory,
    /// a private copy whose stores the file does not see, a file system without `SEEK_DATA`).
    /// A hole reads as zeros, but reading it through a shared mapping of a tmpfs file has the
    /// kernel allocate the page (and kill the process with SIGBUS when the file system is
    /// full), so a reader of whole tables (fsck) reads only these.
    pub fn data_runs(&self, offset: u64, len: u64) -> Option<Vec<(u64, u64)>> {
        let info = self.info();
        let shared = matches!(info.access, Access::ReadOnly | Access::ReadWrite);
        if self.recorder.is_some() || !shared || info.kind != MappingKind::File {
            return None;
        }
        self.mapping.data_runs(offset, len).ok().flatten()
    }

    /// The image's file, for reserving its pages ahead of stores ([`BackingFile`]): for a
    /// writable shared mapping of a regular file, whose holes its file system fills at the first
    /// store (or cannot: SIGBUS); `None` for other regions.
    pub fn backing_file(&self) -> Option<Box<dyn BackingFile>> {
        let info = self.info();
        if self.recorder.is_some()
            || info.access != Access::ReadWrite
            || info.kind != MappingKind::File
        {
            return None;
        }
        Some(Box::new(ImageFile(std::sync::Arc::clone(&self.mapping))))
    }

    /// The descriptor that holds the image open (and its lock), if any.
    pub fn descriptor(&self) -> Option<i32> {
        self.mapping.descriptor()
    }

    /// The flush instruction in use.
    pub fn flush_kind(&self) -> FlushKind {
        self.flush_kind
    }

    /// The recorder, when this is a recording region.
    pub fn recorder(&self) -> Option<std::sync::MutexGuard<'_, Recorder>> {
        self.recorder
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|poison| poison.into_inner()))
    }

    /// A copy of the whole region's current contents.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; self.len() as usize];
        self.read_bytes(0, &mut bytes);
        bytes
    }

    /// Panics unless `[offset, offset + len)` lies inside the region. Offsets reaching here were
    /// validated against the superblock's geometry, so a violation is a bug, not bad media.
    #[inline]
    fn check(&self, offset: u64, len: u64) -> *mut u8 {
        let end = offset.checked_add(len);
        assert!(
            end.is_some_and(|end| end <= self.len()),
            "pmem access [{offset}, +{len}) outside region of {} bytes",
            self.len()
        );
        // SAFETY: `offset + len <= self.len()` was just checked, so the pointer stays in bounds.
        unsafe { self.mapping.base().add(offset as usize) }
    }

    #[inline]
    fn check_writable(&self) {
        assert!(
            self.mapping.info().access != Access::ReadOnly,
            "store to a read-only region"
        );
    }

    /// Reads a record of type `T` at `offset`.
    #[inline]
    pub fn read<T: FromBytes>(&self, offset: u64) -> T {
        let ptr = self.check(offset, size_of::<T>() as u64);
        // SAFETY: in bounds (checked); `T: FromBytes` accepts any bit pattern; unaligned read.
        unsafe { std::ptr::read_unaligned(ptr.cast::<T>()) }
    }

    /// Copies `out.len()` bytes at `offset` into `out`.
    #[inline]
    pub fn read_bytes(&self, offset: u64, out: &mut [u8]) {
        let ptr = self.check(offset, out.len() as u64);
        // SAFETY: in bounds (checked); `out` is a distinct Rust allocation, so no overlap.
        unsafe { copy::copy_nonoverlapping(ptr, out.as_mut_ptr(), out.len()) };
    }

    /// Continues CRC-32C `crc` over the `len` bytes at `offset`, read in place rather than
    /// copied out first.
    pub fn crc32c_append(&self, crc: u32, offset: u64, len: u64) -> u32 {
        let ptr = self.check(offset, len);
        // SAFETY: in bounds (checked) and only read; as for `read_bytes`, writers to these bytes
        // are kept apart by the caller's locks.
        let bytes = unsafe { std::slice::from_raw_parts(ptr.cast_const(), len as usize) };
        crc32c::crc32c_append(crc, bytes)
    }

    /// Loads an aligned 8-byte word atomically (the counterpart of [`Region::store_u64_persist`]).
    #[inline]
    pub fn load_u64(&self, offset: u64) -> u64 {
        assert!(offset % 8 == 0, "unaligned atomic load at {offset}");
        let ptr = self.check(offset, 8);
        // SAFETY: in bounds and 8-byte aligned (the mapping is page aligned); every other access
        // to this word is atomic or excluded by the caller's locks. Little-endian on media.
        let word = unsafe { AtomicU64::from_ptr(ptr.cast::<u64>()) };
        u64::from_le(word.load(Ordering::Acquire))
    }

    /// Hints that the cache line holding `offset` is about to be used, so its miss overlaps the
    /// work before that use. Changes nothing the crash model sees: a prefetch only reads.
    #[inline]
    pub fn prefetch(&self, offset: u64) {
        let ptr = self.check(offset, 1);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch never faults nor changes memory, and `ptr` is inside the mapping.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(ptr.cast::<i8>().cast_const());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = ptr;
    }

    /// Stores a record at `offset` (not yet durable: flush and fence it).
    #[inline]
    pub fn write<T: IntoBytes + Immutable>(&self, offset: u64, value: &T) {
        self.write_bytes(offset, value.as_bytes());
    }

    /// Stores bytes at `offset` (not yet durable: flush and fence them).
    #[inline]
    pub fn write_bytes(&self, offset: u64, bytes: &[u8]) {
        self.check_writable();
        let ptr = self.check(offset, bytes.len() as u64);
        // SAFETY: in bounds (checked), writable mapping (checked); `bytes` cannot alias the
        // mapping's memory mutably; concurrent writers to these bytes are excluded by the caller.
        unsafe { copy::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
        if let Some(rec) = self.recorder() {
            let mut rec = rec;
            rec.store(offset, bytes);
        }
    }

    /// Sets `len` bytes at `offset` to `byte` (not yet durable).
    pub fn fill(&self, offset: u64, len: u64, byte: u8) {
        self.check_writable();
        let ptr = self.check(offset, len);
        // SAFETY: in bounds (checked), writable mapping (checked).
        unsafe { std::ptr::write_bytes(ptr, byte, len as usize) };
        if let Some(mut rec) = self.recorder() {
            rec.store(offset, &vec![byte; len as usize]);
        }
    }

    /// Asks the kernel to write back the pages of `[offset, offset + len)` (`msync(MS_SYNC)`).
    /// noseFS never needs this for its own image (its stores persist by write-back and fence);
    /// it is how a mapped file on an ordinary file system becomes durable, which the benchmark's
    /// `mmap` workload measures on its baseline targets.
    pub fn msync(&self, offset: u64, len: u64) -> Result<()> {
        self.check(offset, len);
        if self.recorder.is_some() {
            return Ok(());
        }
        self.mapping
            .msync(offset, len)
            .map_err(|e| crate::Error::io("msync", e))
    }

    /// Writes back every cache line overlapping `[offset, offset + len)`. Orders nothing by itself.
    #[inline]
    pub fn flush(&self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let ptr = self.check(offset, len);
        let first = offset / CACHE_LINE;
        let last = (offset + len - 1) / CACHE_LINE;
        let lines = last - first + 1;
        count(lines, 0);
        if let Some(mut rec) = self.recorder() {
            for line in first..=last {
                rec.flush(line * CACHE_LINE);
            }
            return;
        }
        let line_start = ptr.wrapping_sub((offset % CACHE_LINE) as usize);
        for i in 0..lines {
            // SAFETY: the line overlaps the checked range, and the mapping is page aligned, so the
            // whole line lies inside the mapping.
            unsafe {
                flush::flush_line(self.flush_kind, line_start.add((i * CACHE_LINE) as usize))
            };
        }
    }

    /// A store fence: every flush and non-temporal store before it is durable after it.
    #[inline]
    pub fn fence(&self) {
        count(0, 1);
        if let Some(mut rec) = self.recorder() {
            rec.fence();
            return;
        }
        flush::fence(self.flush_kind);
    }

    /// Flush then fence: `[offset, offset + len)` is durable on return.
    #[inline]
    pub fn persist(&self, offset: u64, len: u64) {
        self.flush(offset, len);
        self.fence();
    }

    /// Stores an aligned 8-byte little-endian word atomically and makes it durable: the commit
    /// point of every journal. A crash leaves either the old or the new word.
    pub fn store_u64_persist(&self, offset: u64, value: u64) {
        self.store_u64(offset, value);
        self.persist(offset, 8);
    }

    /// Stores an aligned 8-byte word atomically, without persisting it.
    pub fn store_u64(&self, offset: u64, value: u64) {
        assert!(offset % 8 == 0, "unaligned atomic store at {offset}");
        self.check_writable();
        let ptr = self.check(offset, 8);
        // SAFETY: in bounds, 8-byte aligned (page-aligned mapping), writable; other accesses to
        // this word are atomic or excluded by the caller's locks.
        let word = unsafe { AtomicU64::from_ptr(ptr.cast::<u64>()) };
        word.store(value.to_le(), Ordering::Release);
        if let Some(mut rec) = self.recorder() {
            rec.store(offset, &value.to_le_bytes());
        }
    }

    /// Atomically ORs `mask` into the aligned little-endian word at `offset` (not yet durable).
    /// For words several threads update bit by bit, such as the block bitmap.
    pub fn fetch_or_u64(&self, offset: u64, mask: u64) {
        self.update_u64(offset, |word| word.fetch_or(mask.to_le(), Ordering::AcqRel));
    }

    /// Atomically ANDs `mask` into the aligned little-endian word at `offset` (not yet durable).
    pub fn fetch_and_u64(&self, offset: u64, mask: u64) {
        self.update_u64(offset, |word| {
            word.fetch_and(mask.to_le(), Ordering::AcqRel)
        });
    }

    fn update_u64(&self, offset: u64, op: impl FnOnce(&AtomicU64) -> u64) {
        assert!(offset % 8 == 0, "unaligned atomic update at {offset}");
        self.check_writable();
        let ptr = self.check(offset, 8);
        // SAFETY: in bounds, 8-byte aligned (page-aligned mapping), writable; every access to
        // this word is atomic.
        let word = unsafe { AtomicU64::from_ptr(ptr.cast::<u64>()) };
        op(word);
        if let Some(mut rec) = self.recorder() {
            rec.store(offset, &word.load(Ordering::Acquire).to_ne_bytes());
        }
    }

    /// Copies `bytes` to `offset` with non-temporal stores where the destination allows it, for
    /// bulk data. Durable after the next [`Region::fence`]; no flush is needed.
    pub fn copy_nt(&self, offset: u64, bytes: &[u8]) {
        self.check_writable();
        let ptr = self.check(offset, bytes.len() as u64);
        if let Some(mut rec) = self.recorder() {
            // SAFETY: as in `write_bytes`.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
            rec.store_nt(offset, bytes);
            return;
        }
        // SAFETY: `ptr .. ptr + bytes.len()` is inside the writable mapping (checked above), and
        // `bytes` does not overlap it.
        let flushed_lines = unsafe { flush::copy_nt(self.flush_kind, ptr, bytes) };
        count(flushed_lines, 0);
    }

    /// Zeroes `len` bytes at `offset` with non-temporal stores. Durable after the next fence.
    pub fn zero_nt(&self, offset: u64, len: u64) {
        const CHUNK: usize = 1 << 16;
        let zeros = [0u8; CHUNK];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(CHUNK as u64);
            self.copy_nt(offset + done, &zeros[..n as usize]);
            done += n;
        }
    }
}

// SAFETY: the region owns its mapping for its whole life; the raw base pointer is only
// dereferenced through bounds-checked methods, and the file system's locks keep writers to the
// same bytes apart, as for any shared mapping.
unsafe impl Send for Region {}
// SAFETY: see `Send`; every method takes `&self` and is safe to call from several threads.
unsafe impl Sync for Region {}

#[cfg(test)]
mod tests;
