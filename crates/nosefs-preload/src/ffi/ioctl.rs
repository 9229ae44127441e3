//! ioctl on noseFS descriptors: FIEMAP and FIONREAD, the ioctls every file system answers
//! (fs/ioctl.c: FIOCLEX, FIONBIO, FIOQSIZE, FIGETBSZ, the XFS preallocation calls, FICLONE and
//! its relatives), ENOTTY for the rest, as a file system without them answers.

use std::ffi::{c_int, c_ulong, c_void};
use std::sync::atomic::Ordering;

use nosefs_core::Errno;

use super::{fail, in_shim, int, serve};
use crate::fdtable;
use crate::ops;

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
            // The descriptor's close-on-exec flag lives on the placeholder, in the kernel.
            FIOCLEX | FIONCLEX => unsafe {
                real!(ioctl: fn(c_int, c_ulong, *mut c_void) -> c_int)(fd, request, arg)
            },
            _ => int(serve(|| unsafe { generic_ioctl(fd, request, arg) })),
        };
    }
    unsafe { real!(ioctl: fn(c_int, c_ulong, *mut c_void) -> c_int)(fd, request, arg) }
}

const FIOCLEX: c_ulong = 0x5451;
const FIONCLEX: c_ulong = 0x5450;
const FIONBIO: c_ulong = 0x5421;
const FIOQSIZE: c_ulong = 0x5460;
const FIGETBSZ: c_ulong = 2;
/// `_IOW('X', 40..43 and 57, struct space_resv)`: fallocate by ioctl, as XFS first had it.
const FS_IOC_RESVSP: c_ulong = 0x4030_5828;
const FS_IOC_UNRESVSP: c_ulong = 0x4030_5829;
const FS_IOC_RESVSP64: c_ulong = 0x4030_582A;
const FS_IOC_UNRESVSP64: c_ulong = 0x4030_582B;
const FS_IOC_ZERO_RANGE: c_ulong = 0x4030_5839;
/// `_IOW(0x94, 9, int)`, `_IOW(0x94, 13, struct file_clone_range)`,
/// `_IOWR(0x94, 54, struct file_dedupe_range)`.
const FICLONE: c_ulong = 0x4004_9409;
const FICLONERANGE: c_ulong = 0x4020_940D;
const FIDEDUPERANGE: c_ulong = 0xC018_9436;

/// The requests the kernel answers for every file system (fs/ioctl.c), on a noseFS descriptor,
/// with the kernel's answers; anything else is ENOTTY, as from a file system with no ioctls.
unsafe fn generic_ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> Result<(), Errno> {
    let file = fdtable::get(fd).ok_or(Errno::EBADF)?;
    let regular = file.kind == fdtable::Kind::File;
    let put = |bytes: &[u8]| {
        if arg.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        // SAFETY: each request's argument is the integer the kernel writes, of this size.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), arg.cast::<u8>(), bytes.len()) };
        Ok(())
    };
    match request {
        FIONBIO => {
            if arg.is_null() {
                return Err(Errno(libc::EFAULT));
            }
            // SAFETY: FIONBIO's argument is an int the caller owns.
            let on = unsafe { *arg.cast::<c_int>() } != 0;
            let flags = file.flags.load(Ordering::Relaxed) & !libc::O_NONBLOCK;
            let nonblock = if on { libc::O_NONBLOCK } else { 0 };
            file.flags.store(flags | nonblock, Ordering::Relaxed);
            Ok(())
        }
        // Bytes the file holds (st_blocks in bytes), for files, directories and symbolic links.
        FIOQSIZE if file.kind != fdtable::Kind::Path => {
            put(&(ops::fstat(fd)?.blocks as i64 * 512).to_ne_bytes())
        }
        FIGETBSZ => put(&(nosefs_core::format::BLOCK_SIZE as c_int).to_ne_bytes()),
        FS_IOC_RESVSP | FS_IOC_RESVSP64 if regular => unsafe { preallocate(fd, 0, arg) },
        FS_IOC_UNRESVSP | FS_IOC_UNRESVSP64 if regular => unsafe {
            preallocate(fd, libc::FALLOC_FL_PUNCH_HOLE, arg)
        },
        FS_IOC_ZERO_RANGE if regular => unsafe { preallocate(fd, libc::FALLOC_FL_ZERO_RANGE, arg) },
        // Sharing blocks between files: a source on another file system is EXDEV, as the
        // kernel answers before asking the file system, which here has no way to share.
        FICLONE | FICLONERANGE => {
            let source = if request == FICLONE {
                arg as usize as c_int
            } else if arg.is_null() {
                return Err(Errno(libc::EFAULT));
            } else {
                // SAFETY: struct file_clone_range starts with the source's s64 descriptor.
                unsafe { *arg.cast::<i64>() as c_int }
            };
            if !fdtable::is_ours(source) {
                // SAFETY: F_GETFD only asks whether the number is an open descriptor.
                let open = unsafe {
                    real!(fcntl: fn(c_int, c_int, *mut c_void) -> c_int)(
                        source,
                        libc::F_GETFD,
                        std::ptr::null_mut(),
                    )
                } >= 0;
                return Err(if open {
                    Errno(libc::EXDEV)
                } else {
                    Errno::EBADF
                });
            }
            Err(Errno(libc::EOPNOTSUPP))
        }
        FIDEDUPERANGE if file.kind == fdtable::Kind::Dir => Err(Errno(libc::EISDIR)),
        FIDEDUPERANGE => Err(Errno(libc::EOPNOTSUPP)),
        _ => Err(Errno(libc::ENOTTY)),
    }
}

/// FS_IOC_RESVSP and its kin: `struct space_resv` (l_whence at 2, l_start at 8, l_len at 16)
/// as a fallocate of `mode` with KEEP_SIZE, the start taken from where `l_whence` says.
unsafe fn preallocate(fd: c_int, mode: c_int, arg: *mut c_void) -> Result<(), Errno> {
    if arg.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    let bytes = arg.cast::<u8>();
    // SAFETY: the argument is a 48-byte struct space_resv the caller owns.
    let (whence, start, len) = unsafe {
        (
            bytes.add(2).cast::<i16>().read_unaligned(),
            bytes.add(8).cast::<i64>().read_unaligned(),
            bytes.add(16).cast::<i64>().read_unaligned(),
        )
    };
    let base = match c_int::from(whence) {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => *fdtable::get(fd).ok_or(Errno::EBADF)?.offset.lock() as i64,
        libc::SEEK_END => ops::fstat(fd)?.size as i64,
        _ => return Err(Errno::EINVAL),
    };
    let start = start.checked_add(base).ok_or(Errno::EINVAL)?;
    ops::fallocate(fd, mode | libc::FALLOC_FL_KEEP_SIZE, start, len)
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
