//! Copies between descriptors.

use std::ffi::{c_int, c_uint, c_void};
use std::ptr::null_mut;
use std::sync::atomic::Ordering;

use libc::{off64_t, off_t, size_t, ssize_t};
use nosefs_core::Errno;

use super::{in_shim, serve, value};
use crate::fdtable;
use crate::ops;

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

/// Moves descriptor `fd`'s own offset back by `bytes`.
unsafe fn unread(fd: c_int, bytes: usize) -> Result<(), Errno> {
    let back = -(bytes as i64);
    if fdtable::is_ours(fd) {
        return ops::lseek(fd, back, libc::SEEK_CUR).map(drop);
    }
    let at =
        unsafe { real!(lseek64: fn(c_int, off64_t, c_int) -> off64_t)(fd, back, libc::SEEK_CUR) };
    if at < 0 {
        return Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    Ok(())
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

/// The first read of a copy between descriptors; later reads double it while they fill it, up
/// to [`COPY_MAX_CHUNK_BYTES`].
const COPY_FIRST_CHUNK_BYTES: usize = 16 << 10;
const COPY_MAX_CHUNK_BYTES: usize = 1 << 20;

/// Copies up to `len` bytes; offsets given by pointer are used and advanced instead of the
/// descriptors' own.
unsafe fn copy_between(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: usize,
) -> Result<usize, Errno> {
    // The buffer starts small and doubles while reads fill it: a zeroed buffer of `len` (cp
    // asks for ~100 KB, others for gigabytes) cost a short process 25 page faults and a memset
    // per copy of a file of a few bytes.
    let mut buf = vec![0u8; len.min(COPY_FIRST_CHUNK_BYTES)];
    let mut done = 0;
    while done < len {
        if done > 0 && buf.len() < COPY_MAX_CHUNK_BYTES && len - done > buf.len() {
            buf.resize((buf.len() * 2).min(COPY_MAX_CHUNK_BYTES), 0);
        }
        let want = (len - done).min(buf.len());
        let at_in = (!off_in.is_null()).then(|| unsafe { *off_in });
        let n = unsafe { any_read(fd_in, &mut buf[..want], at_in) }?;
        if n == 0 {
            break;
        }
        let at_out = (!off_out.is_null()).then(|| unsafe { *off_out });
        let written = unsafe { any_write(fd_out, &buf[..n], at_out) };
        let w = *written.as_ref().unwrap_or(&0);
        if off_in.is_null() && w < n {
            // The read moved the input's own offset by what the output did not take (a write
            // cut at the file size limit, or refused): the kernel's copy never read it.
            unsafe { unread(fd_in, n - w) }?;
        }
        let w = written?;
        unsafe {
            if !off_in.is_null() {
                *off_in += w as i64;
            }
            if !off_out.is_null() {
                *off_out += w as i64;
            }
        }
        done += w;
        // A short count is always a valid answer, and a short read is where the file ends: one
        // read more would only find that out again (a round trip for a daemon client).
        if w < n || n < want {
            break;
        }
    }
    Ok(done)
}

/// copy_file_range's refusals, as the kernel makes them before copying: flags (none defined),
/// an output opened to append, and a copy within one file whose two ranges overlap.
/// (Offsets past 2^63 are the core's EINVAL or EFBIG later.)
unsafe fn copy_range_checks(
    fd_in: c_int,
    off_in: *const off64_t,
    fd_out: c_int,
    off_out: *const off64_t,
    len: usize,
    flags: c_uint,
) -> Result<(), Errno> {
    if flags != 0 {
        return Err(Errno::EINVAL);
    }
    let (Some(input), Some(output)) = (fdtable::get(fd_in), fdtable::get(fd_out)) else {
        return Ok(()); // one side is the kernel's: no file is both
    };
    if output.flags.load(Ordering::Relaxed) & libc::O_APPEND != 0 {
        return Err(Errno::EBADF);
    }
    if input.ino != output.ino {
        return Ok(());
    }
    let at = |ptr: *const off64_t, file: &fdtable::OpenFile| {
        if ptr.is_null() {
            *file.offset.lock()
        } else {
            // SAFETY: a non-null offset pointer is the caller's loff_t.
            unsafe { *ptr as u64 }
        }
    };
    let (from, to) = (at(off_in, &input), at(off_out, &output));
    // The kernel compares the ranges after shortening the copy to the input's end.
    let size = ops::fstat(fd_in)?.size;
    let len = (len as u64).min(size.saturating_sub(from));
    if to < from.saturating_add(len) && from < to.saturating_add(len) {
        return Err(Errno::EINVAL);
    }
    Ok(())
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
            copy_range_checks(fd_in, off_in, fd_out, off_out, len, flags)?;
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
