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

mod data;
mod locks;
mod names;
mod open;

pub use data::*;
pub use locks::*;
pub use names::*;
pub use open::*;

fn file_of(fd: i32) -> Result<Arc<OpenFile>, Errno> {
    fdtable::get(fd).ok_or(Errno::EBADF)
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

/// `None` for ENOENT: the open directory was removed.
fn removed<T>(r: Result<T, Errno>) -> Result<Option<T>, Errno> {
    match r {
        Err(e) if e == Errno::ENOENT => Ok(None),
        r => r.map(Some),
    }
}
