//! C pointers from the program: paths read only from pages known readable (EFAULT, as the kernel answers, for the rest).

use std::cell::Cell;
use std::ffi::{c_char, c_void};

/// Whether `p` cannot be a user-space address (null, the first page, or above the 47-bit user
/// half of x86-64): such a path is handed to the kernel, which answers EFAULT, instead of being
/// read here. A wild pointer inside user space still faults, as in any libc that reads paths.
pub(super) fn wild(p: *const c_char) -> bool {
    let a = p as usize;
    a < 4096 || (cfg!(target_arch = "x86_64") && a >= 1 << 47)
}

/// The C string at `p`, or `None` where the kernel would answer EFAULT: a pointer into the
/// first page or past user space, or into memory that is not mapped readable. Each page the
/// string touches is checked ([`page_readable`]) before it is read, so a bad pointer never
/// faults in the shim.
pub(super) unsafe fn bytes<'a>(p: *const c_char) -> Option<&'a [u8]> {
    if wild(p) {
        return None;
    }
    let start = p as usize;
    let mut page = start & !(PAGE_BYTES - 1);
    loop {
        if page >= 1 << 47 || !page_readable(page) {
            return None;
        }
        let from = start.max(page);
        let end = page + PAGE_BYTES;
        // SAFETY: `[from, end)` lies in a page just found readable.
        let here = unsafe { std::slice::from_raw_parts(from as *const u8, end - from) };
        if let Some(nul) = here.iter().position(|&b| b == 0) {
            // SAFETY: every page from `start` to the NUL was found readable.
            return Some(unsafe {
                std::slice::from_raw_parts(start as *const u8, from - start + nul)
            });
        }
        page = end;
    }
}

const PAGE_BYTES: usize = 4096;

/// Bumped whenever the program unmaps or moves memory: pages found readable before may not be.
static MAP_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Readable `[start, end)` ranges a thread knows, the mapping generation they were found in, and
/// how many it has learnt in that generation (the next slot to replace).
type KnownRanges = ([(usize, usize); 8], u64, usize);

/// Pages a thread asks the kernel about one by one before it reads the whole map: most
/// processes pass few paths (a short-lived `cp` pays one system call per page, not a read of
/// `/proc/self/maps`), a busy one soon learns whole mappings.
const PAGES_BEFORE_MAPS: usize = 16;

thread_local! {
    /// Readable mappings this thread found (at most 8 `[start, end)` ranges, replaced
    /// round-robin), in the mapping generation they were found in: the paths a program passes
    /// come from a few mappings (its stack, heap, strings), so nearly every check is a lookup.
    static READABLE_RANGES: Cell<KnownRanges> =
        const { Cell::new(([(0, 0); 8], 0, 0)) };
}

/// Whether the page at address `page` can be read, as the kernel would find it: from this
/// thread's cache of readable ranges, else from the kernel (the page alone, for the first
/// [`PAGES_BEFORE_MAPS`] misses; then the whole mapping from `/proc/self/maps`, read with raw
/// system calls into a fixed buffer: no allocation, since a hook may run inside malloc), which
/// is then cached until the program next unmaps memory.
fn page_readable(page: usize) -> bool {
    let generation = MAP_GENERATION.load(std::sync::atomic::Ordering::Acquire);
    let (mut ranges, known, mut next) = READABLE_RANGES.with(Cell::get);
    if known == generation && ranges.iter().any(|&(a, b)| a <= page && page < b) {
        return true;
    }
    if known != generation {
        (ranges, next) = ([(0, 0); 8], 0);
    }
    let range = if next < PAGES_BEFORE_MAPS {
        if !page_mapped(page) {
            return false;
        }
        (page, page + PAGE_BYTES)
    } else {
        match readable_mapping(page) {
            None => return false,
            Some(Some(range)) => range,
            // The maps could not be read: the kernel answers for us, as before this check.
            Some(None) => return true,
        }
    };
    ranges[next % 8] = range;
    READABLE_RANGES.with(|c| c.set((ranges, generation, next + 1)));
    true
}

/// Whether one page can be read, asked of the kernel: `process_vm_readv` of one byte from this
/// process fails with EFAULT instead of faulting. A kernel that refuses the call itself (a
/// seccomp filter) leaves the page taken as readable.
fn page_mapped(page: usize) -> bool {
    let mut byte = 0u8;
    let local = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    let remote = libc::iovec {
        iov_base: page as *mut c_void,
        iov_len: 1,
    };
    // SAFETY: the kernel copies one byte from `page` into `byte`, or fails; nothing is read by
    // this process directly.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == 1 || (n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EFAULT))
}

/// The readable mapping of `/proc/self/maps` that holds `addr`: `None` when no readable one does,
/// `Some(None)` when the maps cannot be read.
fn readable_mapping(addr: usize) -> Option<Option<(usize, usize)>> {
    use rustix::fs::{Mode, OFlags};
    let Ok(maps) = rustix::fs::open(
        c"/proc/self/maps",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return Some(None);
    };
    // Each line opens with `start-end perms`: a small state machine over the bytes, so a line
    // split between two reads costs nothing.
    let (mut start, mut end, mut field, mut perm_at) = (0usize, 0usize, 0u8, 0u8);
    let mut buf = [0u8; 4096];
    loop {
        let n = match rustix::io::read(&maps, &mut buf) {
            Ok(0) => return None,
            Ok(n) => n,
            Err(_) => return Some(None),
        };
        for &b in &buf[..n] {
            match (field, b) {
                (_, b'\n') => (start, end, field, perm_at) = (0, 0, 0, 0),
                (0, b'-') => field = 1,
                (0, _) => start = start.wrapping_mul(16).wrapping_add(hex(b)),
                (1, b' ') => field = 2,
                (1, _) => end = end.wrapping_mul(16).wrapping_add(hex(b)),
                (2, _) => {
                    if perm_at == 0 && b == b'r' && start <= addr && addr < end {
                        return Some(Some((start, end)));
                    }
                    perm_at = perm_at.saturating_add(1);
                    if perm_at >= 4 {
                        field = 3; // the rest of the line does not matter
                    }
                }
                _ => {}
            }
        }
    }
}

fn hex(b: u8) -> usize {
    match b {
        b'0'..=b'9' => usize::from(b - b'0'),
        b'a'..=b'f' => usize::from(b - b'a' + 10),
        _ => 0,
    }
}

/// After the program unmapped or moved memory: what the threads know of readable mappings may be
/// stale.
pub(super) fn forget_readable_pages() {
    MAP_GENERATION.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
}
