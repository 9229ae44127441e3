//! Where a C path argument leads: to the kernel, or to noseFS with its resolution.

use std::ffi::{c_char, c_int, CString};

use nosefs_core::Errno;

use super::pointers::bytes;
use super::{fail, in_shim, serve};
use crate::fdtable::{self, Kind};
use crate::route::{self, Found, Route};
use crate::state;

/// Where a C path argument leads.
pub(super) enum Routed {
    Kernel(Option<CString>),
    Ours(Found),
    Err(Errno),
}

impl Routed {
    /// The path to hand the kernel: the caller's, or the one resolution produced.
    pub(super) fn kernel_path(k: &Option<CString>, original: *const c_char) -> *const c_char {
        k.as_ref().map_or(original, |c| c.as_ptr())
    }
}

pub(super) unsafe fn routed(dirfd: c_int, path: *const c_char, follow_last: bool) -> Routed {
    if in_shim() || state::config().is_none() {
        return Routed::Kernel(None);
    }
    let Some(p) = (unsafe { bytes(path) }) else {
        return Routed::Kernel(None); // the kernel answers EFAULT
    };
    // Fast exit before any lock: an absolute path outside the prefix without "..".
    if p.first() == Some(&b'/') && !route::maybe_ours(p) && dirfd == libc::AT_FDCWD {
        return Routed::Kernel(None);
    }
    if p.first() != Some(&b'/') && dirfd != libc::AT_FDCWD && !fdtable::is_ours(dirfd) {
        return Routed::Kernel(None);
    }
    match serve(|| route::route(dirfd, p, follow_last)) {
        Ok(Route::Kernel(k)) => Routed::Kernel(k),
        Ok(Route::Ours(f)) => Routed::Ours(f),
        Err(e) => Routed::Err(e),
    }
}

/// How far routing gets before a walk (see [`route::route_start`]).
pub(super) enum Started {
    Kernel(Option<CString>),
    In(std::sync::Arc<fdtable::OpenFile>, Vec<u8>),
    Walk(Vec<u8>),
    Err(Errno),
}

/// A plain name (no `/`, not `.` or `..`) in an open noseFS directory: the `*at` fast path that
/// a daemon can serve in one round trip (`None`: route the path as usual).
pub(super) unsafe fn name_in<'a>(
    dirfd: c_int,
    path: *const c_char,
) -> Option<(std::sync::Arc<fdtable::OpenFile>, &'a [u8])> {
    if in_shim() || dirfd < 0 || !fdtable::is_ours(dirfd) {
        return None;
    }
    let name = unsafe { bytes(path) }?;
    if name.is_empty() || !route::is_plain_name(name) {
        return None;
    }
    let dir = fdtable::get(dirfd)?;
    matches!(dir.kind, Kind::Dir | Kind::Path).then_some((dir, name))
}

/// The descriptor an open returned, or the kernel's open of the path a walk left noseFS by.
pub(super) fn opened_or_kernel(
    opened: Result<Result<c_int, Vec<u8>>, Errno>,
    kernel: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    match opened {
        Ok(Ok(fd)) => fd,
        Ok(Err(outside)) => match CString::new(outside) {
            Ok(p) => kernel(p.as_ptr()),
            Err(_) => fail(Errno::EINVAL),
        },
        Err(e) => fail(e),
    }
}

/// [`routed`] up to the walk, for calls that walk and act in one request.
pub(super) unsafe fn routed_start(dirfd: c_int, path: *const c_char) -> Started {
    if in_shim() || state::config().is_none() {
        return Started::Kernel(None);
    }
    let Some(p) = (unsafe { bytes(path) }) else {
        return Started::Kernel(None);
    };
    if p.first() == Some(&b'/') && !route::maybe_ours(p) && dirfd == libc::AT_FDCWD {
        return Started::Kernel(None);
    }
    if p.first() != Some(&b'/') && dirfd != libc::AT_FDCWD && !fdtable::is_ours(dirfd) {
        return Started::Kernel(None);
    }
    match serve(|| route::route_start(dirfd, p)) {
        Ok(route::Start::Kernel(k)) => Started::Kernel(k),
        Ok(route::Start::In(dir, name)) => Started::In(dir, name),
        Ok(route::Start::Walk(w)) => Started::Walk(w),
        Err(e) => Started::Err(e),
    }
}
