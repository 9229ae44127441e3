//! Opening: paths and names in open directories (one round trip to a daemon where it can), the
//! special files the kernel opens, and the images of programs and libraries stored on noseFS.

use super::*;

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
