//! Path operations with the checks the kernel makes before it calls a file system: open's flags
//! and creation, access, mkdir, mknod, symlink, readlink, unlink, rmdir, rename, link, truncate
//! and setattr by path or inode. Each takes a [`Found`] from [`super::walk`] and the caller.

use super::{core, Caller, Found};
use crate::file::MAX_FILE_BYTES;
use crate::format::pinode;
use crate::fs::Fs;
use crate::namespace::acl::Acl;
use crate::namespace::perm::{self, Cred, MAY_EXEC, MAY_READ, MAY_WRITE};
use crate::namespace::{Attr, Owner, RenameFlags, SetAttr};
use crate::Errno;

/// What an open file description refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// Anything opened with O_PATH (or a symlink with O_PATH | O_NOFOLLOW).
    Path,
}

/// The status flags an open file description keeps (F_GETFL reports them).
pub const KEPT_OPEN_FLAGS: i32 = libc::O_ACCMODE
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_PATH
    | libc::O_DIRECT
    | libc::O_SYNC
    | libc::O_DSYNC
    | libc::O_NOATIME
    | libc::O_LARGEFILE;

/// `open` / `openat` of a resolved path: creates the file with O_CREAT, checks the access asked
/// for, truncates with O_TRUNC. Returns the object's attributes (after creation and truncation)
/// and what the description refers to.
pub fn open(
    fs: &Fs,
    caller: &Caller,
    found: &Found,
    flags: i32,
    mode: u32,
) -> Result<(Attr, OpenKind), Errno> {
    let cred = &caller.cred;
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return open_tmpfile(fs, caller, found, flags, mode);
    }
    let accmode = flags & libc::O_ACCMODE;
    let wants_write = accmode == libc::O_WRONLY || accmode == libc::O_RDWR;
    let mut attr = match found.attr {
        Some(_) if flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0 => {
            return Err(Errno::EEXIST)
        }
        Some(attr) => attr,
        None if flags & libc::O_CREAT == 0 => return Err(Errno::ENOENT),
        None => {
            if found.trailing_slash || flags & libc::O_DIRECTORY != 0 {
                return Err(Errno::EISDIR);
            }
            allowed(fs, &found.parent_attr, cred, MAY_WRITE | MAY_EXEC)?;
            let requested = pinode::S_IFREG | (mode & 0o7777);
            let (mut owner, perm_bits) = perm::new_inode_owner(&found.parent_attr, cred, requested);
            owner.umask = caller.umask & 0o777;
            let exclusive = flags & libc::O_EXCL != 0;
            core(fs.create(found.parent, &found.name, perm_bits, owner, exclusive))?
        }
    };
    let ft = attr.mode & pinode::S_IFMT;
    let kind = if flags & libc::O_PATH != 0 {
        OpenKind::Path
    } else {
        match ft {
            pinode::S_IFDIR => OpenKind::Dir,
            pinode::S_IFREG => OpenKind::File,
            pinode::S_IFLNK => return Err(Errno::ELOOP), // O_NOFOLLOW on a symlink
            // Device nodes, FIFOs and sockets on noseFS cannot be served from the process.
            _ => return Err(Errno(libc::ENXIO)),
        }
    };
    if kind != OpenKind::Path {
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
            allowed(fs, &attr, cred, mask)?;
        }
        if mask & MAY_WRITE != 0 && fs.is_read_only() {
            return Err(Errno::EROFS);
        }
        if flags & libc::O_TRUNC != 0 && ft == pinode::S_IFREG && wants_write && attr.size > 0 {
            core(fs.truncate(attr.ino, 0))?;
            attr.size = 0;
        }
    } else if flags & libc::O_DIRECTORY != 0 && ft != pinode::S_IFDIR {
        return Err(Errno::ENOTDIR);
    }
    if found.trailing_slash && ft != pinode::S_IFDIR {
        return Err(Errno::ENOTDIR);
    }
    Ok((attr, kind))
}

/// `open` with O_TMPFILE: `found` names the directory; the file has no name until a link with
/// AT_EMPTY_PATH gives it one (never, with O_EXCL).
fn open_tmpfile(
    fs: &Fs,
    caller: &Caller,
    found: &Found,
    flags: i32,
    mode: u32,
) -> Result<(Attr, OpenKind), Errno> {
    let dir = found.existing()?;
    if !dir.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    let accmode = flags & libc::O_ACCMODE;
    if accmode != libc::O_WRONLY && accmode != libc::O_RDWR {
        return Err(Errno::EINVAL);
    }
    allowed(fs, &dir, &caller.cred, MAY_WRITE | MAY_EXEC)?;
    let requested = pinode::S_IFREG | (mode & 0o7777);
    let (mut owner, bits) = perm::new_inode_owner(&dir, &caller.cred, requested);
    owner.umask = caller.umask & 0o777;
    let linkable = flags & libc::O_EXCL == 0;
    let attr = core(fs.create_tmpfile(dir.ino, bits, owner, linkable))?;
    Ok((attr, OpenKind::File))
}

/// `linkat(fd, "", ..., AT_EMPTY_PATH)`: a name for the open file `ino` (an O_TMPFILE file's
/// first, or another for a file that has names).
pub fn flink(fs: &Fs, cred: &Cred, ino: u64, to: &Found) -> Result<Attr, Errno> {
    let src = core(fs.getattr(ino))?;
    if src.is_dir() {
        return Err(Errno::EPERM);
    }
    check_create(fs, cred, to)?;
    core(fs.link(ino, to.parent, &to.name))
}

/// Attributes of a path.
pub fn stat(found: &Found) -> Result<Attr, Errno> {
    let attr = found.existing()?;
    if found.trailing_slash && !attr.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    Ok(attr)
}

/// `access` / `faccessat`: existence, then the mode bits (or `acl`, the object's access ACL
/// when `attr.acl` says it has one) against the credentials.
pub fn access(cred: &Cred, found: &Found, mask: i32, acl: Option<&Acl>) -> Result<(), Errno> {
    access_attr(cred, &stat(found)?, mask, acl)
}

/// [`access`] of an object whose attributes are in hand (an open file: `fexecve` asks whether
/// its caller may execute it).
pub fn access_attr(cred: &Cred, attr: &Attr, mask: i32, acl: Option<&Acl>) -> Result<(), Errno> {
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
    core(perm::check_acl(attr, acl, cred, want))
}

/// `truncate` of a path.
pub fn truncate(fs: &Fs, cred: &Cred, found: &Found, size: i64) -> Result<(), Errno> {
    let attr = found.existing()?;
    if attr.is_dir() {
        return Err(Errno::EISDIR);
    }
    if attr.mode & pinode::S_IFMT != pinode::S_IFREG {
        return Err(Errno::EINVAL);
    }
    let size = u64::try_from(size).map_err(|_| Errno::EINVAL)?;
    allowed(fs, &attr, cred, MAY_WRITE)?;
    remove_privs(fs, || cred.clone(), attr.ino)?;
    core(fs.truncate(attr.ino, size))
}

/// Before a change of regular file `ino`'s data by the caller (truncate, fallocate, a copy into
/// it; writes go through [`write_by`]): clears the set-id bits the kernel's `file_remove_privs`
/// clears for `cred` (asked for only when the file has one). Returns whether the mode changed.
pub fn remove_privs(fs: &Fs, cred: impl FnOnce() -> Cred, ino: u64) -> Result<bool, Errno> {
    if !core(fs.has_setid(ino))? {
        return Ok(false);
    }
    core(fs.drop_setid(ino, &cred()))
}

/// A write by the caller whose credentials `cred` gives, at `offset` (`None`: appended), of
/// regular file `ino`, after the set-id bits it clears; the offset written at.
pub fn write_by(
    fs: &Fs,
    cred: impl FnOnce() -> Cred,
    ino: u64,
    offset: Option<u64>,
    data: &[u8],
) -> Result<u64, Errno> {
    core(fs.write_by(ino, offset, data, cred))
}

fn check_create(fs: &Fs, cred: &Cred, found: &Found) -> Result<(), Errno> {
    if found.attr.is_some() {
        return Err(Errno::EEXIST);
    }
    allowed(fs, &found.parent_attr, cred, MAY_WRITE | MAY_EXEC)
}

/// The access ACL of `attr`'s inode when it has one.
fn acl_of(fs: &Fs, attr: &Attr) -> Result<Option<Acl>, Errno> {
    if !attr.acl {
        return Ok(None);
    }
    core(fs.access_acl(attr.ino))
}

/// `mask` (rwx) on `attr` for `cred`, by its ACL when it has one, else by its mode.
fn allowed(fs: &Fs, attr: &Attr, cred: &Cred, mask: u32) -> Result<(), Errno> {
    core(fs.check_permission(attr, cred, mask))
}

/// `mkdir`.
pub fn mkdir(fs: &Fs, caller: &Caller, found: &Found, mode: u32) -> Result<Attr, Errno> {
    check_create(fs, &caller.cred, found)?;
    let requested = pinode::S_IFDIR | (mode & 0o7777);
    let (mut owner, bits) = perm::new_inode_owner(&found.parent_attr, &caller.cred, requested);
    owner.umask = caller.umask & 0o777;
    core(fs.mkdir(found.parent, &found.name, bits, owner))
}

/// `mknod` (regular files, FIFOs, sockets and device nodes are all recorded).
pub fn mknod(fs: &Fs, caller: &Caller, found: &Found, mode: u32, rdev: u64) -> Result<Attr, Errno> {
    check_create(fs, &caller.cred, found)?;
    let ft = mode & pinode::S_IFMT;
    if (ft == pinode::S_IFCHR || ft == pinode::S_IFBLK) && !caller.cred.is_root() {
        return Err(Errno::EPERM);
    }
    let ft = if ft == 0 { pinode::S_IFREG } else { ft };
    let requested = ft | (mode & 0o7777);
    let (mut owner, bits) = perm::new_inode_owner(&found.parent_attr, &caller.cred, requested);
    owner.umask = caller.umask & 0o777;
    let rdev = if ft == pinode::S_IFCHR || ft == pinode::S_IFBLK {
        u32::try_from(rdev).map_err(|_| Errno::EINVAL)?
    } else {
        0
    };
    core(fs.mknod(found.parent, &found.name, ft | bits, rdev, owner))
}

/// `symlink`.
pub fn symlink(fs: &Fs, cred: &Cred, target: &[u8], found: &Found) -> Result<Attr, Errno> {
    check_create(fs, cred, found)?;
    let (owner, _) = perm::new_inode_owner(&found.parent_attr, cred, pinode::S_IFLNK | 0o777);
    core(fs.symlink(found.parent, &found.name, target, owner))
}

/// `readlink`.
pub fn readlink(fs: &Fs, found: &Found) -> Result<Vec<u8>, Errno> {
    let attr = found.existing()?;
    if attr.mode & pinode::S_IFMT != pinode::S_IFLNK {
        return Err(Errno::EINVAL);
    }
    core(fs.readlink(attr.ino))
}

fn check_remove(fs: &Fs, cred: &Cred, found: &Found) -> Result<Attr, Errno> {
    let attr = found.existing()?;
    if found.name == b"." {
        return Err(if found.is_root() {
            Errno::EBUSY
        } else {
            Errno::EINVAL
        });
    }
    let dir_acl = acl_of(fs, &found.parent_attr)?;
    core(perm::check_delete_acl(
        &found.parent_attr,
        dir_acl.as_ref(),
        &attr,
        cred,
    ))?;
    Ok(attr)
}

/// `unlink`.
pub fn unlink(fs: &Fs, cred: &Cred, found: &Found) -> Result<(), Errno> {
    let attr = check_remove(fs, cred, found)?;
    if attr.is_dir() {
        return Err(Errno::EISDIR);
    }
    core(fs.unlink(found.parent, &found.name))
}

/// `rmdir` of a path whose last component, as the caller wrote it, was `last`: `.` is EINVAL
/// and `..` ENOTEMPTY, as the kernel answers before looking at the directory (resolution has
/// already left them).
pub fn rmdir(fs: &Fs, cred: &Cred, found: &Found, last: &[u8]) -> Result<(), Errno> {
    match last {
        b"." => return Err(Errno::EINVAL),
        b".." => return Err(Errno::ENOTEMPTY),
        _ => {}
    }
    let attr = check_remove(fs, cred, found)?;
    if !attr.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    core(fs.rmdir(found.parent, &found.name))
}

/// `rename` / `renameat2` within noseFS (`flags`: RENAME_NOREPLACE, RENAME_EXCHANGE).
pub fn rename(fs: &Fs, cred: &Cred, from: &Found, to: &Found, flags: u32) -> Result<(), Errno> {
    let src = check_remove(fs, cred, from)?;
    if to.name == b"." {
        return Err(Errno::EBUSY);
    }
    match to.attr {
        Some(dst) => {
            let dir_acl = acl_of(fs, &to.parent_attr)?;
            core(perm::check_delete_acl(
                &to.parent_attr,
                dir_acl.as_ref(),
                &dst,
                cred,
            ))?
        }
        None => allowed(fs, &to.parent_attr, cred, MAY_WRITE | MAY_EXEC)?,
    }
    if (from.trailing_slash || to.trailing_slash) && !src.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    if src.is_dir() && from.parent != to.parent {
        // Moving a directory rewrites its "..": write permission on it, as the kernel asks.
        allowed(fs, &src, cred, MAY_WRITE)?;
    }
    let known = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE | libc::RENAME_WHITEOUT;
    if flags & !known != 0 {
        return Err(Errno::EINVAL);
    }
    let whiteout = flags & libc::RENAME_WHITEOUT != 0;
    if whiteout && !cred.is_root() {
        return Err(Errno::EPERM); // a whiteout is a device node: CAP_MKNOD
    }
    let flags = RenameFlags {
        noreplace: flags & libc::RENAME_NOREPLACE != 0,
        exchange: flags & libc::RENAME_EXCHANGE != 0,
        whiteout: whiteout.then_some(Owner {
            uid: cred.uid,
            gid: cred.gid,
            umask: 0,
        }),
    };
    core(fs.rename(from.parent, &from.name, to.parent, &to.name, flags))
}

/// `link`.
pub fn link(fs: &Fs, cred: &Cred, from: &Found, to: &Found) -> Result<Attr, Errno> {
    let src = from.existing()?;
    // The kernel's order (vfs_link): the new name must be free and creatable before a
    // directory source is refused.
    check_create(fs, cred, to)?;
    if src.is_dir() {
        return Err(Errno::EPERM);
    }
    core(fs.link(src.ino, to.parent, &to.name))
}

/// chmod, chown and utimens of an inode, with the kernel's rules (`times_now`: both times are
/// set to now, which needs only write permission).
pub fn setattr(
    fs: &Fs,
    cred: &Cred,
    ino: u64,
    change: &SetAttr,
    times_now: bool,
) -> Result<Attr, Errno> {
    let attr = core(fs.getattr(ino))?;
    let acl = acl_of(fs, &attr)?;
    let change = core(perm::check_setattr_acl(
        &attr,
        acl.as_ref(),
        change,
        cred,
        times_now,
    ))?;
    core(fs.setattr(ino, &change))
}

/// `chdir` into a resolved directory (search permission on it, by `acl` when it has one).
pub fn chdir(cred: &Cred, found: &Found, acl: Option<&Acl>) -> Result<(), Errno> {
    let attr = found.existing()?;
    if !attr.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    core(perm::check_acl(&attr, acl, cred, MAY_EXEC))
}

/// `fallocate` of an open file: mode 0 and KEEP_SIZE reserve the range (its first writes cannot
/// fail with ENOSPC, also after a remount), mode 0 also extends the size; PUNCH_HOLE (with
/// KEEP_SIZE) makes the range a hole and drops its reservation; ZERO_RANGE makes it a hole that
/// stays reserved, as ext4's unwritten extents; COLLAPSE_RANGE and INSERT_RANGE move the rest
/// of the file (and its reserved ranges) without copying data.
pub fn fallocate(fs: &Fs, ino: u64, mode: i32, offset: i64, len: i64) -> Result<(), Errno> {
    if offset < 0 || len <= 0 {
        return Err(Errno::EINVAL);
    }
    let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
    // The kernel's order (vfs_fallocate): the mode's flags, then the largest file size.
    match mode & !libc::FALLOC_FL_KEEP_SIZE {
        0 | libc::FALLOC_FL_ZERO_RANGE => {}
        libc::FALLOC_FL_PUNCH_HOLE if keep_size => {}
        libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE if !keep_size => {}
        // PUNCH_HOLE needs KEEP_SIZE; COLLAPSE_RANGE and INSERT_RANGE change the size, so no
        // other flag goes with them; any other mode is one noseFS does not have.
        _ => return Err(Errno::EOPNOTSUPP),
    }
    let (offset, len) = (offset as u64, len as u64);
    let end = offset
        .checked_add(len)
        .filter(|&end| end <= MAX_FILE_BYTES)
        .ok_or(Errno::EFBIG)?;
    let size = core(fs.getattr(ino))?.size;
    match mode & !libc::FALLOC_FL_KEEP_SIZE {
        // Preallocation: the blocks the range's first writes will take are promised to the
        // file (`Fs::reserve_space`), so those writes cannot fail with ENOSPC.
        0 => {
            core(fs.reserve_space(ino, offset, len))?;
            if end > size && !keep_size {
                core(fs.truncate(ino, end))?;
            }
            Ok(())
        }
        // A hole: cheap on byte-granular extents (the pieces in the range are cut, not copied).
        libc::FALLOC_FL_PUNCH_HOLE => core(fs.punch_hole(ino, offset, len)),
        libc::FALLOC_FL_ZERO_RANGE => {
            core(fs.punch_hole(ino, offset, len))?;
            core(fs.reserve_space(ino, offset, len))?;
            if end > size && !keep_size {
                core(fs.truncate(ino, end))?;
            }
            Ok(())
        }
        // The pieces after the range change their offsets only: no data moves.
        libc::FALLOC_FL_COLLAPSE_RANGE => core(fs.collapse_range(ino, offset, len)),
        libc::FALLOC_FL_INSERT_RANGE => core(fs.insert_range(ino, offset, len)),
        _ => unreachable!("modes refused above"),
    }
}
