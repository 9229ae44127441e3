//! Between the core's types and FUSE's: errors, times, attributes, owners, credentials, and the
//! replies every request shares.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileType, Generation, INodeNo, ReplyAttr, ReplyEmpty, ReplyEntry, ReplyXattr,
    Request, TimeOrNow,
};
use nosefs_core::format::pinode;
use nosefs_core::namespace::{Attr, Owner};

use crate::TTL;

pub(crate) fn errno(e: nosefs_core::Error) -> Errno {
    Errno::from_i32(e.errno().0)
}

pub(crate) fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

pub(crate) fn time_ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(before) => -(before.duration().as_nanos() as i64),
    }
}

pub(crate) fn kind(mode: u32) -> FileType {
    match mode & pinode::S_IFMT {
        pinode::S_IFDIR => FileType::Directory,
        pinode::S_IFLNK => FileType::Symlink,
        pinode::S_IFCHR => FileType::CharDevice,
        pinode::S_IFBLK => FileType::BlockDevice,
        pinode::S_IFIFO => FileType::NamedPipe,
        pinode::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

/// The kernel's view of an inode's attributes.
pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: time(a.atime_ns),
        mtime: time(a.mtime_ns),
        ctime: time(a.ctime_ns),
        crtime: time(a.ctime_ns),
        kind: kind(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        flags: 0,
        blksize: 4096,
    }
}

pub(crate) fn owner(req: &Request) -> Owner {
    Owner {
        uid: req.uid(),
        gid: req.gid(),
        umask: 0,
    }
}

/// Replies to getxattr or listxattr: the size when asked for it (`size` 0), else the bytes, or
/// ERANGE when they do not fit.
pub(crate) fn reply_xattr(reply: ReplyXattr, size: u32, result: nosefs_core::Result<Vec<u8>>) {
    match result {
        Ok(value) if size == 0 => reply.size(value.len() as u32),
        Ok(value) if value.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
        Ok(value) => reply.data(&value),
        Err(e) => reply.error(errno(e)),
    }
}

pub(crate) fn reply_entry(reply: ReplyEntry, result: nosefs_core::Result<Attr>) {
    match result {
        Ok(a) => reply.entry(&TTL, &file_attr(&a), Generation(0)),
        Err(e) => reply.error(errno(e)),
    }
}

pub(crate) fn reply_attr(reply: ReplyAttr, result: nosefs_core::Result<Attr>) {
    match result {
        Ok(a) => reply.attr(&TTL, &file_attr(&a)),
        Err(e) => reply.error(errno(e)),
    }
}

pub(crate) fn reply_empty(reply: ReplyEmpty, result: nosefs_core::Result<()>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

pub(crate) fn set_time(t: Option<TimeOrNow>) -> Option<i64> {
    t.map(|t| match t {
        TimeOrNow::SpecificTime(t) => time_ns(t),
        TimeOrNow::Now => time_ns(SystemTime::now()),
    })
}

/// The credentials a request was made with: its uid and gid, and the caller's supplementary
/// groups from /proc (its file-system ids there, when the process is still there to ask).
pub(crate) fn request_cred(req: &Request) -> nosefs_core::namespace::perm::Cred {
    let pid = req.pid() as i32;
    nosefs_daemon::server::proc_cred(pid)
        .filter(|c| c.uid == req.uid() && c.gid == req.gid())
        .unwrap_or_else(|| nosefs_core::namespace::perm::Cred {
            uid: req.uid(),
            gid: req.gid(),
            groups: Default::default(),
        })
}
