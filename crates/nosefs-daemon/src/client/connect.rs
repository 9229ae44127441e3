//! Finding the daemon of a mount and connecting to it: its socket's name from the mount's
//! device (statmount, else mountinfo), the handshake, the request area it hands over.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};

use nosefs_core::Errno;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendFlags, SocketAddrUnix,
    SocketFlags, SocketType,
};

use super::{Remote, CONNECTIONS, WAKE_SPIN};
use crate::server::{find_daemon, socket_name, HELLO};
use crate::shm::Area;
use crate::wait::Spinner;

/// Reads a small file with raw system calls (never through the shim's hooks).
pub fn read_small(path: &std::ffi::CStr) -> Option<String> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let mut out = Vec::new();
    // Large reads: a proc file changes between two of them (see `Remote::connect`).
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match rustix::io::read(&fd, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8(out).ok()
}

/// Where the daemon of the FUSE mount at `mount_point` would listen, as
/// [`find_daemon`] says from mountinfo, but from `statx` and `statmount` of that one mount (a
/// few microseconds where generating mountinfo costs tens: every process pays this once).
/// `None`: the kernel cannot say (no `statmount`, no unique mount ids); `Some(None)`:
/// `mount_point` is not the root of a FUSE mount.
fn daemon_by_statmount(mount_point: &[u8]) -> Option<Option<(u32, u32, u32)>> {
    use rustix::fs::{AtFlags, StatxAttributes, StatxFlags};
    const STATX_MNT_ID_UNIQUE: u32 = 0x4000;
    const FUSE_SUPER_MAGIC: u64 = 0x6573_5546;
    let path = std::ffi::CString::new(mount_point).ok()?;
    let st = rustix::fs::statx(
        rustix::fs::CWD,
        &path,
        // Cached attributes: the root's, which a FUSE getattr would only refresh.
        AtFlags::SYMLINK_NOFOLLOW | AtFlags::STATX_DONT_SYNC,
        StatxFlags::from_bits_retain(STATX_MNT_ID_UNIQUE),
    )
    .ok()?;
    let root_known = st.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT);
    if st.stx_mask & STATX_MNT_ID_UNIQUE == 0 || !root_known {
        return None;
    }
    if !st.stx_attributes.contains(StatxAttributes::MOUNT_ROOT) {
        return Some(None);
    }
    let facts = crate::sys::statmount(st.stx_mnt_id)?;
    if facts.magic != FUSE_SUPER_MAGIC || facts.fs_type != b"fuse" {
        return Some(None);
    }
    let owner = facts
        .options
        .split(|&b| b == b',')
        .find_map(|o| o.strip_prefix(b"user_id="))
        .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok());
    // A FUSE mount always shows its owner; an answer without one is not trusted.
    owner.map(|owner| Some((facts.dev.0, facts.dev.1, owner)))
}

impl Remote {
    /// Connects to the daemon of the noseFS mount at `prefix` (the mount point as this process
    /// names it). `Ok(None)`: `prefix` is not a noseFS FUSE mount.
    pub fn connect(prefix: &[u8]) -> Result<Option<Remote>, Errno> {
        // A mount or unmount elsewhere while mountinfo is read can make a line go missing from
        // what one pass sees, and a daemon under load can drop a handshake (CI saw both as a
        // rare "not a noseFS mount"): try again, briefly, before saying no.
        let mut outcome = Ok(None);
        for attempt in 0..5 {
            if attempt > 0 {
                let pause = rustix::thread::Timespec {
                    tv_sec: 0,
                    tv_nsec: 20_000_000,
                };
                let _ = rustix::thread::nanosleep(&pause);
            }
            let found = match daemon_by_statmount(prefix) {
                Some(found) => found,
                None => {
                    let Some(mountinfo) = read_small(c"/proc/self/mountinfo") else {
                        return Ok(None);
                    };
                    find_daemon(&mountinfo, prefix)
                }
            };
            outcome = match found {
                Some((major, minor, owner)) => {
                    Remote::connect_device(major, minor, owner, prefix).map(Some)
                }
                None => Ok(None),
            };
            match outcome {
                // ENOTSOCK, EBADF: the new socket's number was taken over between two calls (a
                // child sharing this process's descriptor table dup2'd onto it); EINTR: a signal
                // (the program's interval timer); neither is a daemon that is away.
                Ok(None) | Err(Errno::EIO | Errno::ENOTSOCK | Errno::EBADF | Errno::EINTR) => {
                    continue
                }
                _ => return outcome,
            }
        }
        outcome
    }

    /// Connects to the daemon serving the mount whose device is `major:minor`, owned by user
    /// `owner`, which this process sees at `prefix`.
    pub fn connect_device(
        major: u32,
        minor: u32,
        owner: u32,
        prefix: &[u8],
    ) -> Result<Remote, Errno> {
        let io = |e: rustix::io::Errno| Errno(e.raw_os_error());
        let socket = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(io)?;
        // At once: until `Remote::raise_fd` moves it, the socket's number is a low one, which a
        // child sharing this process's descriptor table may take over.
        let socket_id = super::file_id(&socket).ok_or(Errno::EIO)?;
        let name = socket_name(major, minor);
        let addr = SocketAddrUnix::new_abstract_name(&name).map_err(io)?;
        rustix::net::connect(&socket, &addr).map_err(|_| Errno::EIO)?;
        // Anyone can bind an abstract name: talk only to the mount's owner (or root).
        let peer = rustix::net::sockopt::socket_peercred(&socket).map_err(io)?;
        if peer.uid.as_raw() != owner && !peer.uid.is_root() {
            return Err(Errno::EIO);
        }
        let mut hello = HELLO.to_vec();
        hello.extend_from_slice(prefix);
        rustix::net::send(&socket, &hello, SendFlags::NOSIGNAL).map_err(io)?;
        let mut status = [0u8; 4];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = recv_awake(&socket, &mut status, &mut control).map_err(io)?;
        let mut fd = None;
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(mut fds) = message {
                fd = fds.next();
            }
        }
        if got.bytes != 4 {
            return Err(Errno::EIO);
        }
        let status = u32::from_le_bytes(status);
        if status != 0 {
            return Err(Errno(status as i32));
        }
        let area = fd.and_then(Area::open).ok_or(Errno::EIO)?;
        // Unique among a process's connections and its forked children's (whose pid differs):
        // a child reconnects and must not read words its parent's connection was given.
        let pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
        let count = CONNECTIONS.fetch_add(1, Ordering::Relaxed);
        Ok(Remote {
            area,
            socket,
            dead: AtomicBool::new(false),
            id: (pid << 8 | (count & 0xff)).max(1),
            lending: parking_lot::Mutex::new(()),
            answered: AtomicBool::new(false),
            socket_id,
            image: std::sync::OnceLock::new(),
        })
    }
}

/// The handshake's reply, waited for awake for up to [`WAKE_SPIN`] before sleeping in
/// `recvmsg`: the door thread sleeps in `poll` until the connect wakes it, which takes tens of
/// microseconds on a VM whose idle vCPUs halt, and a client asleep by then would need a second
/// wake-up of that length for the reply (every short process pays the handshake).
fn recv_awake(
    socket: &rustix::fd::OwnedFd,
    status: &mut [u8; 4],
    control: &mut RecvAncillaryBuffer<'_>,
) -> rustix::io::Result<rustix::net::RecvMsg> {
    let mut spinner = Spinner::new();
    let mut flags = RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT;
    loop {
        let got = rustix::net::recvmsg(
            socket,
            &mut [std::io::IoSliceMut::new(status)],
            control,
            flags,
        );
        match got {
            // Past the window, the next receive sleeps until the reply or a hang-up.
            Err(rustix::io::Errno::AGAIN) if !spinner.pause(WAKE_SPIN, || false) => {
                flags = RecvFlags::CMSG_CLOEXEC;
            }
            // A signal: the handshake goes on, as the program's call would be restarted.
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (rustix::fd::OwnedFd, rustix::fd::OwnedFd) {
        rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .expect("socketpair")
    }

    /// A reply later than the awake window is still received, by the blocking receive.
    #[test]
    fn a_reply_after_the_spin_is_received_asleep() {
        let (client, door) = pair();
        let replier = std::thread::spawn(move || {
            std::thread::sleep(WAKE_SPIN * 20);
            rustix::net::send(&door, &7u32.to_le_bytes(), SendFlags::NOSIGNAL).expect("send");
            door
        });
        let mut status = [0u8; 4];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = recv_awake(&client, &mut status, &mut control).expect("a reply");
        assert_eq!((got.bytes, u32::from_le_bytes(status)), (4, 7));
        drop(replier.join());
    }

    /// A door that hangs up instead of replying ends the wait with nothing received.
    #[test]
    fn a_hang_up_ends_the_wait() {
        let (client, door) = pair();
        drop(door);
        let mut status = [0u8; 4];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = recv_awake(&client, &mut status, &mut control).expect("end of stream");
        assert_eq!(got.bytes, 0);
    }
}
