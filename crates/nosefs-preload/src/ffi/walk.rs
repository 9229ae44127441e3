//! glob and scandir: glibc reaches directories through its internal opendir, which no preload
//! sees. glob is given the shim's own directory functions (GLOB_ALTDIRFUNC, glibc's interface
//! for exactly this; they pass kernel paths through, so every pattern works); scandir on a noseFS
//! directory is done here with the shim's directory streams.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use libc::{dirent64, size_t};
use nosefs_core::Errno;

use super::attr::{lstat, stat};
use super::cwd::chdir;
use super::dirs::{closedir, new_dir, opendir, readdir};
use super::pointers::bytes;
use super::routing::{routed, Routed};
use super::{fail, in_shim, serve, set_errno};
use crate::ops;
use crate::route;
use crate::state;

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
