//! The C boundary: every libc entry point the shim exports, the real functions behind them, and
//! the conversions between C arguments and the safe operations in [`crate::ops`]. This is the
//! only module of the crate with `unsafe` code.
//!
//! Safety contract of every exported function: the caller passes what the libc function of the
//! same name requires (valid NUL-terminated paths, buffers of the stated lengths, valid out
//! pointers); a null path is answered with EFAULT rather than dereferenced.
//!
//! Each hook decides first, with no lock, whether the call is noseFS's (a descriptor in the
//! table, a path under the prefix); if not, it calls the real function (found once with
//! `dlsym(RTLD_NEXT)`). noseFS work runs with a per-thread guard set, so a libc call made while
//! serving one (a panic message, say) goes straight to the real function; a panic never unwinds
//! into C: the call fails with EIO and one line on stderr.
//!
//! Every block here relies on that one contract (the hooks' bodies forward the caller's
//! pointers to libc or read them as the C signature says); blocks that rely on more carry their
//! own `// SAFETY:` comment.
#![allow(unsafe_code)]
#![allow(
    clippy::missing_safety_doc,
    clippy::undocumented_unsafe_blocks,
    unused_unsafe
)]

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;

use libc::{dirent64, gid_t, mode_t, off64_t, off_t, pid_t, size_t, ssize_t, uid_t};
use nosefs_core::namespace::{Attr, SetAttr};
use nosefs_core::vfs;
use nosefs_core::Errno;
use parking_lot::Mutex;

use crate::fdtable::{self, Kind};
use crate::kernel;
use crate::maps;
use crate::ops;
use crate::route::{self, Found, Route};
use crate::state;

// ---------------------------------------------------------------------------------------------
// Real functions, the guard, errno.

/// Resolves (once) and returns the next definition of a libc function, typed.
macro_rules! real {
    ($name:ident : fn($($arg:ty),*) -> $ret:ty) => {{
        static PTR: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
        let mut p = PTR.load(Ordering::Relaxed);
        if p.is_null() {
            // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds libc's definition.
            p = unsafe { libc::dlsym(libc::RTLD_NEXT, concat!(stringify!($name), "\0").as_ptr().cast()) };
            if p.is_null() {
                missing(stringify!($name));
            }
            PTR.store(p, Ordering::Relaxed);
        }
        // SAFETY: the symbol is libc's function of this name, whose C signature this is.
        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(p) }
    }};
}

fn missing(name: &str) -> ! {
    state::say(&format!("libc has no {name}; cannot continue"));
    std::process::abort()
}

thread_local! {
    static IN_SHIM: Cell<bool> = const { Cell::new(false) };
}

/// Sets the per-thread guard while noseFS work runs.
struct Guard;

impl Guard {
    fn enter() -> Option<Guard> {
        IN_SHIM.with(|g| (!g.replace(true)).then_some(Guard))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        IN_SHIM.with(|g| g.set(false));
    }
}

fn in_shim() -> bool {
    IN_SHIM.with(Cell::get)
}

fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = e.0 };
}

/// Runs noseFS work under the guard, turning a panic into EIO.
fn serve<T>(f: impl FnOnce() -> Result<T, Errno>) -> Result<T, Errno> {
    let _guard = Guard::enter();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            state::say("internal error (a panic) while serving a call; it fails with EIO");
            Err(Errno::EIO)
        }
    }
}

fn int(r: Result<(), Errno>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn value<T: TryInto<i64>>(r: Result<T, Errno>) -> i64 {
    match r {
        Ok(v) => v.try_into().unwrap_or(i64::MAX),
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn fail(e: Errno) -> c_int {
    set_errno(e);
    -1
}

/// Whether `p` cannot be a user-space address (null, the first page, or above the 47-bit user
/// half of x86-64): such a path is handed to the kernel, which answers EFAULT, instead of being
/// read here. A wild pointer inside user space still faults, as in any libc that reads paths.
fn wild(p: *const c_char) -> bool {
    let a = p as usize;
    a < 4096 || (cfg!(target_arch = "x86_64") && a >= 1 << 47)
}

/// The C string at `p`, or `None` where the kernel would answer EFAULT: a pointer into the
/// first page or past user space, or into memory that is not mapped readable. Each page the
/// string touches is checked ([`page_readable`]) before it is read, so a bad pointer never
/// faults in the shim.
unsafe fn bytes<'a>(p: *const c_char) -> Option<&'a [u8]> {
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
fn forget_readable_pages() {
    MAP_GENERATION.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
}

/// Where a C path argument leads.
enum Routed {
    Kernel(Option<CString>),
    Ours(Found),
    Err(Errno),
}

impl Routed {
    /// The path to hand the kernel: the caller's, or the one resolution produced.
    fn kernel_path(k: &Option<CString>, original: *const c_char) -> *const c_char {
        k.as_ref().map_or(original, |c| c.as_ptr())
    }
}

unsafe fn routed(dirfd: c_int, path: *const c_char, follow_last: bool) -> Routed {
    if in_shim() || state::config().is_none() {
        return Routed::Kernel(None);
    }
    let Some(p) = (unsafe { bytes(path) }) else {
        return Routed::Kernel(None); // the kernel answers EFAULT
    };
    // Fast exit before any lock: an absolute path outside the prefix without "..".
    if p.first() == Some(&b'/') && !route::maybe_ours(p) && dirfd == libc::AT_FDCWD {
        return Routed::Kernel(None);
    }
    if p.first() != Some(&b'/') && dirfd != libc::AT_FDCWD && !fdtable::is_ours(dirfd) {
        return Routed::Kernel(None);
    }
    match serve(|| route::route(dirfd, p, follow_last)) {
        Ok(Route::Kernel(k)) => Routed::Kernel(k),
        Ok(Route::Ours(f)) => Routed::Ours(f),
        Err(e) => Routed::Err(e),
    }
}

/// How far routing gets before a walk (see [`route::route_start`]).
enum Started {
    Kernel(Option<CString>),
    In(std::sync::Arc<fdtable::OpenFile>, Vec<u8>),
    Walk(Vec<u8>),
    Err(Errno),
}

/// A plain name (no `/`, not `.` or `..`) in an open noseFS directory: the `*at` fast path that
/// a daemon can serve in one round trip (`None`: route the path as usual).
unsafe fn name_in<'a>(
    dirfd: c_int,
    path: *const c_char,
) -> Option<(std::sync::Arc<fdtable::OpenFile>, &'a [u8])> {
    if in_shim() || dirfd < 0 || !fdtable::is_ours(dirfd) {
        return None;
    }
    let name = unsafe { bytes(path) }?;
    if name.is_empty() || !route::is_plain_name(name) {
        return None;
    }
    let dir = fdtable::get(dirfd)?;
    matches!(dir.kind, Kind::Dir | Kind::Path).then_some((dir, name))
}

/// The descriptor an open returned, or the kernel's open of the path a walk left noseFS by.
fn opened_or_kernel(
    opened: Result<Result<c_int, Vec<u8>>, Errno>,
    kernel: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    match opened {
        Ok(Ok(fd)) => fd,
        Ok(Err(outside)) => match CString::new(outside) {
            Ok(p) => kernel(p.as_ptr()),
            Err(_) => fail(Errno::EINVAL),
        },
        Err(e) => fail(e),
    }
}

/// [`routed`] up to the walk, for calls that walk and act in one request.
unsafe fn routed_start(dirfd: c_int, path: *const c_char) -> Started {
    if in_shim() || state::config().is_none() {
        return Started::Kernel(None);
    }
    let Some(p) = (unsafe { bytes(path) }) else {
        return Started::Kernel(None);
    };
    if p.first() == Some(&b'/') && !route::maybe_ours(p) && dirfd == libc::AT_FDCWD {
        return Started::Kernel(None);
    }
    if p.first() != Some(&b'/') && dirfd != libc::AT_FDCWD && !fdtable::is_ours(dirfd) {
        return Started::Kernel(None);
    }
    match serve(|| route::route_start(dirfd, p)) {
        Ok(route::Start::Kernel(k)) => Started::Kernel(k),
        Ok(route::Start::In(dir, name)) => Started::In(dir, name),
        Ok(route::Start::Walk(w)) => Started::Walk(w),
        Err(e) => Started::Err(e),
    }
}

// ---------------------------------------------------------------------------------------------
// Start-up, exit, fork.

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

extern "C" fn init() {
    let _guard = Guard::enter();
    if state::config().is_none() {
        return;
    }
    // SAFETY: registering plain extern "C" functions as fork handlers.
    unsafe { libc::pthread_atfork(Some(fork_prepare), None, Some(fork_child)) };
    crate::exec::adopt();
    // Embedded mode: the image's descriptor that outlives a change of credentials, taken now,
    // before the program can drop its privileges or close descriptors it did not open.
    state::keep_image();
}

extern "C" fn fork_prepare() {
    let _guard = Guard::enter();
    crate::offsets::share_all();
    state::before_fork();
}

extern "C" fn fork_child() {
    maps::forget_in_child();
    state::in_forked_child();
}

extern "C" fn exit_hook() {
    // Buffered stdio data may be bound for noseFS: flush it while the image is mounted, outside
    // the guard, so that the shim's streams reach the hooks (inside it they would pass to the
    // kernel's placeholder).
    // SAFETY: fflush(NULL) flushes every stream.
    unsafe { libc::fflush(null_mut()) };
    let _guard = Guard::enter();
    state::at_exit();
}

/// `_exit` and `_Exit` skip atexit handlers, and shells (dash) end every command that way: the
/// image is committed and released first, or writes the program made since its last fsync would
/// be lost as in a crash (the kernel keeps them in its page cache). stdio is not flushed, as
/// `_exit` promises.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    if !in_shim() {
        let _guard = Guard::enter();
        state::at_exit();
    }
    unsafe { real!(_exit: fn(c_int) -> !)(status) }
}

#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    unsafe { _exit(status) }
}

/// Registers the unmount at exit (called at the first mount).
pub fn register_exit_hook() {
    // SAFETY: registering a plain extern "C" function.
    unsafe { libc::atexit(exit_hook) };
}

// ---------------------------------------------------------------------------------------------
// The variadic entry points: naked jumps to their C implementations in variadic.c, which read
// the variadic arguments where the caller put them (a jump leaves registers and stack as they
// were) and call the fixed-arity hooks below.

macro_rules! variadic {
    ($($name:ident => $c:ident),* $(,)?) => {
        extern "C" {
            $(fn $c();)*
        }
        $(
            #[no_mangle]
            #[unsafe(naked)]
            pub unsafe extern "C" fn $name() {
                #[cfg(target_arch = "x86_64")]
                std::arch::naked_asm!("jmp {}", sym $c);
                #[cfg(target_arch = "aarch64")]
                std::arch::naked_asm!("b {}", sym $c);
            }
        )*
    };
}

variadic! {
    // Not variadic: glibc's dlopen finds its calling object (whose DT_RPATH, DT_RUNPATH and
    // namespace a name without a slash is searched by) from its return address, which the
    // jump here and the C side's tail call into the real dlopen leave as the program's.
    dlopen => nosefs_c_dlopen,
    open => nosefs_c_open,
    open64 => nosefs_c_open64,
    openat => nosefs_c_openat,
    openat64 => nosefs_c_openat64,
    fcntl => nosefs_c_fcntl,
    fcntl64 => nosefs_c_fcntl64,
    ioctl => nosefs_c_ioctl,
    execl => nosefs_c_execl,
    execlp => nosefs_c_execlp,
    execle => nosefs_c_execle,
}

// ---------------------------------------------------------------------------------------------
// Open and close.

#[no_mangle]
pub unsafe extern "C" fn nosefs_hook_openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    let follow = flags & libc::O_NOFOLLOW == 0
        && flags & (libc::O_CREAT | libc::O_EXCL) != (libc::O_CREAT | libc::O_EXCL);
    let kernel = |p: *const c_char| {
        let f = real!(openat: fn(c_int, *const c_char, c_int, mode_t) -> c_int);
        unsafe { f(dirfd, p, flags, mode) }
    };
    // Walked and opened in one request where the path needs a walk.
    match unsafe { routed_start(dirfd, path) } {
        Started::Kernel(k) => kernel(Routed::kernel_path(&k, path)),
        Started::Walk(normal) => {
            let opened = serve(|| ops::open_path(normal, follow, flags, mode));
            opened_or_kernel(opened, kernel)
        }
        Started::In(dir, name) => {
            let opened = serve(|| ops::open_in(&dir, &name, follow, flags, mode));
            opened_or_kernel(opened, kernel)
        }
        Started::Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    unsafe { nosefs_hook_openat(libc::AT_FDCWD, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    unsafe { nosefs_hook_openat(libc::AT_FDCWD, path, flags | libc::O_LARGEFILE, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    unsafe { nosefs_hook_openat(dirfd, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    unsafe { nosefs_hook_openat(dirfd, path, flags | libc::O_LARGEFILE, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    unsafe {
        nosefs_hook_openat(
            libc::AT_FDCWD,
            path,
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            mode,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    unsafe { creat(path, mode) }
}

/// A program's attempt to close or replace one of the shim's own descriptors.
fn refuse_internal(fd: c_int, call: &str) -> c_int {
    state::say(&format!(
        "the program's {call} of descriptor {fd} was refused: noseFS holds its image there"
    ));
    fail(Errno::EBADF)
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fdtable::is_internal(fd) && !in_shim() {
        return refuse_internal(fd, "close");
    }
    if fdtable::is_ours(fd) && !in_shim() {
        let file = serve(|| Ok(fdtable::remove(fd)));
        let rc = unsafe { real!(close: fn(c_int) -> c_int)(fd) };
        let _ = serve(|| {
            ops::descriptor_closed(file.ok().flatten());
            Ok(())
        });
        return rc;
    }
    unsafe { real!(close: fn(c_int) -> c_int)(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let f = real!(close_range: fn(c_uint, c_uint, c_int) -> c_int);
    // The shim's own descriptors are stepped over: the range is closed around them.
    let mut rc = 0;
    let mut from = first;
    for fd in fdtable::internal().into_iter().map(|fd| fd as c_uint) {
        if (from..=last).contains(&fd) {
            if fd > from {
                rc = rc.min(unsafe { f(from, fd - 1, flags) });
            }
            from = fd + 1;
        }
    }
    if from <= last && from >= first {
        rc = rc.min(unsafe { f(from, last, flags) });
    }
    if rc == 0 && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 && fdtable::count() > 0 {
        let _ = serve(|| {
            for (fd, _) in fdtable::all() {
                if (first..=last).contains(&(fd as c_uint)) {
                    ops::descriptor_closed(fdtable::remove(fd));
                }
            }
            Ok(())
        });
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    unsafe { close_range(low.max(0) as c_uint, c_uint::MAX, 0) };
}

// ---------------------------------------------------------------------------------------------
// Reading and writing.

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let buf = unsafe { out_slice(buf, count) };
        return value(serve(|| ops::read(fd, buf))) as ssize_t;
    }
    unsafe { real!(read: fn(c_int, *mut c_void, size_t) -> ssize_t)(fd, buf, count) }
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    _buflen: size_t,
) -> ssize_t {
    unsafe { read(fd, buf, count) }
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let data = unsafe { in_slice(buf, count) };
        return value(serve(|| ops::write(fd, data))) as ssize_t;
    }
    unsafe { real!(write: fn(c_int, *const c_void, size_t) -> ssize_t)(fd, buf, count) }
}

#[no_mangle]
pub unsafe extern "C" fn pread(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: off_t,
) -> ssize_t {
    unsafe { pread64(fd, buf, count, offset) }
}

#[no_mangle]
pub unsafe extern "C" fn pread64(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: off64_t,
) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let buf = unsafe { out_slice(buf, count) };
        return value(serve(|| ops::pread(fd, buf, offset))) as ssize_t;
    }
    unsafe {
        real!(pread64: fn(c_int, *mut c_void, size_t, off64_t) -> ssize_t)(fd, buf, count, offset)
    }
}

#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: off_t,
    _l: size_t,
) -> ssize_t {
    unsafe { pread64(fd, buf, count, offset) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: off64_t,
    _l: size_t,
) -> ssize_t {
    unsafe { pread64(fd, buf, count, offset) }
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(
    fd: c_int,
    buf: *const c_void,
    count: size_t,
    offset: off_t,
) -> ssize_t {
    unsafe { pwrite64(fd, buf, count, offset) }
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    count: size_t,
    offset: off64_t,
) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let data = unsafe { in_slice(buf, count) };
        return value(serve(|| ops::pwrite(fd, data, offset))) as ssize_t;
    }
    unsafe {
        real!(pwrite64: fn(c_int, *const c_void, size_t, off64_t) -> ssize_t)(
            fd, buf, count, offset,
        )
    }
}

unsafe fn out_slice<'a>(buf: *mut c_void, count: size_t) -> &'a mut [u8] {
    if count == 0 || buf.is_null() {
        return &mut [];
    }
    // SAFETY: the caller passes a buffer of `count` writable bytes (read(2)'s contract).
    unsafe { std::slice::from_raw_parts_mut(buf.cast(), count) }
}

unsafe fn in_slice<'a>(buf: *const c_void, count: size_t) -> &'a [u8] {
    if count == 0 || buf.is_null() {
        return &[];
    }
    // SAFETY: the caller passes `count` readable bytes (write(2)'s contract).
    unsafe { std::slice::from_raw_parts(buf.cast(), count) }
}

unsafe fn iovecs<'a>(iov: *const libc::iovec, n: c_int) -> Result<&'a [libc::iovec], Errno> {
    if !(0..=libc::UIO_MAXIOV).contains(&n) {
        return Err(Errno::EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: the caller passes `n` iovec structures.
    Ok(unsafe { std::slice::from_raw_parts(iov, n as usize) })
}

/// Gathers a writev's buffers into one, so the write stays one operation (one append).
unsafe fn gather(iov: &[libc::iovec]) -> Vec<u8> {
    let mut data = Vec::with_capacity(iov.iter().map(|v| v.iov_len).sum());
    for v in iov {
        data.extend_from_slice(unsafe { in_slice(v.iov_base, v.iov_len) });
    }
    data
}

/// Scatters `read(buf)` into the iovecs: reads into one buffer, then copies out.
unsafe fn scatter(
    iov: &[libc::iovec],
    read: impl FnOnce(&mut [u8]) -> Result<usize, Errno>,
) -> Result<usize, Errno> {
    let total: usize = iov.iter().map(|v| v.iov_len).sum();
    let mut data = vec![0u8; total];
    let n = read(&mut data)?;
    let mut at = 0;
    for v in iov {
        if at >= n {
            break;
        }
        let take = v.iov_len.min(n - at);
        unsafe { out_slice(v.iov_base, take) }.copy_from_slice(&data[at..at + take]);
        at += take;
    }
    Ok(n)
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        return value(serve(|| unsafe {
            scatter(iovecs(iov, n)?, |b| ops::read(fd, b))
        })) as ssize_t;
    }
    unsafe { real!(readv: fn(c_int, *const libc::iovec, c_int) -> ssize_t)(fd, iov, n) }
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        return value(serve(|| unsafe {
            ops::write(fd, &gather(iovecs(iov, n)?))
        })) as ssize_t;
    }
    unsafe { real!(writev: fn(c_int, *const libc::iovec, c_int) -> ssize_t)(fd, iov, n) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off_t,
) -> ssize_t {
    unsafe { preadv_any(fd, iov, n, offset, 0, false) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off64_t,
) -> ssize_t {
    unsafe { preadv_any(fd, iov, n, offset, 0, false) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off_t,
    flags: c_int,
) -> ssize_t {
    unsafe { preadv_any(fd, iov, n, offset, flags, true) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off64_t,
    flags: c_int,
) -> ssize_t {
    unsafe { preadv_any(fd, iov, n, offset, flags, true) }
}

unsafe fn preadv_any(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off64_t,
    flags: c_int,
    v2: bool,
) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        // Offset -1 (preadv2) means "at the file offset".
        let r = serve(|| unsafe {
            scatter(iovecs(iov, n)?, |b| {
                if offset == -1 {
                    ops::read(fd, b)
                } else {
                    ops::pread(fd, b, offset)
                }
            })
        });
        return value(r) as ssize_t;
    }
    if v2 {
        unsafe {
            real!(preadv64v2: fn(c_int, *const libc::iovec, c_int, off64_t, c_int) -> ssize_t)(
                fd, iov, n, offset, flags,
            )
        }
    } else {
        unsafe {
            real!(preadv64: fn(c_int, *const libc::iovec, c_int, off64_t) -> ssize_t)(
                fd, iov, n, offset,
            )
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off_t,
) -> ssize_t {
    unsafe { pwritev_any(fd, iov, n, offset, 0, false) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off64_t,
) -> ssize_t {
    unsafe { pwritev_any(fd, iov, n, offset, 0, false) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off_t,
    flags: c_int,
) -> ssize_t {
    unsafe { pwritev_any(fd, iov, n, offset, flags, true) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off64_t,
    flags: c_int,
) -> ssize_t {
    unsafe { pwritev_any(fd, iov, n, offset, flags, true) }
}

unsafe fn pwritev_any(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    offset: off64_t,
    flags: c_int,
    v2: bool,
) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let r = serve(|| unsafe {
            let data = gather(iovecs(iov, n)?);
            if offset == -1 {
                ops::write(fd, &data)
            } else {
                ops::pwrite(fd, &data, offset)
            }
        });
        return value(r) as ssize_t;
    }
    if v2 {
        unsafe {
            real!(pwritev64v2: fn(c_int, *const libc::iovec, c_int, off64_t, c_int) -> ssize_t)(
                fd, iov, n, offset, flags,
            )
        }
    } else {
        unsafe {
            real!(pwritev64: fn(c_int, *const libc::iovec, c_int, off64_t) -> ssize_t)(
                fd, iov, n, offset,
            )
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, offset: off_t, whence: c_int) -> off_t {
    unsafe { lseek64(fd, offset, whence) }
}

#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, offset: off64_t, whence: c_int) -> off64_t {
    if fdtable::is_ours(fd) && !in_shim() {
        return value(serve(|| ops::lseek(fd, offset, whence)));
    }
    unsafe { real!(lseek64: fn(c_int, off64_t, c_int) -> off64_t)(fd, offset, whence) }
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| ops::fsync(fd)));
    }
    unsafe { real!(fsync: fn(c_int) -> c_int)(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| ops::fsync(fd)));
    }
    unsafe { real!(fdatasync: fn(c_int) -> c_int)(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn sync_file_range(
    fd: c_int,
    offset: off64_t,
    n: off64_t,
    flags: c_uint,
) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| ops::fsync(fd)));
    }
    unsafe {
        real!(sync_file_range: fn(c_int, off64_t, off64_t, c_uint) -> c_int)(fd, offset, n, flags)
    }
}

#[no_mangle]
pub unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(ops::sync_all));
    }
    unsafe { real!(syncfs: fn(c_int) -> c_int)(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn sync() {
    if !in_shim() {
        let _ = serve(ops::sync_all);
    }
    unsafe { real!(sync: fn() -> ())() }
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, size: off_t) -> c_int {
    unsafe { ftruncate64(fd, size) }
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, size: off64_t) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| ops::ftruncate(fd, size)));
    }
    unsafe { real!(ftruncate64: fn(c_int, off64_t) -> c_int)(fd, size) }
}

#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, size: off_t) -> c_int {
    unsafe { truncate64(path, size) }
}

#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, size: off64_t) -> c_int {
    match unsafe { routed(libc::AT_FDCWD, path, true) } {
        Routed::Kernel(k) => unsafe {
            real!(truncate64: fn(*const c_char, off64_t) -> c_int)(
                Routed::kernel_path(&k, path),
                size,
            )
        },
        Routed::Ours(f) => int(serve(|| ops::truncate(&f, size))),
        Routed::Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, offset: off_t, len: off_t) -> c_int {
    unsafe { fallocate64(fd, mode, offset, len) }
}

#[no_mangle]
pub unsafe extern "C" fn fallocate64(
    fd: c_int,
    mode: c_int,
    offset: off64_t,
    len: off64_t,
) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| ops::fallocate(fd, mode, offset, len)));
    }
    unsafe {
        real!(fallocate64: fn(c_int, c_int, off64_t, off64_t) -> c_int)(fd, mode, offset, len)
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, offset: off_t, len: off_t) -> c_int {
    unsafe { posix_fallocate64(fd, offset, len) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, offset: off64_t, len: off64_t) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        // posix_fallocate returns the error number instead of setting errno.
        return match serve(|| ops::fallocate(fd, 0, offset, len)) {
            Ok(()) => 0,
            Err(e) => e.0,
        };
    }
    unsafe { real!(posix_fallocate64: fn(c_int, off64_t, off64_t) -> c_int)(fd, offset, len) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(
    fd: c_int,
    offset: off_t,
    len: off_t,
    advice: c_int,
) -> c_int {
    if fdtable::is_ours(fd) {
        return 0;
    }
    unsafe {
        real!(posix_fadvise: fn(c_int, off_t, off_t, c_int) -> c_int)(fd, offset, len, advice)
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(
    fd: c_int,
    offset: off64_t,
    len: off64_t,
    advice: c_int,
) -> c_int {
    unsafe { posix_fadvise(fd, offset, len, advice) }
}

// ---------------------------------------------------------------------------------------------
// Attributes.

/// The device number noseFS files report (major 0, like other virtual file systems).
const DEV_MINOR: u32 = 0x6e6f;

fn fill_stat(attr: &Attr, st: &mut libc::stat) {
    st.st_dev = libc::makedev(0, DEV_MINOR);
    st.st_ino = attr.ino;
    st.st_nlink = u64::from(attr.nlink);
    st.st_mode = attr.mode;
    st.st_uid = attr.uid;
    st.st_gid = attr.gid;
    st.st_rdev = u64::from(attr.rdev);
    st.st_size = attr.size as i64;
    st.st_blksize = 4096;
    st.st_blocks = attr.blocks as i64;
    st.st_atime = attr.atime_ns.div_euclid(1_000_000_000);
    st.st_atime_nsec = attr.atime_ns.rem_euclid(1_000_000_000);
    st.st_mtime = attr.mtime_ns.div_euclid(1_000_000_000);
    st.st_mtime_nsec = attr.mtime_ns.rem_euclid(1_000_000_000);
    st.st_ctime = attr.ctime_ns.div_euclid(1_000_000_000);
    st.st_ctime_nsec = attr.ctime_ns.rem_euclid(1_000_000_000);
}

unsafe fn put_stat(r: Result<Attr, Errno>, buf: *mut libc::stat) -> c_int {
    match r {
        Ok(attr) if !buf.is_null() => {
            // SAFETY: the caller passes a struct stat to fill.
            let st = unsafe { &mut *buf };
            // SAFETY: struct stat is plain data; all-zero is a valid value.
            *st = unsafe { std::mem::zeroed() };
            fill_stat(&attr, st);
            0
        }
        Ok(_) => fail(Errno(libc::EFAULT)),
        Err(e) => fail(e),
    }
}

unsafe fn stat_at(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int {
    let empty =
        flags & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(path) }.is_some_and(<[u8]>::is_empty);
    if empty && fdtable::is_ours(dirfd) && !in_shim() {
        return unsafe { put_stat(serve(|| ops::fstat(dirfd)), buf) };
    }
    if !empty {
        match unsafe { routed(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) } {
            Routed::Kernel(Some(k)) => {
                return unsafe {
                    real!(fstatat64: fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int)(
                        dirfd,
                        k.as_ptr(),
                        buf,
                        flags,
                    )
                }
            }
            Routed::Kernel(None) => {}
            Routed::Ours(f) => return unsafe { put_stat(serve(|| ops::stat(&f)), buf) },
            Routed::Err(e) => return fail(e),
        }
    }
    unsafe {
        real!(fstatat64: fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int)(
            dirfd, path, buf, flags,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, libc::AT_SYMLINK_NOFOLLOW) }
}

#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, libc::AT_SYMLINK_NOFOLLOW) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    unsafe { stat_at(dirfd, path, buf, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    unsafe { stat_at(dirfd, path, buf, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return unsafe { put_stat(serve(|| ops::fstat(fd)), buf) };
    }
    unsafe { real!(fstat: fn(c_int, *mut libc::stat) -> c_int)(fd, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat) -> c_int {
    unsafe { fstat(fd, buf) }
}

// The glibc < 2.33 ABI: programs built against older glibc call these.
#[no_mangle]
pub unsafe extern "C" fn __xstat(_ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __xstat64(
    _ver: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat(_ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, libc::AT_SYMLINK_NOFOLLOW) }
}

#[no_mangle]
pub unsafe extern "C" fn __lxstat64(
    _ver: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
) -> c_int {
    unsafe { stat_at(libc::AT_FDCWD, path, buf, libc::AT_SYMLINK_NOFOLLOW) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat(_ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int {
    unsafe { fstat(fd, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat64(_ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int {
    unsafe { fstat(fd, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat(
    _ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    unsafe { stat_at(dirfd, path, buf, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstatat64(
    _ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    unsafe { stat_at(dirfd, path, buf, flags) }
}

fn statx_time(ns: i64) -> libc::statx_timestamp {
    // SAFETY: plain data; all-zero is valid.
    let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
    t.tv_sec = ns.div_euclid(1_000_000_000);
    t.tv_nsec = ns.rem_euclid(1_000_000_000) as u32;
    t
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut libc::statx,
) -> c_int {
    let empty =
        flags & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(path) }.is_some_and(<[u8]>::is_empty);
    let attr = if empty && fdtable::is_ours(dirfd) && !in_shim() {
        serve(|| ops::fstat(dirfd))
    } else if empty {
        return unsafe {
            real!(statx: fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int)(
                dirfd, path, flags, mask, buf,
            )
        };
    } else {
        match unsafe { routed(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) } {
            Routed::Kernel(k) => {
                let f = real!(statx: fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int);
                return unsafe { f(dirfd, Routed::kernel_path(&k, path), flags, mask, buf) };
            }
            Routed::Ours(f) => serve(|| ops::stat(&f)),
            Routed::Err(e) => return fail(e),
        }
    };
    match attr {
        Ok(a) if !buf.is_null() => {
            // SAFETY: the caller passes a struct statx to fill; all-zero is a valid value.
            let sx = unsafe { &mut *buf };
            *sx = unsafe { std::mem::zeroed() };
            sx.stx_mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
            sx.stx_blksize = 4096;
            sx.stx_nlink = a.nlink;
            sx.stx_uid = a.uid;
            sx.stx_gid = a.gid;
            sx.stx_mode = a.mode as u16;
            sx.stx_ino = a.ino;
            sx.stx_size = a.size;
            sx.stx_blocks = a.blocks;
            sx.stx_atime = statx_time(a.atime_ns);
            sx.stx_btime = statx_time(a.ctime_ns);
            sx.stx_ctime = statx_time(a.ctime_ns);
            sx.stx_mtime = statx_time(a.mtime_ns);
            sx.stx_rdev_major = libc::major(u64::from(a.rdev));
            sx.stx_rdev_minor = libc::minor(u64::from(a.rdev));
            sx.stx_dev_major = 0;
            sx.stx_dev_minor = DEV_MINOR;
            0
        }
        Ok(_) => fail(Errno(libc::EFAULT)),
        Err(e) => fail(e),
    }
}

const NOSEFS_MAGIC: i64 = 0x6e6f_7365;

unsafe fn put_statfs(buf: *mut libc::statfs) -> c_int {
    match serve(ops::statfs) {
        Ok((blocks, free, files, ffree)) if !buf.is_null() => {
            // SAFETY: the caller passes a struct statfs; all-zero is valid.
            let s = unsafe { &mut *buf };
            *s = unsafe { std::mem::zeroed() };
            s.f_type = NOSEFS_MAGIC;
            s.f_bsize = 4096;
            s.f_blocks = blocks;
            s.f_bfree = free;
            s.f_bavail = free;
            s.f_files = files;
            s.f_ffree = ffree;
            s.f_namelen = 255;
            s.f_frsize = 4096;
            0
        }
        Ok(_) => fail(Errno(libc::EFAULT)),
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn statfs(path: *const c_char, buf: *mut libc::statfs) -> c_int {
    match unsafe { routed(libc::AT_FDCWD, path, true) } {
        Routed::Kernel(k) => unsafe {
            real!(statfs: fn(*const c_char, *mut libc::statfs) -> c_int)(
                Routed::kernel_path(&k, path),
                buf,
            )
        },
        Routed::Ours(f) => match f.existing() {
            Ok(_) => unsafe { put_statfs(buf) },
            Err(e) => fail(e),
        },
        Routed::Err(e) => fail(e),
    }
}

/// `pathconf`/`fpathconf` values for noseFS (glibc computes them from an internal statfs the
/// shim never sees). EINVAL for a name that has no limit here, as the kernel's file systems do.
fn conf_value(name: c_int) -> Result<libc::c_long, Errno> {
    use nosefs_core::format::pinode::NAME_MAX;
    Ok(match name {
        libc::_PC_NAME_MAX => NAME_MAX as libc::c_long,
        libc::_PC_PATH_MAX => libc::PATH_MAX as libc::c_long,
        libc::_PC_LINK_MAX => nosefs_core::namespace::LINK_MAX as libc::c_long,
        libc::_PC_SYMLINK_MAX => nosefs_core::namespace::SYMLINK_MAX as libc::c_long,
        libc::_PC_FILESIZEBITS => 64,
        libc::_PC_NO_TRUNC | libc::_PC_CHOWN_RESTRICTED | libc::_PC_2_SYMLINKS => 1,
        libc::_PC_PIPE_BUF => 4096,
        libc::_PC_MAX_CANON | libc::_PC_MAX_INPUT => 255,
        libc::_PC_VDISABLE => 0,
        libc::_PC_REC_XFER_ALIGN | libc::_PC_ALLOC_SIZE_MIN | libc::_PC_REC_MIN_XFER_SIZE => 4096,
        _ => return Err(Errno::EINVAL),
    })
}

fn conf_result(r: Result<libc::c_long, Errno>) -> libc::c_long {
    r.unwrap_or_else(|e| {
        set_errno(e);
        -1
    })
}

#[no_mangle]
pub unsafe extern "C" fn pathconf(path: *const c_char, name: c_int) -> libc::c_long {
    match unsafe { routed(libc::AT_FDCWD, path, true) } {
        Routed::Kernel(k) => unsafe {
            real!(pathconf: fn(*const c_char, c_int) -> libc::c_long)(
                Routed::kernel_path(&k, path),
                name,
            )
        },
        Routed::Ours(f) => conf_result(f.existing().and_then(|_| conf_value(name))),
        Routed::Err(e) => conf_result(Err(e)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fpathconf(fd: c_int, name: c_int) -> libc::c_long {
    if fdtable::is_ours(fd) && !in_shim() {
        return conf_result(conf_value(name));
    }
    unsafe { real!(fpathconf: fn(c_int, c_int) -> libc::c_long)(fd, name) }
}

#[no_mangle]
pub unsafe extern "C" fn statfs64(path: *const c_char, buf: *mut libc::statfs) -> c_int {
    unsafe { statfs(path, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs(fd: c_int, buf: *mut libc::statfs) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return unsafe { put_statfs(buf) };
    }
    unsafe { real!(fstatfs: fn(c_int, *mut libc::statfs) -> c_int)(fd, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs64(fd: c_int, buf: *mut libc::statfs) -> c_int {
    unsafe { fstatfs(fd, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn statvfs(path: *const c_char, buf: *mut libc::statvfs) -> c_int {
    match unsafe { routed(libc::AT_FDCWD, path, true) } {
        Routed::Kernel(k) => unsafe {
            real!(statvfs: fn(*const c_char, *mut libc::statvfs) -> c_int)(
                Routed::kernel_path(&k, path),
                buf,
            )
        },
        Routed::Ours(_) => unsafe { put_statvfs(buf) },
        Routed::Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn statvfs64(path: *const c_char, buf: *mut libc::statvfs) -> c_int {
    unsafe { statvfs(path, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs(fd: c_int, buf: *mut libc::statvfs) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return unsafe { put_statvfs(buf) };
    }
    unsafe { real!(fstatvfs: fn(c_int, *mut libc::statvfs) -> c_int)(fd, buf) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs64(fd: c_int, buf: *mut libc::statvfs) -> c_int {
    unsafe { fstatvfs(fd, buf) }
}

unsafe fn put_statvfs(buf: *mut libc::statvfs) -> c_int {
    match serve(ops::statfs) {
        Ok((blocks, free, files, ffree)) if !buf.is_null() => {
            // SAFETY: the caller passes a struct statvfs; all-zero is valid.
            let s = unsafe { &mut *buf };
            *s = unsafe { std::mem::zeroed() };
            s.f_bsize = 4096;
            s.f_frsize = 4096;
            s.f_blocks = blocks;
            s.f_bfree = free;
            s.f_bavail = free;
            s.f_files = files;
            s.f_ffree = ffree;
            s.f_favail = ffree;
            s.f_fsid = u64::from(DEV_MINOR);
            s.f_namemax = 255;
            0
        }
        Ok(_) => fail(Errno(libc::EFAULT)),
        Err(e) => fail(e),
    }
}

unsafe fn access_at(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int {
    match unsafe { routed(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) } {
        Routed::Kernel(k) => unsafe {
            real!(faccessat: fn(c_int, *const c_char, c_int, c_int) -> c_int)(
                dirfd,
                Routed::kernel_path(&k, path),
                mode,
                flags,
            )
        },
        Routed::Ours(f) => int(serve(|| ops::access(&f, mode))),
        Routed::Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    unsafe { access_at(libc::AT_FDCWD, path, mode, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    unsafe { access_at(libc::AT_FDCWD, path, mode, libc::AT_EACCESS) }
}

#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    unsafe { access_at(libc::AT_FDCWD, path, mode, libc::AT_EACCESS) }
}

#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    unsafe { access_at(dirfd, path, mode, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn faccessat2(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    unsafe { access_at(dirfd, path, mode, flags) }
}

// ---------------------------------------------------------------------------------------------
// Names.

macro_rules! path_op {
    ($dirfd:expr, $path:expr, $follow:expr, $ours:expr, $kernel:expr) => {
        match unsafe { routed($dirfd, $path, $follow) } {
            Routed::Kernel(k) => {
                let p = Routed::kernel_path(&k, $path);
                #[allow(clippy::redundant_closure_call)]
                unsafe {
                    $kernel(p)
                }
            }
            Routed::Ours(f) => int(serve(|| $ours(&f))),
            Routed::Err(e) => fail(e),
        }
    };
}

#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        false,
        |f: &Found| ops::mkdir(f, mode),
        |p| real!(mkdir: fn(*const c_char, mode_t) -> c_int)(p, mode)
    )
}

#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    path_op!(
        dirfd,
        path,
        false,
        |f: &Found| ops::mkdir(f, mode),
        |p| real!(mkdirat: fn(c_int, *const c_char, mode_t) -> c_int)(dirfd, p, mode)
    )
}

#[no_mangle]
pub unsafe extern "C" fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    unsafe { mknodat(libc::AT_FDCWD, path, mode, dev) }
}

#[no_mangle]
pub unsafe extern "C" fn mknodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: libc::dev_t,
) -> c_int {
    path_op!(
        dirfd,
        path,
        false,
        |f: &Found| ops::mknod(f, mode, dev),
        |p| real!(mknodat: fn(c_int, *const c_char, mode_t, libc::dev_t) -> c_int)(
            dirfd, p, mode, dev
        )
    )
}

#[no_mangle]
pub unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    unsafe { mknodat(libc::AT_FDCWD, path, mode | libc::S_IFIFO, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    unsafe { mknodat(dirfd, path, mode | libc::S_IFIFO, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    let last = unsafe { bytes(path) }.map(ops::last_component);
    path_op!(
        libc::AT_FDCWD,
        path,
        false,
        |f: &Found| ops::rmdir_named(f, last.unwrap_or_default()),
        |p| real!(rmdir: fn(*const c_char) -> c_int)(p)
    )
}

#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        false,
        ops::unlink,
        |p| real!(unlink: fn(*const c_char) -> c_int)(p)
    )
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if flags & libc::AT_REMOVEDIR == 0 {
        if let Some((dir, name)) = unsafe { name_in(dirfd, path) } {
            match serve(|| ops::unlink_in(&dir, name)) {
                Ok(true) => return 0,
                Ok(false) => {} // the full route below
                Err(e) => return fail(e),
            }
        }
    }
    let last = unsafe { bytes(path) }.map(ops::last_component);
    let ours = |f: &Found| {
        if flags & libc::AT_REMOVEDIR != 0 {
            ops::rmdir_named(f, last.unwrap_or_default())
        } else {
            ops::unlink(f)
        }
    };
    path_op!(
        dirfd,
        path,
        false,
        ours,
        |p| real!(unlinkat: fn(c_int, *const c_char, c_int) -> c_int)(dirfd, p, flags)
    )
}

#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    unsafe { symlinkat(target, libc::AT_FDCWD, path) }
}

#[no_mangle]
pub unsafe extern "C" fn symlinkat(
    target: *const c_char,
    dirfd: c_int,
    path: *const c_char,
) -> c_int {
    let Some(t) = (unsafe { bytes(target) }) else {
        return fail(Errno(libc::EFAULT));
    };
    if t.len() >= libc::PATH_MAX as usize {
        return fail(Errno(libc::ENAMETOOLONG)); // checked by the kernel before the new name
    }
    path_op!(
        dirfd,
        path,
        false,
        |f: &Found| ops::symlink(t, f),
        |p| real!(symlinkat: fn(*const c_char, c_int, *const c_char) -> c_int)(target, dirfd, p)
    )
}

unsafe fn readlink_at(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> ssize_t {
    match unsafe { routed(dirfd, path, false) } {
        Routed::Kernel(k) => unsafe {
            real!(readlinkat: fn(c_int, *const c_char, *mut c_char, size_t) -> ssize_t)(
                dirfd,
                Routed::kernel_path(&k, path),
                buf,
                size,
            )
        },
        Routed::Ours(f) => match serve(|| ops::readlink(&f)) {
            Ok(target) => {
                let n = target.len().min(size);
                unsafe { out_slice(buf.cast(), n) }.copy_from_slice(&target[..n]);
                n as ssize_t
            }
            Err(e) => fail(e) as ssize_t,
        },
        Routed::Err(e) => fail(e) as ssize_t,
    }
}

#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, size: size_t) -> ssize_t {
    unsafe { readlink_at(libc::AT_FDCWD, path, buf, size) }
}

#[no_mangle]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> ssize_t {
    unsafe { readlink_at(dirfd, path, buf, size) }
}

/// The calls of two paths, which resolve them in different orders.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TwoPathCall {
    /// Both paths' directories, then the first one's last component.
    Rename,
    /// The first path whole (its last symlink followed with `follow`), then the second.
    Link { follow: bool },
}

/// Two paths: both noseFS's, both the kernel's, or EXDEV.
unsafe fn two_paths(
    d1: c_int,
    p1: *const c_char,
    d2: c_int,
    p2: *const c_char,
    call: TwoPathCall,
    ours: impl FnOnce(&Found, &Found) -> Result<(), Errno>,
    kernel: impl FnOnce(*const c_char, *const c_char) -> c_int,
) -> c_int {
    if unsafe { bytes(p1).is_none() } {
        return fail(Errno(libc::EFAULT)); // what the kernel answers
    }
    let a = unsafe { routed(d1, p1, call == TwoPathCall::Link { follow: true }) };
    if unsafe { bytes(p2).is_none() } {
        // The kernel reads the second path when it resolves it: after link's lookup of the
        // first (whose ENOENT comes first), after rename's of the first one's directory.
        return match a {
            Routed::Err(e) => fail(e),
            Routed::Ours(x) if call != TwoPathCall::Rename && x.attr.is_none() => {
                fail(Errno::ENOENT)
            }
            Routed::Kernel(x) => kernel(Routed::kernel_path(&x, p1), p2),
            Routed::Ours(_) => fail(Errno(libc::EFAULT)),
        };
    }
    let b = unsafe { routed(d2, p2, false) };
    match (a, b) {
        (Routed::Err(e), _) => fail(e),
        // link looks the old path up whole before the new one's directories (rename looks up
        // both directories first): a missing source is ENOENT whatever the target's path holds.
        (Routed::Ours(x), Routed::Err(_)) if call != TwoPathCall::Rename && x.attr.is_none() => {
            fail(Errno::ENOENT)
        }
        (_, Routed::Err(e)) => fail(e),
        (Routed::Ours(x), Routed::Ours(y)) => int(serve(|| ours(&x, &y))),
        (Routed::Kernel(x), Routed::Kernel(y)) => {
            kernel(Routed::kernel_path(&x, p1), Routed::kernel_path(&y, p2))
        }
        _ => fail(Errno(libc::EXDEV)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rename(from: *const c_char, to: *const c_char) -> c_int {
    unsafe { renameat2(libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn renameat(
    d1: c_int,
    from: *const c_char,
    d2: c_int,
    to: *const c_char,
) -> c_int {
    unsafe { renameat2(d1, from, d2, to, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    d1: c_int,
    from: *const c_char,
    d2: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    if let (Some(a), Some(b)) = unsafe { (name_in(d1, from), name_in(d2, to)) } {
        match serve(|| ops::rename_in((&a.0, a.1), (&b.0, b.1), flags)) {
            Ok(true) => return 0,
            Ok(false) => {} // the full route below
            Err(e) => return fail(e),
        }
    }
    unsafe {
        two_paths(
            d1,
            from,
            d2,
            to,
            TwoPathCall::Rename,
            |a, b| ops::rename(a, b, flags),
            |x, y| {
                real!(renameat2: fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int)(
                    d1, x, d2, y, flags,
                )
            },
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn link(from: *const c_char, to: *const c_char) -> c_int {
    unsafe { linkat(libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn linkat(
    d1: c_int,
    from: *const c_char,
    d2: c_int,
    to: *const c_char,
    flags: c_int,
) -> c_int {
    let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
    let empty =
        flags & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(from) }.is_some_and(<[u8]>::is_empty);
    if empty && fdtable::is_ours(d1) && !in_shim() {
        // A name for an open noseFS file (O_TMPFILE's first): the new name must be ours too.
        return match unsafe { routed(d2, to, false) } {
            Routed::Ours(t) => int(serve(|| ops::flink(d1, &t))),
            Routed::Kernel(_) => fail(Errno(libc::EXDEV)),
            Routed::Err(e) => fail(e),
        };
    }
    unsafe {
        two_paths(
            d1,
            from,
            d2,
            to,
            TwoPathCall::Link { follow },
            ops::link,
            |x, y| {
                real!(linkat: fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int)(
                    d1, x, d2, y, flags,
                )
            },
        )
    }
}

// Asynchronous I/O.
//
// io_uring (through liburing) and Linux AIO (through libaio) hand requests to the kernel, which
// sees only the placeholders of noseFS descriptors: a read or write submitted there would fail,
// or wait for ever, and nothing reaches noseFS. A process that serves noseFS is told these
// interfaces are missing, with the answer a kernel without them gives (ENOSYS), and programs
// fall back to ordinary calls (MariaDB's InnoDB: innodb_use_native_aio off; RocksDB and
// PostgreSQL: synchronous I/O). Kernel files of the process lose them too: the rings cannot tell
// which descriptors they will be given.

/// Whether asynchronous-I/O set-up is refused in this process.
fn async_io_refused() -> bool {
    state::config().is_some()
}

#[no_mangle]
pub unsafe extern "C" fn io_uring_queue_init(
    entries: c_uint,
    ring: *mut c_void,
    flags: c_uint,
) -> c_int {
    if async_io_refused() {
        return -libc::ENOSYS; // liburing answers a negative errno
    }
    unsafe {
        real!(io_uring_queue_init: fn(c_uint, *mut c_void, c_uint) -> c_int)(entries, ring, flags)
    }
}

#[no_mangle]
pub unsafe extern "C" fn io_uring_queue_init_params(
    entries: c_uint,
    ring: *mut c_void,
    params: *mut c_void,
) -> c_int {
    if async_io_refused() {
        return -libc::ENOSYS;
    }
    unsafe {
        real!(io_uring_queue_init_params: fn(c_uint, *mut c_void, *mut c_void) -> c_int)(
            entries, ring, params,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn io_uring_queue_init_mem(
    entries: c_uint,
    ring: *mut c_void,
    params: *mut c_void,
    buf: *mut c_void,
    buf_size: size_t,
) -> c_int {
    if async_io_refused() {
        return -libc::ENOSYS;
    }
    unsafe {
        real!(io_uring_queue_init_mem: fn(c_uint, *mut c_void, *mut c_void, *mut c_void, size_t) -> c_int)(
            entries, ring, params, buf, buf_size,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn io_uring_setup(entries: c_uint, params: *mut c_void) -> c_int {
    if async_io_refused() {
        return -libc::ENOSYS;
    }
    unsafe { real!(io_uring_setup: fn(c_uint, *mut c_void) -> c_int)(entries, params) }
}

#[no_mangle]
pub unsafe extern "C" fn io_setup(max_events: c_int, context: *mut c_void) -> c_int {
    if async_io_refused() {
        return -libc::ENOSYS; // libaio answers a negative errno
    }
    unsafe { real!(io_setup: fn(c_int, *mut c_void) -> c_int)(max_events, context) }
}

#[no_mangle]
pub unsafe extern "C" fn io_queue_init(max_events: c_int, context: *mut c_void) -> c_int {
    if async_io_refused() {
        return -libc::ENOSYS;
    }
    unsafe { real!(io_queue_init: fn(c_int, *mut c_void) -> c_int)(max_events, context) }
}

// Extended attributes.

/// What a get or list call returns in a caller's buffer: the length with `size` 0, ERANGE when
/// it does not fit, else the bytes copied.
unsafe fn xattr_out(result: Result<Vec<u8>, Errno>, buf: *mut c_void, size: size_t) -> ssize_t {
    match result {
        Ok(bytes) if size == 0 => bytes.len() as ssize_t,
        Ok(bytes) if bytes.len() > size => fail(Errno(libc::ERANGE)) as ssize_t,
        Ok(bytes) => {
            unsafe { out_slice(buf, bytes.len()) }.copy_from_slice(&bytes);
            bytes.len() as ssize_t
        }
        Err(e) => fail(e) as ssize_t,
    }
}

/// A name argument: EFAULT where the kernel would fault.
unsafe fn xattr_name<'a>(name: *const c_char) -> Result<&'a [u8], Errno> {
    unsafe { bytes(name) }.ok_or(Errno(libc::EFAULT))
}

/// A path-addressed get or list (`follow`: not the `l` form).
unsafe fn xattr_get_path(
    path: *const c_char,
    follow: bool,
    name: Option<*const c_char>,
    buf: *mut c_void,
    size: size_t,
    kernel: impl FnOnce(*const c_char) -> ssize_t,
) -> ssize_t {
    match unsafe { routed(libc::AT_FDCWD, path, follow) } {
        Routed::Kernel(k) => kernel(Routed::kernel_path(&k, path)),
        Routed::Ours(f) => {
            let result = serve(|| match name {
                Some(name) => ops::xattr(&f, vfs::XattrCall::Get(unsafe { xattr_name(name) }?)),
                None => ops::xattr(&f, vfs::XattrCall::List),
            });
            unsafe { xattr_out(result, buf, size) }
        }
        Routed::Err(e) => fail(e) as ssize_t,
    }
}

#[no_mangle]
pub unsafe extern "C" fn getxattr(
    path: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size: size_t,
) -> ssize_t {
    unsafe {
        xattr_get_path(path, true, Some(name), value, size, |p| {
            real!(getxattr: fn(*const c_char, *const c_char, *mut c_void, size_t) -> ssize_t)(
                p, name, value, size,
            )
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn lgetxattr(
    path: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size: size_t,
) -> ssize_t {
    unsafe {
        xattr_get_path(path, false, Some(name), value, size, |p| {
            real!(lgetxattr: fn(*const c_char, *const c_char, *mut c_void, size_t) -> ssize_t)(
                p, name, value, size,
            )
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn fgetxattr(
    fd: c_int,
    name: *const c_char,
    value: *mut c_void,
    size: size_t,
) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let result = serve(|| ops::fxattr(fd, vfs::XattrCall::Get(unsafe { xattr_name(name) }?)));
        return unsafe { xattr_out(result, value, size) };
    }
    unsafe {
        real!(fgetxattr: fn(c_int, *const c_char, *mut c_void, size_t) -> ssize_t)(
            fd, name, value, size,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn listxattr(
    path: *const c_char,
    list: *mut c_char,
    size: size_t,
) -> ssize_t {
    unsafe {
        xattr_get_path(path, true, None, list.cast(), size, |p| {
            real!(listxattr: fn(*const c_char, *mut c_char, size_t) -> ssize_t)(p, list, size)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn llistxattr(
    path: *const c_char,
    list: *mut c_char,
    size: size_t,
) -> ssize_t {
    unsafe {
        xattr_get_path(path, false, None, list.cast(), size, |p| {
            real!(llistxattr: fn(*const c_char, *mut c_char, size_t) -> ssize_t)(p, list, size)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn flistxattr(fd: c_int, list: *mut c_char, size: size_t) -> ssize_t {
    if fdtable::is_ours(fd) && !in_shim() {
        let result = serve(|| ops::fxattr(fd, vfs::XattrCall::List));
        return unsafe { xattr_out(result, list.cast(), size) };
    }
    unsafe { real!(flistxattr: fn(c_int, *mut c_char, size_t) -> ssize_t)(fd, list, size) }
}

/// A set or remove call from its C arguments (`value` null for remove).
unsafe fn xattr_change<'a>(
    name: *const c_char,
    value: Option<(*const c_void, size_t)>,
    flags: c_int,
) -> Result<vfs::XattrCall<'a>, Errno> {
    let name = unsafe { xattr_name(name) }?;
    Ok(match value {
        Some((value, size)) => vfs::XattrCall::Set(name, unsafe { in_slice(value, size) }, flags),
        None => vfs::XattrCall::Remove(name),
    })
}

#[no_mangle]
pub unsafe extern "C" fn setxattr(
    path: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        true,
        |f: &Found| ops::xattr(f, unsafe {
            xattr_change(name, Some((value, size)), flags)
        }?)
        .map(drop),
        |p| real!(setxattr: fn(*const c_char, *const c_char, *const c_void, size_t, c_int) -> c_int)(
            p, name, value, size, flags
        )
    )
}

#[no_mangle]
pub unsafe extern "C" fn lsetxattr(
    path: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        false,
        |f: &Found| ops::xattr(f, unsafe {
            xattr_change(name, Some((value, size)), flags)
        }?)
        .map(drop),
        |p| real!(lsetxattr: fn(*const c_char, *const c_char, *const c_void, size_t, c_int) -> c_int)(
            p, name, value, size, flags
        )
    )
}

#[no_mangle]
pub unsafe extern "C" fn fsetxattr(
    fd: c_int,
    name: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| {
            ops::fxattr(fd, unsafe {
                xattr_change(name, Some((value, size)), flags)
            }?)
            .map(drop)
        }));
    }
    unsafe {
        real!(fsetxattr: fn(c_int, *const c_char, *const c_void, size_t, c_int) -> c_int)(
            fd, name, value, size, flags,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn removexattr(path: *const c_char, name: *const c_char) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        true,
        |f: &Found| ops::xattr(f, unsafe { xattr_change(name, None, 0) }?).map(drop),
        |p| real!(removexattr: fn(*const c_char, *const c_char) -> c_int)(p, name)
    )
}

#[no_mangle]
pub unsafe extern "C" fn lremovexattr(path: *const c_char, name: *const c_char) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        false,
        |f: &Found| ops::xattr(f, unsafe { xattr_change(name, None, 0) }?).map(drop),
        |p| real!(lremovexattr: fn(*const c_char, *const c_char) -> c_int)(p, name)
    )
}

#[no_mangle]
pub unsafe extern "C" fn fremovexattr(fd: c_int, name: *const c_char) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| {
            ops::fxattr(fd, unsafe { xattr_change(name, None, 0) }?).map(drop)
        }));
    }
    unsafe { real!(fremovexattr: fn(c_int, *const c_char) -> c_int)(fd, name) }
}

// chmod, chown, times.

fn chmod_change(mode: mode_t) -> SetAttr {
    SetAttr {
        mode: Some(mode & 0o7777),
        ..SetAttr::default()
    }
}

fn chown_change(uid: uid_t, gid: gid_t) -> SetAttr {
    SetAttr {
        uid: (uid != u32::MAX).then_some(uid),
        gid: (gid != u32::MAX).then_some(gid),
        ..SetAttr::default()
    }
}

fn setattr_found(f: &Found, change: &SetAttr, now: bool) -> Result<(), Errno> {
    ops::setattr(f, change, now)
}

fn setattr_fd(fd: c_int, change: &SetAttr, now: bool) -> Result<(), Errno> {
    ops::fsetattr(fd, change, now)
}

#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        true,
        |f: &Found| setattr_found(f, &chmod_change(mode), false),
        |p| real!(chmod: fn(*const c_char, mode_t) -> c_int)(p, mode)
    )
}

#[no_mangle]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    path_op!(
        dirfd,
        path,
        flags & libc::AT_SYMLINK_NOFOLLOW == 0,
        |f: &Found| setattr_found(f, &chmod_change(mode), false),
        |p| real!(fchmodat: fn(c_int, *const c_char, mode_t, c_int) -> c_int)(
            dirfd, p, mode, flags
        )
    )
}

#[no_mangle]
pub unsafe extern "C" fn fchmod(fd: c_int, mode: mode_t) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| setattr_fd(fd, &chmod_change(mode), false)));
    }
    unsafe { real!(fchmod: fn(c_int, mode_t) -> c_int)(fd, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn chown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        true,
        |f: &Found| setattr_found(f, &chown_change(uid, gid), false),
        |p| real!(chown: fn(*const c_char, uid_t, gid_t) -> c_int)(p, uid, gid)
    )
}

#[no_mangle]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    path_op!(
        libc::AT_FDCWD,
        path,
        false,
        |f: &Found| setattr_found(f, &chown_change(uid, gid), false),
        |p| real!(lchown: fn(*const c_char, uid_t, gid_t) -> c_int)(p, uid, gid)
    )
}

#[no_mangle]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: uid_t,
    gid: gid_t,
    flags: c_int,
) -> c_int {
    let empty =
        flags & libc::AT_EMPTY_PATH != 0 && unsafe { bytes(path) }.is_some_and(<[u8]>::is_empty);
    if empty && fdtable::is_ours(dirfd) && !in_shim() {
        return int(serve(|| setattr_fd(dirfd, &chown_change(uid, gid), false)));
    }
    path_op!(
        dirfd,
        path,
        flags & libc::AT_SYMLINK_NOFOLLOW == 0,
        |f: &Found| setattr_found(f, &chown_change(uid, gid), false),
        |p| real!(fchownat: fn(c_int, *const c_char, uid_t, gid_t, c_int) -> c_int)(
            dirfd, p, uid, gid, flags
        )
    )
}

#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, uid: uid_t, gid: gid_t) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| setattr_fd(fd, &chown_change(uid, gid), false)));
    }
    unsafe { real!(fchown: fn(c_int, uid_t, gid_t) -> c_int)(fd, uid, gid) }
}

/// A utimensat argument as a change, and whether it only sets "now" (which write permission
/// allows).
unsafe fn times_change(times: *const libc::timespec) -> Result<(SetAttr, bool), Errno> {
    let now = nosefs_core::mkfs::now_ns();
    if times.is_null() {
        let change = SetAttr {
            atime_ns: Some(now),
            mtime_ns: Some(now),
            ..SetAttr::default()
        };
        return Ok((change, true));
    }
    // SAFETY: utimensat takes two timespecs.
    let t = unsafe { std::slice::from_raw_parts(times, 2) };
    let mut only_now = true;
    let mut pick = |ts: &libc::timespec| -> Result<Option<i64>, Errno> {
        match ts.tv_nsec {
            libc::UTIME_OMIT => Ok(None),
            libc::UTIME_NOW => Ok(Some(now)),
            n if (0..1_000_000_000).contains(&n) => {
                only_now = false;
                Ok(Some(
                    ts.tv_sec.saturating_mul(1_000_000_000).saturating_add(n),
                ))
            }
            _ => Err(Errno::EINVAL),
        }
    };
    let change = SetAttr {
        atime_ns: pick(&t[0])?,
        mtime_ns: pick(&t[1])?,
        ..SetAttr::default()
    };
    Ok((change, only_now))
}

#[no_mangle]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    times: *const libc::timespec,
    flags: c_int,
) -> c_int {
    if path.is_null() {
        // Linux's futimens(fd) form.
        if fdtable::is_ours(dirfd) && !in_shim() {
            return unsafe { futimens(dirfd, times) };
        }
        return unsafe {
            real!(utimensat: fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int)(
                dirfd, path, times, flags,
            )
        };
    }
    let ours = |f: &Found| {
        let (change, now) = unsafe { times_change(times) }?;
        setattr_found(f, &change, now)
    };
    path_op!(
        dirfd,
        path,
        flags & libc::AT_SYMLINK_NOFOLLOW == 0,
        ours,
        |p| real!(utimensat: fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int)(
            dirfd, p, times, flags
        )
    )
}

#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, times: *const libc::timespec) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return int(serve(|| {
            let (change, now) = unsafe { times_change(times) }?;
            setattr_fd(fd, &change, now)
        }));
    }
    unsafe { real!(futimens: fn(c_int, *const libc::timespec) -> c_int)(fd, times) }
}

unsafe fn timevals(tv: *const libc::timeval) -> Option<[libc::timespec; 2]> {
    (!tv.is_null()).then(|| {
        // SAFETY: utimes takes two timevals.
        let t = unsafe { std::slice::from_raw_parts(tv, 2) };
        [t[0], t[1]].map(|v| libc::timespec {
            tv_sec: v.tv_sec,
            tv_nsec: v.tv_usec * 1000,
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn utimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    let ts = unsafe { timevals(tv) };
    unsafe {
        utimensat(
            libc::AT_FDCWD,
            path,
            ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            0,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn lutimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    let ts = unsafe { timevals(tv) };
    unsafe {
        utimensat(
            libc::AT_FDCWD,
            path,
            ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn futimes(fd: c_int, tv: *const libc::timeval) -> c_int {
    let ts = unsafe { timevals(tv) };
    unsafe { futimens(fd, ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr())) }
}

#[no_mangle]
pub unsafe extern "C" fn futimesat(
    dirfd: c_int,
    path: *const c_char,
    tv: *const libc::timeval,
) -> c_int {
    let ts = unsafe { timevals(tv) };
    unsafe {
        utimensat(
            dirfd,
            path,
            ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            0,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn utime(path: *const c_char, times: *const libc::utimbuf) -> c_int {
    let ts = (!times.is_null()).then(|| {
        // SAFETY: the caller passes a utimbuf.
        let t = unsafe { &*times };
        [
            libc::timespec {
                tv_sec: t.actime,
                tv_nsec: 0,
            },
            libc::timespec {
                tv_sec: t.modtime,
                tv_nsec: 0,
            },
        ]
    });
    unsafe {
        utimensat(
            libc::AT_FDCWD,
            path,
            ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            0,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Descriptors.

/// Registers `new` as another descriptor of `old`'s description after the kernel duplicated it.
fn adopt_dup(old: c_int, new: c_int) {
    if new < 0 {
        return;
    }
    let _ = serve(|| {
        let dropped = match fdtable::get(old) {
            Some(file) if (new as usize) < fdtable::MAX_FDS => fdtable::insert(new, file),
            _ => fdtable::remove(new),
        };
        ops::descriptor_closed(dropped);
        Ok(())
    });
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let new = unsafe { real!(dup: fn(c_int) -> c_int)(fd) };
    if fdtable::is_ours(fd) {
        adopt_dup(fd, new);
    }
    new
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if fdtable::is_internal(new) && !in_shim() {
        return refuse_internal(new, "dup2");
    }
    let rc = unsafe { real!(dup2: fn(c_int, c_int) -> c_int)(old, new) };
    if rc >= 0 && old != new && (fdtable::is_ours(old) || fdtable::is_ours(new)) {
        adopt_dup(old, rc);
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if fdtable::is_internal(new) && !in_shim() {
        return refuse_internal(new, "dup3");
    }
    let rc = unsafe { real!(dup3: fn(c_int, c_int, c_int) -> c_int)(old, new, flags) };
    if rc >= 0 && (fdtable::is_ours(old) || fdtable::is_ours(new)) {
        adopt_dup(old, rc);
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn nosefs_hook_fcntl(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    let f = real!(fcntl: fn(c_int, c_int, *mut c_void) -> c_int);
    if !fdtable::is_ours(fd) || in_shim() {
        return unsafe { f(fd, cmd, arg) };
    }
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let new = unsafe { f(fd, cmd, arg) };
            adopt_dup(fd, new);
            new
        }
        libc::F_GETFL => match fdtable::get(fd) {
            Some(file) => file.flags.load(Ordering::Relaxed),
            None => fail(Errno::EBADF),
        },
        libc::F_SETFL => match fdtable::get(fd) {
            Some(file) => {
                let settable = libc::O_APPEND | libc::O_NONBLOCK | libc::O_NOATIME | libc::O_DIRECT;
                let new = arg as usize as c_int;
                let old = file.flags.load(Ordering::Relaxed);
                file.flags
                    .store((old & !settable) | (new & settable), Ordering::Relaxed);
                0
            }
            None => fail(Errno::EBADF),
        },
        libc::F_SETLK | libc::F_SETLKW | libc::F_GETLK => {
            if arg.is_null() {
                return fail(Errno(libc::EFAULT));
            }
            // SAFETY: the lock commands take a struct flock, which the caller passed.
            let lock = unsafe { &mut *arg.cast::<libc::flock>() };
            record_lock(fd, cmd, lock)
        }
        libc::F_OFD_SETLK | libc::F_OFD_SETLKW | libc::F_OFD_GETLK => {
            if arg.is_null() {
                return fail(Errno(libc::EFAULT));
            }
            // SAFETY: as above.
            let lock = unsafe { &mut *arg.cast::<libc::flock>() };
            match serve(|| ops::lock_fd(fd)) {
                // Embedded mode serves one process: granted, and no conflicting lock found.
                Ok(None) => {
                    if cmd == libc::F_OFD_GETLK {
                        lock.l_type = libc::F_UNLCK as i16;
                    }
                    0
                }
                // Daemon mode: on the description's kernel descriptor through the FUSE mount.
                Ok(Some((file, kernel_fd))) => {
                    let offset = *file.offset.lock();
                    unsafe { kernel_lock(kernel_fd, cmd, lock, offset) }
                }
                Err(e) => fail(e),
            }
        }
        // Descriptor flags (FD_CLOEXEC) live on the placeholder, in the kernel.
        libc::F_GETFD | libc::F_SETFD => unsafe { f(fd, cmd, arg) },
        libc::F_ADD_SEALS | libc::F_GET_SEALS => fail(Errno::EINVAL),
        libc::F_GETPIPE_SZ | libc::F_SETPIPE_SZ => fail(Errno::EBADF),
        _ => fail(Errno::EINVAL),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nosefs_hook_ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        return match request {
            FS_IOC_FIEMAP => int(serve(|| unsafe { fiemap(fd, arg) })),
            FIONREAD => match serve(|| ops::unread_bytes(fd)) {
                Ok(n) if !arg.is_null() => {
                    // SAFETY: FIONREAD's argument is an int the caller owns.
                    unsafe { *arg.cast::<c_int>() = n.min(c_int::MAX as u64) as c_int };
                    0
                }
                Ok(_) => fail(Errno(libc::EFAULT)),
                Err(e) => fail(e),
            },
            _ => fail(Errno(libc::ENOTTY)),
        };
    }
    unsafe { real!(ioctl: fn(c_int, c_ulong, *mut c_void) -> c_int)(fd, request, arg) }
}

/// `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: c_ulong = 0xC020_660B;
const FIONREAD: c_ulong = 0x541B;
/// `struct fiemap`'s header and one `struct fiemap_extent`, in bytes.
const FIEMAP_HEADER_BYTES: usize = 32;
const FIEMAP_EXTENT_BYTES: usize = 56;
const FIEMAP_FLAG_SYNC: u32 = 1;
const FIEMAP_EXTENT_LAST: u32 = 0x1;
const FIEMAP_EXTENT_NOT_ALIGNED: u32 = 0x100;

/// FS_IOC_FIEMAP on a noseFS file: the runs of its data in the asked range, from the core's map.
/// With `fm_extent_count` 0 only their number; an unknown flag is EBADR with the flags it does
/// not know left in `fm_flags`, as the kernel answers.
unsafe fn fiemap(fd: c_int, arg: *mut c_void) -> Result<(), Errno> {
    if arg.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    let header = arg.cast::<u8>();
    // SAFETY: FS_IOC_FIEMAP's argument is a struct fiemap the caller owns: a 32-byte header and
    // room for fm_extent_count extents after it (the kernel's contract too).
    let mut h = [0u8; FIEMAP_HEADER_BYTES];
    unsafe { std::ptr::copy_nonoverlapping(header, h.as_mut_ptr(), FIEMAP_HEADER_BYTES) };
    let field64 = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
    let field32 = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
    let (start, len, flags, count) = (field64(0), field64(8), field32(16), field32(24));
    let put32 = |at: usize, v: u32| {
        // SAFETY: inside the caller's header (see above).
        unsafe { std::ptr::copy_nonoverlapping(v.to_le_bytes().as_ptr(), header.add(at), 4) }
    };
    if flags & !FIEMAP_FLAG_SYNC != 0 {
        put32(16, flags & !FIEMAP_FLAG_SYNC);
        return Err(Errno(libc::EBADR));
    }
    if flags & FIEMAP_FLAG_SYNC != 0 {
        ops::fsync(fd)?;
    }
    let max = if count == 0 { 1 << 16 } else { count as usize };
    let runs = ops::data_map(fd, start, len, max)?;
    put32(20, runs.len() as u32);
    if count == 0 {
        return Ok(());
    }
    for (i, run) in runs.iter().enumerate() {
        let mut e = [0u8; FIEMAP_EXTENT_BYTES];
        e[0..8].copy_from_slice(&run.logical.to_le_bytes());
        e[8..16].copy_from_slice(&run.physical.to_le_bytes());
        e[16..24].copy_from_slice(&run.length.to_le_bytes());
        let aligned = (run.logical | run.physical | run.length) % 4096 == 0;
        let mut fe_flags = 0;
        if run.last {
            fe_flags |= FIEMAP_EXTENT_LAST;
        }
        if !aligned {
            fe_flags |= FIEMAP_EXTENT_NOT_ALIGNED;
        }
        e[40..44].copy_from_slice(&fe_flags.to_le_bytes());
        // SAFETY: extent i < fm_extent_count lies in the room the caller gave (see above).
        unsafe {
            let at = header.add(FIEMAP_HEADER_BYTES + i * FIEMAP_EXTENT_BYTES);
            std::ptr::copy_nonoverlapping(e.as_ptr(), at, FIEMAP_EXTENT_BYTES);
        }
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    let real_flock = real!(flock: fn(c_int, c_int) -> c_int);
    if fdtable::is_ours(fd) && !in_shim() {
        return match serve(|| ops::lock_fd(fd)) {
            // As record locks: one process, granted (see nosefs_hook_fcntl).
            Ok(None) => 0,
            Ok(Some((_file, kernel_fd))) => unsafe { real_flock(kernel_fd, op) },
            Err(e) => fail(e),
        };
    }
    unsafe { real_flock(fd, op) }
}

/// POSIX record locks of noseFS descriptor `fd`: embedded mode serves one process, where they
/// never conflict (granted; F_GETLK finds no conflicting lock); daemon mode takes them on the
/// file's kernel descriptor through the FUSE mount, where the kernel arbitrates between processes
/// (`kernel`, `ops::record_lock_file`).
fn record_lock(fd: c_int, cmd: c_int, lock: &mut libc::flock) -> c_int {
    match serve(|| ops::record_lock_file(fd, lock.l_type as c_int, cmd != libc::F_GETLK)) {
        Ok(None) => {
            if cmd == libc::F_GETLK {
                lock.l_type = libc::F_UNLCK as i16;
            }
            0
        }
        Ok(Some((kernel, offset))) => {
            let rc = unsafe { kernel_lock(kernel.raw(), cmd, lock, offset) };
            if rc == 0 && cmd != libc::F_GETLK && lock.l_type != libc::F_UNLCK as i16 {
                kernel.note_locked();
            }
            rc
        }
        Err(e) => fail(e),
    }
}

/// A lock command on kernel descriptor `kernel_fd`, for a description at `offset` (whose offset
/// the kernel descriptor does not share: SEEK_CUR is made absolute).
///
/// # Safety
/// `kernel_fd` is one of the shim's kernel descriptors.
unsafe fn kernel_lock(kernel_fd: c_int, cmd: c_int, lock: &mut libc::flock, offset: u64) -> c_int {
    let mut asked = *lock;
    if asked.l_whence == libc::SEEK_CUR as i16 {
        asked.l_start = asked.l_start.saturating_add(offset as i64);
        asked.l_whence = libc::SEEK_SET as i16;
    }
    let f = real!(fcntl: fn(c_int, c_int, *mut c_void) -> c_int);
    // SAFETY: the lock commands take a struct flock; `asked` is one.
    let rc = unsafe { f(kernel_fd, cmd, (&raw mut asked).cast()) };
    if rc == 0 && (cmd == libc::F_GETLK || cmd == libc::F_OFD_GETLK) {
        *lock = asked;
    }
    rc
}

/// lockf, as glibc makes it of fcntl (its own fcntl call does not reach the shim's).
#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    if !fdtable::is_ours(fd) || in_shim() {
        return unsafe { real!(lockf: fn(c_int, c_int, off_t) -> c_int)(fd, cmd, len) };
    }
    // SAFETY: struct flock is plain data.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_whence = libc::SEEK_CUR as i16;
    lock.l_len = len;
    let (command, l_type) = match cmd {
        libc::F_TEST => (libc::F_GETLK, libc::F_RDLCK),
        libc::F_ULOCK => (libc::F_SETLK, libc::F_UNLCK),
        libc::F_LOCK => (libc::F_SETLKW, libc::F_WRLCK),
        libc::F_TLOCK => (libc::F_SETLK, libc::F_WRLCK),
        _ => return fail(Errno::EINVAL),
    };
    lock.l_type = l_type as i16;
    let rc = record_lock(fd, command, &mut lock);
    if rc != 0 || cmd != libc::F_TEST {
        return rc;
    }
    if lock.l_type == libc::F_UNLCK as i16 || lock.l_pid == std::process::id() as i32 {
        0
    } else {
        fail(Errno(libc::EACCES))
    }
}

#[no_mangle]
pub unsafe extern "C" fn lockf64(fd: c_int, cmd: c_int, len: off64_t) -> c_int {
    unsafe { lockf(fd, cmd, len) }
}

// ---------------------------------------------------------------------------------------------
// Working directory.

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    let real_chdir = real!(chdir: fn(*const c_char) -> c_int);
    match unsafe { routed(libc::AT_FDCWD, path, true) } {
        Routed::Kernel(k) => {
            let rc = unsafe { real_chdir(Routed::kernel_path(&k, path)) };
            if rc == 0 {
                route::set_cwd(None);
                route::forget_kernel_cwd();
            }
            rc
        }
        Routed::Ours(f) => {
            let rc = int(serve(|| ops::chdir(&f)));
            if rc == 0 {
                unsafe { trap_cwd() };
            }
            rc
        }
        Routed::Err(e) => fail(e),
    }
}

/// While the working directory is inside noseFS, the kernel's is the prefix directory.
unsafe fn trap_cwd() {
    if let Some(config) = state::config() {
        let chdir = real!(chdir: fn(*const c_char) -> c_int);
        // In daemon mode the kernel reaches the same directory through the FUSE mount, so
        // relative paths the shim does not see (exec, a static child) resolve there too.
        let same_in_kernel = route::cwd()
            .filter(|_| state::daemon_mode())
            .and_then(|cwd| CString::new(cwd).ok());
        let moved = same_in_kernel.is_some_and(|p| unsafe { chdir(p.as_ptr()) } == 0);
        if !moved {
            if let Ok(p) = CString::new(config.prefix.to_vec()) {
                unsafe { chdir(p.as_ptr()) };
            }
        }
        route::forget_kernel_cwd();
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    if fdtable::is_ours(fd) && !in_shim() {
        let rc = int(serve(|| {
            let file = fdtable::get(fd).ok_or(Errno::EBADF)?;
            if file.kind == Kind::File {
                return Err(Errno::ENOTDIR);
            }
            let attr = ops::fstat(fd)?;
            if !attr.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            ops::may_search(fd, &attr)?;
            route::set_cwd(Some(file.path.clone()));
            Ok(())
        }));
        if rc == 0 {
            unsafe { trap_cwd() };
        }
        return rc;
    }
    let rc = unsafe { real!(fchdir: fn(c_int) -> c_int)(fd) };
    if rc == 0 {
        route::set_cwd(None);
        route::forget_kernel_cwd();
    }
    rc
}

/// Copies `path` out as getcwd does (allocating when `buf` is null).
unsafe fn give_path(path: &[u8], buf: *mut c_char, size: size_t) -> *mut c_char {
    let need = path.len() + 1;
    let out = if buf.is_null() {
        let alloc = if size == 0 { need } else { size };
        if alloc < need {
            set_errno(Errno(libc::ERANGE));
            return null_mut();
        }
        // SAFETY: plain allocation, freed by the caller with free().
        let p = unsafe { libc::malloc(alloc) }.cast::<c_char>();
        if p.is_null() {
            set_errno(Errno(libc::ENOMEM));
            return null_mut();
        }
        p
    } else {
        if size < need {
            set_errno(Errno(libc::ERANGE));
            return null_mut();
        }
        buf
    };
    let dst = unsafe { out_slice(out.cast(), need) };
    dst[..path.len()].copy_from_slice(path);
    dst[path.len()] = 0;
    out
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    if !in_shim() {
        if let Some(cwd) = route::cwd() {
            return unsafe { give_path(&cwd, buf, size) };
        }
    }
    unsafe { real!(getcwd: fn(*mut c_char, size_t) -> *mut c_char)(buf, size) }
}

#[no_mangle]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    unsafe { getcwd(null_mut(), 0) }
}

#[no_mangle]
pub unsafe extern "C" fn getwd(buf: *mut c_char) -> *mut c_char {
    unsafe { getcwd(buf, libc::PATH_MAX as size_t) }
}

#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    match unsafe { routed(libc::AT_FDCWD, path, true) } {
        Routed::Kernel(k) => unsafe {
            real!(realpath: fn(*const c_char, *mut c_char) -> *mut c_char)(
                Routed::kernel_path(&k, path),
                resolved,
            )
        },
        Routed::Ours(f) => match f.existing() {
            Ok(_) => unsafe {
                give_path(
                    &f.path,
                    resolved,
                    if resolved.is_null() {
                        0
                    } else {
                        libc::PATH_MAX as size_t
                    },
                )
            },
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        },
        Routed::Err(e) => {
            set_errno(e);
            null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    unsafe { realpath(path, null_mut()) }
}

#[no_mangle]
pub unsafe extern "C" fn umask(mask: mode_t) -> mode_t {
    let old = unsafe { real!(umask: fn(mode_t) -> mode_t)(mask) };
    state::set_umask(mask);
    old
}

// Credentials change: forget the cached ones, and in daemon mode have the daemon read them
// again (it checks every request against them).
macro_rules! cred_hook {
    ($name:ident ( $($arg:ident : $ty:ty),* )) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            let rc = unsafe { real!($name: fn($($ty),*) -> c_int)($($arg),*) };
            if rc == 0 && !in_shim() {
                let _ = serve(|| {
                    state::credentials_changed();
                    Ok(())
                });
            }
            rc
        }
    };
}

cred_hook!(setuid(uid: uid_t));
cred_hook!(seteuid(uid: uid_t));
cred_hook!(setreuid(r: uid_t, e: uid_t));
cred_hook!(setresuid(r: uid_t, e: uid_t, s: uid_t));
cred_hook!(setgid(gid: gid_t));
cred_hook!(setegid(gid: gid_t));
cred_hook!(setregid(r: gid_t, e: gid_t));
cred_hook!(setresgid(r: gid_t, e: gid_t, s: gid_t));
cred_hook!(setgroups(n: size_t, list: *const gid_t));

// ---------------------------------------------------------------------------------------------
// Directory streams.

/// A noseFS directory stream, handed to the program as its `DIR *`.
struct NoseDir {
    fd: c_int,
    entries: Vec<nosefs_core::namespace::DirEntry>,
    next: usize,
    /// The position after the last entry returned (telldir).
    position: u64,
    dirent: dirent64,
}

static DIRS: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static DIR_COUNT: AtomicUsize = AtomicUsize::new(0);

fn is_our_dir(d: *mut c_void) -> bool {
    DIR_COUNT.load(Ordering::Relaxed) > 0 && DIRS.lock().contains(&(d as usize))
}

fn new_dir(fd: c_int) -> *mut c_void {
    // SAFETY: dirent64 is plain data; all-zero is valid.
    let dirent: dirent64 = unsafe { std::mem::zeroed() };
    let d = Box::into_raw(Box::new(NoseDir {
        fd,
        entries: Vec::new(),
        next: 0,
        position: 0,
        dirent,
    }))
    .cast::<c_void>();
    DIRS.lock().push(d as usize);
    DIR_COUNT.fetch_add(1, Ordering::Relaxed);
    d
}

unsafe fn our_dir<'a>(d: *mut c_void) -> &'a mut NoseDir {
    // SAFETY: `d` came from new_dir (checked by is_our_dir) and is not yet closed.
    unsafe { &mut *d.cast::<NoseDir>() }
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut c_void {
    match unsafe { routed(libc::AT_FDCWD, path, true) } {
        Routed::Kernel(k) => unsafe {
            real!(opendir: fn(*const c_char) -> *mut c_void)(Routed::kernel_path(&k, path))
        },
        Routed::Ours(f) => {
            match serve(|| ops::open(&f, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0)) {
                Ok(fd) => new_dir(fd),
                Err(e) => {
                    set_errno(e);
                    null_mut()
                }
            }
        }
        Routed::Err(e) => {
            set_errno(e);
            null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut c_void {
    if let Some(file) = fdtable::get(fd) {
        if file.kind != Kind::Dir {
            set_errno(Errno::ENOTDIR);
            return null_mut();
        }
        return new_dir(fd);
    }
    unsafe { real!(fdopendir: fn(c_int) -> *mut c_void)(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut c_void) -> c_int {
    if is_our_dir(d) {
        DIRS.lock().retain(|&x| x != d as usize);
        DIR_COUNT.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: from Box::into_raw in new_dir, removed from the registry just now.
        let dir = unsafe { Box::from_raw(d.cast::<NoseDir>()) };
        return unsafe { close(dir.fd) };
    }
    unsafe { real!(closedir: fn(*mut c_void) -> c_int)(d) }
}

fn dt_of(file_type: u32) -> u8 {
    match file_type {
        libc::S_IFDIR => libc::DT_DIR,
        libc::S_IFREG => libc::DT_REG,
        libc::S_IFLNK => libc::DT_LNK,
        libc::S_IFCHR => libc::DT_CHR,
        libc::S_IFBLK => libc::DT_BLK,
        libc::S_IFIFO => libc::DT_FIFO,
        libc::S_IFSOCK => libc::DT_SOCK,
        _ => libc::DT_UNKNOWN,
    }
}

/// The next entry of a noseFS stream, filled into its dirent; null at the end.
unsafe fn next_entry(d: *mut c_void) -> *mut dirent64 {
    let dir = unsafe { our_dir(d) };
    if dir.next >= dir.entries.len() {
        match serve(|| ops::read_dir(dir.fd, 256)) {
            Ok(entries) => {
                dir.entries = entries;
                dir.next = 0;
            }
            Err(e) => {
                set_errno(e);
                return null_mut();
            }
        }
        if dir.entries.is_empty() {
            return null_mut();
        }
    }
    let e = &dir.entries[dir.next];
    dir.next += 1;
    dir.position = e.cookie;
    let de = &mut dir.dirent;
    de.d_ino = e.ino;
    de.d_off = e.cookie as i64;
    de.d_reclen = std::mem::size_of::<dirent64>() as u16;
    de.d_type = dt_of(e.file_type);
    let n = e.name.len().min(255);
    for (dst, &src) in de.d_name.iter_mut().zip(&e.name[..n]) {
        *dst = src as c_char;
    }
    de.d_name[n] = 0;
    de
}

#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut c_void) -> *mut dirent64 {
    if is_our_dir(d) {
        return unsafe { next_entry(d) };
    }
    unsafe { real!(readdir: fn(*mut c_void) -> *mut dirent64)(d) }
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut c_void) -> *mut dirent64 {
    if is_our_dir(d) {
        return unsafe { next_entry(d) };
    }
    unsafe { real!(readdir64: fn(*mut c_void) -> *mut dirent64)(d) }
}

unsafe fn readdir_r_impl(
    d: *mut c_void,
    entry: *mut dirent64,
    result: *mut *mut dirent64,
) -> c_int {
    let e = unsafe { next_entry(d) };
    if e.is_null() {
        unsafe { *result = null_mut() };
        return 0;
    }
    // SAFETY: the caller passes a dirent to fill and a result pointer.
    unsafe {
        std::ptr::copy_nonoverlapping(e, entry, 1);
        *result = entry;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn readdir_r(
    d: *mut c_void,
    entry: *mut dirent64,
    result: *mut *mut dirent64,
) -> c_int {
    if is_our_dir(d) {
        return unsafe { readdir_r_impl(d, entry, result) };
    }
    unsafe {
        real!(readdir_r: fn(*mut c_void, *mut dirent64, *mut *mut dirent64) -> c_int)(
            d, entry, result,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn readdir64_r(
    d: *mut c_void,
    entry: *mut dirent64,
    result: *mut *mut dirent64,
) -> c_int {
    if is_our_dir(d) {
        return unsafe { readdir_r_impl(d, entry, result) };
    }
    unsafe {
        real!(readdir64_r: fn(*mut c_void, *mut dirent64, *mut *mut dirent64) -> c_int)(
            d, entry, result,
        )
    }
}

unsafe fn reposition(d: *mut c_void, position: u64) {
    let dir = unsafe { our_dir(d) };
    dir.entries.clear();
    dir.next = 0;
    dir.position = position;
    let fd = dir.fd;
    let _ = serve(|| ops::lseek(fd, position as i64, libc::SEEK_SET));
}

#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut c_void) {
    if is_our_dir(d) {
        return unsafe { reposition(d, 0) };
    }
    unsafe { real!(rewinddir: fn(*mut c_void) -> ())(d) }
}

#[no_mangle]
pub unsafe extern "C" fn seekdir(d: *mut c_void, position: libc::c_long) {
    if is_our_dir(d) {
        return unsafe { reposition(d, position as u64) };
    }
    unsafe { real!(seekdir: fn(*mut c_void, libc::c_long) -> ())(d, position) }
}

#[no_mangle]
pub unsafe extern "C" fn telldir(d: *mut c_void) -> libc::c_long {
    if is_our_dir(d) {
        return unsafe { our_dir(d) }.position as libc::c_long;
    }
    unsafe { real!(telldir: fn(*mut c_void) -> libc::c_long)(d) }
}

#[no_mangle]
pub unsafe extern "C" fn dirfd(d: *mut c_void) -> c_int {
    if is_our_dir(d) {
        return unsafe { our_dir(d) }.fd;
    }
    unsafe { real!(dirfd: fn(*mut c_void) -> c_int)(d) }
}

#[no_mangle]
pub unsafe extern "C" fn getdents64(fd: c_int, buf: *mut c_void, size: size_t) -> ssize_t {
    if !fdtable::is_ours(fd) || in_shim() {
        return unsafe {
            real!(getdents64: fn(c_int, *mut c_void, size_t) -> ssize_t)(fd, buf, size)
        };
    }
    let out = unsafe { out_slice(buf, size) };
    let r = serve(|| {
        let file = fdtable::get(fd).ok_or(Errno::EBADF)?;
        let start = *file.offset.lock();
        let entries = ops::read_dir(fd, (size / 24).max(1))?;
        let mut at = 0usize;
        let mut position = start;
        for e in &entries {
            let reclen = (19 + e.name.len() + 1).next_multiple_of(8);
            if at + reclen > out.len() {
                break;
            }
            let rec = &mut out[at..at + reclen];
            rec.fill(0);
            rec[0..8].copy_from_slice(&e.ino.to_ne_bytes());
            rec[8..16].copy_from_slice(&(e.cookie as i64).to_ne_bytes());
            rec[16..18].copy_from_slice(&(reclen as u16).to_ne_bytes());
            rec[18] = dt_of(e.file_type);
            rec[19..19 + e.name.len()].copy_from_slice(&e.name);
            at += reclen;
            position = e.cookie;
        }
        *file.offset.lock() = position;
        if at == 0 && !entries.is_empty() {
            return Err(Errno::EINVAL);
        }
        Ok(at)
    });
    value(r) as ssize_t
}

// ---------------------------------------------------------------------------------------------
// stdio: noseFS files as fopencookie streams.

#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut libc::FILE;
}

/// Offset of `_fileno` in glibc's `struct _IO_FILE` (public in <bits/types/struct_FILE.h>):
/// `int _flags`, twelve pointers, `_chain`, then `_fileno`.
const FILE_FILENO_OFFSET: usize = 112;

unsafe extern "C" fn cookie_read(cookie: *mut c_void, buf: *mut c_char, size: size_t) -> ssize_t {
    unsafe { read(cookie as usize as c_int, buf.cast(), size) }
}

unsafe extern "C" fn cookie_write(
    cookie: *mut c_void,
    buf: *const c_char,
    size: size_t,
) -> ssize_t {
    let n = unsafe { write(cookie as usize as c_int, buf.cast(), size) };
    // fopencookie treats a short write or -1 as an error either way; 0 must not be returned.
    if n < 0 {
        -1
    } else {
        n
    }
}

unsafe extern "C" fn cookie_seek(
    cookie: *mut c_void,
    offset: *mut off64_t,
    whence: c_int,
) -> c_int {
    // SAFETY: glibc passes a valid offset pointer.
    let at = unsafe { lseek64(cookie as usize as c_int, *offset, whence) };
    if at < 0 {
        return -1;
    }
    unsafe { *offset = at };
    0
}

unsafe extern "C" fn cookie_close(cookie: *mut c_void) -> c_int {
    unsafe { close(cookie as usize as c_int) }
}

/// A stdio stream over noseFS descriptor `fd`; `fileno` reports `fd`.
unsafe fn cookie_stream(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    let io = CookieIo {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: Some(cookie_seek),
        close: Some(cookie_close),
    };
    let stream = unsafe { fopencookie(fd as usize as *mut c_void, mode, io) };
    if !stream.is_null() {
        // SAFETY: glibc's FILE layout; `_fileno` of a cookie stream is -1 otherwise, which would
        // make fileno() fail for programs that fstat their streams.
        unsafe { *stream.cast::<u8>().add(FILE_FILENO_OFFSET).cast::<c_int>() = fd };
    }
    stream
}

extern "C" {
    static mut stdin: *mut libc::FILE;
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
}

/// Which of descriptors 0-2 already have their standard stream replaced.
static STD_STREAM_SWAPPED: [AtomicBool; 3] = [const { AtomicBool::new(false) }; 3];
/// glibc's own standard streams that were replaced (programs may have kept the pointers).
static STD_STREAM_ORIGINAL: [AtomicPtr<libc::FILE>; 3] = [const { AtomicPtr::new(null_mut()) }; 3];

/// Descriptor 0, 1 or 2 now names a noseFS file (an exec handed it over, or a program `dup2`'d
/// onto it, as `sort -o` and shells do). glibc's own stdin/stdout/stderr reach the kernel through
/// internal calls the shim never sees, so the standard stream is replaced, once, by a cookie
/// stream on the same descriptor, whose calls go through the shim's hooks (and to the kernel again
/// if the descriptor later stops being noseFS's). Data the old stream still buffered is dropped;
/// programs flush before they redirect.
pub fn std_stream_became_ours(fd: c_int) {
    let Some(swapped) = usize::try_from(fd)
        .ok()
        .and_then(|i| STD_STREAM_SWAPPED.get(i))
    else {
        return;
    };
    if swapped.swap(true, Ordering::AcqRel) {
        return;
    }
    let mode: &[u8] = if fd == 0 { b"r\0" } else { b"w\0" };
    // SAFETY: `cookie_stream` takes a NUL-terminated mode; the standard stream globals are plain
    // pointers glibc reads at every use, and this runs once per descriptor.
    unsafe {
        let stream = cookie_stream(fd, mode.as_ptr().cast());
        if stream.is_null() {
            swapped.store(false, Ordering::Release);
            return;
        }
        let original = match fd {
            0 => std::mem::replace(&mut *std::ptr::addr_of_mut!(stdin), stream),
            1 => std::mem::replace(&mut *std::ptr::addr_of_mut!(stdout), stream),
            _ => {
                libc::setvbuf(stream, null_mut(), libc::_IONBF, 0);
                std::mem::replace(&mut *std::ptr::addr_of_mut!(stderr), stream)
            }
        };
        STD_STREAM_ORIGINAL[fd as usize].store(original, Ordering::Release);
    }
}

/// open(2) flags for an fopen mode string.
fn fopen_flags(mode: &[u8]) -> Option<c_int> {
    let plus = mode.contains(&b'+');
    let mut flags = match mode.first()? {
        b'r' if plus => libc::O_RDWR,
        b'r' => libc::O_RDONLY,
        b'w' if plus => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        b'w' => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        b'a' if plus => libc::O_RDWR | libc::O_CREAT | libc::O_APPEND,
        b'a' => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    if mode.contains(&b'x') {
        flags |= libc::O_EXCL;
    }
    if mode.contains(&b'e') {
        flags |= libc::O_CLOEXEC;
    }
    Some(flags)
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let flags = unsafe { bytes(mode) }.and_then(fopen_flags);
    let follow = flags.is_some_and(|f| f & libc::O_EXCL == 0);
    match unsafe { routed(libc::AT_FDCWD, path, follow) } {
        Routed::Kernel(k) => unsafe {
            real!(fopen: fn(*const c_char, *const c_char) -> *mut libc::FILE)(
                Routed::kernel_path(&k, path),
                mode,
            )
        },
        Routed::Ours(f) => {
            let Some(flags) = flags else {
                set_errno(Errno::EINVAL);
                return null_mut();
            };
            match serve(|| ops::open(&f, flags, 0o666)) {
                Ok(fd) => {
                    let stream = unsafe { cookie_stream(fd, mode) };
                    if stream.is_null() {
                        unsafe { close(fd) };
                    }
                    stream
                }
                Err(e) => {
                    set_errno(e);
                    null_mut()
                }
            }
        }
        Routed::Err(e) => {
            set_errno(e);
            null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    unsafe { fopen(path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    if fdtable::is_ours(fd) && !in_shim() {
        return unsafe { cookie_stream(fd, mode) };
    }
    unsafe { real!(fdopen: fn(c_int, *const c_char) -> *mut libc::FILE)(fd, mode) }
}

/// The standard descriptor (0-2) whose stream `stream` is, now or before the shim replaced it.
fn std_stream_fd(stream: *mut libc::FILE) -> Option<c_int> {
    // SAFETY: reading the standard stream pointers, which glibc initialises before any code runs.
    let current = unsafe { [stdin, stdout, stderr] };
    (0..3)
        .find(|&i| current[i] == stream || STD_STREAM_ORIGINAL[i].load(Ordering::Acquire) == stream)
        .map(|i| i as c_int)
}

/// `freopen` onto a noseFS path. A standard stream keeps its descriptor number (the new file is
/// `dup2`'d onto it, as glibc does) and becomes the shim's stream for it, which the global
/// `stdin`/`stdout`/`stderr` name from then on; any other stream is closed and a new one returned
/// (a program that ignores freopen's result and keeps the old pointer for a non-standard stream
/// is not served).
#[no_mangle]
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut libc::FILE,
) -> *mut libc::FILE {
    let real = real!(freopen: fn(*const c_char, *const c_char, *mut libc::FILE) -> *mut libc::FILE);
    if path.is_null() || in_shim() {
        return unsafe { real(path, mode, stream) };
    }
    let flags = unsafe { bytes(mode) }.and_then(fopen_flags);
    let follow = flags.is_some_and(|f| f & libc::O_EXCL == 0);
    let found = match unsafe { routed(libc::AT_FDCWD, path, follow) } {
        Routed::Kernel(k) => return unsafe { real(Routed::kernel_path(&k, path), mode, stream) },
        Routed::Err(e) => {
            set_errno(e);
            return null_mut();
        }
        Routed::Ours(f) => f,
    };
    let Some(flags) = flags else {
        set_errno(Errno::EINVAL);
        return null_mut();
    };
    // SAFETY: `stream` is the caller's open stream; flushing it first is what freopen does.
    unsafe { libc::fflush(stream) };
    let fd = match serve(|| ops::open(&found, flags, 0o666)) {
        Ok(fd) => fd,
        Err(e) => {
            set_errno(e);
            return null_mut();
        }
    };
    match std_stream_fd(stream) {
        Some(std_fd) => {
            // SAFETY: both descriptors are valid; the hooks keep the shim's table in step.
            let rc = unsafe { dup2(fd, std_fd) };
            unsafe { close(fd) };
            if rc < 0 {
                return null_mut();
            }
            std_stream_became_ours(std_fd);
            // SAFETY: reading the standard stream pointer just set.
            unsafe { [stdin, stdout, stderr][std_fd as usize] }
        }
        None => {
            // SAFETY: the caller gives the old stream up to freopen.
            unsafe { libc::fclose(stream) };
            let new = unsafe { cookie_stream(fd, mode) };
            if new.is_null() {
                unsafe { close(fd) };
            }
            new
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut libc::FILE,
) -> *mut libc::FILE {
    unsafe { freopen(path, mode, stream) }
}

// ---------------------------------------------------------------------------------------------
// Unix-domain sockets on noseFS paths: the path holds an S_IFSOCK inode and the socket itself is
// bound in the kernel's abstract namespace under a name derived from the image and the inode
// (`ops::socket_address`), where connect() by path finds it.

/// The noseFS path a Unix-domain socket address names, routed; `None` if it is not noseFS's.
unsafe fn unix_path(addr: *const libc::sockaddr, len: libc::socklen_t) -> Option<Routed> {
    let len = len as usize;
    if wild(addr.cast()) || len <= 2 || len > std::mem::size_of::<libc::sockaddr_un>() {
        return None;
    }
    // SAFETY: the caller passes `len` readable bytes at `addr` (checked against sockaddr_un).
    let raw = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len) };
    if u16::from_ne_bytes([raw[0], raw[1]]) != libc::AF_UNIX as u16 || raw[2] == 0 {
        return None; // not AF_UNIX, or an abstract address
    }
    let path = &raw[2..];
    let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
    let c = CString::new(path).ok()?;
    match unsafe { routed(libc::AT_FDCWD, c.as_ptr(), true) } {
        Routed::Kernel(_) => None,
        other => Some(other),
    }
}

/// The path of a pathname sockaddr_un as the program wrote it (`unix_path` checked it).
unsafe fn sun_path(addr: *const libc::sockaddr, len: libc::socklen_t) -> Vec<u8> {
    // SAFETY: `unix_path` accepted `len` readable bytes at `addr`.
    let raw = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len as usize) };
    let path = &raw[2..];
    path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())].to_vec()
}

/// An abstract-namespace sockaddr_un for `name`, and its length.
fn abstract_address(name: &[u8]) -> Result<(libc::sockaddr_un, libc::socklen_t), Errno> {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if name.len() + 1 > sun.sun_path.len() {
        return Err(Errno(libc::ENAMETOOLONG));
    }
    sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &b) in sun.sun_path[1..].iter_mut().zip(name) {
        *dst = b as c_char;
    }
    Ok((sun, (2 + 1 + name.len()) as libc::socklen_t))
}

type SockCall = unsafe extern "C" fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int;

unsafe fn to_abstract(fd: c_int, name: &[u8], call: SockCall) -> c_int {
    match abstract_address(name) {
        Ok((sun, len)) => unsafe { call(fd, (&raw const sun).cast(), len) },
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn bind(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    let real = real!(bind: fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int);
    match unsafe { unix_path(addr, len) } {
        None => unsafe { real(fd, addr, len) },
        Some(Routed::Ours(f)) => match serve(|| ops::bind_socket(&f)) {
            Ok(name) => {
                remember_socket_path(&name, &unsafe { sun_path(addr, len) });
                let rc = unsafe { to_abstract(fd, &name, real) };
                if rc < 0 {
                    let errno = Errno(
                        std::io::Error::last_os_error()
                            .raw_os_error()
                            .unwrap_or(libc::EIO),
                    );
                    // The kernel refused the address: the inode made for it goes again.
                    let _ = serve(|| match route::route(libc::AT_FDCWD, &f.path, false)? {
                        Route::Ours(again) => ops::unlink(&again),
                        Route::Kernel(_) => Ok(()),
                    });
                    return fail(errno);
                }
                rc
            }
            Err(e) => fail(e),
        },
        Some(Routed::Err(e)) => fail(e),
        Some(Routed::Kernel(_)) => unreachable!("unix_path returns None for kernel paths"),
    }
}

#[no_mangle]
pub unsafe extern "C" fn connect(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    let real = real!(connect: fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int);
    match unsafe { unix_path(addr, len) } {
        None => unsafe { real(fd, addr, len) },
        Some(Routed::Ours(f)) => match serve(|| ops::connect_socket(&f)) {
            Ok(name) => {
                remember_socket_path(&name, &unsafe { sun_path(addr, len) });
                unsafe { to_abstract(fd, &name, real) }
            }
            Err(e) => fail(e),
        },
        Some(Routed::Err(e)) => fail(e),
        Some(Routed::Kernel(_)) => unreachable!("unix_path returns None for kernel paths"),
    }
}

/// `sendto` a datagram socket bound to a noseFS path: to its abstract address, as `connect`.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> ssize_t {
    let real = real!(sendto: fn(c_int, *const c_void, size_t, c_int, *const libc::sockaddr, libc::socklen_t) -> ssize_t);
    if addr.is_null() {
        return unsafe { real(fd, buf, n, flags, addr, len) };
    }
    match unsafe { unix_path(addr, len) } {
        None => unsafe { real(fd, buf, n, flags, addr, len) },
        Some(Routed::Ours(f)) => match serve(|| ops::connect_socket(&f)) {
            Ok(name) => match abstract_address(&name) {
                Ok((sun, sun_len)) => unsafe {
                    real(fd, buf, n, flags, (&raw const sun).cast(), sun_len)
                },
                Err(e) => fail(e) as ssize_t,
            },
            Err(e) => fail(e) as ssize_t,
        },
        Some(Routed::Err(e)) => fail(e) as ssize_t,
        Some(Routed::Kernel(_)) => unreachable!("unix_path returns None for kernel paths"),
    }
}

/// The noseFS paths this process bound or connected Unix-domain sockets to, as it wrote them,
/// by the abstract name that stands for each: `getsockname` and `getpeername` give the program
/// its path back, as the kernel does.
static SOCKET_PATHS: parking_lot::Mutex<Vec<(Vec<u8>, Vec<u8>)>> =
    parking_lot::Mutex::new(Vec::new());

fn remember_socket_path(name: &[u8], path: &[u8]) {
    let mut paths = SOCKET_PATHS.lock();
    paths.retain(|(n, _)| n != name);
    paths.push((name.to_vec(), path.to_vec()));
}

/// After the kernel filled `addr` (`*len` bytes): an abstract name standing for a noseFS path
/// this process knows becomes that path, truncated to the caller's buffer as the kernel
/// truncates, `*len` the length the whole address needs.
unsafe fn socket_path_back(
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    room: libc::socklen_t,
) {
    if addr.is_null() || len.is_null() {
        return;
    }
    let filled = (unsafe { *len }).min(room) as usize;
    if filled <= 3 {
        return;
    }
    // SAFETY: the kernel wrote `filled` bytes at `addr`, within the caller's `room`.
    let raw = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), filled) };
    if u16::from_ne_bytes([raw[0], raw[1]]) != libc::AF_UNIX as u16 || raw[2] != 0 {
        return;
    }
    let name = &raw[3..(unsafe { *len } as usize).min(filled)];
    let Some(path) = SOCKET_PATHS
        .lock()
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| p.clone())
    else {
        return;
    };
    let mut whole = raw[..2].to_vec();
    whole.extend_from_slice(&path);
    whole.push(0);
    let copy = whole.len().min(room as usize);
    // SAFETY: at most `room` bytes, the caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(whole.as_ptr(), addr.cast::<u8>(), copy);
        *len = whole.len() as libc::socklen_t;
    }
}

type NameCall = unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int;

/// getsockname and getpeername: the kernel's answer, with a noseFS path given back.
unsafe fn socket_name(
    real: NameCall,
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    let room = if len.is_null() { 0 } else { unsafe { *len } };
    let rc = unsafe { real(fd, addr, len) };
    if rc == 0 && !in_shim() {
        unsafe { socket_path_back(addr, len, room) };
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn getsockname(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    let real = real!(getsockname: fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int);
    unsafe { socket_name(real, fd, addr, len) }
}

#[no_mangle]
pub unsafe extern "C" fn getpeername(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    let real = real!(getpeername: fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int);
    unsafe { socket_name(real, fd, addr, len) }
}

// ---------------------------------------------------------------------------------------------
// glob and scandir: glibc reaches directories through its internal opendir, which no preload
// sees. glob is given the shim's own directory functions (GLOB_ALTDIRFUNC, glibc's interface
// for exactly this; they pass kernel paths through, so every pattern works); scandir on a noseFS
// directory is done here with the shim's directory streams.

#[no_mangle]
pub unsafe extern "C" fn glob(
    pattern: *const c_char,
    flags: c_int,
    errfunc: Option<unsafe extern "C" fn(*const c_char, c_int) -> c_int>,
    pglob: *mut libc::glob_t,
) -> c_int {
    let real = real!(glob: fn(*const c_char, c_int, Option<unsafe extern "C" fn(*const c_char, c_int) -> c_int>, *mut libc::glob_t) -> c_int);
    if in_shim() || state::config().is_none() || pglob.is_null() || flags & GLOB_ALTDIRFUNC != 0 {
        return unsafe { real(pattern, flags, errfunc, pglob) };
    }
    // SAFETY: `pglob` is the caller's glob_t (glibc's layout, GlibcGlob); the directory-function
    // fields are ours to set when GLOB_ALTDIRFUNC is passed, and glob leaves them alone otherwise.
    unsafe {
        let g = &mut *pglob.cast::<GlibcGlob>();
        g.gl_opendir = opendir as *mut c_void;
        g.gl_readdir = readdir as *mut c_void;
        g.gl_closedir = closedir as *mut c_void;
        g.gl_stat = stat as *mut c_void;
        g.gl_lstat = lstat as *mut c_void;
        real(pattern, flags | GLOB_ALTDIRFUNC, errfunc, pglob)
    }
}

/// glibc's GLOB_ALTDIRFUNC (not in the libc crate).
const GLOB_ALTDIRFUNC: c_int = 1 << 9;

/// glibc's `glob_t` (<glob.h>), whose directory-function fields the libc crate keeps private.
#[repr(C)]
struct GlibcGlob {
    gl_pathc: size_t,
    gl_pathv: *mut *mut c_char,
    gl_offs: size_t,
    gl_flags: c_int,
    gl_closedir: *mut c_void,
    gl_readdir: *mut c_void,
    gl_opendir: *mut c_void,
    gl_lstat: *mut c_void,
    gl_stat: *mut c_void,
}

const _: () = assert!(std::mem::size_of::<GlibcGlob>() == std::mem::size_of::<libc::glob_t>());

#[no_mangle]
pub unsafe extern "C" fn glob64(
    pattern: *const c_char,
    flags: c_int,
    errfunc: Option<unsafe extern "C" fn(*const c_char, c_int) -> c_int>,
    pglob: *mut libc::glob_t,
) -> c_int {
    // On 64-bit glibc glob64_t and glob_t, dirent64 and dirent, stat64 and stat agree.
    unsafe { glob(pattern, flags, errfunc, pglob) }
}

type DirentFilter = Option<unsafe extern "C" fn(*const dirent64) -> c_int>;
type DirentCompare =
    Option<unsafe extern "C" fn(*mut *const dirent64, *mut *const dirent64) -> c_int>;

/// scandir on an open noseFS directory stream: entries copied into malloc'd records (the caller
/// frees each and the list), filtered, then sorted with `compar`.
unsafe fn scan_our_dir(
    dir: *mut c_void,
    namelist: *mut *mut *mut dirent64,
    filter: DirentFilter,
    compar: DirentCompare,
) -> c_int {
    let mut list: Vec<*mut dirent64> = Vec::new();
    let free_all = |list: &[*mut dirent64]| {
        for &e in list {
            // SAFETY: each record came from malloc below.
            unsafe { libc::free(e.cast()) };
        }
    };
    loop {
        let e = unsafe { readdir(dir) };
        if e.is_null() {
            break;
        }
        // SAFETY: readdir returned a valid entry, valid until the next readdir.
        if let Some(f) = filter {
            if unsafe { f(e) } == 0 {
                continue;
            }
        }
        let size = std::mem::size_of::<dirent64>();
        // SAFETY: a fresh allocation of a whole dirent64, filled from the entry.
        let copy = unsafe { libc::malloc(size) }.cast::<dirent64>();
        if copy.is_null() {
            free_all(&list);
            unsafe { closedir(dir) };
            set_errno(Errno(libc::ENOMEM));
            return -1;
        }
        unsafe { std::ptr::copy_nonoverlapping(e, copy, 1) };
        list.push(copy);
    }
    unsafe { closedir(dir) };
    if let Some(cmp) = compar {
        // SAFETY: qsort over the pointer array with the caller's comparison, as scandir does.
        unsafe {
            libc::qsort(
                list.as_mut_ptr().cast(),
                list.len(),
                std::mem::size_of::<*mut dirent64>(),
                Some(std::mem::transmute::<
                    unsafe extern "C" fn(*mut *const dirent64, *mut *const dirent64) -> c_int,
                    unsafe extern "C" fn(*const c_void, *const c_void) -> c_int,
                >(cmp)),
            )
        };
    }
    let bytes = list.len().max(1) * std::mem::size_of::<*mut dirent64>();
    // SAFETY: the caller frees the array with free().
    let array = unsafe { libc::malloc(bytes) }.cast::<*mut dirent64>();
    if array.is_null() {
        free_all(&list);
        set_errno(Errno(libc::ENOMEM));
        return -1;
    }
    unsafe {
        std::ptr::copy_nonoverlapping(list.as_ptr(), array, list.len());
        *namelist = array;
    }
    list.len() as c_int
}

#[no_mangle]
pub unsafe extern "C" fn scandirat(
    dirfd: c_int,
    path: *const c_char,
    namelist: *mut *mut *mut dirent64,
    filter: DirentFilter,
    compar: DirentCompare,
) -> c_int {
    let real = real!(scandirat: fn(c_int, *const c_char, *mut *mut *mut dirent64, DirentFilter, DirentCompare) -> c_int);
    match unsafe { routed(dirfd, path, true) } {
        Routed::Kernel(k) => unsafe {
            real(
                dirfd,
                Routed::kernel_path(&k, path),
                namelist,
                filter,
                compar,
            )
        },
        Routed::Ours(f) => {
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
            match serve(|| ops::open(&f, flags, 0)) {
                Ok(fd) => unsafe { scan_our_dir(new_dir(fd), namelist, filter, compar) },
                Err(e) => fail(e),
            }
        }
        Routed::Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn scandir(
    path: *const c_char,
    namelist: *mut *mut *mut dirent64,
    filter: DirentFilter,
    compar: DirentCompare,
) -> c_int {
    unsafe { scandirat(libc::AT_FDCWD, path, namelist, filter, compar) }
}

#[no_mangle]
pub unsafe extern "C" fn scandir64(
    path: *const c_char,
    namelist: *mut *mut *mut dirent64,
    filter: DirentFilter,
    compar: DirentCompare,
) -> c_int {
    unsafe { scandirat(libc::AT_FDCWD, path, namelist, filter, compar) }
}

#[no_mangle]
pub unsafe extern "C" fn scandirat64(
    dirfd: c_int,
    path: *const c_char,
    namelist: *mut *mut *mut dirent64,
    filter: DirentFilter,
    compar: DirentCompare,
) -> c_int {
    unsafe { scandirat(dirfd, path, namelist, filter, compar) }
}

// ---------------------------------------------------------------------------------------------
// nftw and ftw: glibc walks with its internal opendir and stat, so a tree inside noseFS is walked
// here, through the shim's own directory streams and stat, with glibc's semantics: FTW_PHYS,
// FTW_DEPTH, FTW_CHDIR, FTW_ACTIONRETVAL; FTW_MOUNT is moot inside one noseFS.

type NftwFn = unsafe extern "C" fn(*const c_char, *const libc::stat, c_int, *mut Ftw) -> c_int;
/// glibc's `struct FTW` (<ftw.h>).
#[derive(Debug)]
#[repr(C)]
pub struct Ftw {
    base: c_int,
    level: c_int,
}

type FtwFn = unsafe extern "C" fn(*const c_char, *const libc::stat, c_int) -> c_int;

const FTW_F: c_int = 0;
const FTW_D: c_int = 1;
const FTW_DNR: c_int = 2;
const FTW_NS: c_int = 3;
const FTW_SL: c_int = 4;
const FTW_DP: c_int = 5;
const FTW_SLN: c_int = 6;
const FTW_PHYS: c_int = 1;
const FTW_CHDIR: c_int = 4;
const FTW_DEPTH: c_int = 8;
const FTW_ACTIONRETVAL: c_int = 16;
const FTW_STOP: c_int = 1;
const FTW_SKIP_SUBTREE: c_int = 2;
const FTW_SKIP_SIBLINGS: c_int = 3;

enum WalkFn {
    Nftw(NftwFn),
    Ftw(FtwFn),
}

struct Walk {
    call: WalkFn,
    flags: c_int,
}

impl Walk {
    /// Calls the program's function; `Err(value)` ends the walk with `value`.
    unsafe fn visit(
        &self,
        path: &CString,
        st: &libc::stat,
        kind: c_int,
        base: usize,
        level: usize,
    ) -> Result<c_int, c_int> {
        let mut ftw = Ftw {
            base: base as c_int,
            level: level as c_int,
        };
        let r = match self.call {
            WalkFn::Nftw(f) => unsafe { f(path.as_ptr(), st, kind, &mut ftw) },
            WalkFn::Ftw(f) => unsafe { f(path.as_ptr(), st, kind) },
        };
        if self.flags & FTW_ACTIONRETVAL != 0 {
            if r == FTW_STOP {
                Err(r)
            } else {
                Ok(r)
            }
        } else if r != 0 {
            Err(r)
        } else {
            Ok(0)
        }
    }

    /// Walks `path` (whose last component starts at `base`); `Ok(FTW_SKIP_SIBLINGS)` asks the
    /// caller to stop at this level.
    unsafe fn walk(&self, path: Vec<u8>, base: usize, level: usize) -> Result<c_int, c_int> {
        let Ok(c) = CString::new(path.clone()) else {
            return Ok(0);
        };
        // SAFETY: struct stat is plain data; all zeroes is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let phys = self.flags & FTW_PHYS != 0;
        let stat_rc = if phys {
            unsafe { lstat(c.as_ptr(), &mut st) }
        } else {
            unsafe { stat(c.as_ptr(), &mut st) }
        };
        let kind = if stat_rc != 0 {
            if !phys && unsafe { lstat(c.as_ptr(), &mut st) } == 0 {
                FTW_SLN
            } else {
                FTW_NS
            }
        } else {
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => FTW_D,
                libc::S_IFLNK => FTW_SL,
                _ => FTW_F,
            }
        };
        if kind != FTW_D {
            return unsafe { self.visit(&c, &st, kind, base, level) };
        }
        let dir = unsafe { opendir(c.as_ptr()) };
        if dir.is_null() {
            return unsafe { self.visit(&c, &st, FTW_DNR, base, level) };
        }
        if self.flags & FTW_DEPTH == 0 {
            match unsafe { self.visit(&c, &st, FTW_D, base, level) } {
                Ok(FTW_SKIP_SUBTREE) => {
                    unsafe { closedir(dir) };
                    return Ok(0);
                }
                Ok(FTW_SKIP_SIBLINGS) => {
                    unsafe { closedir(dir) };
                    return Ok(FTW_SKIP_SIBLINGS);
                }
                Ok(_) => {}
                Err(r) => {
                    unsafe { closedir(dir) };
                    return Err(r);
                }
            }
        }
        let mut names = Vec::new();
        loop {
            let e = unsafe { readdir(dir) };
            if e.is_null() {
                break;
            }
            // SAFETY: readdir's entry is valid until the next call; d_name is NUL-terminated.
            let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) }
                .to_bytes()
                .to_vec();
            if name != b"." && name != b".." {
                names.push(name);
            }
        }
        unsafe { closedir(dir) };
        let chdir_each = self.flags & FTW_CHDIR != 0;
        for name in names {
            let mut child = path.clone();
            if !child.ends_with(b"/") {
                child.push(b'/');
            }
            let child_base = child.len();
            child.extend_from_slice(&name);
            if chdir_each {
                unsafe { chdir(c.as_ptr()) };
            }
            if unsafe { self.walk(child, child_base, level + 1) }? == FTW_SKIP_SIBLINGS {
                break;
            }
        }
        if self.flags & FTW_DEPTH != 0 {
            if chdir_each {
                unsafe { chdir(c.as_ptr()) };
            }
            return unsafe { self.visit(&c, &st, FTW_DP, base, level) }.map(|r| {
                if r == FTW_SKIP_SIBLINGS {
                    r
                } else {
                    0
                }
            });
        }
        Ok(0)
    }
}

unsafe fn walk_ours(dir: *const c_char, call: WalkFn, flags: c_int) -> Option<c_int> {
    let Routed::Ours(_) = (unsafe { routed(libc::AT_FDCWD, dir, flags & FTW_PHYS == 0) }) else {
        return None;
    };
    let mut path = unsafe { bytes(dir) }?.to_vec();
    // glibc reports the start without its trailing slashes.
    while path.len() > 1 && path.ends_with(b"/") {
        path.pop();
    }
    let base = match path.iter().rposition(|&b| b == b'/') {
        Some(i) if i + 1 < path.len() => i + 1,
        _ => 0,
    };
    let walk = Walk { call, flags };
    let saved = (flags & FTW_CHDIR != 0).then(|| {
        route::cwd().or_else(|| {
            rustix::process::getcwd(Vec::new())
                .ok()
                .map(|c| c.into_bytes())
        })
    });
    let r = match unsafe { walk.walk(path, base, 0) } {
        Ok(_) => 0,
        Err(r) => r,
    };
    if let Some(Some(cwd)) = saved {
        if let Ok(c) = CString::new(cwd) {
            unsafe { chdir(c.as_ptr()) };
        }
    }
    Some(r)
}

#[no_mangle]
pub unsafe extern "C" fn nftw(
    dir: *const c_char,
    f: Option<NftwFn>,
    fds: c_int,
    flags: c_int,
) -> c_int {
    if let Some(func) = f {
        if let Some(r) = unsafe { walk_ours(dir, WalkFn::Nftw(func), flags) } {
            return r;
        }
    }
    unsafe {
        real!(nftw: fn(*const c_char, Option<NftwFn>, c_int, c_int) -> c_int)(dir, f, fds, flags)
    }
}

#[no_mangle]
pub unsafe extern "C" fn nftw64(
    dir: *const c_char,
    f: Option<NftwFn>,
    fds: c_int,
    flags: c_int,
) -> c_int {
    unsafe { nftw(dir, f, fds, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn ftw(dir: *const c_char, f: Option<FtwFn>, fds: c_int) -> c_int {
    if let Some(func) = f {
        if let Some(r) = unsafe { walk_ours(dir, WalkFn::Ftw(func), 0) } {
            return r;
        }
    }
    unsafe { real!(ftw: fn(*const c_char, Option<FtwFn>, c_int) -> c_int)(dir, f, fds) }
}

#[no_mangle]
pub unsafe extern "C" fn ftw64(dir: *const c_char, f: Option<FtwFn>, fds: c_int) -> c_int {
    unsafe { ftw(dir, f, fds) }
}

// ---------------------------------------------------------------------------------------------
// Temporary files.

unsafe fn make_temp(
    template: *mut c_char,
    suffix: c_int,
    flags: c_int,
    dir: bool,
) -> Result<c_int, Errno> {
    let t = unsafe { bytes(template) }.ok_or(Errno(libc::EFAULT))?;
    let len = t.len();
    let suffix = usize::try_from(suffix).map_err(|_| Errno::EINVAL)?;
    if len < 6 + suffix || &t[len - 6 - suffix..len - suffix] != b"XXXXXX" {
        return Err(Errno::EINVAL);
    }
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let name = unsafe { std::slice::from_raw_parts_mut(template.cast::<u8>(), len) };
    let mut seed = nosefs_core::mkfs::now_ns() as u64 ^ (std::process::id() as u64).rotate_left(32);
    for _ in 0..1000 {
        for b in &mut name[len - 6 - suffix..len - suffix] {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *b = CHARS[(seed % CHARS.len() as u64) as usize];
        }
        let found = match route::route(libc::AT_FDCWD, name, false)? {
            Route::Ours(f) => f,
            Route::Kernel(_) => return Err(Errno(libc::EXDEV)),
        };
        let r = if dir {
            ops::mkdir(&found, 0o700).map(|()| 0)
        } else {
            ops::open(
                &found,
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | (flags & !libc::O_ACCMODE),
                0o600,
            )
        };
        match r {
            Err(e) if e == Errno::EEXIST => continue,
            other => return other,
        }
    }
    Err(Errno::EEXIST)
}

/// Whether a template names a noseFS path (decided like any path).
unsafe fn template_is_ours(template: *const c_char) -> bool {
    matches!(
        unsafe { routed(libc::AT_FDCWD, template, false) },
        Routed::Ours(_)
    )
}

macro_rules! mkstemp_hook {
    ($name:ident ( $($arg:ident : $ty:ty),* ) => $suffix:expr, $flags:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(template: *mut c_char $(, $arg: $ty)*) -> c_int {
            if unsafe { template_is_ours(template) } {
                return value(serve(|| unsafe { make_temp(template, $suffix, $flags, false) })) as c_int;
            }
            unsafe { real!($name: fn(*mut c_char $(, $ty)*) -> c_int)(template $(, $arg)*) }
        }
    };
}

mkstemp_hook!(mkstemp() => 0, 0);
mkstemp_hook!(mkstemp64() => 0, 0);
mkstemp_hook!(mkostemp(flags: c_int) => 0, flags);
mkstemp_hook!(mkostemp64(flags: c_int) => 0, flags);
mkstemp_hook!(mkstemps(suffix: c_int) => suffix, 0);
mkstemp_hook!(mkstemps64(suffix: c_int) => suffix, 0);
mkstemp_hook!(mkostemps(suffix: c_int, flags: c_int) => suffix, flags);
mkstemp_hook!(mkostemps64(suffix: c_int, flags: c_int) => suffix, flags);

#[no_mangle]
pub unsafe extern "C" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    if unsafe { template_is_ours(template) } {
        return match serve(|| unsafe { make_temp(template, 0, 0, true) }) {
            Ok(_) => template,
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        };
    }
    unsafe { real!(mkdtemp: fn(*mut c_char) -> *mut c_char)(template) }
}

// ---------------------------------------------------------------------------------------------
// Copies between descriptors.

/// Reads from any descriptor: noseFS's through the core, others through libc.
unsafe fn any_read(fd: c_int, buf: &mut [u8], offset: Option<i64>) -> Result<usize, Errno> {
    if fdtable::is_ours(fd) {
        return match offset {
            Some(o) => ops::pread(fd, buf, o),
            None => ops::read(fd, buf),
        };
    }
    let n = match offset {
        Some(o) => unsafe {
            real!(pread64: fn(c_int, *mut c_void, size_t, off64_t) -> ssize_t)(
                fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                o,
            )
        },
        None => unsafe {
            real!(read: fn(c_int, *mut c_void, size_t) -> ssize_t)(
                fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        },
    };
    if n < 0 {
        return Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    Ok(n as usize)
}

unsafe fn any_write(fd: c_int, data: &[u8], offset: Option<i64>) -> Result<usize, Errno> {
    if fdtable::is_ours(fd) {
        return match offset {
            Some(o) => ops::pwrite(fd, data, o),
            None => ops::write(fd, data),
        };
    }
    let n = match offset {
        Some(o) => unsafe {
            real!(pwrite64: fn(c_int, *const c_void, size_t, off64_t) -> ssize_t)(
                fd,
                data.as_ptr().cast(),
                data.len(),
                o,
            )
        },
        None => unsafe {
            real!(write: fn(c_int, *const c_void, size_t) -> ssize_t)(
                fd,
                data.as_ptr().cast(),
                data.len(),
            )
        },
    };
    if n < 0 {
        return Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    Ok(n as usize)
}

/// Copies up to `len` bytes; offsets given by pointer are used and advanced instead of the
/// descriptors' own.
unsafe fn copy_between(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: usize,
) -> Result<usize, Errno> {
    let mut buf = vec![0u8; len.min(1 << 20)];
    let mut done = 0;
    while done < len {
        let want = (len - done).min(buf.len());
        let at_in = (!off_in.is_null()).then(|| unsafe { *off_in });
        let n = unsafe { any_read(fd_in, &mut buf[..want], at_in) }?;
        if n == 0 {
            break;
        }
        let at_out = (!off_out.is_null()).then(|| unsafe { *off_out });
        let w = unsafe { any_write(fd_out, &buf[..n], at_out) }?;
        unsafe {
            if !off_in.is_null() {
                *off_in += w as i64;
            }
            if !off_out.is_null() {
                *off_out += w as i64;
            }
        }
        done += w;
        if w < n {
            break;
        }
    }
    Ok(done)
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    if (fdtable::is_ours(fd_in) || fdtable::is_ours(fd_out)) && !in_shim() {
        return value(serve(|| unsafe {
            copy_between(fd_in, off_in, fd_out, off_out, len)
        })) as ssize_t;
    }
    unsafe {
        real!(copy_file_range: fn(c_int, *mut off64_t, c_int, *mut off64_t, size_t, c_uint) -> ssize_t)(
            fd_in, off_in, fd_out, off_out, len, flags,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off_t,
    count: size_t,
) -> ssize_t {
    if (fdtable::is_ours(in_fd) || fdtable::is_ours(out_fd)) && !in_shim() {
        return value(serve(|| unsafe {
            copy_between(in_fd, offset, out_fd, null_mut(), count)
        })) as ssize_t;
    }
    unsafe {
        real!(sendfile: fn(c_int, c_int, *mut off_t, size_t) -> ssize_t)(
            out_fd, in_fd, offset, count,
        )
    }
}

/// `splice` between a noseFS file and a pipe: one transfer, as the kernel makes one, of at most
/// what the pipe can take now (or 64 KiB), through a buffer. A noseFS file's offset (or
/// `*off`) moves by what the other side took, so nothing is lost when a pipe takes less.
#[no_mangle]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    if (fdtable::is_ours(fd_in) || fdtable::is_ours(fd_out)) && !in_shim() {
        return value(serve(|| unsafe {
            splice_once(fd_in, off_in, fd_out, off_out, len)
        })) as ssize_t;
    }
    unsafe {
        real!(splice: fn(c_int, *mut off64_t, c_int, *mut off64_t, size_t, c_uint) -> ssize_t)(
            fd_in, off_in, fd_out, off_out, len, flags,
        )
    }
}

unsafe fn splice_once(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: usize,
) -> Result<usize, Errno> {
    // Whether `fd` is a pipe; EBADF when it is not open.
    let pipe = |fd: c_int| -> Result<bool, Errno> {
        if fdtable::is_ours(fd) {
            return Ok(false);
        }
        if fd < 0 {
            return Err(Errno::EBADF);
        }
        // SAFETY: fstat only reads the descriptor's attributes; a closed one answers EBADF.
        let st = rustix::fs::fstat(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
            .map_err(|e| Errno(e.raw_os_error()))?;
        Ok(st.st_mode & libc::S_IFMT == libc::S_IFIFO)
    };
    let (pipe_in, pipe_out) = (pipe(fd_in)?, pipe(fd_out)?);
    // The kernel's rules: one side a pipe, and no offset for a pipe.
    if !pipe_in && !pipe_out || (pipe_in && !off_in.is_null()) || (pipe_out && !off_out.is_null()) {
        return Err(Errno::EINVAL);
    }
    let mut want = len.min(64 << 10);
    if pipe_out {
        // SAFETY: F_GETPIPE_SZ and FIONREAD read a pipe's capacity and fill.
        let capacity = unsafe {
            real!(fcntl: fn(c_int, c_int, c_int) -> c_int)(fd_out, libc::F_GETPIPE_SZ, 0)
        };
        let mut queued: c_int = 0;
        let asked = unsafe {
            real!(ioctl: fn(c_int, libc::c_ulong, *mut c_int) -> c_int)(
                fd_out,
                libc::FIONREAD,
                &mut queued,
            )
        };
        if capacity > 0 && asked == 0 {
            let room = (capacity - queued).max(libc::PIPE_BUF as c_int) as usize;
            want = want.min(room);
        }
    }
    let mut buf = vec![0u8; want];
    // A noseFS source is read at its offset and moved by what the sink took.
    let from_file = !pipe_in;
    let at_in = if off_in.is_null() {
        from_file
            .then(|| ops::lseek(fd_in, 0, libc::SEEK_CUR))
            .transpose()?
    } else {
        Some(unsafe { *off_in })
    };
    let n = unsafe { any_read(fd_in, &mut buf, at_in) }?;
    if n == 0 {
        return Ok(0);
    }
    let at_out = (!off_out.is_null()).then(|| unsafe { *off_out });
    let w = unsafe { any_write(fd_out, &buf[..n], at_out) }?;
    match (off_in.is_null(), at_in) {
        (false, _) => unsafe { *off_in += w as i64 },
        (true, Some(at)) => {
            ops::lseek(fd_in, at + w as i64, libc::SEEK_SET)?;
        }
        (true, None) => {}
    }
    if !off_out.is_null() {
        unsafe { *off_out += w as i64 };
    }
    Ok(w)
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off64_t,
    count: size_t,
) -> ssize_t {
    unsafe { sendfile(out_fd, in_fd, offset, count) }
}

// ---------------------------------------------------------------------------------------------
// Mapped files.

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    unsafe { mmap64(addr, len, prot, flags, fd, offset) }
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off64_t,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS != 0 || !fdtable::is_ours(fd) || in_shim() {
        return unsafe {
            real!(mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off64_t) -> *mut c_void)(
                addr, len, prot, flags, fd, offset,
            )
        };
    }
    let mapped = serve(|| {
        match maps::map(addr as usize, len, prot, flags, fd, offset) {
            // Daemon mode: the shadow would live in the daemon; copies instead.
            Err(Errno(libc::EOPNOTSUPP)) => unsafe { map_copy(addr, len, prot, flags, fd, offset) },
            other => other.map(|p| p as *mut c_void),
        }
    });
    match mapped {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            libc::MAP_FAILED
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    if !in_shim() {
        if let Some(done) = serve(|| Ok(maps::unmap(addr as usize, len))).unwrap_or(None) {
            return match done {
                Ok(()) => 0,
                Err(e) => {
                    set_errno(e);
                    -1
                }
            };
        }
    }
    let rc = unsafe { real!(munmap: fn(*mut c_void, size_t) -> c_int)(addr, len) };
    if rc == 0 {
        forget_readable_pages();
    }
    if rc == 0 && !in_shim() {
        let _guard = Guard::enter();
        kernel::unmapped(addr as usize, len);
    }
    rc
}

/// Daemon mode: the kernel descriptor to map noseFS descriptor `fd` through (see `kernel`):
/// the description must allow what `prot` asks, as the kernel's mmap checks.
fn kernel_file_to_map(fd: c_int, prot: c_int) -> Result<Arc<kernel::KernelFile>, Errno> {
    let file = fdtable::get(fd).ok_or(Errno::EBADF)?;
    let write = prot & libc::PROT_WRITE != 0;
    if file.kind != Kind::File || !file.readable() || (write && !file.writable()) {
        return Err(Errno(libc::EACCES));
    }
    kernel::for_file(&file, true, write)
}

/// Daemon mode, before this process reads, writes, truncates or syncs file `ino` through the
/// daemon: the dirty pages of its mappings through the kernel are written back (FUSE writes,
/// pending in the daemon, not committed), so the call sees them and they cannot land later over
/// what it writes. `sync`: fsync instead (the kernel writes back, then the daemon commits).
pub fn write_back_mapped(ino: u64, sync: bool) {
    if let Some(file) = kernel::mapped_file(ino) {
        write_back_fd(file.raw(), sync);
    }
}

/// Writes back the dirty pages of the file of kernel descriptor `fd` and waits for them (FUSE
/// writes, pending in the daemon); `sync`: fsync instead (the daemon commits them too).
pub fn write_back_fd(fd: c_int, sync: bool) {
    // SAFETY: plain system calls on a descriptor the shim owns.
    unsafe {
        if sync {
            real!(fsync: fn(c_int) -> c_int)(fd);
        } else {
            let how = libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER;
            libc::sync_file_range(fd, 0, 0, how);
        }
    }
}

/// Daemon mode, after this process changed the size of file `ino` through the daemon: the
/// kernel's idea of it (which its mappings fault against) is refreshed.
pub fn refresh_mapped_size(ino: u64) {
    if let Some(file) = kernel::mapped_file(ino) {
        kernel::refresh_size(&file);
    }
}

#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    if !in_shim() {
        if let Some(done) = serve(|| Ok(maps::sync(addr as usize, len))).unwrap_or(None) {
            return match done {
                Ok(()) => 0,
                Err(e) => {
                    set_errno(e);
                    -1
                }
            };
        }
    }
    unsafe { real!(msync: fn(*mut c_void, size_t, c_int) -> c_int)(addr, len, flags) }
}

/// mremap cannot move or resize a mapping of a noseFS file (the core knows it by its address):
/// ENOMEM, which callers such as SQLite answer with munmap and mmap.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    // Variadic in C; on x86-64 a fifth argument travels in the same register either way. It is
    // meaningful only with MREMAP_FIXED (otherwise whatever the register held, passed on and
    // ignored by the kernel, as libc's own mremap does).
    new_addr: *mut c_void,
) -> *mut c_void {
    if !in_shim() {
        match serve(|| Ok(maps::remap(old as usize, old_len, new_len, flags))) {
            Ok(Some(Ok(addr))) => return addr as *mut c_void,
            Ok(Some(Err(e))) | Err(e) => {
                set_errno(e);
                return libc::MAP_FAILED;
            }
            Ok(None) => {}
        }
    }
    forget_readable_pages();
    unsafe {
        real!(mremap: fn(*mut c_void, size_t, size_t, c_int, *mut c_void) -> *mut c_void)(
            old, old_len, new_len, flags, new_addr,
        )
    }
}

/// Daemon mode: a shared mapping goes through the kernel's FUSE mount (`maps`); a private one
/// is a copy of the file's bytes.
unsafe fn map_copy(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off64_t,
) -> Result<*mut c_void, Errno> {
    let file = fdtable::get(fd).ok_or(Errno::EBADF)?;
    let shared = flags & libc::MAP_TYPE == libc::MAP_SHARED
        || flags & libc::MAP_TYPE == libc::MAP_SHARED_VALIDATE;
    let f = real!(mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off64_t) -> *mut c_void);
    if shared {
        // Through the daemon's FUSE mount (see `maps`): one page cache for every process.
        let kernel_file = kernel_file_to_map(fd, prot)?;
        let kernel_fd = kernel_file.raw();
        // Another process may have grown the file through the daemon since the kernel last
        // asked its size: pages past a stale size would fault SIGBUS (measured: SQLite's -shm
        // index, grown by one process and mapped by another).
        kernel::refresh_size(&kernel_file);
        let p = unsafe { f(addr, len, prot, flags, kernel_fd, offset) };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOMEM);
            return Err(Errno(e));
        }
        kernel::mapped(&kernel_file, p as usize, len);
        return Ok(p);
    }
    if !file.readable() || file.kind != Kind::File {
        return Err(Errno(libc::EACCES));
    }
    if len == 0 || offset < 0 || offset % 4096 != 0 {
        return Err(Errno::EINVAL);
    }
    let keep = flags
        & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_NORESERVE | libc::MAP_POPULATE);
    let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | keep;
    let p = unsafe { f(addr, len, libc::PROT_READ | libc::PROT_WRITE, anon, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOMEM),
        ));
    }
    let dst = unsafe { out_slice(p, len) };
    let mut at = 0;
    while at < len {
        let n = ops::pread(fd, &mut dst[at..], offset + at as i64)?;
        if n == 0 {
            break;
        }
        at += n;
    }
    // SAFETY: `p..p+len` is the mapping made above.
    unsafe { libc::mprotect(p, len, prot) };
    Ok(p)
}

// ---------------------------------------------------------------------------------------------
// Processes: fork, spawn, exec.

#[no_mangle]
pub unsafe extern "C" fn vfork() -> pid_t {
    // A vfork child shares our memory: anything it did to the shim's state (an exec unmounts)
    // would happen to the parent too. fork is a correct vfork.
    unsafe { fork() }
}

/// In daemon mode the child shares this process's open descriptions: they are handed to it in
/// a ticket made before the fork (so none is released before the child claims it at its first
/// call), which the parent then ties to the child's pid (the child's end releases what it did
/// not claim).
#[no_mangle]
pub unsafe extern "C" fn fork() -> pid_t {
    if in_shim() || !state::daemon_mode() {
        return unsafe { real!(fork: fn() -> pid_t)() };
    }
    let ticket = {
        let _guard = Guard::enter();
        let mut handles = Vec::new();
        fdtable::for_each(|file| {
            handles.push(file.handle);
            // The child shares every description, and with it the flock and OFD locks taken
            // through it: both must lock one kernel description.
            ops::share_locks(file);
        });
        handles.sort_unstable();
        handles.dedup();
        state::hold_for_child(&handles)
    };
    let pid = unsafe { real!(fork: fn() -> pid_t)() };
    if pid == 0 {
        state::claim_at_connect(ticket);
    } else {
        let _guard = Guard::enter();
        state::after_fork_in_parent(ticket, pid);
    }
    pid
}

/// Before a spawn: the descriptor table and environment the child gets ([`crate::exec`]), or
/// `None` when the shim has nothing to hand over (not configured, or called from inside it).
unsafe fn prepare_spawn(
    actions: *const c_void,
    envp: *const *mut c_char,
) -> Option<(Vec<CString>, u64)> {
    if state::config().is_none() || in_shim() {
        return None;
    }
    let _guard = Guard::enter();
    crate::offsets::share_all();
    let env = if envp.is_null() {
        None
    } else {
        Some(unsafe { c_strings(envp.cast()) })
    };
    crate::exec::prepare_spawn(env, actions as usize).ok()
}

/// Embedded mode, `dlopen` (from `nosefs_c_dlopen` in C): the path of a sealed memfd copy of
/// the shared object `file` names when that is a noseFS file, which the dynamic loader, opening
/// paths itself through the kernel, would not find (a Python extension built in a virtual
/// environment on noseFS); null otherwise, and the real dlopen gets `file` as it was. Only a
/// name with a slash: the loader searches the others. Copies are kept for the life of the
/// process, one per version of a file (inode, size, modification time), so a second dlopen of
/// it finds the object already loaded, as the loader matches the memfd's inode. Libraries the
/// copy needs are found by the loader as usual (not on noseFS). Daemon mode needs none of this:
/// the loader finds the file on the FUSE mount.
#[no_mangle]
pub unsafe extern "C" fn nosefs_stored_library(file: *const c_char) -> *const c_char {
    if in_shim() || state::config().is_none() || state::daemon_mode() {
        return std::ptr::null();
    }
    match unsafe { bytes(file) } {
        Some(name) if name.contains(&b'/') => {}
        _ => return std::ptr::null(),
    }
    let Routed::Ours(found) = (unsafe { routed(libc::AT_FDCWD, file, true) }) else {
        return std::ptr::null();
    };
    let _guard = Guard::enter();
    let Some(attr) = found.attr else {
        return std::ptr::null();
    };
    let version = (attr.ino, attr.size, attr.mtime_ns);
    let mut copies = STORED_LIBRARIES.lock();
    if let Some((_, path, _)) = copies.iter().find(|(v, _, _)| *v == version) {
        return path.as_ptr();
    }
    let Ok(image) = ops::library_image(&found, STORED_PROGRAM_MAX_BYTES) else {
        return std::ptr::null();
    };
    let Some(memfd) = stored_program_memfd(&image, true)
        .ok()
        .and_then(fdtable::LockFd::moved_high)
    else {
        return std::ptr::null();
    };
    let path = CString::new(format!("/proc/self/fd/{}", memfd.raw())).expect("no NUL");
    copies.push((version, path, memfd));
    copies
        .last()
        .map_or(std::ptr::null(), |(_, path, _)| path.as_ptr())
}

/// [`nosefs_stored_library`]'s copies: file version, the path the loader opened, the memfd.
#[allow(clippy::type_complexity)]
static STORED_LIBRARIES: parking_lot::Mutex<Vec<((u64, u64, i64), CString, fdtable::LockFd)>> =
    parking_lot::Mutex::new(Vec::new());

/// Embedded mode, execvp and posix_spawnp of a name without a slash (`search`: the caller
/// searches PATH): when a directory of this process's PATH is in noseFS, the shim searches, as
/// glibc would, for the first executable regular file `dir/name` (noseFS's through the core,
/// the kernel's through the kernel), since glibc's own search asks the kernel, which sees an
/// empty directory there. EACCES if only files the caller may not execute were found, ENOENT
/// if none. `None` when glibc's search serves (no PATH directory is noseFS's; daemon mode,
/// whose kernel finds them on the FUSE mount).
unsafe fn search_stored(search: bool, file: *const c_char) -> Option<Result<CString, Errno>> {
    if !search || in_shim() || state::config().is_none() || state::daemon_mode() {
        return None;
    }
    let name = unsafe { bytes(file) }?;
    if name.is_empty() || name.contains(&b'/') {
        return None;
    }
    // No guard here: the candidates are routed like any path a program names.
    let path = std::env::var_os("PATH")
        .map(|p| std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()).to_vec())
        .unwrap_or_else(|| b"/bin:/usr/bin".to_vec());
    // An empty entry is the working directory.
    let ours = |dir: &[u8]| {
        if dir.first() == Some(&b'/') {
            route::maybe_ours(dir)
        } else {
            route::cwd_is_ours()
        }
    };
    let dirs: Vec<&[u8]> = path.split(|&b| b == b':').collect();
    if !dirs.iter().any(|d| ours(d)) {
        return None;
    }
    let mut denied = false;
    for dir in dirs {
        let mut candidate = if dir.is_empty() {
            b".".to_vec()
        } else {
            dir.to_vec()
        };
        candidate.push(b'/');
        candidate.extend_from_slice(name);
        let Ok(candidate) = CString::new(candidate) else {
            continue;
        };
        match executable(&candidate) {
            Ok(()) => return Some(Ok(candidate)),
            Err(e) if e == Errno(libc::EACCES) => denied = true,
            Err(_) => {}
        }
    }
    Some(Err(Errno(if denied { libc::EACCES } else { libc::ENOENT })))
}

/// Whether `path` names a regular file the caller may execute (EACCES if it may not, ENOENT
/// or another error if there is none).
fn executable(path: &CStr) -> Result<(), Errno> {
    match unsafe { routed(libc::AT_FDCWD, path.as_ptr(), true) } {
        Routed::Ours(found) => {
            let attr = found.attr.ok_or(Errno::ENOENT)?;
            if attr.mode & libc::S_IFMT != libc::S_IFREG {
                return Err(Errno(libc::EACCES));
            }
            serve(|| ops::access(&found, libc::X_OK))
        }
        Routed::Kernel(k) => {
            let path = Routed::kernel_path(&k, path.as_ptr());
            let st = rustix::fs::stat(unsafe { CStr::from_ptr(path) })
                .map_err(|e| Errno(e.raw_os_error()))?;
            if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                return Err(Errno(libc::EACCES));
            }
            rustix::fs::access(unsafe { CStr::from_ptr(path) }, rustix::fs::Access::EXEC_OK)
                .map_err(|e| Errno(e.raw_os_error()))
        }
        Routed::Err(e) => Err(e),
    }
}

/// Embedded mode: what exec and posix_spawn run instead of `path` when that is a program stored
/// in noseFS, which the kernel cannot see (the prefix is an empty directory to it): a `#!`
/// script's interpreter with the script's path among its arguments (the interpreter, under the
/// shim, opens it), or the program's sealed memfd copy by its /proc path (the kernel opens it
/// before the exec closes the close-on-exec descriptor; kept open until the call returns).
/// Daemon mode needs none of this: there the prefix is the FUSE mount, where the kernel finds
/// the program itself.
struct StoredSpawn {
    path: CString,
    args: Vec<CString>,
    _memfd: Option<std::os::fd::OwnedFd>,
}

/// [`StoredSpawn`] for `path` with arguments `argv`, `None` when `path` is not noseFS's (or in
/// daemon mode, where the kernel finds it on the FUSE mount).
unsafe fn stored_spawn(
    path: *const c_char,
    argv: *const *const c_char,
) -> Result<Option<StoredSpawn>, Errno> {
    if path.is_null() || in_shim() || state::config().is_none() || state::daemon_mode() {
        return Ok(None);
    }
    let mut path = unsafe { CStr::from_ptr(path) }.to_owned();
    let mut args = if argv.is_null() {
        Vec::new()
    } else {
        unsafe { c_strings(argv) }
    };
    for depth in 0..=INTERPRETER_DEPTH_MAX {
        let found = match unsafe { routed(libc::AT_FDCWD, path.as_ptr(), true) } {
            Routed::Ours(found) => found,
            // A kernel program reached through noseFS (a symlink there, `..` out of it): the
            // kernel gets the path it resolves to, which it can see.
            Routed::Kernel(Some(resolved)) => {
                return Ok(Some(StoredSpawn {
                    path: resolved,
                    args,
                    _memfd: None,
                }))
            }
            Routed::Kernel(None) | Routed::Err(_) if depth == 0 => return Ok(None),
            Routed::Kernel(None) | Routed::Err(_) => {
                return Ok(Some(StoredSpawn {
                    path,
                    args,
                    _memfd: None,
                }))
            }
        };
        let image = serve(|| ops::program_image(&found, STORED_PROGRAM_MAX_BYTES))?;
        let Some(line) = image.strip_prefix(b"#!") else {
            let memfd = stored_program_memfd(&image, true)?;
            let fd = std::os::fd::AsRawFd::as_raw_fd(&memfd);
            return Ok(Some(StoredSpawn {
                path: CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL"),
                args,
                _memfd: Some(memfd),
            }));
        };
        let (interpreter, arg) = interpreter_line(line).ok_or(Errno(libc::ENOEXEC))?;
        let mut with = vec![interpreter.clone()];
        with.extend(arg);
        with.push(path);
        with.extend(args.into_iter().skip(1));
        (path, args) = (interpreter, with);
    }
    Err(Errno(libc::ELOOP))
}

macro_rules! spawn_hook {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            pid: *mut pid_t,
            path: *const c_char,
            actions: *const c_void,
            attr: *const c_void,
            argv: *const *mut c_char,
            envp: *const *mut c_char,
        ) -> c_int {
            let f = real!($name: fn(*mut pid_t, *const c_char, *const c_void, *const c_void, *const *mut c_char, *const *mut c_char) -> c_int);
            // A name with a slash is a path (posix_spawnp searches PATH only for the others; a
            // search that reaches a noseFS directory is the shim's, glibc's would miss it).
            let found;
            let path = match unsafe { search_stored(stringify!($name) == "posix_spawnp", path) } {
                Some(Ok(p)) => {
                    found = p;
                    found.as_ptr()
                }
                Some(Err(e)) => return e.0,
                None => path,
            };
            let named = !path.is_null() && unsafe { CStr::from_ptr(path) }.to_bytes().contains(&b'/');
            let stored = if named {
                match unsafe { stored_spawn(path, argv.cast()) } {
                    Ok(stored) => stored,
                    Err(e) => return e.0,
                }
            } else {
                None
            };
            let stored_args = stored.as_ref().map(|s| pointers(&s.args));
            let (path, argv) = match (&stored, &stored_args) {
                (Some(s), Some(a)) => (s.path.as_ptr(), a.as_ptr().cast()),
                _ => (path, argv),
            };
            if !actions.is_null() && !in_shim() {
                if let Err(e) = spawn_actions_allowed(actions) {
                    return e.0;
                }
            }
            let Some((env, ticket)) = (unsafe { prepare_spawn(actions, envp) }) else {
                return unsafe { f(pid, path, actions, attr, argv, envp) };
            };
            let env_ptrs = pointers(&env);
            let mut child: pid_t = -1;
            let out = if pid.is_null() { &mut child as *mut pid_t } else { pid };
            let rc = unsafe { f(out, path, actions, attr, argv, env_ptrs.as_ptr().cast()) };
            let _guard = Guard::enter();
            // SAFETY: `out` is the caller's pid pointer or our local, written on success.
            crate::exec::spawned(ticket, if rc == 0 { unsafe { *out } } else { -1 });
            rc
        }
    };
}

spawn_hook!(posix_spawn);
spawn_hook!(posix_spawnp);

/// `system` and `popen` spawn through glibc's internal posix_spawn with this process's
/// environment: the hand-over's variables are set in it for the call, and restored after.
/// (Changing the environment while another thread reads it is the usual setenv caveat; the
/// child gets the table either way.)
unsafe fn with_spawn_environment<T>(call: impl FnOnce() -> T, child_outlives_call: bool) -> T {
    let Some((env, ticket)) = (unsafe { prepare_spawn(std::ptr::null(), std::ptr::null()) }) else {
        return call();
    };
    let saved: Vec<(&str, Option<std::ffi::OsString>)> = [state::ENV_EXEC_TABLE, state::ENV_CWD]
        .into_iter()
        .map(|name| (name, std::env::var_os(name)))
        .collect();
    for (name, _) in &saved {
        let prefix = format!("{name}=");
        match env
            .iter()
            .find_map(|kv| kv.to_bytes().strip_prefix(prefix.as_bytes()))
        {
            Some(value) => std::env::set_var(
                name,
                <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(value),
            ),
            None => std::env::remove_var(name),
        }
    }
    let out = call();
    let _guard = Guard::enter();
    for (name, value) in saved {
        match value {
            Some(v) => std::env::set_var(name, v),
            None => std::env::remove_var(name),
        }
    }
    // system's child has ended: what it did not claim is released. popen's runs on: its ticket
    // is tied to this process (released at its end at the latest).
    let holder = if child_outlives_call {
        rustix::process::getpid().as_raw_nonzero().get()
    } else {
        -1
    };
    crate::exec::spawned(ticket, holder);
    out
}

#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    let f = real!(system: fn(*const c_char) -> c_int);
    unsafe { with_spawn_environment(|| f(command), false) }
}

#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let f = real!(popen: fn(*const c_char, *const c_char) -> *mut libc::FILE);
    unsafe { with_spawn_environment(|| f(command, mode), true) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_init(actions: *mut c_void) -> c_int {
    let rc = unsafe { real!(posix_spawn_file_actions_init: fn(*mut c_void) -> c_int)(actions) };
    if rc == 0 && !in_shim() {
        let opened = {
            let _guard = Guard::enter();
            crate::exec::actions_init(actions as usize)
        };
        opened.into_iter().for_each(|fd| {
            unsafe { close(fd) };
        });
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_destroy(actions: *mut c_void) -> c_int {
    if !in_shim() {
        let opened = {
            let _guard = Guard::enter();
            crate::exec::actions_destroy(actions as usize)
        };
        opened.into_iter().for_each(|fd| {
            unsafe { close(fd) };
        });
    }
    unsafe { real!(posix_spawn_file_actions_destroy: fn(*mut c_void) -> c_int)(actions) }
}

fn record_action(rc: c_int, actions: *mut c_void, action: crate::exec::FileAction) -> c_int {
    record(rc, actions, crate::exec::Recorded::Files(action))
}

fn record(rc: c_int, actions: *mut c_void, action: crate::exec::Recorded) -> c_int {
    if rc == 0 && !in_shim() {
        let _guard = Guard::enter();
        crate::exec::actions_add(actions as usize, action);
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_adddup2(
    actions: *mut c_void,
    from: c_int,
    to: c_int,
) -> c_int {
    let f = real!(posix_spawn_file_actions_adddup2: fn(*mut c_void, c_int, c_int) -> c_int);
    let rc = unsafe { f(actions, from, to) };
    record_action(rc, actions, crate::exec::FileAction::Dup2 { from, to })
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_addclose(
    actions: *mut c_void,
    fd: c_int,
) -> c_int {
    let f = real!(posix_spawn_file_actions_addclose: fn(*mut c_void, c_int) -> c_int);
    let rc = unsafe { f(actions, fd) };
    record_action(rc, actions, crate::exec::FileAction::Close(fd))
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_addopen(
    actions: *mut c_void,
    fd: c_int,
    path: *const c_char,
    oflag: c_int,
    mode: libc::mode_t,
) -> c_int {
    let f = real!(posix_spawn_file_actions_addopen: fn(*mut c_void, c_int, *const c_char, c_int, libc::mode_t) -> c_int);
    if let Some(rc) = unsafe { add_stored_open(actions, fd, path, oflag, mode) } {
        return rc;
    }
    let rc = unsafe { f(actions, fd, path, oflag, mode) };
    record_action(rc, actions, crate::exec::FileAction::Open(fd))
}

/// Embedded mode, `addopen` of a noseFS path: the child's kernel would open it in the prefix's
/// empty directory (creating a file there the shim never shows), so the shim opens it now and
/// the action becomes a dup2 of that descriptor onto `fd`; the child adopts the description
/// from the hand-over. An open that fails makes the spawn fail with its errno, as the child's
/// would. `None` when glibc's own action serves (a kernel path; daemon mode, whose kernel finds
/// the path on the FUSE mount).
unsafe fn add_stored_open(
    actions: *mut c_void,
    fd: c_int,
    path: *const c_char,
    oflag: c_int,
    mode: libc::mode_t,
) -> Option<c_int> {
    if in_shim() || state::config().is_none() || state::daemon_mode() || actions.is_null() {
        return None;
    }
    let follow = oflag & libc::O_NOFOLLOW == 0;
    if !matches!(
        unsafe { routed(libc::AT_FDCWD, path, follow) },
        Routed::Ours(_)
    ) {
        return None;
    }
    let opened = unsafe { nosefs_hook_openat(libc::AT_FDCWD, path, oflag | libc::O_CLOEXEC, mode) };
    if opened < 0 {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        return Some(record(0, actions, crate::exec::Recorded::Failed(errno)));
    }
    let dup2 = real!(posix_spawn_file_actions_adddup2: fn(*mut c_void, c_int, c_int) -> c_int);
    let rc = unsafe { dup2(actions, opened, fd) };
    if rc != 0 {
        unsafe { close(opened) };
        return Some(rc);
    }
    record(0, actions, crate::exec::Recorded::Opened(opened));
    Some(record_action(
        0,
        actions,
        crate::exec::FileAction::Dup2 {
            from: opened,
            to: fd,
        },
    ))
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_addclosefrom_np(
    actions: *mut c_void,
    from: c_int,
) -> c_int {
    let f = real!(posix_spawn_file_actions_addclosefrom_np: fn(*mut c_void, c_int) -> c_int);
    let rc = unsafe { f(actions, from) };
    record_action(rc, actions, crate::exec::FileAction::CloseFrom(from))
}

/// `addchdir_np`: a child that starts in a noseFS directory gets it from the hand-over (glibc's
/// own action would ask the kernel, which does not see it); glibc's action enters the kernel's
/// side of it instead (the FUSE mount's same directory in daemon mode, the prefix in embedded
/// mode, as `chdir` does). The directory is checked when the child is spawned.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_addchdir_np(
    actions: *mut c_void,
    path: *const c_char,
) -> c_int {
    let f = real!(posix_spawn_file_actions_addchdir_np: fn(*mut c_void, *const c_char) -> c_int);
    if in_shim() || state::config().is_none() {
        return unsafe { f(actions, path) };
    }
    let Some(p) = (unsafe { bytes(path) }) else {
        return unsafe { f(actions, path) };
    };
    // Relative to the directory an earlier action entered, when that is noseFS's.
    let earlier = {
        let _guard = Guard::enter();
        crate::exec::recorded_chdir(actions as usize)
    };
    let absolute = match earlier {
        Some(Some(dir)) if p.first() != Some(&b'/') => {
            let mut joined = dir;
            joined.push(b'/');
            joined.extend_from_slice(p);
            CString::new(joined).ok()
        }
        Some(None) if p.first() != Some(&b'/') => None, // relative to a kernel directory
        _ => Some(unsafe { CStr::from_ptr(path) }.to_owned()),
    };
    let ours = absolute.and_then(
        |a| match unsafe { routed(libc::AT_FDCWD, a.as_ptr(), true) } {
            Routed::Ours(found) => Some(found.path),
            Routed::Kernel(_) | Routed::Err(_) => None,
        },
    );
    match ours {
        Some(dir) => unsafe { add_kernel_side_chdir(actions, dir) },
        None => {
            let rc = unsafe { f(actions, path) };
            record(rc, actions, crate::exec::Recorded::Chdir(None))
        }
    }
}

/// `addfchdir_np`: as [`posix_spawn_file_actions_addchdir_np`] for a noseFS directory
/// descriptor, whose placeholder the kernel could not enter.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_addfchdir_np(
    actions: *mut c_void,
    fd: c_int,
) -> c_int {
    let f = real!(posix_spawn_file_actions_addfchdir_np: fn(*mut c_void, c_int) -> c_int);
    if in_shim() || !fdtable::is_ours(fd) {
        let rc = unsafe { f(actions, fd) };
        return if in_shim() {
            rc
        } else {
            record(rc, actions, crate::exec::Recorded::Chdir(None))
        };
    }
    let Some(file) = fdtable::get(fd) else {
        return libc::EBADF;
    };
    unsafe { add_kernel_side_chdir(actions, file.path.clone()) }
}

/// Records a change into noseFS directory `dir` and adds glibc's action for the kernel's side.
unsafe fn add_kernel_side_chdir(actions: *mut c_void, dir: Vec<u8>) -> c_int {
    let f = real!(posix_spawn_file_actions_addchdir_np: fn(*mut c_void, *const c_char) -> c_int);
    let Some(config) = state::config() else {
        return libc::EINVAL;
    };
    let kernel_side = if state::daemon_mode() {
        dir.clone()
    } else {
        config.prefix.to_vec()
    };
    let Ok(kernel_side) = CString::new(kernel_side) else {
        return libc::EINVAL;
    };
    let rc = unsafe { f(actions, kernel_side.as_ptr()) };
    record(rc, actions, crate::exec::Recorded::Chdir(Some(dir)))
}

/// Whether a spawn's actions can be carried out: the error of an open the shim made for them
/// (embedded mode), or of entering the noseFS directory they name, as the child's open or
/// chdir would have given it, which posix_spawn returns.
fn spawn_actions_allowed(actions: *const c_void) -> Result<(), Errno> {
    if let Some(errno) = crate::exec::failed_open(actions as usize) {
        return Err(Errno(errno));
    }
    let Some(Some(dir)) = crate::exec::recorded_chdir(actions as usize) else {
        return Ok(());
    };
    let dir = CString::new(dir).map_err(|_| Errno(libc::EINVAL))?;
    match unsafe { routed(libc::AT_FDCWD, dir.as_ptr(), true) } {
        Routed::Ours(found) => serve(|| ops::may_chdir(&found)),
        Routed::Kernel(_) => Err(Errno(libc::ENOENT)),
        Routed::Err(e) => Err(e),
    }
}

/// Reads a NULL-terminated array of C strings.
unsafe fn c_strings(list: *const *const c_char) -> Vec<CString> {
    let mut out = Vec::new();
    if list.is_null() {
        return out;
    }
    let mut i = 0;
    loop {
        // SAFETY: the array is NULL-terminated (execve's contract).
        let p = unsafe { *list.add(i) };
        if p.is_null() {
            break;
        }
        out.push(unsafe { CStr::from_ptr(p) }.to_owned());
        i += 1;
    }
    out
}

/// Hands the image and the noseFS descriptors over to the program about to be executed;
/// returns the environment it gets (built from `envp`, or from ours when null).
unsafe fn prepare_exec(envp: *const *const c_char) -> Option<Vec<CString>> {
    if state::config().is_none() || in_shim() {
        return None;
    }
    let _guard = Guard::enter();
    let env = if envp.is_null() {
        None
    } else {
        Some(unsafe { c_strings(envp) })
    };
    crate::exec::prepare(env).ok()
}

fn pointers(list: &[CString]) -> Vec<*const c_char> {
    list.iter()
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Largest program embedded mode runs from noseFS (it is copied into memory first).
const STORED_PROGRAM_MAX_BYTES: u64 = 1 << 30;
/// How many `#!` interpreters may lead to one another (the kernel allows four).
const INTERPRETER_DEPTH_MAX: usize = 4;

/// A sealed memfd holding `image`, close-on-exec unless the program exec runs must read it.
fn stored_program_memfd(image: &[u8], close_on_exec: bool) -> Result<std::os::fd::OwnedFd, Errno> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let io = |e: rustix::io::Errno| Errno(e.raw_os_error());
    let _guard = Guard::enter();
    let cloexec = if close_on_exec {
        MemfdFlags::CLOEXEC
    } else {
        MemfdFlags::empty()
    };
    let fd =
        rustix::fs::memfd_create("nosefs-exec", cloexec | MemfdFlags::ALLOW_SEALING).map_err(io)?;
    let mut at = 0;
    while at < image.len() {
        at += rustix::io::write(&fd, &image[at..]).map_err(io)?;
    }
    rustix::fs::fcntl_add_seals(
        &fd,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )
    .map_err(io)?;
    Ok(fd)
}

/// The interpreter a `#!` line names (`line`: what follows `#!`) and its optional argument, as
/// the kernel reads them: the first line (at most 255 bytes), blanks trimmed, the interpreter
/// up to the first blank and the rest as one argument.
fn interpreter_line(line: &[u8]) -> Option<(CString, Option<CString>)> {
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let line = line.get(..255).unwrap_or(line);
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let start = line.iter().position(|b| !blank(b)).unwrap_or(line.len());
    let line = &line[start..];
    let end = line.iter().rposition(|b| !blank(b)).map_or(0, |i| i + 1);
    let line = &line[..end];
    let split = line.iter().position(blank).unwrap_or(line.len());
    let (interpreter, rest) = line.split_at(split);
    let arg = &rest[rest.iter().position(|b| !blank(b)).unwrap_or(rest.len())..];
    if interpreter.is_empty() {
        return None;
    }
    let arg = if arg.is_empty() {
        None
    } else {
        Some(CString::new(arg).ok()?)
    };
    Some((CString::new(interpreter).ok()?, arg))
}

#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real!(execve: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int);
    // A program stored in noseFS (embedded mode): what to run instead ([`StoredSpawn`]).
    let stored = match unsafe { stored_spawn(path, argv) } {
        Ok(stored) => stored,
        Err(e) => return fail(e),
    };
    let stored_args = stored.as_ref().map(|s| pointers(&s.args));
    let (path, argv) = match (&stored, &stored_args) {
        (Some(s), Some(a)) => (s.path.as_ptr(), a.as_ptr()),
        _ => (path, argv),
    };
    let Some(env) = (unsafe { prepare_exec(envp) }) else {
        return unsafe { f(path, argv, envp) };
    };
    let env_ptrs = pointers(&env);
    let rc = unsafe { f(path, argv, env_ptrs.as_ptr()) };
    crate::exec::failed();
    rc
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real!(execvpe: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int);
    // A name with a slash is not searched for: a path, which may be noseFS's (see `execve`).
    if !file.is_null() && unsafe { CStr::from_ptr(file) }.to_bytes().contains(&b'/') {
        return unsafe { execve(file, argv, if envp.is_null() { environ } else { envp }) };
    }
    match unsafe { search_stored(true, file) } {
        Some(Ok(path)) => {
            return unsafe {
                execve(
                    path.as_ptr(),
                    argv,
                    if envp.is_null() { environ } else { envp },
                )
            };
        }
        Some(Err(e)) => return fail(e),
        None => {}
    }
    let Some(env) = (unsafe { prepare_exec(envp) }) else {
        return unsafe { f(file, argv, envp) };
    };
    let env_ptrs = pointers(&env);
    let rc = unsafe { f(file, argv, env_ptrs.as_ptr()) };
    crate::exec::failed();
    rc
}

extern "C" {
    static environ: *const *const c_char;
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    unsafe { execve(path, argv, environ) }
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    unsafe { execvpe(file, argv, environ) }
}

#[no_mangle]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let f = real!(fexecve: fn(c_int, *const *const c_char, *const *const c_char) -> c_int);
    if fdtable::is_ours(fd) {
        return unsafe { exec_descriptor(fd, argv, envp) };
    }
    let Some(env) = (unsafe { prepare_exec(envp) }) else {
        return unsafe { f(fd, argv, envp) };
    };
    let env_ptrs = pointers(&env);
    let rc = unsafe { f(fd, argv, env_ptrs.as_ptr()) };
    crate::exec::failed();
    rc
}

/// `execveat`: a descriptor alone (`AT_EMPTY_PATH`) is [`fexecve`]; a path is [`execve`]'s when
/// it is absolute or relative to the working directory, and is opened first when it is relative
/// to a noseFS directory.
#[no_mangle]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    let f = real!(execveat: fn(c_int, *const c_char, *const *const c_char, *const *const c_char, c_int) -> c_int);
    match unsafe { bytes(path) } {
        Some([]) if flags & libc::AT_EMPTY_PATH != 0 => {
            return unsafe { fexecve(dirfd, argv, envp) };
        }
        Some(p)
            if flags & !libc::AT_EMPTY_PATH == 0 && (p[0] == b'/' || dirfd == libc::AT_FDCWD) =>
        {
            return unsafe { execve(path, argv, envp) };
        }
        Some(_) if fdtable::is_ours(dirfd) => {
            let nofollow = if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
                libc::O_NOFOLLOW
            } else {
                0
            };
            let fd = unsafe {
                nosefs_hook_openat(dirfd, path, libc::O_RDONLY | libc::O_CLOEXEC | nofollow, 0)
            };
            if fd < 0 {
                return -1;
            }
            let rc = unsafe { fexecve(fd, argv, envp) };
            let errno = std::io::Error::last_os_error();
            unsafe { close(fd) };
            set_errno(Errno(errno.raw_os_error().unwrap_or(libc::ENOEXEC)));
            return rc;
        }
        _ => {}
    }
    let Some(env) = (unsafe { prepare_exec(envp) }) else {
        return unsafe { f(dirfd, path, argv, envp, flags) };
    };
    let env_ptrs = pointers(&env);
    let rc = unsafe { f(dirfd, path, argv, env_ptrs.as_ptr(), flags) };
    crate::exec::failed();
    rc
}

/// `fexecve` of a noseFS descriptor, in either mode: the kernel cannot open the file, so the
/// program runs from a sealed memfd copy of it, as a program stored in noseFS does in embedded
/// mode ([`stored_spawn`]). A `#!` script runs through its interpreter with the copy as
/// `/dev/fd/N`, as the kernel names a script run by descriptor, and left open for the
/// interpreter to read (the kernel leaves the script's descriptor open too, and refuses a
/// close-on-exec one). Returns only on failure, with errno set.
unsafe fn exec_descriptor(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let image = match serve(|| ops::program_image_of(fd, STORED_PROGRAM_MAX_BYTES)) {
        Ok(image) => image,
        Err(e) => return fail(e),
    };
    let args = if argv.is_null() {
        Vec::new()
    } else {
        unsafe { c_strings(argv) }
    };
    let script = image.strip_prefix(b"#!");
    // The kernel refuses a script whose descriptor goes with the exec: the interpreter could
    // not open it.
    if script.is_some() && !survives_exec(fd) {
        return fail(Errno(libc::ENOENT));
    }
    let interpreter = match script.map(interpreter_line) {
        Some(None) => return fail(Errno(libc::ENOEXEC)),
        Some(Some(found)) => Some(found),
        None => None,
    };
    let memfd = match stored_program_memfd(&image, interpreter.is_none()) {
        Ok(memfd) => memfd,
        Err(e) => return fail(e),
    };
    let copy = std::os::fd::AsRawFd::as_raw_fd(&memfd);
    let (path, args) = match interpreter {
        Some((interpreter, arg)) => {
            let mut with = vec![interpreter.clone()];
            with.extend(arg);
            with.push(CString::new(format!("/dev/fd/{copy}")).expect("no NUL"));
            with.extend(args.into_iter().skip(1));
            (interpreter, with)
        }
        None => (
            CString::new(format!("/proc/self/fd/{copy}")).expect("no NUL"),
            args,
        ),
    };
    let arg_ptrs = pointers(&args);
    let env = if envp.is_null() {
        unsafe { environ }
    } else {
        envp
    };
    // An interpreter stored in noseFS is `execve`'s to find.
    let rc = unsafe { execve(path.as_ptr(), arg_ptrs.as_ptr(), env) };
    let errno = std::io::Error::last_os_error();
    drop(memfd);
    set_errno(Errno(errno.raw_os_error().unwrap_or(libc::ENOEXEC)));
    rc
}

// ---------------------------------------------------------------------------------------------
// Helpers for the exec hand-over.

/// Whether descriptor `fd` stays open across exec (no close-on-exec flag).
pub fn survives_exec(fd: c_int) -> bool {
    // SAFETY: F_GETFD reads a descriptor flag; an unknown number answers EBADF.
    let flags = unsafe { real!(fcntl: fn(c_int, c_int, c_int) -> c_int)(fd, libc::F_GETFD, 0) };
    flags >= 0 && flags & libc::FD_CLOEXEC == 0
}

/// Takes ownership of descriptor `fd`, which the previous program handed over across exec for
/// the shim alone (named in an environment variable the shim removes).
pub fn take_descriptor(fd: c_int) -> Option<std::os::fd::OwnedFd> {
    if fd < 0 || fdtable::is_ours(fd) || fdtable::is_internal(fd) {
        return None;
    }
    // SAFETY: the descriptor is open (F_GETFD succeeds) and nothing else in the process owns it:
    // the previous program left it for the shim, before the new program's code has run.
    let open = unsafe { real!(fcntl: fn(c_int, c_int, c_int) -> c_int)(fd, libc::F_GETFD, 0) };
    (open >= 0)
        .then(|| unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Maps `words` 64-bit words of `fd` shared and writable, for the life of the process.
pub fn map_shared_words(
    fd: std::os::fd::BorrowedFd<'_>,
    words: usize,
) -> Result<&'static [std::sync::atomic::AtomicU64], Errno> {
    use rustix::mm::{MapFlags, ProtFlags};
    let len = words * 8;
    // SAFETY: a new shared mapping the kernel places; it is never unmapped, so the slice lives
    // as long as the process, and AtomicU64 accepts any bit pattern other processes store.
    unsafe {
        let p = rustix::mm::mmap(
            null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            fd,
            0,
        )
        .map_err(|e| Errno(e.raw_os_error()))?;
        Ok(std::slice::from_raw_parts(p.cast(), words))
    }
}

/// An environment variable's bytes, through libc's `getenv`, which neither allocates nor locks
/// (the configuration is read this way: the first hook may run inside the program's malloc).
pub fn env_bytes(name: &CStr) -> Option<&'static [u8]> {
    // SAFETY: getenv returns NULL or a NUL-terminated string of the environment, which the shim
    // copies at once (nothing here keeps it across a setenv).
    let p = unsafe { libc::getenv(name.as_ptr()) };
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// The kernel device and inode behind descriptor `fd`, if it is open.
pub fn kernel_dev_ino(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: struct stat is plain data; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let rc = unsafe { real!(fstat: fn(c_int, *mut libc::stat) -> c_int)(fd, &mut st) };
    (rc == 0).then_some((st.st_dev, st.st_ino))
}

/// The kernel inode behind descriptor `fd` (a placeholder's is its anchor memfd's).
pub fn kernel_ino(fd: c_int) -> Option<u64> {
    // SAFETY: struct stat is plain data; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let rc = unsafe { real!(fstat: fn(c_int, *mut libc::stat) -> c_int)(fd, &mut st) };
    (rc == 0).then_some(st.st_ino)
}
