//! The operations the hooks serve for noseFS paths and descriptors, in safe Rust: each takes a
//! resolved path ([`Found`]) or an open file description and returns a value or an errno, with
//! the checks the kernel would make (permissions, open flags, file types).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use nosefs_core::file::holes::DataExtent;
use nosefs_core::format::pinode;
use nosefs_core::namespace::acl::{self, Acl};
use nosefs_core::namespace::{Attr, DirEntry, SetAttr};
use nosefs_core::vfs::{self, XattrCall, KEPT_OPEN_FLAGS};
use nosefs_core::Errno;
use nosefs_daemon::service::{self, Opened, OpenedPath, Service, XattrTarget};

use crate::fdtable::{self, Kind, OpenFile};
use crate::fsize;
use crate::kernel::{self, KernelFile};
use crate::route::{Found, Route};
use crate::state::{self, with_service};

/// `open` / `openat` of a noseFS path: returns the new descriptor.
pub fn open(found: &Found, flags: i32, mode: u32) -> Result<i32, Errno> {
    let umask = state::umask();
    let opened = match with_service(|s| s.open(found, flags, mode, umask)) {
        Err(e) if e == Errno(libc::ENXIO) => return special_open(&found.path, true, flags),
        opened => opened?,
    };
    opened_descriptor(found, &opened, flags)
}

/// The whole content of the regular file at `found`, for exec in embedded mode, which the
/// caller may execute (EACCES otherwise, as the kernel's execve answers). At most `max` bytes
/// (E2BIG past it).
pub fn program_image(found: &Found, max: u64) -> Result<Vec<u8>, Errno> {
    stored_image(found, libc::X_OK, max)
}

/// [`program_image`] of a shared object `dlopen` loads, which the caller must be allowed to
/// read (the loader opens it for reading and maps it).
pub fn library_image(found: &Found, max: u64) -> Result<Vec<u8>, Errno> {
    stored_image(found, libc::R_OK, max)
}

fn stored_image(found: &Found, mask: i32, max: u64) -> Result<Vec<u8>, Errno> {
    access(found, mask)?;
    let opened = with_service(|s| s.open(found, libc::O_RDONLY, 0, 0))?;
    let result = if opened.kind == Kind::File {
        read_whole(opened.handle, opened.attr.size, max)
    } else {
        Err(Errno(libc::EACCES))
    };
    with_service(|s| {
        s.close(opened.handle);
        Ok(())
    })?;
    result
}

/// [`program_image`] of the open file `fd` (`fexecve`, in either mode): the permission is
/// checked against the file as it is now, whatever the descriptor was opened for.
pub fn program_image_of(fd: i32, max: u64) -> Result<Vec<u8>, Errno> {
    let file = file_of(fd)?;
    let attr = with_service(|s| s.fstat(file.handle))?;
    fd_access(fd, &attr, libc::X_OK)?;
    if attr.mode & pinode::S_IFMT != pinode::S_IFREG {
        return Err(Errno(libc::EACCES));
    }
    read_whole(file.handle, attr.size, max)
}

/// The first `size` bytes of open file `handle` (fewer if it is shorter now), at most `max`.
fn read_whole(handle: u64, size: u64, max: u64) -> Result<Vec<u8>, Errno> {
    if size > max {
        return Err(Errno(libc::E2BIG));
    }
    let mut bytes = vec![0u8; size as usize];
    let mut at = 0;
    while at < bytes.len() {
        let n = with_service(|s| s.read(handle, at as u64, &mut bytes[at..]))?;
        if n == 0 {
            break;
        }
        at += n;
    }
    bytes.truncate(at);
    Ok(bytes)
}

/// `open` of an absolute logical path noseFS walks itself (one round trip to a daemon): the new
/// descriptor, or the kernel's path when the walk left noseFS.
pub fn open_path(
    path: Vec<u8>,
    follow: bool,
    flags: i32,
    mode: u32,
) -> Result<Result<i32, Vec<u8>>, Errno> {
    // The service walks again when the name went away between its walk and its open
    // (`service::open_again`: in this process, or in the daemon); here only a file removed
    // between the service's open and its counting (embedded mode) is opened again.
    service::open_again(flags, || open_path_once(path.clone(), follow, flags, mode))
}

/// One open: the outer error is the answer, the inner one a file removed before it was counted.
fn open_path_once(
    path: Vec<u8>,
    follow: bool,
    flags: i32,
    mode: u32,
) -> Result<Result<Result<i32, Vec<u8>>, Errno>, Errno> {
    let umask = state::umask();
    match with_service(|s| s.open_path(path.clone(), follow, flags, mode, umask)) {
        Ok(OpenedPath::Outside(path)) => Ok(Ok(Err(path))),
        Ok(OpenedPath::Opened(found, opened)) => {
            Ok(opened_descriptor(&found, &opened, flags).map(Ok))
        }
        Err(e) if e == Errno(libc::ENXIO) => {
            special_open(&path, follow, flags).map(|fd| Ok(Ok(fd)))
        }
        Err(e) => Err(e),
    }
}

/// Daemon mode: `open` of a FIFO or device node on noseFS, which the core does not serve (it
/// answers ENXIO): the kernel opens it through the daemon's FUSE mount, where the logical path
/// names it too, so a FIFO connects every process that opens it, clients and FUSE users alike,
/// with the kernel's blocking and ENXIO rules. The descriptor is the kernel's. In embedded mode
/// (and for sockets, which no open serves) the ENXIO stands: processes there use the image one
/// at a time, so a FIFO's two ends could never meet.
fn special_open(path: &[u8], follow: bool, flags: i32) -> Result<i32, Errno> {
    let enxio = Err(Errno(libc::ENXIO));
    if !state::daemon_mode() {
        return enxio;
    }
    let Route::Ours(found) = crate::route::route(libc::AT_FDCWD, path, follow)? else {
        return enxio;
    };
    let special = found
        .attr
        .map(|a| a.mode & pinode::S_IFMT)
        .is_some_and(|t| matches!(t, pinode::S_IFIFO | pinode::S_IFCHR | pinode::S_IFBLK));
    if !special {
        return enxio;
    }
    let flags = rustix::fs::OFlags::from_bits_retain(flags as u32)
        - (rustix::fs::OFlags::CREATE | rustix::fs::OFlags::EXCL);
    let fd = rustix::fs::open(found.path.as_slice(), flags, rustix::fs::Mode::empty())
        .map_err(|e| Errno(e.raw_os_error()))?;
    Ok(std::os::fd::IntoRawFd::into_raw_fd(fd))
}

/// `openat` of one plain name in the open noseFS directory `dir` (one round trip to a daemon):
/// the new descriptor, or the kernel's path when a full walk left noseFS.
pub fn open_in(
    dir: &OpenFile,
    name: &[u8],
    follow: bool,
    flags: i32,
    mode: u32,
) -> Result<Result<i32, Vec<u8>>, Errno> {
    service::open_again(flags, || open_in_once(dir, name, follow, flags, mode))
}

/// One open, as [`open_path_once`].
fn open_in_once(
    dir: &OpenFile,
    name: &[u8],
    follow: bool,
    flags: i32,
    mode: u32,
) -> Result<Result<Result<i32, Vec<u8>>, Errno>, Errno> {
    let umask = state::umask();
    let opened = match with_service(|s| {
        s.open_in(dir.handle, &dir.path, name, follow, flags, mode, umask)
    }) {
        Err(e) if e == Errno(libc::ENXIO) => {
            let path = nosefs_core::vfs::walk::join(&dir.path, name);
            return special_open(&path, follow, flags).map(|fd| Ok(Ok(fd)));
        }
        opened => opened?,
    };
    match opened {
        Some((found, opened)) => Ok(opened_descriptor(&found, &opened, flags).map(Ok)),
        None => {
            let path = nosefs_core::vfs::walk::join(&dir.path, name);
            open_path(path, follow, flags, mode).map(Ok)
        }
    }
}

/// `unlinkat` of a plain name in the open noseFS directory `dir`, in one round trip to a
/// daemon; `false` when the name needs the full route (nothing was done).
pub fn unlink_in(dir: &OpenFile, name: &[u8]) -> Result<bool, Errno> {
    with_service(|s| s.unlink_in(dir.handle, &dir.path, name))
}

/// `renameat2` between plain names in open noseFS directories, in one round trip to a daemon;
/// `false` when a name needs the full route.
pub fn rename_in(a: (&OpenFile, &[u8]), b: (&OpenFile, &[u8]), flags: u32) -> Result<bool, Errno> {
    let from = (a.0.handle, a.0.path.as_slice(), a.1);
    let to = (b.0.handle, b.0.path.as_slice(), b.1);
    with_service(|s| s.rename_in(from, to, flags))
}

/// The descriptor of a description noseFS opened.
fn opened_descriptor(found: &Found, opened: &Opened, flags: i32) -> Result<i32, Errno> {
    let file = OpenFile::new(
        opened.attr.ino,
        opened.handle,
        opened.kind,
        flags & KEPT_OPEN_FLAGS,
        found.path.clone(),
    );
    if !state::daemon_mode() && !state::with_fs(|fs| Ok(file.count_open(fs)))? {
        return Err(Errno::ENOENT); // removed since it was found: see `service::open_again`
    }
    fdtable::open_placeholder(file, flags & libc::O_CLOEXEC != 0)
}

fn file_of(fd: i32) -> Result<Arc<OpenFile>, Errno> {
    fdtable::get(fd).ok_or(Errno::EBADF)
}

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

fn readable_file(file: &OpenFile) -> Result<(), Errno> {
    if !file.readable() {
        return Err(Errno::EBADF);
    }
    if file.kind == Kind::Dir {
        return Err(Errno::EISDIR);
    }
    Ok(())
}

fn writable_file(file: &OpenFile) -> Result<(), Errno> {
    if !file.writable() {
        return Err(Errno::EBADF);
    }
    Ok(())
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

/// Attributes of an open description.
pub fn fstat(fd: i32) -> Result<Attr, Errno> {
    let file = file_of(fd)?;
    with_service(|s| s.fstat(file.handle))
}

/// Attributes of a path.
pub fn stat(found: &Found) -> Result<Attr, Errno> {
    vfs::stat(found)
}

/// `access` / `faccessat`: existence, then the mode bits (or the access ACL) against the
/// credentials.
pub fn access(found: &Found, mask: i32) -> Result<(), Errno> {
    let acl = access_acl(found)?;
    vfs::access(&state::cred(), found, mask, acl.as_ref())
}

/// The access ACL of what `found` names, when its attributes say it has one (one more call).
fn access_acl(found: &Found) -> Result<Option<Acl>, Errno> {
    if !found.attr.is_some_and(|a| a.acl) {
        return Ok(None);
    }
    let call = XattrCall::Get(acl::ACCESS);
    match with_service(|s| s.xattr(XattrTarget::Path(found), call)) {
        Ok(value) => Acl::parse(&value).map(Some).map_err(|e| e.errno()),
        Err(e) if e == Errno(libc::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `linkat(fd, "", ..., AT_EMPTY_PATH)`: a name for the open file `fd`.
pub fn flink(fd: i32, to: &Found) -> Result<(), Errno> {
    let file = file_of(fd)?;
    with_service(|s| s.flink(file.handle, to))
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

/// Search permission on the open directory `fd` (fchdir), by its access ACL when it has one.
pub fn may_search(fd: i32, attr: &Attr) -> Result<(), Errno> {
    fd_access(fd, attr, libc::X_OK)
}

/// `access` of the open `fd` whose attributes are `attr`: the mode bits, or its access ACL when
/// it has one.
fn fd_access(fd: i32, attr: &Attr, mask: i32) -> Result<(), Errno> {
    let acl = if attr.acl {
        match fxattr(fd, XattrCall::Get(acl::ACCESS)) {
            Ok(value) => Some(Acl::parse(&value).map_err(|e| e.errno())?),
            Err(e) if e == Errno(libc::ENODATA) => None,
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    vfs::access_attr(&state::cred(), attr, mask, acl.as_ref())
}

/// getxattr, listxattr, setxattr, removexattr of a path.
pub fn xattr(found: &Found, call: XattrCall<'_>) -> Result<Vec<u8>, Errno> {
    found.existing()?;
    with_service(|s| s.xattr(XattrTarget::Path(found), call))
}

/// fgetxattr, flistxattr, fsetxattr, fremovexattr.
pub fn fxattr(fd: i32, call: XattrCall<'_>) -> Result<Vec<u8>, Errno> {
    let file = file_of(fd)?;
    with_service(|s| s.xattr(XattrTarget::Handle(file.handle), call))
}

/// `mkdir`.
pub fn mkdir(found: &Found, mode: u32) -> Result<(), Errno> {
    let umask = state::umask();
    with_service(|s| s.mkdir(found, mode, umask))
}

/// `mknod` (regular files, FIFOs, sockets and device nodes are all recorded).
pub fn mknod(found: &Found, mode: u32, rdev: u64) -> Result<(), Errno> {
    mknod_attr(found, mode, rdev).map(drop)
}

fn mknod_attr(found: &Found, mode: u32, rdev: u64) -> Result<Attr, Errno> {
    let umask = state::umask();
    with_service(|s| s.mknod(found, mode, rdev, umask))
}

/// `symlink`.
pub fn symlink(target: &[u8], found: &Found) -> Result<(), Errno> {
    with_service(|s| s.symlink(target, found))
}

/// `readlink`.
pub fn readlink(found: &Found) -> Result<Vec<u8>, Errno> {
    with_service(|s| s.readlink(found))
}

/// `unlink`.
pub fn unlink(found: &Found) -> Result<(), Errno> {
    with_service(|s| s.unlink(found))
}

/// The last component of a path as the caller wrote it (trailing slashes ignored).
pub fn last_component(path: &[u8]) -> &[u8] {
    let trimmed = match path.iter().rposition(|&b| b != b'/') {
        Some(end) => &path[..=end],
        None => return path,
    };
    trimmed.rsplit(|&b| b == b'/').next().unwrap_or(trimmed)
}

/// `rmdir` of a path whose last component was `last` (`.`: EINVAL, `..`: ENOTEMPTY).
pub fn rmdir_named(found: &Found, last: &[u8]) -> Result<(), Errno> {
    with_service(|s| s.rmdir(found, last))
}

/// `rmdir`.
pub fn rmdir(found: &Found) -> Result<(), Errno> {
    rmdir_named(found, &found.name)
}

/// `rename` / `renameat2` within noseFS.
pub fn rename(from: &Found, to: &Found, flags: u32) -> Result<(), Errno> {
    with_service(|s| s.rename(from, to, flags))
}

/// `link`.
pub fn link(from: &Found, to: &Found) -> Result<(), Errno> {
    with_service(|s| s.link(from, to))
}

/// chmod, chown and utimens of a path, with the kernel's rules.
pub fn setattr(found: &Found, change: &SetAttr, times_now: bool) -> Result<(), Errno> {
    with_service(|s| s.setattr(found, change, times_now))
}

/// fchmod, fchown and futimens of an open description.
pub fn fsetattr(fd: i32, change: &SetAttr, times_now: bool) -> Result<(), Errno> {
    let file = file_of(fd)?;
    with_service(|s| s.fsetattr(file.handle, change, times_now))
}

/// Daemon mode: the kernel descriptor of `fd`'s file on which the process's POSIX record locks
/// are taken (`kernel`), checked against the description's access mode as the kernel checks a
/// lock of type `l_type`, with the description's current offset (for SEEK_CUR and lockf). `None`
/// in embedded mode, where one process holds the image and locks cannot conflict.
///
/// The kernel keeps POSIX locks per process and inode on the FUSE mount's inode, where every
/// process of the machine meets: so locks are honoured between daemon clients, and between a
/// client and a program using the FUSE mount. Not followed: the kernel descriptor is opened by
/// path, so a file renamed or removed since it was opened gets ENODEV.
/// `set`: a lock is set (F_GETLK only tests, and needs no access).
pub fn record_lock_file(
    fd: i32,
    l_type: i32,
    set: bool,
) -> Result<Option<(Arc<KernelFile>, u64)>, Errno> {
    if !state::daemon_mode() {
        return Ok(None);
    }
    let file = file_of(fd)?;
    let (read, write) = match l_type {
        libc::F_RDLCK if set => (true, false),
        libc::F_WRLCK if set => (false, true),
        _ => (false, false),
    };
    if file.kind == Kind::Path || (read && !file.readable()) || (write && !file.writable()) {
        return Err(Errno::EBADF);
    }
    let kernel = kernel::for_file(&file, read, write)?;
    let offset = *file.offset.lock();
    Ok(Some((kernel, offset)))
}

/// Daemon mode: the kernel descriptor on which the flock and OFD locks of `fd`'s description are
/// taken (see `OpenFile::lock_fd`), with the description, which keeps the descriptor open.
/// `None` in embedded mode, where one process holds the image and locks cannot conflict.
/// Closing the description's last descriptor closes it, dropping its locks. Refused (ENOLCK)
/// while the process holds POSIX record locks on the file: opening it closes a descriptor of the
/// file, which would drop them (`kernel`).
pub fn lock_fd(fd: i32) -> Result<Option<(Arc<OpenFile>, i32)>, Errno> {
    if !state::daemon_mode() {
        return Ok(None);
    }
    let file = file_of(fd)?;
    if file.kind == Kind::Path {
        return Err(Errno::EBADF);
    }
    let raw = description_lock_fd(&file)?;
    Ok(Some((file, raw)))
}

/// The kernel descriptor of description `file` through the FUSE mount, opened now if it has
/// none yet (see [`lock_fd`]).
fn description_lock_fd(file: &OpenFile) -> Result<i32, Errno> {
    let mut slot = file.lock_fd.lock();
    if slot.is_none() {
        if kernel::locked(file.ino) {
            state::say("an flock or OFD lock on a noseFS file this process holds record locks on, through a description that never locked before, would drop those locks in daemon mode (ENOLCK)");
            return Err(Errno(libc::ENOLCK));
        }
        let access = match file.flags.load(Ordering::Relaxed) & libc::O_ACCMODE {
            libc::O_WRONLY => rustix::fs::OFlags::WRONLY,
            libc::O_RDWR => rustix::fs::OFlags::RDWR,
            _ => rustix::fs::OFlags::RDONLY,
        };
        let flags = access | rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::NOCTTY;
        let path = kernel::path_now(file).map_err(|_| Errno(libc::ENOLCK))?;
        let opened = rustix::fs::open(path.as_slice(), flags, rustix::fs::Mode::empty())
            .map_err(|_| Errno(libc::ENOLCK))?;
        kernel::same_file(&opened, file).map_err(|_| Errno(libc::ENOLCK))?;
        *slot = Some(fdtable::LockFd::moved_high(opened).ok_or(Errno(libc::ENOLCK))?);
    }
    Ok(slot.as_ref().map(|f| f.raw()).expect("just set"))
}

/// Daemon mode, before a fork: description `file` gets its kernel descriptor now if it has
/// none, so that parent and child, which share the description, lock through one kernel
/// description (made at the first lock instead, each would make its own, and a lock the child
/// took would go when it exits). Skipped where making one would drop the process's record
/// locks on the file.
pub fn share_locks(file: &OpenFile) {
    if state::daemon_mode()
        && file.kind != Kind::Path
        && file.lock_fd.lock().is_none()
        && !kernel::locked(file.ino)
    {
        let _ = description_lock_fd(file);
    }
}

/// Daemon mode, at an exec or spawn that hands description `file` to another program: a copy
/// of its kernel descriptor (made now if it has none) that the program inherits, so that both
/// share one kernel description and its flock and OFD locks, as they share the noseFS
/// description (`exec 9>lock; flock 9` in a shell: the lock flock(1) takes stays with the
/// shell's descriptor after flock exits). Not close-on-exec; the caller closes it after the
/// spawn, or if the exec fails. `None` in embedded mode, for `O_PATH` descriptions, and where
/// making one would drop the process's record locks on the file (the program then makes its
/// own at its first lock, as before).
pub fn lock_fd_to_hand_over(file: &OpenFile) -> Option<std::os::fd::OwnedFd> {
    if !state::daemon_mode() || file.kind == Kind::Path {
        return None;
    }
    if file.lock_fd.lock().is_none() && kernel::locked(file.ino) {
        return None;
    }
    description_lock_fd(file).ok()?;
    let held = file.lock_fd.lock();
    // High, out of the way of the numbers a spawn's file actions move descriptors to.
    let copy = rustix::io::fcntl_dupfd_cloexec(held.as_ref()?, fdtable::internal_fd_floor() / 4);
    let copy = copy.ok()?;
    rustix::io::fcntl_setfd(&copy, rustix::io::FdFlags::empty()).ok()?;
    Some(copy)
}

/// A program's descriptor of noseFS description `file` is gone (close, close_range, dup2 over
/// it): daemon mode drops the process's record locks on the file, as POSIX says.
pub fn descriptor_closed(file: Option<Arc<OpenFile>>) {
    if let Some(file) = file {
        let ino = file.ino;
        drop(file);
        kernel::closed(ino);
    }
}

/// `None` for ENOENT: the open directory was removed.
fn removed<T>(r: Result<T, Errno>) -> Result<Option<T>, Errno> {
    match r {
        Err(e) if e == Errno::ENOENT => Ok(None),
        r => r.map(Some),
    }
}

/// Directory entries of an open directory from its position, at most `max`, advancing it.
pub fn read_dir(fd: i32, max: usize) -> Result<Vec<DirEntry>, Errno> {
    let file = file_of(fd)?;
    if file.kind != Kind::Dir {
        return Err(Errno::ENOTDIR);
    }
    let mut cookie = file.offset.lock();
    let mut out: Vec<DirEntry> = Vec::new();
    // A listing that starts (or restarts: rewinddir) ends where the directory ended then, so
    // that names renamed under the reader (each gets a new cookie) cannot keep it going forever.
    // A directory removed while open lists as empty: the kernel's getdents says ENOENT, which
    // glibc's readdir takes for the end (the shim answers both).
    if *cookie == 0 {
        let Some(end) = removed(with_service(|s| s.listing_end(file.handle)))? else {
            return Ok(Vec::new());
        };
        file.listing_end.store(end, Ordering::Relaxed);
    }
    let Some(batch) = removed(with_service(|s| s.readdir(file.handle, *cookie, max)))? else {
        return Ok(Vec::new());
    };
    out.extend(batch);
    let end = file.listing_end.load(Ordering::Relaxed);
    if end != 0 {
        out.retain(|e| e.cookie < end); // cookies grow along a batch: only a tail goes
    }
    if let Some(last) = out.last() {
        *cookie = last.cookie;
    }
    Ok(out)
}

/// Puts back the entries a caller could not take (they did not fit its buffer).
pub fn unread_dir(fd: i32, first_not_taken: Option<&DirEntry>, before: u64) {
    if let (Some(file), Some(_)) = (fdtable::get(fd), first_not_taken) {
        *file.offset.lock() = before;
    }
}

/// Statistics of the file system.
pub fn statfs() -> Result<(u64, u64, u64, u64), Errno> {
    let s = with_service(|s| s.statfs())?;
    Ok((s.blocks, s.blocks_free, s.inodes, s.inodes_free))
}

/// `chdir` into a noseFS directory.
pub fn chdir(found: &Found) -> Result<(), Errno> {
    may_chdir(found)?;
    crate::route::set_cwd(Some(found.path.clone()));
    Ok(())
}

/// Whether `chdir` into what `found` names would succeed (a directory the caller may search).
pub fn may_chdir(found: &Found) -> Result<(), Errno> {
    let acl = access_acl(found)?;
    vfs::chdir(&state::cred(), found, acl.as_ref())
}

/// The abstract Unix-domain address that stands for socket inode `ino` of this image:
/// `nosefs/<image device>:<image inode>/<ino>`. A socket bound to a noseFS path is bound to
/// this address in the kernel's abstract namespace, and the path holds an S_IFSOCK inode, so
/// that connect() by path (from any process under the shim on the same image) finds it.
pub fn socket_address(ino: u64) -> Result<Vec<u8>, Errno> {
    static IMAGE: std::sync::OnceLock<Option<(u64, u64)>> = std::sync::OnceLock::new();
    // The image's file names it in embedded mode, the mount point (its device) in daemon mode.
    let image = IMAGE.get_or_init(|| {
        let config = state::config()?;
        let st = match &config.image {
            Some(image) => rustix::fs::stat(image.path()).ok()?,
            None => rustix::fs::stat(config.prefix.path()).ok()?,
        };
        Some((st.st_dev, st.st_ino))
    });
    let (dev, image_ino) = image.ok_or(Errno::EIO)?;
    Ok(format!("nosefs/{dev:x}:{image_ino:x}/{ino:x}").into_bytes())
}

/// `bind` of a Unix-domain socket to a noseFS path: creates the socket inode (EADDRINUSE if the
/// name exists, as the kernel answers) and returns the abstract address to bind to.
pub fn bind_socket(found: &Found) -> Result<Vec<u8>, Errno> {
    if found.attr.is_some() {
        return Err(Errno(libc::EADDRINUSE));
    }
    let ino = mknod_attr(found, pinode::S_IFSOCK | 0o777, 0)?.ino;
    socket_address(ino)
}

/// `connect` to a noseFS path: the abstract address of the socket inode there (ECONNREFUSED if
/// it is not a socket, EACCES without write permission on it, as the kernel answers).
pub fn connect_socket(found: &Found) -> Result<Vec<u8>, Errno> {
    let attr = found.existing()?;
    if attr.mode & pinode::S_IFMT != pinode::S_IFSOCK {
        return Err(Errno(libc::ECONNREFUSED));
    }
    access(found, libc::W_OK)?;
    socket_address(attr.ino)
}
