//! The system calls the stress makes, through libc, the crate's only `unsafe`.
//!
//! Every call goes through libc (not rustix, which enters the kernel directly), so that the
//! preload shim sees it when the stress runs under `nosefs run`. Paths are relative to the
//! worker's directory descriptor, as a program's `*at` calls are. Errors are the raw errno.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A call's result: its value, or the errno it failed with.
pub type Sys<T> = Result<T, i32>;

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn check(rc: libc::c_int) -> Sys<libc::c_int> {
    if rc < 0 {
        Err(errno())
    } else {
        Ok(rc)
    }
}

fn check_size(rc: isize) -> Sys<usize> {
    if rc < 0 {
        Err(errno())
    } else {
        Ok(rc as usize)
    }
}

fn c(path: &str) -> CString {
    CString::new(path).expect("stress paths hold no NUL")
}

/// `openat(dir, path, flags, mode)`, close-on-exec.
pub fn openat(dir: BorrowedFd<'_>, path: &str, flags: i32, mode: u32) -> Sys<OwnedFd> {
    let p = c(path);
    // SAFETY: `p` is NUL-terminated; the result is a new descriptor nobody else owns.
    let fd =
        check(unsafe { libc::openat(dir.as_raw_fd(), p.as_ptr(), flags | libc::O_CLOEXEC, mode) })?;
    // SAFETY: `fd` was just opened and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `pwrite`, all of `data` (a short write is retried from where it stopped).
pub fn pwrite_all(fd: BorrowedFd<'_>, mut data: &[u8], mut offset: u64) -> Sys<()> {
    while !data.is_empty() {
        // SAFETY: `data` is readable for its length.
        let n = check_size(unsafe {
            libc::pwrite(
                fd.as_raw_fd(),
                data.as_ptr().cast(),
                data.len(),
                offset as i64,
            )
        })?;
        if n == 0 {
            return Err(libc::EIO);
        }
        data = &data[n..];
        offset += n as u64;
    }
    Ok(())
}

/// `write` at the descriptor's offset (O_APPEND: at the end), all of `data`.
pub fn write_all(fd: BorrowedFd<'_>, mut data: &[u8]) -> Sys<()> {
    while !data.is_empty() {
        // SAFETY: `data` is readable for its length.
        let n =
            check_size(unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) })?;
        if n == 0 {
            return Err(libc::EIO);
        }
        data = &data[n..];
    }
    Ok(())
}

/// `pread` until `len` bytes or the end of the file.
pub fn pread_upto(fd: BorrowedFd<'_>, len: usize, offset: u64) -> Sys<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        // SAFETY: `buf[got..]` is writable for its length.
        let n = check_size(unsafe {
            libc::pread(
                fd.as_raw_fd(),
                buf[got..].as_mut_ptr().cast(),
                len - got,
                (offset + got as u64) as i64,
            )
        })?;
        if n == 0 {
            break;
        }
        got += n;
    }
    buf.truncate(got);
    Ok(buf)
}

/// `ftruncate`.
pub fn ftruncate(fd: BorrowedFd<'_>, size: u64) -> Sys<()> {
    // SAFETY: reads no memory.
    check(unsafe { libc::ftruncate(fd.as_raw_fd(), size as i64) }).map(drop)
}

/// `fsync`, or `fdatasync` when `data_only`.
pub fn fsync(fd: BorrowedFd<'_>, data_only: bool) -> Sys<()> {
    // SAFETY: reads no memory.
    let rc = unsafe {
        if data_only {
            libc::fdatasync(fd.as_raw_fd())
        } else {
            libc::fsync(fd.as_raw_fd())
        }
    };
    check(rc).map(drop)
}

/// `fallocate`.
pub fn fallocate(fd: BorrowedFd<'_>, mode: i32, offset: u64, len: u64) -> Sys<()> {
    // SAFETY: reads no memory.
    check(unsafe { libc::fallocate(fd.as_raw_fd(), mode, offset as i64, len as i64) }).map(drop)
}

/// `copy_file_range` of `len` bytes, repeated until done or the source ends; bytes copied.
pub fn copy_range(
    from: BorrowedFd<'_>,
    mut off_in: u64,
    to: BorrowedFd<'_>,
    mut off_out: u64,
    len: u64,
) -> Sys<u64> {
    let mut done = 0;
    while done < len {
        let (mut i, mut o) = (off_in as i64, off_out as i64);
        // SAFETY: the offsets are ours and writable; the descriptors are open.
        let n = check_size(unsafe {
            libc::copy_file_range(
                from.as_raw_fd(),
                &mut i,
                to.as_raw_fd(),
                &mut o,
                (len - done) as usize,
                0,
            )
        })? as u64;
        if n == 0 {
            break;
        }
        done += n;
        off_in += n;
        off_out += n;
    }
    Ok(done)
}

/// `unlinkat(dir, path, flags)`.
pub fn unlinkat(dir: BorrowedFd<'_>, path: &str, flags: i32) -> Sys<()> {
    let p = c(path);
    // SAFETY: `p` is NUL-terminated.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), p.as_ptr(), flags) }).map(drop)
}

/// `mkdirat`.
pub fn mkdirat(dir: BorrowedFd<'_>, path: &str, mode: u32) -> Sys<()> {
    let p = c(path);
    // SAFETY: `p` is NUL-terminated.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), p.as_ptr(), mode) }).map(drop)
}

/// `renameat2` (glibc's wrapper, which the shim serves).
pub fn renameat2(dir: BorrowedFd<'_>, from: &str, to: &str, flags: u32) -> Sys<()> {
    let (f, t) = (c(from), c(to));
    let d = dir.as_raw_fd();
    // SAFETY: both paths are NUL-terminated.
    check(unsafe { libc::renameat2(d, f.as_ptr(), d, t.as_ptr(), flags) }).map(drop)
}

/// `linkat(dir, from, dir, to, 0)`.
pub fn linkat(dir: BorrowedFd<'_>, from: &str, to: &str) -> Sys<()> {
    let (f, t) = (c(from), c(to));
    let d = dir.as_raw_fd();
    // SAFETY: both paths are NUL-terminated.
    check(unsafe { libc::linkat(d, f.as_ptr(), d, t.as_ptr(), 0) }).map(drop)
}

/// `linkat(fd, "", dir, to, AT_EMPTY_PATH)`: names an O_TMPFILE file.
pub fn link_fd(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, to: &str) -> Sys<()> {
    let t = c(to);
    let empty = c("");
    // SAFETY: both paths are NUL-terminated.
    check(unsafe {
        libc::linkat(
            fd.as_raw_fd(),
            empty.as_ptr(),
            dir.as_raw_fd(),
            t.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    })
    .map(drop)
}

/// `symlinkat(target, dir, path)`.
pub fn symlinkat(target: &str, dir: BorrowedFd<'_>, path: &str) -> Sys<()> {
    let (t, p) = (c(target), c(path));
    // SAFETY: both strings are NUL-terminated.
    check(unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), p.as_ptr()) }).map(drop)
}

/// `readlinkat`.
pub fn readlinkat(dir: BorrowedFd<'_>, path: &str) -> Sys<String> {
    let p = c(path);
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` is writable for its length; `p` is NUL-terminated.
    let n = check_size(unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            p.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })?;
    buf.truncate(n);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// `fchmodat(dir, path, mode, 0)` (follows a final symlink).
pub fn fchmodat(dir: BorrowedFd<'_>, path: &str, mode: u32) -> Sys<()> {
    let p = c(path);
    // SAFETY: `p` is NUL-terminated.
    check(unsafe { libc::fchmodat(dir.as_raw_fd(), p.as_ptr(), mode, 0) }).map(drop)
}

/// `utimensat(dir, path, {t, t}, AT_SYMLINK_NOFOLLOW)`: access and modification time `t` ns.
pub fn utimensat(dir: BorrowedFd<'_>, path: &str, t_ns: i64) -> Sys<()> {
    let p = c(path);
    let ts = libc::timespec {
        tv_sec: t_ns / 1_000_000_000,
        tv_nsec: t_ns % 1_000_000_000,
    };
    let times = [ts, ts];
    // SAFETY: `times` holds two timespecs; `p` is NUL-terminated.
    check(unsafe {
        libc::utimensat(
            dir.as_raw_fd(),
            p.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// What `fstatat(.., AT_SYMLINK_NOFOLLOW)` says of a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `st_mode`.
    pub mode: u32,
    /// `st_nlink`.
    pub nlink: u64,
    /// `st_size`.
    pub size: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_mtime` in nanoseconds.
    pub mtime_ns: i64,
}

/// `fstatat(dir, path, AT_SYMLINK_NOFOLLOW)`.
pub fn lstatat(dir: BorrowedFd<'_>, path: &str) -> Sys<Stat> {
    let p = c(path);
    // SAFETY: struct stat is plain data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable and sized for fstatat; `p` is NUL-terminated.
    check(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            p.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(Stat {
        mode: st.st_mode,
        nlink: st.st_nlink,
        size: st.st_size as u64,
        ino: st.st_ino,
        mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec,
    })
}

/// The names in directory `path` (under `dir`), without `.` and `..`, sorted.
pub fn list(dir: BorrowedFd<'_>, path: &str) -> Sys<Vec<String>> {
    let fd = openat(dir, path, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let raw = fd.as_raw_fd();
    // SAFETY: `raw` is an open directory; fdopendir takes it over (closed by closedir).
    let d = unsafe { libc::fdopendir(raw) };
    if d.is_null() {
        return Err(errno());
    }
    std::mem::forget(fd);
    let mut names = Vec::new();
    loop {
        // SAFETY: `d` is an open DIR stream.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            break;
        }
        // SAFETY: readdir returned a valid entry whose d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) };
        let name = name.to_string_lossy().into_owned();
        if name != "." && name != ".." {
            names.push(name);
        }
    }
    // SAFETY: `d` is open and not used again.
    unsafe { libc::closedir(d) };
    names.sort();
    Ok(names)
}

/// `fsetxattr(fd, name, value, 0)`.
pub fn fsetxattr(fd: BorrowedFd<'_>, name: &str, value: &[u8]) -> Sys<()> {
    let n = c(name);
    // SAFETY: `value` is readable for its length; `n` is NUL-terminated.
    check(unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
    .map(drop)
}

/// `fgetxattr(fd, name)`.
pub fn fgetxattr(fd: BorrowedFd<'_>, name: &str) -> Sys<Vec<u8>> {
    let n = c(name);
    let mut buf = vec![0u8; 70_000];
    // SAFETY: `buf` is writable for its length; `n` is NUL-terminated.
    let len = check_size(unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })?;
    buf.truncate(len);
    Ok(buf)
}

/// `fremovexattr(fd, name)`.
pub fn fremovexattr(fd: BorrowedFd<'_>, name: &str) -> Sys<()> {
    let n = c(name);
    // SAFETY: `n` is NUL-terminated.
    check(unsafe { libc::fremovexattr(fd.as_raw_fd(), n.as_ptr()) }).map(drop)
}

/// Stores `data` at `offset` of the file through a shared writable mapping of its first
/// `map_len` bytes, then `msync(MS_SYNC)` and unmaps.
pub fn map_store(fd: BorrowedFd<'_>, map_len: usize, offset: usize, data: &[u8]) -> Sys<()> {
    assert!(offset + data.len() <= map_len);
    // SAFETY: a new shared mapping where the kernel (or the shim) chooses; it overlaps nothing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    // SAFETY: the range is inside the live writable mapping (asserted above).
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), (p as *mut u8).add(offset), data.len());
    }
    // SAFETY: msync and munmap of the whole mapping made above.
    let synced = check(unsafe { libc::msync(p, map_len, libc::MS_SYNC) });
    // SAFETY: as above; nothing refers to the mapping afterwards.
    unsafe { libc::munmap(p, map_len) };
    synced.map(drop)
}

/// `lseek(fd, offset, whence)`.
pub fn lseek(fd: BorrowedFd<'_>, offset: u64, whence: i32) -> Sys<u64> {
    // SAFETY: reads no memory.
    let at = unsafe { libc::lseek(fd.as_raw_fd(), offset as i64, whence) };
    if at < 0 {
        Err(errno())
    } else {
        Ok(at as u64)
    }
}
