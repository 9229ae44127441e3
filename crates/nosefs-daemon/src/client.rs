//! The client side, linked into the shim: a connection to the daemon of a noseFS mount, and
//! [`Remote`], the [`Service`] that sends each call as a request in the shared area.
//!
//! Everything here makes its system calls through rustix's raw backend, never libc, so nothing
//! re-enters the shim's hooks.
//!
//! A call takes a free slot (one per calling thread at a time), writes its request, rings the
//! doorbell if the thread serving the slot sleeps, then polls the slot's state for
//! [`CLIENT_SPIN`] (see [`crate::wait`]) and after that waits on it with a futex. While it waits it checks every
//! [`DAEMON_CHECK`] that the daemon still holds its end of the socket: a daemon that died
//! gives EIO, never a hang.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use nosefs_core::file::holes::DataExtent;
use nosefs_core::namespace::{Attr, DirEntry, SetAttr};
use nosefs_core::vfs::{Found, Walked, XattrCall};
use nosefs_core::Errno;
use rustix::event::{PollFd, PollFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendFlags, SocketAddrUnix,
    SocketFlags, SocketType,
};
use rustix::thread::futex;

use crate::proto::{op, Dec, Enc};
use crate::server::{find_daemon, socket_name, HELLO};
use crate::service::{Handle, NameIn, Opened, OpenedPath, Service, Statfs, XattrTarget};
use crate::shm::{current_cpu, owner, state, Area};
use crate::wait::Spinner;

/// How long a client spins on its slot before it sleeps on the futex.
pub const CLIENT_SPIN: Duration = Duration::from_micros(20);
/// How long a client spins (yielding, see [`crate::wait`]) for the reply after it woke a
/// sleeping server thread, and on its connection's first call: that thread needs tens of
/// microseconds to run again (a halted vCPU's wake-up on this VM), so a client that slept after
/// [`CLIENT_SPIN`] paid a second wake-up of the same length for the reply.
pub const WAKE_SPIN: Duration = Duration::from_micros(250);
/// How often a sleeping client checks that the daemon lives.
pub const DAEMON_CHECK: Duration = Duration::from_millis(100);

/// A connection to a daemon.
#[derive(Debug)]
pub struct Remote {
    area: Area,
    socket: OwnedFd,
    dead: AtomicBool,
    /// This connection among the process's (and its forked children's): the high half of a
    /// remembered size watch ([`Service::end_of`]), so that a word remembered for another
    /// connection is never read from this one's board.
    id: u32,
    /// Held from a loan's request until its memfd is read from the socket, so that each
    /// thread reads the memfd of its own loan.
    lending: parking_lot::Mutex<()>,
    /// A reply came on this connection: its server thread has run since it was handed the
    /// connection (until then a call waits [`WAKE_SPIN`], as after ringing a sleeping thread).
    answered: AtomicBool,
}

/// Connections made by this process so far (a forked child counts on from its parent's).
static CONNECTIONS: AtomicU32 = AtomicU32::new(0);

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
                Ok(None) | Err(Errno::EIO) => continue,
                _ => return outcome,
            }
        }
        outcome
    }

    /// Moves the connection's descriptors (its socket and its area) to numbers at or above
    /// `floor`, and returns them: the shim keeps them out of the program's way and marks them as
    /// its own, so that a program closing every descriptor (a child before exec) leaves them.
    pub fn raise_fds(&mut self, floor: i32) -> Result<[std::os::fd::RawFd; 2], Errno> {
        use std::os::fd::AsRawFd;
        let io = |e: rustix::io::Errno| Errno(e.raw_os_error());
        self.socket = rustix::io::fcntl_dupfd_cloexec(&self.socket, floor).map_err(io)?;
        self.area.raise_fd(floor).map_err(io)?;
        Ok([self.socket.as_raw_fd(), self.area.fd().as_raw_fd()])
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
        let got = rustix::net::recvmsg(
            &socket,
            &mut [std::io::IoSliceMut::new(&mut status)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(io)?;
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
        })
    }

    /// A loan of the shadow of the file open as `handle` (`nosefs_core::file::lent`), for a
    /// shared mapping made here: the loan's number and the shadow's memfd (read-only unless
    /// `writable`).
    pub fn lend_shadow(&self, handle: Handle, writable: bool) -> Result<(u64, OwnedFd), Errno> {
        let _one_at_a_time = self.lending.lock();
        let mut e = Enc::new(op::SHADOW_LEND);
        e.u64(handle).bool(writable);
        let loan = decode(&self.call(&e)?, |d| d.u64())?;
        let mut number = [0u8; 8];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            &self.socket,
            &mut [std::io::IoSliceMut::new(&mut number)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
        )
        .map_err(|_| Errno::EIO)?;
        let mut memfd = None;
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(mut fds) = message {
                memfd = fds.next();
            }
        }
        match memfd {
            Some(fd) if got.bytes == 8 && u64::from_le_bytes(number) == loan => Ok((loan, fd)),
            _ => Err(Errno::EIO),
        }
    }

    /// Pages stored to through a loan's mappings ((first page, pages) runs) for the file's
    /// next commit; with `commit`, committed now (msync). With `end`, the loan ends (munmap).
    pub fn take_lent(
        &self,
        loan: u64,
        runs: &[(u64, u64)],
        commit: bool,
        end: bool,
    ) -> Result<(), Errno> {
        let mut chunks = runs.chunks(crate::proto::MAX_RUNS).peekable();
        loop {
            let chunk = chunks.next().unwrap_or(&[]);
            let last = chunks.peek().is_none();
            let opcode = if end && last {
                op::SHADOW_RETURN
            } else {
                op::SHADOW_TAKE
            };
            let mut e = Enc::new(opcode);
            e.u64(loan).bool(commit && last).u32(chunk.len() as u32);
            for &(first, pages) in chunk {
                e.u64(first).u64(pages);
            }
            self.call(&e)?;
            if last {
                return Ok(());
            }
        }
    }

    /// Bytes of data one request or reply carries.
    pub fn chunk_bytes(&self) -> usize {
        self.area.payload_bytes() - 64
    }

    /// A free slot, taken (owner 1); `None` once the daemon is gone. A slot whose posted
    /// request ([`Remote::post`]) has been answered is free: its reply is dropped here.
    fn take_slot(&self) -> Option<usize> {
        thread_local! {
            // Each thread starts its search at its own pair of slots (no system call per
            // request): one for its call, one for the close it posted before (see `shm`).
            static HOME: usize = rustix::thread::gettid().as_raw_nonzero().get() as usize;
        }
        let n = self.area.slots();
        let start = HOME.with(|h| *h) % (n / 2) * 2;
        let take = |slot: usize, from: u32| {
            self.area
                .owner(slot)
                .compare_exchange(from, owner::CALL, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        };
        let mut rounds = 0u32;
        loop {
            for k in 0..n {
                let slot = (start + k) % n;
                match self.area.owner(slot).load(Ordering::Relaxed) {
                    owner::FREE if take(slot, owner::FREE) => return Some(slot),
                    owner::POSTED
                        if self.area.state(slot).load(Ordering::Acquire) == state::REPLY
                            && take(slot, owner::POSTED) =>
                    {
                        self.area.state(slot).store(state::IDLE, Ordering::Release);
                        return Some(slot);
                    }
                    _ => {}
                }
            }
            rounds += 1;
            if rounds % 1024 == 0 && self.daemon_gone() {
                self.dead.store(true, Ordering::Relaxed);
                return None;
            }
            rustix::thread::sched_yield();
        }
    }

    /// Sends a request whose answer no one waits for (close: nothing the caller does next
    /// depends on it, and the round trip is half a create's). Its slot stays taken (owner
    /// [`owner::POSTED`]) until the answer is in; [`Remote::take_slot`] frees it then. The daemon
    /// serves a client's slots in any order, so only requests nothing later depends on are
    /// posted.
    fn post(&self, request: &Enc) {
        if self.dead.load(Ordering::Relaxed) {
            return;
        }
        let Some(slot) = self.take_slot() else {
            return;
        };
        // Marked before it is sent, so the daemon never takes it for a waiting call.
        self.area
            .owner(slot)
            .store(owner::POSTED, Ordering::Release);
        self.send(slot, request);
    }

    /// Puts a request in slot `slot` (taken) and rings the doorbell of the thread serving it if
    /// that thread sleeps.
    fn send(&self, slot: usize, request: &Enc) {
        let _ = self.send_with(slot, request, &[]);
    }

    /// [`Remote::send`] with `data` after the request's bytes, copied straight from the
    /// caller's buffer (a write's data: the request ends with its length).
    /// Returns whether it rang a sleeping server thread.
    fn send_with(&self, slot: usize, request: &Enc, data: &[u8]) -> bool {
        let len = request.buf.len() + data.len();
        assert!(len <= self.area.payload_bytes(), "requests are chunked");
        let area = &self.area;
        area.put(slot, 0, &request.buf);
        area.put(slot, request.buf.len(), data);
        area.len(slot).store(len as u32, Ordering::Relaxed);
        area.client_cpu(slot)
            .store(current_cpu(), Ordering::Relaxed);
        area.state(slot).store(state::REQUEST, Ordering::SeqCst);
        // A slot the daemon gave a thread of its own is served only by that thread (the
        // daemon sets `helper` before the thread's first poll, so a request stored before the
        // flag is seen is found by that poll).
        let (sleeping, bell) = if area.helper(slot).load(Ordering::SeqCst) != 0 {
            (area.helper_sleeping(slot), area.helper_doorbell(slot))
        } else {
            (area.server_sleeping(), area.doorbell())
        };
        let asleep = sleeping.load(Ordering::SeqCst) != 0;
        if asleep {
            bell.fetch_add(1, Ordering::SeqCst);
            let _ = futex::wake(bell, futex::Flags::empty(), 1);
        }
        asleep
    }

    /// Whether the daemon has closed its end (it died or stopped).
    fn daemon_gone(&self) -> bool {
        let mut fds = [PollFd::new(&self.socket, PollFlags::IN)];
        let zero = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // Hung up, not readable: a loan's memfd may wait on the socket for its thread.
        matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
            && fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR)
    }

    /// Sends one request and returns the reply's bytes after its errno.
    pub fn call(&self, request: &Enc) -> Result<Vec<u8>, Errno> {
        self.call_with(request, &[], |area, slot, len| {
            let mut reply = vec![0u8; len];
            area.get(slot, 4, &mut reply);
            Ok(reply)
        })
    }

    /// Sends `request` followed by `data`, then hands the reply in the area (its slot and the
    /// length after the errno, a successful one) to `take`, which copies out what it needs: a
    /// write's data and a read's go between the caller's buffer and the area with no copy in
    /// between.
    fn call_with<T>(
        &self,
        request: &Enc,
        data: &[u8],
        take: impl FnOnce(&Area, usize, usize) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        if self.dead.load(Ordering::Relaxed) {
            return Err(Errno::EIO);
        }
        let slot = self.take_slot().ok_or(Errno::EIO)?;
        let rang = self.send_with(slot, request, data);
        let window = if rang || !self.answered.load(Ordering::Relaxed) {
            WAKE_SPIN
        } else {
            CLIENT_SPIN
        };
        let result = self
            .wait_reply(slot, window)
            .and_then(|len| take(&self.area, slot, len));
        self.area.state(slot).store(state::IDLE, Ordering::Release);
        self.area.owner(slot).store(owner::FREE, Ordering::Release);
        result
    }

    /// Waits for slot `slot`'s reply; its length after the errno, or the errno.
    fn wait_reply(&self, slot: usize, window: Duration) -> Result<usize, Errno> {
        let area = &self.area;
        let mut spinner = Spinner::new();
        loop {
            let now = area.state(slot).load(Ordering::Acquire);
            if now == state::REPLY {
                break;
            }
            let server_here = || area.server_cpu(slot).load(Ordering::Relaxed) == current_cpu();
            if spinner.pause(window, server_here) {
                continue;
            }
            area.client_waiting(slot).store(1, Ordering::SeqCst);
            let now = area.state(slot).load(Ordering::SeqCst);
            if now != state::REPLY {
                let timeout = rustix::time::Timespec {
                    tv_sec: 0,
                    tv_nsec: DAEMON_CHECK.as_nanos() as i64,
                };
                let woke =
                    futex::wait(area.state(slot), futex::Flags::empty(), now, Some(&timeout));
                if woke == Err(rustix::io::Errno::TIMEDOUT) && self.daemon_gone() {
                    area.client_waiting(slot).store(0, Ordering::Relaxed);
                    self.dead.store(true, Ordering::Relaxed);
                    return Err(Errno::EIO);
                }
            }
            area.client_waiting(slot).store(0, Ordering::Relaxed);
        }
        self.answered.store(true, Ordering::Relaxed);
        let len = (area.len(slot).load(Ordering::Acquire) as usize).min(area.payload_bytes());
        if len < 4 {
            return Err(Errno::EIO);
        }
        let mut head = [0u8; 4];
        area.get(slot, 0, &mut head);
        match i32::from_le_bytes(head) {
            0 => Ok(len - 4),
            errno => Err(Errno(errno)),
        }
    }

    fn path_request(opcode: u32, found: &Found) -> Enc {
        let mut e = Enc::new(opcode);
        e.path_of(found);
        e
    }

    /// An empty request (the round trip's cost).
    pub fn nop(&self) -> Result<(), Errno> {
        self.call(&Enc::new(op::NOP)).map(drop)
    }

    /// Tells the daemon this process's credentials changed; it reads them from /proc.
    pub fn recred(&self) -> Result<(), Errno> {
        self.call(&Enc::new(op::RECRED)).map(drop)
    }

    /// Hands references on `handles` to a process about to be created (fork, spawn) or to
    /// this process's next image (exec): returns the ticket it claims them with.
    pub fn hold(&self, handles: &[Handle]) -> Result<u64, Errno> {
        let mut e = Enc::new(op::HOLD);
        e.u32(handles.len() as u32);
        for h in handles {
            e.u64(*h);
        }
        let reply = self.call(&e)?;
        Dec::new(&reply).u64().map_err(|_| Errno::EIO)
    }

    /// Claims a ticket, keeping the references on `keep` (the rest are released).
    pub fn claim(&self, ticket: u64, keep: &[Handle]) -> Result<(), Errno> {
        let mut e = Enc::new(op::CLAIM);
        e.u64(ticket).u32(keep.len() as u32);
        for h in keep {
            e.u64(*h);
        }
        self.call(&e).map(drop)
    }

    /// Ties an unclaimed ticket to process `pid`: its end releases the ticket.
    pub fn bind(&self, ticket: u64, pid: i32) -> Result<(), Errno> {
        let mut e = Enc::new(op::BIND);
        e.u64(ticket).u32(pid as u32);
        self.call(&e).map(drop)
    }
}

fn decode<T>(
    reply: &[u8],
    f: impl FnOnce(&mut Dec<'_>) -> Result<T, crate::proto::Malformed>,
) -> Result<T, Errno> {
    f(&mut Dec::new(reply)).map_err(|_| Errno::EIO)
}

impl Service for Remote {
    fn walk(&self, path: Vec<u8>, follow_last: bool) -> Result<Walked, Errno> {
        let mut e = Enc::new(op::WALK);
        e.bytes(&path).bool(follow_last);
        decode(&self.call(&e)?, |d| d.walked())
    }

    fn walk_in(
        &self,
        dir: Handle,
        dir_path: &[u8],
        name: &[u8],
        follow_last: bool,
    ) -> Result<Option<Found>, Errno> {
        let mut e = Enc::new(op::WALK_IN);
        e.u64(dir).bytes(dir_path).bytes(name).bool(follow_last);
        decode(&self.call(&e)?, |d| match d.u8()? {
            0 => Ok(None),
            _ => d.found().map(Some),
        })
    }

    fn open_path(
        &self,
        path: Vec<u8>,
        follow_last: bool,
        flags: i32,
        mode: u32,
        umask: u32,
    ) -> Result<OpenedPath, Errno> {
        let mut e = Enc::new(op::OPEN_PATH);
        e.bytes(&path)
            .bool(follow_last)
            .u32(flags as u32)
            .u32(mode)
            .u32(umask);
        decode(&self.call(&e)?, |d| match d.walked()? {
            Walked::Outside(p) => Ok(OpenedPath::Outside(p)),
            Walked::Found(found) => {
                let opened = Opened {
                    attr: d.attr()?,
                    kind: d.kind()?,
                    handle: d.u64()?,
                };
                Ok(OpenedPath::Opened(Box::new(found), opened))
            }
        })
    }

    fn open_in(
        &self,
        dir: Handle,
        dir_path: &[u8],
        name: &[u8],
        follow_last: bool,
        flags: i32,
        mode: u32,
        umask: u32,
    ) -> Result<Option<(Box<Found>, Opened)>, Errno> {
        let mut e = Enc::new(op::OPEN_IN);
        e.u64(dir)
            .bytes(dir_path)
            .bytes(name)
            .bool(follow_last)
            .u32(flags as u32)
            .u32(mode)
            .u32(umask);
        decode(&self.call(&e)?, |d| match d.u8()? {
            0 => Ok(None),
            _ => {
                let found = d.found()?;
                let opened = Opened {
                    attr: d.attr()?,
                    kind: d.kind()?,
                    handle: d.u64()?,
                };
                Ok(Some((Box::new(found), opened)))
            }
        })
    }

    fn unlink_in(&self, dir: Handle, dir_path: &[u8], name: &[u8]) -> Result<bool, Errno> {
        let mut e = Enc::new(op::UNLINK_IN);
        e.u64(dir).bytes(dir_path).bytes(name);
        decode(&self.call(&e)?, |d| d.bool())
    }

    fn rename_in(&self, from: NameIn<'_>, to: NameIn<'_>, flags: u32) -> Result<bool, Errno> {
        let mut e = Enc::new(op::RENAME_IN);
        e.u64(from.0).bytes(from.1).bytes(from.2);
        e.u64(to.0).bytes(to.1).bytes(to.2).u32(flags);
        decode(&self.call(&e)?, |d| d.bool())
    }

    fn open(&self, found: &Found, flags: i32, mode: u32, umask: u32) -> Result<Opened, Errno> {
        let mut e = Self::path_request(op::OPEN, found);
        e.u32(flags as u32).u32(mode).u32(umask);
        decode(&self.call(&e)?, |d| {
            Ok(Opened {
                attr: d.attr()?,
                kind: d.kind()?,
                handle: d.u64()?,
            })
        })
    }

    fn close(&self, handle: Handle) {
        let mut e = Enc::new(op::CLOSE);
        e.u64(handle);
        self.post(&e);
    }

    fn read(&self, handle: Handle, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(self.chunk_bytes());
            let mut e = Enc::new(op::READ);
            e.u64(handle).u64(offset + done as u64).u32(want as u32);
            let out = &mut buf[done..done + want];
            // The reply is the data's length, then the data: copied from the area straight
            // into the caller's buffer.
            let n = self.call_with(&e, &[], |area, slot, len| {
                let mut head = [0u8; 4];
                if len < 4 {
                    return Err(Errno::EIO);
                }
                area.get(slot, 4, &mut head);
                let n = (u32::from_le_bytes(head) as usize).min(len - 4).min(want);
                area.get(slot, 8, &mut out[..n]);
                Ok(n)
            })?;
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    fn write(&self, handle: Handle, offset: u64, data: &[u8], append: bool) -> Result<u64, Errno> {
        let mut first = None;
        let mut done = 0;
        loop {
            let n = (data.len() - done).min(self.chunk_bytes());
            let mut e = Enc::new(op::WRITE);
            // The data's length ends the request; the data follows it in the area, copied
            // straight from the caller's buffer (the same bytes `Enc::bytes` would make).
            e.u64(handle)
                .u64(offset + done as u64)
                .bool(append)
                .u32(n as u32);
            let at = self.call_with(&e, &data[done..done + n], |area, slot, len| {
                let mut reply = [0u8; 8];
                if len < 8 {
                    return Err(Errno::EIO);
                }
                area.get(slot, 4, &mut reply);
                Ok(u64::from_le_bytes(reply))
            })?;
            first.get_or_insert(at);
            done += n;
            if done >= data.len() {
                return Ok(first.unwrap_or(offset));
            }
        }
    }

    fn fsync(&self, handle: Handle) -> Result<(), Errno> {
        let mut e = Enc::new(op::FSYNC);
        e.u64(handle);
        self.call(&e).map(drop)
    }

    fn ftruncate(&self, handle: Handle, size: u64) -> Result<(), Errno> {
        let mut e = Enc::new(op::FTRUNCATE);
        e.u64(handle).u64(size);
        self.call(&e).map(drop)
    }

    fn fstat(&self, handle: Handle) -> Result<Attr, Errno> {
        let mut e = Enc::new(op::FSTAT);
        e.u64(handle);
        decode(&self.call(&e)?, |d| d.attr())
    }

    /// The size from the word of the size board the daemon keeps for this file, asked for at
    /// the description's first call (a round trip, once); `u32::MAX` remembered when the board
    /// is full (then every call asks).
    fn end_of(&self, handle: Handle, watch: &AtomicU64) -> Result<u64, Errno> {
        let remembered = watch.load(Ordering::Relaxed);
        let index = if remembered >> 32 == u64::from(self.id) {
            remembered as u32
        } else {
            let mut e = Enc::new(op::SIZE_WATCH);
            e.u64(handle);
            let index = decode(&self.call(&e)?, |d| d.u64())? as u32;
            watch.store(
                u64::from(self.id) << 32 | u64::from(index),
                Ordering::Relaxed,
            );
            index
        };
        match self.area.size_word(index) {
            Some(word) => Ok(word.load(Ordering::Acquire)),
            None => Ok(self.fstat(handle)?.size),
        }
    }

    fn fsetattr(&self, handle: Handle, change: &SetAttr, times_now: bool) -> Result<(), Errno> {
        let mut e = Enc::new(op::FSETATTR);
        e.u64(handle).setattr(change).bool(times_now);
        self.call(&e).map(drop)
    }

    fn readdir(&self, handle: Handle, cookie: u64, max: usize) -> Result<Vec<DirEntry>, Errno> {
        let mut e = Enc::new(op::READDIR);
        e.u64(handle)
            .u64(cookie)
            .u32(max.min(u32::MAX as usize) as u32);
        decode(&self.call(&e)?, |d| {
            let n = d.u32()?;
            (0..n).map(|_| d.entry()).collect()
        })
    }

    fn fallocate(&self, handle: Handle, mode: i32, offset: i64, len: i64) -> Result<(), Errno> {
        let mut e = Enc::new(op::FALLOCATE);
        e.u64(handle).u32(mode as u32).i64(offset).i64(len);
        self.call(&e).map(drop)
    }

    fn listing_end(&self, handle: Handle) -> Result<u64, Errno> {
        let mut e = Enc::new(op::LISTING_END);
        e.u64(handle);
        let reply = self.call(&e)?;
        Dec::new(&reply).u64().map_err(|_| Errno::EIO)
    }

    fn seek_hole(&self, handle: Handle, offset: u64, data: bool) -> Result<u64, Errno> {
        let mut e = Enc::new(op::SEEK_HOLE);
        e.u64(handle).u64(offset).bool(data);
        let reply = self.call(&e)?;
        Dec::new(&reply).u64().map_err(|_| Errno::EIO)
    }

    fn path_of(&self, handle: Handle) -> Result<Vec<u8>, Errno> {
        let mut e = Enc::new(op::PATH_OF);
        e.u64(handle);
        decode(&self.call(&e)?, |d| d.bytes().map(<[u8]>::to_vec))
    }

    fn data_map(
        &self,
        handle: Handle,
        start: u64,
        len: u64,
        max: usize,
    ) -> Result<Vec<DataExtent>, Errno> {
        let mut e = Enc::new(op::DATA_MAP);
        e.u64(handle)
            .u64(start)
            .u64(len)
            .u32(max.min(u32::MAX as usize) as u32);
        decode(&self.call(&e)?, |d| {
            let n = d.u32()?;
            (0..n)
                .map(|_| {
                    let (logical, physical, length) = (d.u64()?, d.u64()?, d.u64()?);
                    let flags = d.u8()?;
                    Ok(DataExtent {
                        logical,
                        physical,
                        length,
                        last: flags & 1 != 0,
                        pending: flags & 2 != 0,
                    })
                })
                .collect()
        })
    }

    fn truncate(&self, found: &Found, size: i64) -> Result<(), Errno> {
        let mut e = Self::path_request(op::TRUNCATE, found);
        e.i64(size);
        self.call(&e).map(drop)
    }

    fn mkdir(&self, found: &Found, mode: u32, umask: u32) -> Result<(), Errno> {
        let mut e = Self::path_request(op::MKDIR, found);
        e.u32(mode).u32(umask);
        self.call(&e).map(drop)
    }

    fn mknod(&self, found: &Found, mode: u32, rdev: u64, umask: u32) -> Result<Attr, Errno> {
        let mut e = Self::path_request(op::MKNOD, found);
        e.u32(mode).u64(rdev).u32(umask);
        decode(&self.call(&e)?, |d| d.attr())
    }

    fn symlink(&self, target: &[u8], found: &Found) -> Result<(), Errno> {
        let mut e = Self::path_request(op::SYMLINK, found);
        e.bytes(target);
        self.call(&e).map(drop)
    }

    fn readlink(&self, found: &Found) -> Result<Vec<u8>, Errno> {
        let e = Self::path_request(op::READLINK, found);
        decode(&self.call(&e)?, |d| d.bytes().map(<[u8]>::to_vec))
    }

    fn unlink(&self, found: &Found) -> Result<(), Errno> {
        self.call(&Self::path_request(op::UNLINK, found)).map(drop)
    }

    fn rmdir(&self, found: &Found, last: &[u8]) -> Result<(), Errno> {
        let mut e = Self::path_request(op::RMDIR, found);
        e.bytes(last);
        self.call(&e).map(drop)
    }

    fn rename(&self, from: &Found, to: &Found, flags: u32) -> Result<(), Errno> {
        let mut e = Self::path_request(op::RENAME, from);
        e.path_of(to).u32(flags);
        self.call(&e).map(drop)
    }

    fn link(&self, from: &Found, to: &Found) -> Result<(), Errno> {
        let mut e = Self::path_request(op::LINK, from);
        e.path_of(to);
        self.call(&e).map(drop)
    }

    fn setattr(&self, found: &Found, change: &SetAttr, times_now: bool) -> Result<(), Errno> {
        let mut e = Self::path_request(op::SETATTR, found);
        e.setattr(change).bool(times_now);
        self.call(&e).map(drop)
    }

    fn statfs(&self) -> Result<Statfs, Errno> {
        decode(&self.call(&Enc::new(op::STATFS))?, |d| {
            Ok(Statfs {
                blocks: d.u64()?,
                blocks_free: d.u64()?,
                inodes: d.u64()?,
                inodes_free: d.u64()?,
            })
        })
    }

    fn sync_all(&self) -> Result<(), Errno> {
        self.call(&Enc::new(op::SYNC_ALL)).map(drop)
    }

    fn flink(&self, handle: Handle, to: &Found) -> Result<(), Errno> {
        let mut e = Enc::new(op::FLINK);
        e.u64(handle).path_of(to);
        self.call(&e).map(drop)
    }

    fn xattr(&self, target: XattrTarget<'_>, call: XattrCall<'_>) -> Result<Vec<u8>, Errno> {
        let mut e = match target {
            XattrTarget::Path(found) => Self::path_request(op::XATTR, found),
            XattrTarget::Handle(handle) => {
                let mut e = Enc::new(op::FXATTR);
                e.u64(handle);
                e
            }
        };
        e.xattr_call(&call);
        decode(&self.call(&e)?, |d| d.bytes().map(<[u8]>::to_vec))
    }
}
