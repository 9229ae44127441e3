//! Unix-domain sockets on noseFS paths: the path holds an S_IFSOCK inode and the socket itself is
//! bound in the kernel's abstract namespace under a name derived from the image and the inode
//! (`ops::socket_address`), where connect() by path finds it.

use std::ffi::{c_char, c_int, c_void, CString};

use libc::{size_t, ssize_t};
use nosefs_core::Errno;

use super::pointers::wild;
use super::routing::{routed, Routed};
use super::{fail, in_shim, serve};
use crate::ops;
use crate::route::{self, Route};

/// The noseFS path a Unix-domain socket address names, routed; `None` if it is not noseFS's.
unsafe fn unix_path(addr: *const libc::sockaddr, len: libc::socklen_t) -> Option<Routed> {
    let len = len as usize;
    if wild(addr.cast()) || len <= 2 || len > std::mem::size_of::<libc::sockaddr_un>() {
        return None;
    }
    // SAFETY: the caller passes `len` readable bytes at `addr` (checked against sockaddr_un).
    let raw = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len) };
    if u16::from_ne_bytes([raw[0], raw[1]]) != libc::AF_UNIX as u16 || raw[2] == 0 {
        return None; // not AF_UNIX, or an abstract address
    }
    let path = &raw[2..];
    let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
    let c = CString::new(path).ok()?;
    match unsafe { routed(libc::AT_FDCWD, c.as_ptr(), true) } {
        Routed::Kernel(_) => None,
        other => Some(other),
    }
}

/// The path of a pathname sockaddr_un as the program wrote it (`unix_path` checked it).
unsafe fn sun_path(addr: *const libc::sockaddr, len: libc::socklen_t) -> Vec<u8> {
    // SAFETY: `unix_path` accepted `len` readable bytes at `addr`.
    let raw = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len as usize) };
    let path = &raw[2..];
    path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())].to_vec()
}

/// An abstract-namespace sockaddr_un for `name`, and its length.
fn abstract_address(name: &[u8]) -> Result<(libc::sockaddr_un, libc::socklen_t), Errno> {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if name.len() + 1 > sun.sun_path.len() {
        return Err(Errno(libc::ENAMETOOLONG));
    }
    sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &b) in sun.sun_path[1..].iter_mut().zip(name) {
        *dst = b as c_char;
    }
    Ok((sun, (2 + 1 + name.len()) as libc::socklen_t))
}

type SockCall = unsafe extern "C" fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int;

unsafe fn to_abstract(fd: c_int, name: &[u8], call: SockCall) -> c_int {
    match abstract_address(name) {
        Ok((sun, len)) => unsafe { call(fd, (&raw const sun).cast(), len) },
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn bind(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    let real = real!(bind: fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int);
    match unsafe { unix_path(addr, len) } {
        None => unsafe { real(fd, addr, len) },
        Some(Routed::Ours(f)) => match serve(|| ops::bind_socket(&f)) {
            Ok(name) => {
                remember_socket_path(&name, &unsafe { sun_path(addr, len) });
                let rc = unsafe { to_abstract(fd, &name, real) };
                if rc < 0 {
                    let errno = Errno(
                        std::io::Error::last_os_error()
                            .raw_os_error()
                            .unwrap_or(libc::EIO),
                    );
                    // The kernel refused the address: the inode made for it goes again.
                    let _ = serve(|| match route::route(libc::AT_FDCWD, &f.path, false)? {
                        Route::Ours(again) => ops::unlink(&again),
                        Route::Kernel(_) => Ok(()),
                    });
                    return fail(errno);
                }
                rc
            }
            Err(e) => fail(e),
        },
        Some(Routed::Err(e)) => fail(e),
        Some(Routed::Kernel(_)) => unreachable!("unix_path returns None for kernel paths"),
    }
}

#[no_mangle]
pub unsafe extern "C" fn connect(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    let real = real!(connect: fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int);
    match unsafe { unix_path(addr, len) } {
        None => unsafe { real(fd, addr, len) },
        Some(Routed::Ours(f)) => match serve(|| ops::connect_socket(&f)) {
            Ok(name) => {
                remember_socket_path(&name, &unsafe { sun_path(addr, len) });
                unsafe { to_abstract(fd, &name, real) }
            }
            Err(e) => fail(e),
        },
        Some(Routed::Err(e)) => fail(e),
        Some(Routed::Kernel(_)) => unreachable!("unix_path returns None for kernel paths"),
    }
}

/// `sendto` a datagram socket bound to a noseFS path: to its abstract address, as `connect`.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> ssize_t {
    let real = real!(sendto: fn(c_int, *const c_void, size_t, c_int, *const libc::sockaddr, libc::socklen_t) -> ssize_t);
    if addr.is_null() {
        return unsafe { real(fd, buf, n, flags, addr, len) };
    }
    match unsafe { unix_path(addr, len) } {
        None => unsafe { real(fd, buf, n, flags, addr, len) },
        Some(Routed::Ours(f)) => match serve(|| ops::connect_socket(&f)) {
            Ok(name) => match abstract_address(&name) {
                Ok((sun, sun_len)) => unsafe {
                    real(fd, buf, n, flags, (&raw const sun).cast(), sun_len)
                },
                Err(e) => fail(e) as ssize_t,
            },
            Err(e) => fail(e) as ssize_t,
        },
        Some(Routed::Err(e)) => fail(e) as ssize_t,
        Some(Routed::Kernel(_)) => unreachable!("unix_path returns None for kernel paths"),
    }
}

/// The noseFS paths this process bound or connected Unix-domain sockets to, as it wrote them,
/// by the abstract name that stands for each: `getsockname` and `getpeername` give the program
/// its path back, as the kernel does.
static SOCKET_PATHS: parking_lot::Mutex<Vec<(Vec<u8>, Vec<u8>)>> =
    parking_lot::Mutex::new(Vec::new());

fn remember_socket_path(name: &[u8], path: &[u8]) {
    let mut paths = SOCKET_PATHS.lock();
    paths.retain(|(n, _)| n != name);
    paths.push((name.to_vec(), path.to_vec()));
}

/// After the kernel filled `addr` (`*len` bytes): an abstract name standing for a noseFS path
/// this process knows becomes that path, truncated to the caller's buffer as the kernel
/// truncates, `*len` the length the whole address needs.
unsafe fn socket_path_back(
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    room: libc::socklen_t,
) {
    if addr.is_null() || len.is_null() {
        return;
    }
    let filled = (unsafe { *len }).min(room) as usize;
    if filled <= 3 {
        return;
    }
    // SAFETY: the kernel wrote `filled` bytes at `addr`, within the caller's `room`.
    let raw = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), filled) };
    if u16::from_ne_bytes([raw[0], raw[1]]) != libc::AF_UNIX as u16 || raw[2] != 0 {
        return;
    }
    let name = &raw[3..(unsafe { *len } as usize).min(filled)];
    let Some(path) = SOCKET_PATHS
        .lock()
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| p.clone())
    else {
        return;
    };
    let mut whole = raw[..2].to_vec();
    whole.extend_from_slice(&path);
    whole.push(0);
    let copy = whole.len().min(room as usize);
    // SAFETY: at most `room` bytes, the caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(whole.as_ptr(), addr.cast::<u8>(), copy);
        *len = whole.len() as libc::socklen_t;
    }
}

type NameCall = unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int;

/// getsockname and getpeername: the kernel's answer, with a noseFS path given back.
unsafe fn socket_name(
    real: NameCall,
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    let room = if len.is_null() { 0 } else { unsafe { *len } };
    let rc = unsafe { real(fd, addr, len) };
    if rc == 0 && !in_shim() {
        unsafe { socket_path_back(addr, len, room) };
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn getsockname(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    let real = real!(getsockname: fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int);
    unsafe { socket_name(real, fd, addr, len) }
}

#[no_mangle]
pub unsafe extern "C" fn getpeername(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    let real = real!(getpeername: fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int);
    unsafe { socket_name(real, fd, addr, len) }
}
