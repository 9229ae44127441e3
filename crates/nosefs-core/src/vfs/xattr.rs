//! Extended-attribute calls (getxattr, listxattr, setxattr, removexattr and their `l` and `f`
//! forms) with the checks the kernel makes before it calls a file system (`xattr_permission`,
//! the capability checks of `trusted.` and `security.`, and ownership for ACLs).

use super::core;
use crate::format::pinode;
use crate::fs::Fs;
use crate::namespace::perm::{Cred, MAY_READ, MAY_WRITE};
use crate::namespace::{acl, Attr, XattrMode};
use crate::Errno;

/// One extended-attribute call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrCall<'a> {
    /// getxattr(name): the value.
    Get(&'a [u8]),
    /// listxattr: the names, each followed by a NUL.
    List,
    /// setxattr(name, value, flags): nothing.
    Set(&'a [u8], &'a [u8], i32),
    /// removexattr(name): nothing.
    Remove(&'a [u8]),
}

/// Runs `call` on the inode `attr` describes, as `cred`, with the kernel's checks.
pub fn xattr(fs: &Fs, cred: &Cred, attr: &Attr, call: XattrCall<'_>) -> Result<Vec<u8>, Errno> {
    match call {
        XattrCall::Get(name) => {
            permitted(fs, cred, attr, name, false)?;
            core(fs.getxattr(attr.ino, name))
        }
        XattrCall::List => {
            let all = core(fs.listxattr(attr.ino))?;
            if cred.is_root() {
                return Ok(all);
            }
            // `trusted.` names are listed only to CAP_SYS_ADMIN, as ext4 and tmpfs do.
            let mut out = Vec::with_capacity(all.len());
            for name in all.split_inclusive(|&b| b == 0) {
                if !name.starts_with(b"trusted.") {
                    out.extend_from_slice(name);
                }
            }
            Ok(out)
        }
        XattrCall::Set(name, value, flags) => {
            let mode = core(XattrMode::from_flags(flags))?;
            permitted(fs, cred, attr, name, true)?;
            acl_drops_setgid(fs, cred, attr.ino, name)?;
            core(fs.setxattr(attr.ino, name, value, mode)).map(|()| Vec::new())
        }
        XattrCall::Remove(name) => {
            permitted(fs, cred, attr, name, true)?;
            core(fs.removexattr(attr.ino, name)).map(|()| Vec::new())
        }
    }
}

/// Before an access ACL is set by `cred` on inode `ino`: set-group-id goes unless the caller is
/// in the file's group or root (Linux's `posix_acl_update_mode`). Returns whether it went.
pub fn acl_drops_setgid(fs: &Fs, cred: &Cred, ino: u64, name: &[u8]) -> Result<bool, Errno> {
    if name != crate::namespace::acl::ACCESS || cred.is_root() {
        return Ok(false);
    }
    let attr = core(fs.getattr(ino))?;
    if attr.mode & crate::format::pinode::S_ISGID == 0 || cred.in_group(attr.gid) {
        return Ok(false);
    }
    let change = crate::namespace::SetAttr {
        mode: Some(attr.mode & 0o7777 & !crate::format::pinode::S_ISGID),
        ..Default::default()
    };
    core(fs.setattr(ino, &change))?;
    Ok(true)
}

/// `xattr_permission` and the namespace's own rules: `trusted.` needs root (a read without it
/// finds nothing); `security.` needs root to change; a POSIX ACL needs the owner (or root) to
/// change; `user.` lives only on regular files and directories (not on a sticky directory
/// another user owns, for a change) and needs read or write permission.
fn permitted(fs: &Fs, cred: &Cred, attr: &Attr, name: &[u8], write: bool) -> Result<(), Errno> {
    if write && fs.is_read_only() {
        return Err(Errno::EROFS);
    }
    let denied = if write {
        Errno::EPERM
    } else {
        Errno(libc::ENODATA)
    };
    if name.starts_with(b"trusted.") {
        return if cred.is_root() { Ok(()) } else { Err(denied) };
    }
    if name.starts_with(b"security.") {
        return if !write || cred.is_root() {
            Ok(())
        } else {
            Err(Errno::EPERM)
        };
    }
    if name == acl::ACCESS || name == acl::DEFAULT {
        return if !write || cred.owns(attr) {
            Ok(())
        } else {
            Err(Errno::EPERM)
        };
    }
    if name.starts_with(b"user.") {
        let ft = attr.mode & pinode::S_IFMT;
        if ft != pinode::S_IFREG && ft != pinode::S_IFDIR {
            return Err(denied);
        }
        let sticky_dir = ft == pinode::S_IFDIR && attr.mode & pinode::S_ISVTX != 0;
        if write && sticky_dir && !cred.owns(attr) {
            return Err(Errno::EPERM);
        }
        let mask = if write { MAY_WRITE } else { MAY_READ };
        return core(fs.check_permission(attr, cred, mask));
    }
    Ok(()) // the core answers an unknown namespace
}
