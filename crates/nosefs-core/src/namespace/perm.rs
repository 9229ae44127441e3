//! Permission checks, as the kernel's VFS makes them (`generic_permission`, `may_delete`,
//! `setattr_prepare`), for the frontends the kernel does not stand in front of: the LD_PRELOAD
//! shim and the daemon's shim clients. The FUSE mount leaves them to the kernel
//! (`default_permissions`). They are pure functions of the attributes and the caller's
//! credentials, so each frontend checks exactly what the kernel would, in one place.

use smallvec::SmallVec;

use super::acl::Acl;
use super::{Attr, SetAttr};
use crate::error::{Errno, Result};
use crate::format::pinode;

/// Read permission.
pub const MAY_READ: u32 = 4;
/// Write permission.
pub const MAY_WRITE: u32 = 2;
/// Execute permission (search, for a directory).
pub const MAY_EXEC: u32 = 1;

/// The credentials an operation runs with: effective (file-system) user and group, and the
/// supplementary groups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cred {
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: SmallVec<[u32; 8]>,
}

impl Cred {
    /// The superuser (every check passes but execute on a file with no execute bit).
    pub fn root() -> Cred {
        Cred::default()
    }

    /// Whether this is the superuser (CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN are taken to come
    /// with uid 0, as they do outside user namespaces).
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether the caller is in group `gid`.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// Whether the caller owns an inode (or may act as its owner).
    pub fn owns(&self, attr: &Attr) -> bool {
        self.is_root() || self.uid == attr.uid
    }
}

/// Checks `mask` (a combination of [`MAY_READ`], [`MAY_WRITE`], [`MAY_EXEC`]) against the mode
/// bits of `attr`: the owner class if the caller owns it, else the group class if it is in the
/// group, else the other class. Root may do anything except execute a file with no execute bit.
pub fn check(attr: &Attr, cred: &Cred, mask: u32) -> Result<()> {
    check_acl(attr, None, cred, mask)
}

/// [`check`], with the inode's access ACL when it has one (`attr.acl`): then a caller who is
/// not the owner is checked against the ACL's entries (`posix_acl_permission`), not the mode's
/// group and other bits. The owner's entry is the mode's owner bits, and root is decided by the
/// mode, as the kernel does.
pub fn check_acl(attr: &Attr, acl: Option<&Acl>, cred: &Cred, mask: u32) -> Result<()> {
    if let (Some(acl), true, false) = (acl, attr.acl, cred.is_root() || cred.uid == attr.uid) {
        return if acl.permits(attr, cred, mask) {
            Ok(())
        } else {
            Err(Errno::EACCES.into())
        };
    }
    if cred.is_root() {
        let is_dir = attr.mode & pinode::S_IFMT == pinode::S_IFDIR;
        if mask & MAY_EXEC == 0 || is_dir || attr.mode & 0o111 != 0 {
            return Ok(());
        }
        return Err(Errno::EACCES.into());
    }
    let bits = if cred.uid == attr.uid {
        attr.mode >> 6
    } else if cred.in_group(attr.gid) {
        attr.mode >> 3
    } else {
        attr.mode
    } & 7;
    if bits & mask == mask {
        Ok(())
    } else {
        Err(Errno::EACCES.into())
    }
}

/// Whether the caller may remove or rename `victim` out of directory `dir`: write and search
/// permission on the directory, and with the sticky bit set, ownership of the directory or of
/// the victim.
pub fn check_delete(dir: &Attr, victim: &Attr, cred: &Cred) -> Result<()> {
    check_delete_acl(dir, None, victim, cred)
}

/// [`check_delete`] with the directory's access ACL (see [`check_acl`]).
pub fn check_delete_acl(
    dir: &Attr,
    dir_acl: Option<&Acl>,
    victim: &Attr,
    cred: &Cred,
) -> Result<()> {
    check_acl(dir, dir_acl, cred, MAY_WRITE | MAY_EXEC)?;
    if dir.mode & pinode::S_ISVTX != 0 && !cred.owns(dir) && !cred.owns(victim) {
        return Err(Errno::EPERM.into());
    }
    Ok(())
}

/// Checks an attribute change as `setattr_prepare` does, and returns it adjusted as the kernel
/// adjusts it: a chmod by a caller outside the file's group clears the set-group-id bit; a
/// chown by a non-root caller clears set-user-id and set-group-id.
/// `times_now` says the new times are "now" (utimensat with UTIME_NOW or a null argument), which
/// write permission allows; explicit times need ownership.
pub fn check_setattr(
    attr: &Attr,
    change: &SetAttr,
    cred: &Cred,
    times_now: bool,
) -> Result<SetAttr> {
    check_setattr_acl(attr, None, change, cred, times_now)
}

/// [`check_setattr`] with the inode's access ACL (see [`check_acl`]).
pub fn check_setattr_acl(
    attr: &Attr,
    acl: Option<&Acl>,
    change: &SetAttr,
    cred: &Cred,
    times_now: bool,
) -> Result<SetAttr> {
    let check = |attr: &Attr, cred: &Cred, mask| check_acl(attr, acl, cred, mask);
    let mut change = *change;
    if change.size.is_some() {
        check(attr, cred, MAY_WRITE)?;
    }
    if let Some(mode) = change.mode {
        if !cred.owns(attr) {
            return Err(Errno::EPERM.into());
        }
        let group = change.gid.unwrap_or(attr.gid);
        if !cred.is_root() && !cred.in_group(group) {
            change.mode = Some(mode & !pinode::S_ISGID);
        }
    }
    // Linux's chown_ok and chgrp_ok: naming an owner or group at all (even the present one) is
    // the owner's to do, or root's; the owner may give the file only a group it is in (or keep
    // the file's).
    let owner = cred.uid == attr.uid;
    if change.uid.is_some_and(|uid| !(owner && uid == attr.uid)) && !cred.is_root() {
        return Err(Errno::EPERM.into());
    }
    if change
        .gid
        .is_some_and(|gid| !(owner && (gid == attr.gid || cred.in_group(gid))))
        && !cred.is_root()
    {
        return Err(Errno::EPERM.into());
    }
    if (change.uid.is_some() || change.gid.is_some())
        && attr.mode & pinode::S_IFMT != pinode::S_IFDIR
    {
        // chown clears set-user-id, and set-group-id when group-execute is set (a mandatory
        // locking mark otherwise), even for root, as Linux does for regular files.
        let mut mode = change.mode.unwrap_or(attr.mode & 0o7777);
        if !cred.is_root() || attr.mode & 0o111 != 0 {
            mode &= !pinode::S_ISUID;
            if mode & 0o010 != 0 {
                mode &= !pinode::S_ISGID;
            }
        }
        if mode != attr.mode & 0o7777 || change.mode.is_some() {
            change.mode = Some(mode);
        }
    }
    if change.atime_ns.is_some() || change.mtime_ns.is_some() {
        if times_now {
            if !cred.owns(attr) {
                check(attr, cred, MAY_WRITE)?;
            }
        } else if !cred.owns(attr) {
            return Err(Errno::EPERM.into());
        }
    }
    Ok(change)
}

/// The mode a change of a regular file's data by `cred` (write, truncate, fallocate, a copy into
/// it) leaves: anyone but root clears set-user-id, and set-group-id when group-execute is set or
/// the caller is not in the file's group (Linux's `file_remove_privs`, `setattr_should_drop_sgid`).
/// `None` when unchanged.
pub fn mode_after_write(attr: &Attr, cred: &Cred) -> Option<u32> {
    let regular = attr.mode & pinode::S_IFMT == pinode::S_IFREG;
    if cred.is_root() || !regular || attr.mode & (pinode::S_ISUID | pinode::S_ISGID) == 0 {
        return None;
    }
    let mut mode = attr.mode & 0o7777 & !pinode::S_ISUID;
    if mode & 0o010 != 0 || !cred.in_group(attr.gid) {
        mode &= !pinode::S_ISGID;
    }
    (mode != attr.mode & 0o7777).then_some(mode)
}

/// Owner and permission bits (without the file type) of a new inode in directory `dir`: the caller's uid; the directory's
/// group and, for a new directory, the set-group-id bit when the parent has it set (BSD group
/// semantics); otherwise the caller's gid. A non-root caller outside the resulting group loses a
/// requested set-group-id bit on a regular file.
pub fn new_inode_owner(dir: &Attr, cred: &Cred, mode: u32) -> (super::Owner, u32) {
    let setgid_dir = dir.mode & pinode::S_ISGID != 0;
    let gid = if setgid_dir { dir.gid } else { cred.gid };
    let is_dir = mode & pinode::S_IFMT == pinode::S_IFDIR;
    let mut mode = mode & 0o7777;
    if setgid_dir && is_dir {
        mode |= pinode::S_ISGID;
    } else if !is_dir && mode & pinode::S_ISGID != 0 && !cred.is_root() && !cred.in_group(gid) {
        mode &= !pinode::S_ISGID;
    }
    (
        super::Owner {
            uid: cred.uid,
            gid,
            umask: 0,
        },
        mode,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(mode: u32, uid: u32, gid: u32) -> Attr {
        Attr {
            mode,
            uid,
            gid,
            ..Attr::default()
        }
    }

    fn user(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        Cred {
            uid,
            gid,
            groups: groups.iter().copied().collect(),
        }
    }

    #[test]
    fn classes_are_exclusive_owner_then_group_then_other() {
        let file = attr(pinode::S_IFREG | 0o604, 10, 20);
        // The owner class denies read to the owner even though "other" grants it.
        assert!(check(&file, &user(10, 99, &[]), MAY_READ).is_ok());
        assert!(check(&file, &user(10, 99, &[]), MAY_WRITE).is_ok());
        assert!(check(&file, &user(11, 20, &[]), MAY_READ).is_err());
        assert!(check(&file, &user(11, 5, &[20]), MAY_READ).is_err());
        assert!(check(&file, &user(11, 5, &[]), MAY_READ).is_ok());
        assert!(check(&file, &user(11, 5, &[]), MAY_WRITE).is_err());
    }

    #[test]
    fn root_passes_all_but_exec_without_an_exec_bit() {
        let file = attr(pinode::S_IFREG, 10, 20);
        assert!(check(&file, &Cred::root(), MAY_READ | MAY_WRITE).is_ok());
        assert_eq!(
            check(&file, &Cred::root(), MAY_EXEC).unwrap_err().errno(),
            Errno::EACCES
        );
        let dir = attr(pinode::S_IFDIR, 10, 20);
        assert!(check(&dir, &Cred::root(), MAY_EXEC).is_ok());
    }

    #[test]
    fn sticky_directories_keep_others_files() {
        let tmp = attr(pinode::S_IFDIR | 0o1777, 0, 0);
        let theirs = attr(pinode::S_IFREG | 0o644, 10, 10);
        assert_eq!(
            check_delete(&tmp, &theirs, &user(11, 11, &[]))
                .unwrap_err()
                .errno(),
            Errno::EPERM
        );
        assert!(check_delete(&tmp, &theirs, &user(10, 10, &[])).is_ok());
        assert!(check_delete(&tmp, &theirs, &Cred::root()).is_ok());
    }

    #[test]
    fn setattr_rules() {
        let file = attr(pinode::S_IFREG | 0o6755, 10, 20);
        let owner = user(10, 30, &[]);
        let chmod = SetAttr {
            mode: Some(0o2755),
            ..SetAttr::default()
        };
        // The owner outside the group loses the set-group-id bit it asks for.
        assert_eq!(
            check_setattr(&file, &chmod, &owner, false).unwrap().mode,
            Some(0o755)
        );
        assert!(check_setattr(&file, &chmod, &user(11, 20, &[]), false).is_err());
        let chown = SetAttr {
            uid: Some(11),
            ..SetAttr::default()
        };
        assert!(check_setattr(&file, &chown, &owner, false).is_err());
        let chgrp = SetAttr {
            gid: Some(40),
            ..SetAttr::default()
        };
        assert!(check_setattr(&file, &chgrp, &owner, false).is_err());
        let changed = check_setattr(&file, &chgrp, &user(10, 40, &[]), false).unwrap();
        assert_eq!(changed.mode, Some(0o755), "chown clears set-id bits");
        // Naming the present owner and group is still the owner's (or root's) to do.
        let same = SetAttr {
            uid: Some(10),
            gid: Some(20),
            ..SetAttr::default()
        };
        assert!(check_setattr(&file, &same, &user(11, 20, &[]), false).is_err());
        assert!(check_setattr(&file, &same, &user(10, 30, &[]), false).is_ok());
        assert!(check_setattr(&file, &same, &Cred::root(), false).is_ok());
        let touch = SetAttr {
            mtime_ns: Some(5),
            ..SetAttr::default()
        };
        let writable = attr(pinode::S_IFREG | 0o666, 10, 20);
        assert!(check_setattr(&writable, &touch, &user(11, 11, &[]), true).is_ok());
        assert!(check_setattr(&writable, &touch, &user(11, 11, &[]), false).is_err());
    }

    #[test]
    fn new_inodes_in_setgid_directories_take_its_group() {
        let dir = attr(pinode::S_IFDIR | 0o2775, 0, 12345);
        let (owner, mode) = new_inode_owner(&dir, &Cred::root(), pinode::S_IFDIR | 0o755);
        assert_eq!((owner.uid, owner.gid, mode), (0, 12345, 0o2755));
        let (owner, mode) = new_inode_owner(&dir, &user(5, 6, &[]), pinode::S_IFREG | 0o644);
        assert_eq!((owner.uid, owner.gid, mode), (5, 12345, 0o644));
        let plain = attr(pinode::S_IFDIR | 0o755, 0, 7);
        let (owner, _) = new_inode_owner(&plain, &user(5, 6, &[]), pinode::S_IFREG | 0o644);
        assert_eq!(owner.gid, 6);
    }

    #[test]
    fn writes_by_others_than_root_clear_set_id_bits() {
        let file = attr(pinode::S_IFREG | 0o6775, 10, 20);
        assert_eq!(mode_after_write(&file, &user(10, 20, &[])), Some(0o775));
        assert_eq!(mode_after_write(&file, &Cred::root()), None);
        let plain = attr(pinode::S_IFREG | 0o644, 10, 20);
        assert_eq!(mode_after_write(&plain, &user(10, 20, &[])), None);
        // Set-group-id without group-execute: kept for a member of the group, cleared for
        // anyone else (pjdfstest and xfstests generic/68x ask both).
        let sgid = attr(pinode::S_IFREG | 0o2666, 10, 20);
        assert_eq!(mode_after_write(&sgid, &user(11, 20, &[])), None);
        assert_eq!(
            mode_after_write(&sgid, &user(65534, 65534, &[])),
            Some(0o666)
        );
        let suid = attr(pinode::S_IFREG | 0o4777, 10, 20);
        assert_eq!(
            mode_after_write(&suid, &user(65534, 65534, &[])),
            Some(0o777)
        );
        let dir = attr(pinode::S_IFDIR | 0o2777, 10, 20);
        assert_eq!(mode_after_write(&dir, &user(65534, 65534, &[])), None);
    }
}
