//! The system side of mapped files, and the core's only `unsafe` outside `pmem`: mappings of a
//! shadow memfd, copies in and out of them, and the kernel's write tracking for them
//! (userfaultfd asynchronous write-protect with the PAGEMAP_SCAN ioctl, Linux 6.7 and later).
//!
//! Every call goes through rustix's raw backend, never libc: the LD_PRELOAD shim links the core
//! and exports `mmap`, `munmap` and `ioctl`, so a libc call from here would land in its hooks.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::ioctl::{ioctl, opcode, Updater};
use rustix::mm::{MapFlags, ProtFlags, UserfaultfdFlags};

/// Bytes per page: the unit of write tracking.
pub const PAGE_BYTES: u64 = 4096;

/// A mapping of a shadow memfd, unmapped on drop.
#[derive(Debug)]
pub struct View {
    addr: usize,
    len: usize,
}

impl View {
    /// Maps `len` bytes of `fd` from `offset` (page aligned), shared or private, readable and
    /// writable, with its pages faulted in, where the kernel chooses.
    pub fn map(fd: BorrowedFd<'_>, offset: u64, len: usize, shared: bool) -> io::Result<View> {
        View::map_placed(
            fd,
            offset,
            len,
            shared,
            libc::PROT_READ | libc::PROT_WRITE,
            None,
            true,
        )
    }

    /// [`View::map`] with the pages faulted in as they are touched, for the core's own shared
    /// view of a whole shadow, which write tracking never watches: populating it would give
    /// every hole of a sparse file a page of memory (a 6 GiB sparse file, 6 GiB of it).
    pub fn map_lazily(fd: BorrowedFd<'_>, len: usize) -> io::Result<View> {
        View::mapped(
            fd,
            0,
            len,
            MapFlags::SHARED,
            libc::PROT_READ | libc::PROT_WRITE,
            0,
        )
    }

    /// [`View::map`] with the caller's protection (`PROT_*` bits), for a program's
    /// `MAP_FIXED` or `MAP_FIXED_NOREPLACE` mapping its address, and its pages faulted in now
    /// only with `populate` (where write tracking needs them present).
    pub fn map_placed(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        shared: bool,
        prot: i32,
        at: Option<(usize, bool)>,
        populate: bool,
    ) -> io::Result<View> {
        let mut flags = if shared {
            MapFlags::SHARED
        } else {
            MapFlags::PRIVATE
        };
        if populate {
            flags |= MapFlags::POPULATE;
        }
        let addr = match at {
            Some((addr, replace)) => {
                flags |= if replace {
                    MapFlags::FIXED
                } else {
                    MapFlags::FIXED_NOREPLACE
                };
                addr
            }
            None => 0,
        };
        View::mapped(fd, offset, len, flags, prot, addr)
    }

    fn mapped(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        flags: MapFlags,
        prot: i32,
        addr: usize,
    ) -> io::Result<View> {
        assert!(len > 0 && offset % PAGE_BYTES == 0, "views are whole pages");
        // SAFETY: without a fixed address the kernel picks one that overlaps nothing. With one,
        // the program asked for exactly this (MAP_FIXED replaces its own pages there, as the
        // kernel would have done for it).
        let addr = unsafe {
            rustix::mm::mmap(
                addr as *mut _,
                len,
                ProtFlags::from_bits_retain(prot as u32),
                flags,
                fd,
                offset,
            )
        }?;
        Ok(View {
            addr: addr as usize,
            len,
        })
    }

    /// The first byte's address.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Copies bytes out of the view from `at`.
    pub fn read(&self, at: usize, out: &mut [u8]) {
        assert!(at + out.len() <= self.len, "read past the view");
        // SAFETY: the range is inside the live mapping (asserted); other threads and views may
        // store into it concurrently, as with any shared memory: the copy sees each byte's old or
        // new value, which is what a reader of a mapped file gets from the kernel too.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (self.addr + at) as *const u8,
                out.as_mut_ptr(),
                out.len(),
            )
        }
    }

    /// Copies `data` into the view at `at`.
    pub fn write(&self, at: usize, data: &[u8]) {
        assert!(at + data.len() <= self.len, "write past the view");
        // SAFETY: as for `read`; the mapping is writable and lives as long as `self`.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), (self.addr + at) as *mut u8, data.len())
        }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and nothing refers to it once its view is gone.
        let _ = unsafe { rustix::mm::munmap(self.addr as *mut _, self.len) };
    }
}

// The kernel's ABI (include/uapi/linux/userfaultfd.h, fs.h), as of Linux 6.7.
const UFFD_API: u64 = 0xaa;
const UFFD_USER_MODE_ONLY: u32 = 1;
const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
const PAGE_IS_WRITTEN: u64 = 1 << 1;
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

#[repr(C)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

const UFFDIO_API: u32 = opcode::read_write::<UffdioApi>(0xaa, 0x3f);
const UFFDIO_REGISTER: u32 = opcode::read_write::<UffdioRegister>(0xaa, 0x00);
const UFFDIO_UNREGISTER: u32 = opcode::read::<UffdioRange>(0xaa, 0x01);
const UFFDIO_WRITEPROTECT: u32 = opcode::read_write::<UffdioWriteprotect>(0xaa, 0x06);
const PAGEMAP_SCAN: u32 = opcode::read_write::<PmScanArg>(b'f', 16);

/// Finds the pages written in tracked views: each view is write-protected asynchronously (the
/// kernel resolves the first store to a page itself and marks it written, ~1-2 us), and a scan
/// reports the written pages and protects them again in one call.
#[derive(Debug)]
pub struct WriteTracker {
    uffd: OwnedFd,
    pagemap: OwnedFd,
    /// Whether a page never faulted in is protected too (shmem's uffd-wp PTE markers), so a
    /// tracked view need not be populated first (a mapping of a sparse file would otherwise
    /// take a page of memory for every page of its holes).
    unpopulated: bool,
}

impl WriteTracker {
    /// A tracker, or why this kernel cannot give one (older than 6.7, or userfaultfd refused).
    pub fn new() -> io::Result<WriteTracker> {
        let flags =
            UserfaultfdFlags::CLOEXEC | UserfaultfdFlags::from_bits_retain(UFFD_USER_MODE_ONLY);
        // SAFETY: userfaultfd only creates a descriptor.
        let uffd = unsafe { rustix::mm::userfaultfd(flags) }?;
        let mut api = UffdioApi {
            api: UFFD_API,
            features: UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API takes a struct uffdio_api, which `UffdioApi` lays out.
        unsafe { ioctl(&uffd, Updater::<{ UFFDIO_API }, _>::new(&mut api)) }?;
        let pagemap = rustix::fs::open(
            "/proc/self/pagemap",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        let mut tracker = WriteTracker {
            uffd,
            pagemap,
            unpopulated: false,
        };
        tracker.probe()?;
        tracker.unpopulated = tracker.probe_unpopulated().unwrap_or(false);
        Ok(tracker)
    }

    /// Whether views may be tracked without being populated first ([`WriteTracker::new`]
    /// found out).
    pub fn tracks_unpopulated(&self) -> bool {
        self.unpopulated
    }

    /// Tracks three pages never faulted in, protecting none of them ([`WriteTracker::track_ranges`]
    /// with no ranges), and stores to the middle one: exactly that page must come back written.
    fn probe_unpopulated(&self) -> io::Result<bool> {
        let fd = rustix::fs::memfd_create("nosefs-probe", rustix::fs::MemfdFlags::CLOEXEC)?;
        rustix::fs::ftruncate(&fd, 3 * PAGE_BYTES)?;
        let view = View::map_lazily(fd.as_fd(), 3 * PAGE_BYTES as usize)?;
        self.track_ranges(&view, &[])?;
        view.write(PAGE_BYTES as usize, &[1]);
        let mut written = Vec::new();
        let scanned = self.take_written(&view, &mut written);
        let mut again = Vec::new();
        let rescanned = self.take_written(&view, &mut again);
        self.untrack(&view);
        scanned?;
        rescanned?;
        Ok(written == [(PAGE_BYTES as usize, PAGE_BYTES as usize)] && again.is_empty())
    }

    /// Checks the whole path on a scratch page: a kernel with userfaultfd but no PAGEMAP_SCAN
    /// (before 6.7) fails here, not at the first msync.
    fn probe(&self) -> io::Result<()> {
        let fd = rustix::fs::memfd_create("nosefs-probe", rustix::fs::MemfdFlags::CLOEXEC)?;
        rustix::fs::ftruncate(&fd, PAGE_BYTES)?;
        let view = View::map(fd.as_fd(), 0, PAGE_BYTES as usize, true)?;
        self.track(&view)?;
        view.write(0, &[1]);
        let mut written = Vec::new();
        self.take_written(&view, &mut written)?;
        self.untrack(&view);
        if written != [(0, PAGE_BYTES as usize)] {
            return Err(io::Error::other(
                "PAGEMAP_SCAN did not report a written page",
            ));
        }
        Ok(())
    }

    /// Starts tracking a shared view: registers it and write-protects every page.
    pub fn track(&self, view: &View) -> io::Result<()> {
        self.track_ranges(view, &[(0, view.len)])
    }

    /// Starts tracking a shared view that nothing has touched yet: registers all of it and
    /// write-protects only the pages of `ranges` (offset in the view, bytes; whole pages).
    ///
    /// Why not all of it: protecting a page that is not there installs a marker in a page table
    /// (tables made for it), and every later scan walks those tables, so a 2 GiB mapping of a
    /// few MiB of data (LMDB with writemap) paid a 2 GiB walk, about 0.5 ms, per sync. A page
    /// outside `ranges` gets a table entry only when it is touched, without protection; the scan
    /// ([`WriteTracker::take_written_in`]) reports present or swapped pages without protection
    /// as written and protects them from then on. A page that was only read is reported once
    /// too (the caller drops those that read as a hole's zeros). So every page a store reaches
    /// is reported, and a scan walks only tables of pages that hold data or were touched.
    pub fn track_ranges(&self, view: &View, ranges: &[(usize, usize)]) -> io::Result<()> {
        let mut register = UffdioRegister {
            range: UffdioRange {
                start: view.addr as u64,
                len: view.len as u64,
            },
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER takes a struct uffdio_register over our own live mapping.
        unsafe {
            ioctl(
                &self.uffd,
                Updater::<{ UFFDIO_REGISTER }, _>::new(&mut register),
            )
        }?;
        for &(at, len) in ranges.iter().filter(|r| r.1 > 0) {
            assert!(
                at % PAGE_BYTES as usize == 0 && len % PAGE_BYTES as usize == 0,
                "protection covers whole pages"
            );
            assert!(at + len <= view.len, "a protected range lies in its view");
            let mut protect = UffdioWriteprotect {
                range: UffdioRange {
                    start: (view.addr + at) as u64,
                    len: len as u64,
                },
                mode: UFFDIO_WRITEPROTECT_MODE_WP,
            };
            // SAFETY: as above, for struct uffdio_writeprotect.
            unsafe {
                ioctl(
                    &self.uffd,
                    Updater::<{ UFFDIO_WRITEPROTECT }, _>::new(&mut protect),
                )
            }?;
        }
        Ok(())
    }

    /// Stops tracking a view (before it is unmapped).
    pub fn untrack(&self, view: &View) {
        let mut range = UffdioRange {
            start: view.addr as u64,
            len: view.len as u64,
        };
        // SAFETY: UFFDIO_UNREGISTER reads a struct uffdio_range.
        let _ = unsafe {
            ioctl(
                &self.uffd,
                Updater::<{ UFFDIO_UNREGISTER }, _>::new(&mut range),
            )
        };
    }

    /// Appends the view's pages written since the last call, as (offset in the view, bytes)
    /// runs, and write-protects them again in the same call.
    pub fn take_written(&self, view: &View, out: &mut Vec<(usize, usize)>) -> io::Result<()> {
        self.take_written_in(view, 0, view.len, out)
    }

    /// [`WriteTracker::take_written`] for `len` bytes of the view from `at` (page aligned).
    pub fn take_written_in(
        &self,
        view: &View,
        at: usize,
        len: usize,
        out: &mut Vec<(usize, usize)>,
    ) -> io::Result<()> {
        assert!(
            at % PAGE_BYTES as usize == 0 && at + len <= view.len,
            "a scan covers whole pages of the view"
        );
        let mut regions: [PageRegion; 32] = std::array::from_fn(|_| PageRegion {
            start: 0,
            end: 0,
            categories: 0,
        });
        let end = (view.addr + at + len) as u64;
        let mut start = (view.addr + at) as u64;
        while start < end {
            let mut arg = PmScanArg {
                size: std::mem::size_of::<PmScanArg>() as u64,
                flags: PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                start,
                end,
                walk_end: 0,
                vec: regions.as_mut_ptr() as u64,
                vec_len: regions.len() as u64,
                max_pages: 0,
                category_inverted: 0,
                // Written and there (in memory or swapped out): a page never touched in a view
                // tracked with `track_ranges` has no table entry and is neither.
                category_mask: PAGE_IS_WRITTEN,
                category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
                return_mask: PAGE_IS_WRITTEN,
            };
            // SAFETY: PAGEMAP_SCAN takes a struct pm_scan_arg whose `vec` points at `vec_len`
            // struct page_region the kernel may fill; `regions` outlives the call.
            unsafe { ioctl(&self.pagemap, Updater::<{ PAGEMAP_SCAN }, _>::new(&mut arg)) }?;
            // The ioctl's return value (regions filled) is not passed through `Updater`; the
            // filled entries are the ones with a non-empty range, and the walk resumes at
            // `walk_end`.
            for r in regions.iter_mut().filter(|r| r.end > r.start) {
                out.push((
                    (r.start - view.addr as u64) as usize,
                    (r.end - r.start) as usize,
                ));
                *r = PageRegion {
                    start: 0,
                    end: 0,
                    categories: 0,
                };
            }
            if arg.walk_end <= start {
                break;
            }
            start = arg.walk_end;
        }
        Ok(())
    }
}
