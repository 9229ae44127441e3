//! The operations the hooks serve for noseFS paths and descriptors, in safe Rust: each takes a
//! resolved path ([`Found`]) or an open file description and returns a value or an errno, with
//! the checks the kernel would make (permissions, open flags, file types).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use nosefs_core::format::pinode;
use nosefs_core::namespace::perm::{self, MAY_EXEC, MAY_READ, MAY_WRITE};
use nosefs_core::namespace::{Attr, DirEntry, RenameFlags, SetAttr, ROOT_INO};
use nosefs_core::Errno;

use crate::fdtable::{self, Kind, OpenFile};
use crate::route::Found;
use crate::state::{self, with_fs};

fn core<T>(r: nosefs_core::Result<T>) -> Result<T, Errno> {
    r.map_err(|e| e.errno())
}

/// `open` / `openat` of a noseFS path: returns the new descriptor.
pub fn open(found: &Found, flags: i32, mode: u32) -> Result<i32, Errno> {
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(Errno(libc::EOPNOTSUPP));
    }
    let cred = state::cred();
    let accmode = flags & libc::O_ACCMODE;
    let wants_write = accmode == libc::O_WRONLY || accmode == libc::O_RDWR;
    let attr = match found.attr {
        Some(_) if flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0 => {
            return Err(Errno::EEXIST)
        }
        Some(attr) => attr,
        None if flags & libc::O_CREAT == 0 => return Err(Errno::ENOENT),
        None => {
            if found.trailing_slash || flags & libc::O_DIRECTORY != 0 {
                return Err(Errno::EISDIR);
            }
            core(perm::check(&found.parent_attr, &cred, MAY_WRITE | MAY_EXEC))?;
            let requested = pinode::S_IFREG | (mode & 0o7777 & !state::umask());
            let (owner, perm_bits) = perm::new_inode_owner(&found.parent_attr, &cred, requested);
            let exclusive = flags & libc::O_EXCL != 0;
            with_fs(|fs| core(fs.create(found.parent, &found.name, perm_bits, owner, exclusive)))?
        }
    };
    let ft = attr.mode & pinode::S_IFMT;
    let kind = if flags & libc::O_PATH != 0 {
        Kind::Path
    } else {
        match ft {
            pinode::S_IFDIR => Kind::Dir,
            pinode::S_IFREG => Kind::File,
            pinode::S_IFLNK => return Err(Errno::ELOOP), // O_NOFOLLOW on a symlink
            // Device nodes, FIFOs and sockets on noseFS cannot be served from the process.
            _ => return Err(Errno(libc::ENXIO)),
        }
    };
    if kind != Kind::Path {
        if ft == pinode::S_IFDIR && (wants_write || flags & (libc::O_CREAT | libc::O_TRUNC) != 0) {
            return Err(Errno::EISDIR);
        }
        if flags & libc::O_DIRECTORY != 0 && ft != pinode::S_IFDIR {
            return Err(Errno::ENOTDIR);
        }
        let mut mask = 0;
        if accmode == libc::O_RDONLY || accmode == libc::O_RDWR {
            mask |= MAY_READ;
        }
        if wants_write || flags & libc::O_TRUNC != 0 {
            mask |= MAY_WRITE;
        }
        // A file just created by this open is opened with the access asked for, whatever its mode.
        if found.attr.is_some() {
            core(perm::check(&attr, &cred, mask))?;
        }
        if flags & libc::O_TRUNC != 0 && ft == pinode::S_IFREG && wants_write && attr.size > 0 {
            with_fs(|fs| core(fs.truncate(attr.ino, 0)))?;
        }
    } else if flags & libc::O_DIRECTORY != 0 && ft != pinode::S_IFDIR {
        return Err(Errno::ENOTDIR);
    }
    if found.trailing_slash && ft != pinode::S_IFDIR {
        return Err(Errno::ENOTDIR);
    }
    let keep = libc::O_ACCMODE
        | libc::O_APPEND
        | libc::O_NONBLOCK
        | libc::O_PATH
        | libc::O_DIRECT
        | libc::O_SYNC
        | libc::O_DSYNC
        | libc::O_NOATIME
        | libc::O_LARGEFILE;
    let file = OpenFile::new(attr.ino, kind, flags & keep, found.path.clone());
    with_fs(|fs| {
        file.count_open(fs);
        Ok(())
    })?;
    fdtable::open_placeholder(file, flags & libc::O_CLOEXEC != 0)
}

fn file_of(fd: i32) -> Result<Arc<OpenFile>, Errno> {
    fdtable::get(fd).ok_or(Errno::EBADF)
}

/// `read`: at the description's offset, advancing it.
pub fn read(fd: i32, buf: &mut [u8]) -> Result<usize, Errno> {
    let file = file_of(fd)?;
    readable_file(&file)?;
    let mut offset = file.offset.lock();
    let n = with_fs(|fs| core(fs.read(file.ino, *offset, buf)))?;
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

/// `pread`: at `offset`, leaving the description's offset alone.
pub fn pread(fd: i32, buf: &mut [u8], offset: i64) -> Result<usize, Errno> {
    let file = file_of(fd)?;
    readable_file(&file)?;
    let offset = u64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    with_fs(|fs| core(fs.read(file.ino, offset, buf)))
}

/// `write`: at the offset (or the end with O_APPEND), advancing it.
pub fn write(fd: i32, data: &[u8]) -> Result<usize, Errno> {
    let file = file_of(fd)?;
    writable_file(&file)?;
    let mut offset = file.offset.lock();
    let append = file.flags.load(Ordering::Relaxed) & libc::O_APPEND != 0;
    let end = with_fs(|fs| {
        let at = if append {
            core(fs.append(file.ino, data))?
        } else {
            core(fs.write(file.ino, *offset, data))?;
            *offset
        };
        sync_if_asked(fs, &file)?;
        Ok(at + data.len() as u64)
    })?;
    *offset = end;
    Ok(data.len())
}

/// O_SYNC and O_DSYNC: the write is durable on return.
fn sync_if_asked(fs: &nosefs_core::namespace::Fs, file: &OpenFile) -> Result<(), Errno> {
    if file.flags.load(Ordering::Relaxed) & (libc::O_SYNC | libc::O_DSYNC) != 0 {
        core(fs.fsync(file.ino))?;
    }
    Ok(())
}

/// `pwrite`: at `offset` (Linux appends anyway with O_APPEND).
pub fn pwrite(fd: i32, data: &[u8], offset: i64) -> Result<usize, Errno> {
    let file = file_of(fd)?;
    writable_file(&file)?;
    let offset = u64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    let append = file.flags.load(Ordering::Relaxed) & libc::O_APPEND != 0;
    with_fs(|fs| {
        if append {
            core(fs.append(file.ino, data))?;
        } else {
            core(fs.write(file.ino, offset, data))?;
        }
        sync_if_asked(fs, &file)?;
        Ok(data.len())
    })
}

/// `lseek`, including SEEK_DATA and SEEK_HOLE (the whole file is data: noseFS has no holes yet).
pub fn lseek(fd: i32, offset: i64, whence: i32) -> Result<i64, Errno> {
    let file = file_of(fd)?;
    if file.kind == Kind::Path {
        return Err(Errno::EBADF);
    }
    let mut current = file.offset.lock();
    if file.kind == Kind::Dir {
        // Directory offsets are readdir cookies; only a rewind or a told position is meaningful.
        if whence != libc::SEEK_SET || offset < 0 {
            return Err(Errno::EINVAL);
        }
        *current = offset as u64;
        return Ok(offset);
    }
    let size = with_fs(|fs| core(fs.getattr(file.ino)))?.size as i64;
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => *current as i64,
        libc::SEEK_END => size,
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            if offset < 0 || offset >= size {
                return Err(Errno(libc::ENXIO));
            }
            let at = if whence == libc::SEEK_DATA {
                offset
            } else {
                size
            };
            *current = at as u64;
            return Ok(at);
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
        with_fs(|fs| core(fs.fsync(file.ino)))?;
    }
    Ok(())
}

/// `syncfs` / `sync`: every file's writes.
pub fn sync_all() -> Result<(), Errno> {
    if !state::is_mounted() {
        return Ok(());
    }
    with_fs(|fs| core(fs.sync_all()))
}

/// `ftruncate`.
pub fn ftruncate(fd: i32, size: i64) -> Result<(), Errno> {
    let file = file_of(fd)?;
    if file.kind != Kind::File || !file.writable() {
        return Err(Errno::EINVAL);
    }
    let size = u64::try_from(size).map_err(|_| Errno::EINVAL)?;
    with_fs(|fs| core(fs.truncate(file.ino, size)))
}

/// `truncate` of a path.
pub fn truncate(found: &Found, size: i64) -> Result<(), Errno> {
    let attr = found.existing()?;
    if attr.is_dir() {
        return Err(Errno::EISDIR);
    }
    if attr.mode & pinode::S_IFMT != pinode::S_IFREG {
        return Err(Errno::EINVAL);
    }
    let size = u64::try_from(size).map_err(|_| Errno::EINVAL)?;
    core(perm::check(&attr, &state::cred(), MAY_WRITE))?;
    with_fs(|fs| core(fs.truncate(attr.ino, size)))
}

/// `fallocate`: mode 0 extends the size (noseFS allocates on write, so no space is reserved);
/// KEEP_SIZE succeeds with nothing to do; PUNCH_HOLE (with KEEP_SIZE) and ZERO_RANGE write zeros
/// over the range, which reads as the hole would. Collapse and insert range are not supported.
pub fn fallocate(fd: i32, mode: i32, offset: i64, len: i64) -> Result<(), Errno> {
    let file = file_of(fd)?;
    if file.kind != Kind::File {
        return Err(Errno(libc::ENODEV));
    }
    writable_file(&file)?;
    if offset < 0 || len <= 0 {
        return Err(Errno::EINVAL);
    }
    let (offset, len) = (offset as u64, len as u64);
    let end = offset.checked_add(len).ok_or(Errno::EFBIG)?;
    with_fs(|fs| {
        let size = core(fs.getattr(file.ino))?.size;
        match mode {
            0 => {
                if end > size {
                    core(fs.truncate(file.ino, end))?;
                }
                Ok(())
            }
            libc::FALLOC_FL_KEEP_SIZE => Ok(()),
            m if m == libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
                || m == libc::FALLOC_FL_ZERO_RANGE
                || m == libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE =>
            {
                let stop = if m & libc::FALLOC_FL_KEEP_SIZE != 0 {
                    end.min(size)
                } else {
                    end
                };
                let zeros = vec![0u8; 1 << 16];
                let mut at = offset;
                while at < stop {
                    let n = (stop - at).min(zeros.len() as u64) as usize;
                    core(fs.write(file.ino, at, &zeros[..n]))?;
                    at += n as u64;
                }
                Ok(())
            }
            _ => Err(Errno(libc::EOPNOTSUPP)),
        }
    })
}

/// Attributes of an open description.
pub fn fstat(fd: i32) -> Result<Attr, Errno> {
    let file = file_of(fd)?;
    with_fs(|fs| core(fs.getattr(file.ino)))
}

/// Attributes of a path.
pub fn stat(found: &Found) -> Result<Attr, Errno> {
    let attr = found.existing()?;
    if found.trailing_slash && !attr.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    Ok(attr)
}

/// `access` / `faccessat`: existence, then the mode bits against the credentials.
pub fn access(found: &Found, mask: i32) -> Result<(), Errno> {
    let attr = stat(found)?;
    if mask == libc::F_OK {
        return Ok(());
    }
    let mut want = 0;
    if mask & libc::R_OK != 0 {
        want |= MAY_READ;
    }
    if mask & libc::W_OK != 0 {
        want |= MAY_WRITE;
    }
    if mask & libc::X_OK != 0 {
        want |= MAY_EXEC;
    }
    core(perm::check(&attr, &state::cred(), want))
}

fn check_create(found: &Found) -> Result<perm::Cred, Errno> {
    if found.attr.is_some() {
        return Err(Errno::EEXIST);
    }
    let cred = state::cred();
    core(perm::check(&found.parent_attr, &cred, MAY_WRITE | MAY_EXEC))?;
    Ok(cred)
}

/// `mkdir`.
pub fn mkdir(found: &Found, mode: u32) -> Result<(), Errno> {
    let cred = check_create(found)?;
    let requested = pinode::S_IFDIR | (mode & 0o7777 & !state::umask());
    let (owner, bits) = perm::new_inode_owner(&found.parent_attr, &cred, requested);
    with_fs(|fs| core(fs.mkdir(found.parent, &found.name, bits, owner)).map(drop))
}

/// `mknod` (regular files, FIFOs, sockets and device nodes are all recorded).
pub fn mknod(found: &Found, mode: u32, rdev: u64) -> Result<(), Errno> {
    let cred = check_create(found)?;
    let ft = mode & pinode::S_IFMT;
    if (ft == pinode::S_IFCHR || ft == pinode::S_IFBLK) && !cred.is_root() {
        return Err(Errno::EPERM);
    }
    let ft = if ft == 0 { pinode::S_IFREG } else { ft };
    let requested = ft | (mode & 0o7777 & !state::umask());
    let (owner, bits) = perm::new_inode_owner(&found.parent_attr, &cred, requested);
    with_fs(|fs| core(fs.mknod(found.parent, &found.name, ft | bits, rdev as u32, owner)).map(drop))
}

/// `symlink`.
pub fn symlink(target: &[u8], found: &Found) -> Result<(), Errno> {
    let cred = check_create(found)?;
    let (owner, _) = perm::new_inode_owner(&found.parent_attr, &cred, pinode::S_IFLNK | 0o777);
    with_fs(|fs| core(fs.symlink(found.parent, &found.name, target, owner)).map(drop))
}

/// `readlink`.
pub fn readlink(found: &Found) -> Result<Vec<u8>, Errno> {
    let attr = found.existing()?;
    if attr.mode & pinode::S_IFMT != pinode::S_IFLNK {
        return Err(Errno::EINVAL);
    }
    with_fs(|fs| core(fs.readlink(attr.ino)))
}

fn check_remove(found: &Found) -> Result<Attr, Errno> {
    let attr = found.existing()?;
    if found.name == b"." {
        return Err(
            if found.parent == ROOT_INO
                && found.path.len() == state::config().map_or(0, |c| c.prefix.len())
            {
                Errno::EBUSY
            } else {
                Errno::EINVAL
            },
        );
    }
    core(perm::check_delete(
        &found.parent_attr,
        &attr,
        &state::cred(),
    ))?;
    Ok(attr)
}

/// `unlink`.
pub fn unlink(found: &Found) -> Result<(), Errno> {
    let attr = check_remove(found)?;
    if attr.is_dir() {
        return Err(Errno::EISDIR);
    }
    with_fs(|fs| core(fs.unlink(found.parent, &found.name)))
}

/// The last component of a path as the caller wrote it (trailing slashes ignored).
pub fn last_component(path: &[u8]) -> &[u8] {
    let trimmed = match path.iter().rposition(|&b| b != b'/') {
        Some(end) => &path[..=end],
        None => return path,
    };
    trimmed.rsplit(|&b| b == b'/').next().unwrap_or(trimmed)
}

/// `rmdir` of a path whose last component was `last`: `.` is EINVAL and `..` ENOTEMPTY, as
/// the kernel answers before looking at the directory (resolution has already left them).
pub fn rmdir_named(found: &Found, last: &[u8]) -> Result<(), Errno> {
    match last {
        b"." => Err(Errno::EINVAL),
        b".." => Err(Errno::ENOTEMPTY),
        _ => rmdir(found),
    }
}

/// `rmdir`.
pub fn rmdir(found: &Found) -> Result<(), Errno> {
    let attr = check_remove(found)?;
    if !attr.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    with_fs(|fs| core(fs.rmdir(found.parent, &found.name)))
}

/// `rename` / `renameat2` within noseFS.
pub fn rename(from: &Found, to: &Found, flags: u32) -> Result<(), Errno> {
    let src = check_remove(from)?;
    if to.name == b"." {
        return Err(Errno::EBUSY);
    }
    let cred = state::cred();
    match to.attr {
        Some(dst) => core(perm::check_delete(&to.parent_attr, &dst, &cred))?,
        None => core(perm::check(&to.parent_attr, &cred, MAY_WRITE | MAY_EXEC))?,
    }
    if (from.trailing_slash || to.trailing_slash) && !src.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    if src.is_dir() && from.parent != to.parent {
        // Moving a directory rewrites its "..": write permission on it, as the kernel asks.
        core(perm::check(&src, &cred, MAY_WRITE))?;
    }
    let flags = RenameFlags {
        noreplace: flags & libc::RENAME_NOREPLACE != 0,
        exchange: flags & libc::RENAME_EXCHANGE != 0,
    };
    with_fs(|fs| core(fs.rename(from.parent, &from.name, to.parent, &to.name, flags)))
}

/// `link`.
pub fn link(from: &Found, to: &Found) -> Result<(), Errno> {
    let src = from.existing()?;
    if src.is_dir() {
        return Err(Errno::EPERM);
    }
    check_create(to)?;
    with_fs(|fs| core(fs.link(src.ino, to.parent, &to.name)).map(drop))
}

/// chmod, chown and utimens of an inode, with the kernel's rules.
pub fn setattr(ino: u64, change: &SetAttr, times_now: bool) -> Result<(), Errno> {
    with_fs(|fs| {
        let attr = core(fs.getattr(ino))?;
        let change = core(perm::check_setattr(
            &attr,
            change,
            &state::cred(),
            times_now,
        ))?;
        core(fs.setattr(ino, &change)).map(drop)
    })
}

/// Directory entries of an open directory from its position, at most `max`, advancing it.
pub fn read_dir(fd: i32, max: usize) -> Result<Vec<DirEntry>, Errno> {
    let file = file_of(fd)?;
    if file.kind != Kind::Dir {
        return Err(Errno::ENOTDIR);
    }
    let mut cookie = file.offset.lock();
    let mut out = Vec::new();
    with_fs(|fs| {
        core(fs.readdir(file.ino, *cookie, |e| {
            out.push(e);
            out.len() < max
        }))
    })?;
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
    with_fs(|fs| {
        let blocks = fs.image().geometry().data_block_count();
        let free = fs.free_data_blocks();
        let (used, free_pinodes) = fs.pinode_usage();
        Ok((blocks, free, used + free_pinodes, free_pinodes))
    })
}

/// `chdir` into a noseFS directory.
pub fn chdir(found: &Found) -> Result<(), Errno> {
    let attr = found.existing()?;
    if !attr.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    core(perm::check(&attr, &state::cred(), MAY_EXEC))?;
    crate::route::set_cwd(Some(found.path.clone()));
    Ok(())
}

/// The abstract Unix-domain address that stands for socket inode `ino` of this image:
/// `nosefs/<image device>:<image inode>/<ino>`. A socket bound to a noseFS path is bound to
/// this address in the kernel's abstract namespace, and the path holds an S_IFSOCK inode, so
/// that connect() by path (from any process under the shim on the same image) finds it.
pub fn socket_address(ino: u64) -> Result<Vec<u8>, Errno> {
    static IMAGE: std::sync::OnceLock<Option<(u64, u64)>> = std::sync::OnceLock::new();
    let image = IMAGE.get_or_init(|| {
        let config = state::config()?;
        let st = rustix::fs::stat(&config.image).ok()?;
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
    mknod(found, pinode::S_IFSOCK | 0o777, 0)?;
    let ino = with_fs(|fs| core(fs.lookup(found.parent, &found.name)))?.ino;
    socket_address(ino)
}

/// `connect` to a noseFS path: the abstract address of the socket inode there (ECONNREFUSED if
/// it is not a socket, EACCES without write permission on it, as the kernel answers).
pub fn connect_socket(found: &Found) -> Result<Vec<u8>, Errno> {
    let attr = found.existing()?;
    if attr.mode & pinode::S_IFMT != pinode::S_IFSOCK {
        return Err(Errno(libc::ECONNREFUSED));
    }
    core(perm::check(&attr, &state::cred(), MAY_WRITE))?;
    socket_address(attr.ino)
}
