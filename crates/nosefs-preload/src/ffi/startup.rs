//! Start-up, exit, fork.

use std::ffi::c_int;

use super::{in_shim, Guard};
use crate::maps;
use crate::state;

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

extern "C" fn init() {
    let _guard = Guard::enter();
    crate::fdtable::on_std_stream_ours(super::stdio::std_stream_became_ours);
    if state::config().is_none() {
        return;
    }
    state::note_owner();
    // SAFETY: registering plain extern "C" functions as fork handlers.
    unsafe { libc::pthread_atfork(Some(fork_prepare), None, Some(fork_child)) };
    crate::exec::adopt();
    // Embedded mode: the image's descriptor that outlives a change of credentials, taken now,
    // before the program can drop its privileges or close descriptors it did not open.
    state::keep_image();
}

extern "C" fn fork_prepare() {
    let _guard = Guard::enter();
    crate::offsets::share_all();
    state::before_fork();
}

extern "C" fn fork_child() {
    maps::forget_in_child();
    crate::borrowed::forget_in_child();
    state::in_forked_child();
}

/// `_exit` and `_Exit` skip atexit handlers, and shells (dash) end every command that way: the
/// image is committed and released first, or writes the program made since its last fsync would
/// be lost as in a crash (the kernel keeps them in its page cache). stdio is not flushed, as
/// `_exit` promises.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    if !in_shim() {
        let _guard = Guard::enter();
        state::at_exit();
    }
    unsafe { real!(_exit: fn(c_int) -> !)(status) }
}

#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    unsafe { _exit(status) }
}

// ---------------------------------------------------------------------------------------------
// The variadic entry points: naked jumps to their C implementations in variadic.c, which read
// the variadic arguments where the caller put them (a jump leaves registers and stack as they
// were) and call the fixed-arity hooks below.

macro_rules! variadic {
    ($($name:ident => $c:ident),* $(,)?) => {
        extern "C" {
            $(fn $c();)*
        }
        $(
            #[no_mangle]
            #[unsafe(naked)]
            pub unsafe extern "C" fn $name() {
                #[cfg(target_arch = "x86_64")]
                std::arch::naked_asm!("jmp {}", sym $c);
                #[cfg(target_arch = "aarch64")]
                std::arch::naked_asm!("b {}", sym $c);
            }
        )*
    };
}

variadic! {
    // Not variadic: glibc's dlopen finds its calling object (whose DT_RPATH, DT_RUNPATH and
    // namespace a name without a slash is searched by) from its return address, which the
    // jump here and the C side's tail call into the real dlopen leave as the program's.
    dlopen => nosefs_c_dlopen,
    open => nosefs_c_open,
    open64 => nosefs_c_open64,
    openat => nosefs_c_openat,
    openat64 => nosefs_c_openat64,
    fcntl => nosefs_c_fcntl,
    fcntl64 => nosefs_c_fcntl64,
    ioctl => nosefs_c_ioctl,
    syscall => nosefs_c_syscall,
    execl => nosefs_c_execl,
    execlp => nosefs_c_execlp,
    execle => nosefs_c_execle,
}
