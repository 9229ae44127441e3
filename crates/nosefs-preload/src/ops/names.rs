//! Names and what they name: attributes, access checks, extended attributes, creation and
//! removal, renames and links, directory listings, the working directory, sockets bound on
//! noseFS paths.

use super::*;

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

/// Search permission on the open directory `fd` (fchdir), by its access ACL when it has one.
pub fn may_search(fd: i32, attr: &Attr) -> Result<(), Errno> {
    fd_access(fd, attr, libc::X_OK)
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
