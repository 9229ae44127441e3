//! The C boundary: every libc entry point the shim exports, the real functions behind them, and
//! the conversions between C arguments and the safe operations in [`crate::ops`]. This is the
//! only module of the crate with `unsafe` code.
//!
//! Safety contract of every exported function: the caller passes what the libc function of the
//! same name requires (valid NUL-terminated paths, buffers of the stated lengths, valid out
//! pointers); a null path is answered with EFAULT rather than dereferenced.
//!
//! Each hook decides first, with no lock, whether the call is noseFS's (a descriptor in the
//! table, a path under the prefix); if not, it calls the real function (found once with
//! `dlsym(RTLD_NEXT)`). noseFS work runs with a per-thread guard set, so a libc call made while
//! serving one (a panic message, say) goes straight to the real function; a panic never unwinds
//! into C: the call fails with EIO and one line on stderr.
//!
//! Every block here relies on that one contract (the hooks' bodies forward the caller's
//! pointers to libc or read them as the C signature says); blocks that rely on more carry their
//! own `// SAFETY:` comment.
#![allow(unsafe_code)]
#![allow(
    clippy::missing_safety_doc,
    clippy::undocumented_unsafe_blocks,
    unused_unsafe
)]

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use nosefs_core::Errno;

use crate::state;
pub(crate) use crate::sys::{in_shim, Guard};

// ---------------------------------------------------------------------------------------------
// Real functions, the guard, errno.

fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = e.0 };
}

/// Runs noseFS work under the guard, turning a panic into EIO.
fn serve<T>(f: impl FnOnce() -> Result<T, Errno>) -> Result<T, Errno> {
    let _guard = Guard::enter();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            state::say("internal error (a panic) while serving a call; it fails with EIO");
            Err(Errno::EIO)
        }
    }
}

fn int(r: Result<(), Errno>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn value<T: TryInto<i64>>(r: Result<T, Errno>) -> i64 {
    match r {
        Ok(v) => v.try_into().unwrap_or(i64::MAX),
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn fail(e: Errno) -> c_int {
    set_errno(e);
    -1
}

/// A call on a path: served by noseFS (`$ours`, given the resolution) or by the kernel
/// (`$kernel`, given the path to hand it).
macro_rules! path_op {
    ($dirfd:expr, $path:expr, $follow:expr, $ours:expr, $kernel:expr) => {
        match unsafe { $crate::ffi::routing::routed($dirfd, $path, $follow) } {
            $crate::ffi::routing::Routed::Kernel(k) => {
                let p = $crate::ffi::routing::Routed::kernel_path(&k, $path);
                #[allow(clippy::redundant_closure_call)]
                unsafe {
                    $kernel(p)
                }
            }
            $crate::ffi::routing::Routed::Ours(f) => {
                $crate::ffi::int($crate::ffi::serve(|| $ours(&f)))
            }
            $crate::ffi::routing::Routed::Err(e) => $crate::ffi::fail(e),
        }
    };
}

// The hooks, by call family. Declared after `real!`, which they all use.
mod aio;
mod attr;
mod copy;
mod cwd;
mod dirs;
mod fds;
mod ioctl;
mod locks;
mod mmap;
mod names;
mod open;
mod pointers;
mod posix_aio;
mod process;
mod raw;
mod routing;
mod rw;
mod setattr;
mod sockets;
mod spawn;
mod startup;
mod stdio;
mod stored;
mod tmp;
mod uring;
mod walk;
mod xattr;
