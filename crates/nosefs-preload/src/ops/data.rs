//! File data through an open description: reads, writes (with the file size limit and O_SYNC),
//! offsets, syncs, truncation, fallocate, and where the data is.

use super::*;

/// `read`: at the description's offset, advancing it.
pub fn read(fd: i32, buf: &mut [u8]) -> Result<usize, Errno> {
    let file = file_of(fd)?;
    readable_file(&file)?;
    crate::kernel::write_back_mapped(file.ino, false);
    let mut offset = file.offset.lock();
    let n = with_service(|s| s.read_cached(file.handle, *offset, buf, &file.read_cache))?;
    *offset += n as u64;
    Ok(n)
}

/// `readahead`: the data is in memory already, so there is nothing to read ahead; the
/// kernel's checks only (EBADF unless open for reading, EINVAL unless a regular file).
pub fn readahead(fd: i32) -> Result<(), Errno> {
    let file = file_of(fd)?;
    if !file.readable() {
        return Err(Errno::EBADF);
    }
    if file.kind != Kind::File {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// `pread`: at `offset`, leaving the description's offset alone.
pub fn pread(fd: i32, buf: &mut [u8], offset: i64) -> Result<usize, Errno> {
    let file = file_of(fd)?;
    readable_file(&file)?;
    let offset = u64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    crate::kernel::write_back_mapped(file.ino, false);
    with_service(|s| s.read_cached(file.handle, offset, buf, &file.read_cache))
}

/// `write`: at the offset (or the end with O_APPEND), advancing it.
pub fn write(fd: i32, data: &[u8]) -> Result<usize, Errno> {
    let file = file_of(fd)?;
    writable_file(&file)?;
    crate::kernel::write_back_mapped(file.ino, false);
    let mut offset = file.offset.lock();
    let append = file.flags.load(Ordering::Relaxed) & libc::O_APPEND != 0;
    let data = within_size_limit(&file, *offset, append, data)?;
    let end = with_service(|s| {
        let at = s.write(file.handle, *offset, data, append)?;
        sync_if_asked(s, &file)?;
        Ok(at + data.len() as u64)
    })?;
    *offset = end;
    crate::kernel::refresh_mapped_size_to(file.ino, end);
    Ok(data.len())
}

/// `data` cut where a write of it at `at` (the end of the file with `append`) would cross the
/// process's file size limit; EFBIG, with SIGXFSZ, when it starts past it (`fsize`).
fn within_size_limit<'d>(
    file: &OpenFile,
    at: u64,
    append: bool,
    data: &'d [u8],
) -> Result<&'d [u8], Errno> {
    if !fsize::limited() {
        return Ok(data);
    }
    let at = if append {
        with_service(|s| s.fstat(file.handle))?.size
    } else {
        at
    };
    Ok(&data[..fsize::writable_bytes(at, data.len())?])
}

/// O_SYNC and O_DSYNC: the write is durable on return.
fn sync_if_asked(s: &dyn Service, file: &OpenFile) -> Result<(), Errno> {
    if file.flags.load(Ordering::Relaxed) & (libc::O_SYNC | libc::O_DSYNC) != 0 {
        s.fsync(file.handle)?;
    }
    Ok(())
}

/// `pwrite`: at `offset` (Linux appends anyway with O_APPEND).
pub fn pwrite(fd: i32, data: &[u8], offset: i64) -> Result<usize, Errno> {
    let file = file_of(fd)?;
    writable_file(&file)?;
    let offset = u64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    let append = file.flags.load(Ordering::Relaxed) & libc::O_APPEND != 0;
    let data = within_size_limit(&file, offset, append, data)?;
    crate::kernel::write_back_mapped(file.ino, false);
    let end = with_service(|s| {
        let at = s.write(file.handle, offset, data, append)?;
        sync_if_asked(s, &file)?;
        Ok(at + data.len() as u64)
    })?;
    crate::kernel::refresh_mapped_size_to(file.ino, end);
    Ok(data.len())
}

/// `lseek`, including SEEK_DATA and SEEK_HOLE (from the file's map of pieces).
pub fn lseek(fd: i32, offset: i64, whence: i32) -> Result<i64, Errno> {
    let file = file_of(fd)?;
    if file.kind == Kind::Path {
        return Err(Errno::EBADF);
    }
    let mut current = file.offset.lock();
    if file.kind == Kind::Dir {
        // Directory offsets are readdir cookies: set, or moved from where they are (SEEK_CUR
        // with 0 is how programs ask for the cookie), as tmpfs answers; the end means nothing.
        let target = match whence {
            libc::SEEK_SET => Some(offset),
            libc::SEEK_CUR => (*current as i64).checked_add(offset),
            _ => None,
        };
        let target = target.filter(|t| *t >= 0).ok_or(Errno::EINVAL)?;
        *current = target as u64;
        return Ok(target);
    }
    // Only the end and the data/hole searches need the size. A daemon client reads it from the
    // word of shared memory the daemon keeps at the file's size (PostgreSQL probes relation
    // sizes with SEEK_END about ten times a transaction), after one round trip for the word.
    let size = || with_service(|s| s.end_of(file.handle, &file.size_watch)).map(|n| n as i64);
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => *current as i64,
        libc::SEEK_END => size()?,
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            if offset < 0 || offset >= size()? {
                return Err(Errno(libc::ENXIO));
            }
            let data = whence == libc::SEEK_DATA;
            let at = with_service(|s| s.seek_hole(file.handle, offset as u64, data))?;
            *current = at;
            return Ok(at as i64);
        }
        _ => return Err(Errno::EINVAL),
    };
    let target = base.checked_add(offset).ok_or(Errno::EINVAL)?;
    if target < 0 {
        return Err(Errno::EINVAL);
    }
    *current = target as u64;
    Ok(target)
}

/// `fsync` / `fdatasync`: the file's writes since the last commit become durable atomically.
/// Directories: every namespace operation is already durable.
pub fn fsync(fd: i32) -> Result<(), Errno> {
    let file = file_of(fd)?;
    if file.kind == Kind::File {
        // Pages this process stored through mappings of the file join the commit: those
        // through the FUSE mount written back first, then those over the shadow reported with
        // the commit.
        if crate::borrowed::maps_file(file.ino) {
            crate::kernel::write_back_mapped(file.ino, false);
            if crate::borrowed::sync_file(file.ino)? {
                return Ok(());
            }
        }
        crate::kernel::write_back_mapped(file.ino, true);
        with_service(|s| s.fsync(file.handle))?;
    }
    Ok(())
}

/// `syncfs` / `sync`: every file's writes.
pub fn sync_all() -> Result<(), Errno> {
    // An embedded image not mounted in this process has nothing of this process's to commit;
    // a daemon has everyone's.
    if !state::daemon_mode() && !state::is_mounted() {
        return Ok(());
    }
    crate::borrowed::sync_every_file()?;
    with_service(|s| s.sync_all())
}

/// `ftruncate`.
pub fn ftruncate(fd: i32, size: i64) -> Result<(), Errno> {
    let file = file_of(fd)?;
    if file.kind != Kind::File || !file.writable() {
        return Err(Errno::EINVAL);
    }
    let size = u64::try_from(size).map_err(|_| Errno::EINVAL)?;
    fsize::may_grow(size, || Ok(with_service(|s| s.fstat(file.handle))?.size))?;
    crate::kernel::write_back_mapped(file.ino, false);
    with_service(|s| s.ftruncate(file.handle, size))?;
    crate::kernel::refresh_mapped_size(file.ino);
    Ok(())
}

/// `truncate` of a path.
pub fn truncate(found: &Found, size: i64) -> Result<(), Errno> {
    if let Ok(size @ 0..) = u64::try_from(size) {
        fsize::may_grow(size, || Ok(vfs::stat(found)?.size))?;
    }
    with_service(|s| s.truncate(found, size))
}

/// `fallocate` (see [`vfs::fallocate`] for what each mode does).
pub fn fallocate(fd: i32, mode: i32, offset: i64, len: i64) -> Result<(), Errno> {
    let file = file_of(fd)?;
    if file.kind != Kind::File {
        return Err(Errno(libc::ENODEV));
    }
    writable_file(&file)?;
    let not_allocating =
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE;
    if mode & not_allocating == 0 {
        // A range that reaches past the size and the limit, also with KEEP_SIZE (tmpfs's answer:
        // the blocks count against the limit whether or not the size grows).
        if let Some(end) = offset.checked_add(len).filter(|_| offset >= 0 && len > 0) {
            fsize::may_grow(end as u64, || {
                Ok(with_service(|s| s.fstat(file.handle))?.size)
            })?;
        }
    }
    crate::kernel::write_back_mapped(file.ino, false);
    with_service(|s| s.fallocate(file.handle, mode, offset, len))?;
    crate::kernel::refresh_mapped_size(file.ino);
    Ok(())
}

/// Where the open file `fd`'s data in `[start, start + len)` is, at most `max` runs (FIEMAP).
pub fn data_map(fd: i32, start: u64, len: u64, max: usize) -> Result<Vec<DataExtent>, Errno> {
    let file = file_of(fd)?;
    if file.kind != Kind::File {
        return Err(Errno::EINVAL);
    }
    with_service(|s| s.data_map(file.handle, start, len, max))
}

/// Bytes left to read from `fd`'s offset (FIONREAD on a regular file).
pub fn unread_bytes(fd: i32) -> Result<u64, Errno> {
    let file = file_of(fd)?;
    if file.kind != Kind::File {
        return Err(Errno(libc::ENOTTY));
    }
    let size = with_service(|s| s.fstat(file.handle))?.size;
    let offset = *file.offset.lock();
    Ok(size.saturating_sub(offset))
}
