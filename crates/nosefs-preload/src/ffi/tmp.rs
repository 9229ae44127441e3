//! Temporary files.

use std::ffi::{c_char, c_int};
use std::ptr::null_mut;

use nosefs_core::Errno;

use super::pointers::bytes;
use super::routing::{routed, Routed};
use super::{serve, set_errno, value};
use crate::ops;
use crate::route::{self, Route};

unsafe fn make_temp(
    template: *mut c_char,
    suffix: c_int,
    flags: c_int,
    dir: bool,
) -> Result<c_int, Errno> {
    let t = unsafe { bytes(template) }.ok_or(Errno(libc::EFAULT))?;
    let len = t.len();
    let suffix = usize::try_from(suffix).map_err(|_| Errno::EINVAL)?;
    if len < 6 + suffix || &t[len - 6 - suffix..len - suffix] != b"XXXXXX" {
        return Err(Errno::EINVAL);
    }
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let name = unsafe { std::slice::from_raw_parts_mut(template.cast::<u8>(), len) };
    let mut seed = nosefs_core::mkfs::now_ns() as u64 ^ (std::process::id() as u64).rotate_left(32);
    for _ in 0..1000 {
        for b in &mut name[len - 6 - suffix..len - suffix] {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *b = CHARS[(seed % CHARS.len() as u64) as usize];
        }
        let found = match route::route(libc::AT_FDCWD, name, false)? {
            Route::Ours(f) => f,
            Route::Kernel(_) => return Err(Errno(libc::EXDEV)),
        };
        let r = if dir {
            ops::mkdir(&found, 0o700).map(|()| 0)
        } else {
            ops::open(
                &found,
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | (flags & !libc::O_ACCMODE),
                0o600,
            )
        };
        match r {
            Err(e) if e == Errno::EEXIST => continue,
            other => return other,
        }
    }
    Err(Errno::EEXIST)
}

/// Whether a template names a noseFS path (decided like any path).
unsafe fn template_is_ours(template: *const c_char) -> bool {
    matches!(
        unsafe { routed(libc::AT_FDCWD, template, false) },
        Routed::Ours(_)
    )
}

macro_rules! mkstemp_hook {
    ($name:ident ( $($arg:ident : $ty:ty),* ) => $suffix:expr, $flags:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(template: *mut c_char $(, $arg: $ty)*) -> c_int {
            if unsafe { template_is_ours(template) } {
                return value(serve(|| unsafe { make_temp(template, $suffix, $flags, false) })) as c_int;
            }
            unsafe { real!($name: fn(*mut c_char $(, $ty)*) -> c_int)(template $(, $arg)*) }
        }
    };
}

mkstemp_hook!(mkstemp() => 0, 0);
mkstemp_hook!(mkstemp64() => 0, 0);
mkstemp_hook!(mkostemp(flags: c_int) => 0, flags);
mkstemp_hook!(mkostemp64(flags: c_int) => 0, flags);
mkstemp_hook!(mkstemps(suffix: c_int) => suffix, 0);
mkstemp_hook!(mkstemps64(suffix: c_int) => suffix, 0);
mkstemp_hook!(mkostemps(suffix: c_int, flags: c_int) => suffix, flags);
mkstemp_hook!(mkostemps64(suffix: c_int, flags: c_int) => suffix, flags);

#[no_mangle]
pub unsafe extern "C" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    if unsafe { template_is_ours(template) } {
        return match serve(|| unsafe { make_temp(template, 0, 0, true) }) {
            Ok(_) => template,
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        };
    }
    unsafe { real!(mkdtemp: fn(*mut c_char) -> *mut c_char)(template) }
}
