//! Directory streams.

use std::ffi::{c_char, c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{dirent64, size_t, ssize_t};
use nosefs_core::Errno;
use parking_lot::Mutex;

use super::open::close;
use super::routing::{routed, Routed};
use super::rw::out_slice;
use super::{in_shim, serve, set_errno, value};
use crate::fdtable::{self, Kind};
use crate::ops;

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

pub(super) fn new_dir(fd: c_int) -> *mut c_void {
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
