//! The client side, linked into the shim: a connection to the daemon of a noseFS mount, and
//! [`Remote`], the [`Service`](crate::service::Service) that sends each call as a request in the
//! shared area (`service.rs`), reached through `connect.rs`.
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
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use nosefs_core::Errno;
use rustix::event::{PollFd, PollFlags};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use rustix::thread::futex;

use crate::proto::{op, Dec, Enc};
use crate::service::Handle;
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
    /// remembered size watch ([`crate::service::Service::end_of`]), so that a word remembered for another
    /// connection is never read from this one's board.
    id: u32,
    /// Held from a loan's request until its memfd is read from the socket, so that each
    /// thread reads the memfd of its own loan.
    lending: parking_lot::Mutex<()>,
    /// A reply came on this connection: its server thread has run since it was handed the
    /// connection (until then a call waits [`WAKE_SPIN`], as after ringing a sleeping thread).
    answered: AtomicBool,
    /// The socket's device and inode at the handshake: a descriptor of another file at its
    /// number is no longer the connection's socket.
    socket_id: (u64, u64),
    /// A read-only view of the daemon's image, asked for when a read first wants a copy of a
    /// file's pieces ([`op::IMAGE_LEND`], `ReadCache`):
    /// `None` when the daemon does not lend it to this client.
    image: std::sync::OnceLock<Option<nosefs_core::file::direct::ImageView>>,
}

/// The device and inode of the file `fd` is a descriptor of.
fn file_id(fd: &OwnedFd) -> Option<(u64, u64)> {
    rustix::fs::fstat(fd).ok().map(|st| (st.st_dev, st.st_ino))
}

/// Connections made by this process so far (a forked child counts on from its parent's).
static CONNECTIONS: AtomicU32 = AtomicU32::new(0);

mod connect;
mod service;

pub use connect::read_small;

impl Remote {
    /// Moves the connection's socket (its one descriptor: the area keeps none) to a number at
    /// or above `floor`, and returns it: the shim keeps it out of the program's way and marks it
    /// as its own, so that a program closing every descriptor (a child before exec) leaves it.
    ///
    /// ENOTSOCK when the descriptor raised is no longer the connection's socket: between the
    /// socket's creation and its raise its number was low, and a child sharing this process's
    /// descriptor table may have dup2'd something else onto it (the daemon then saw a hang-up:
    /// connect again).
    pub fn raise_fd(&mut self, floor: i32) -> Result<std::os::fd::RawFd, Errno> {
        use std::os::fd::AsRawFd;
        let io = |e: rustix::io::Errno| Errno(e.raw_os_error());
        self.socket = rustix::io::fcntl_dupfd_cloexec(&self.socket, floor).map_err(io)?;
        if !self.socket_is_ours() {
            return Err(Errno::ENOTSOCK);
        }
        Ok(self.socket.as_raw_fd())
    }

    /// Whether the connection's descriptor is still the socket of the handshake.
    fn socket_is_ours(&self) -> bool {
        file_id(&self.socket) == Some(self.socket_id)
    }

    /// Ends the connection without unmapping its area ([`Area::leave`]): at exit, where the
    /// kernel unmaps it without a TLB shootdown, and in a forked child, which inherited the
    /// socket but not the mapping. The socket is closed, so the daemon sees the hang-up once
    /// no other process holds it.
    pub fn leave(self) {
        let Remote { area, socket, .. } = self;
        drop(socket);
        area.leave();
    }

    /// A loan of the shadow of the file open as `handle` (`nosefs_core::file::lent`), for a
    /// shared mapping made here: the loan's number and the shadow's memfd (read-only unless
    /// `writable`).
    pub fn lend_shadow(&self, handle: Handle, writable: bool) -> Result<(u64, OwnedFd), Errno> {
        let _one_at_a_time = self.lending.lock();
        let mut e = Enc::new(op::SHADOW_LEND);
        e.u64(handle).bool(writable);
        let loan = decode(&self.call(&e)?, |d| d.u64())?;
        Ok((loan, self.receive_descriptor(loan)?))
    }

    /// The daemon's image as this client may read it (see [`Remote::image`]), asked for once.
    pub fn image_view(&self) -> Option<&nosefs_core::file::direct::ImageView> {
        self.image
            .get_or_init(|| {
                let _one_at_a_time = self.lending.lock();
                let reply = self.call(&Enc::new(op::IMAGE_LEND)).ok()?;
                let (zone_offset, zone_bytes) =
                    decode(&reply, |d| Ok((d.u64()?, d.u64()?))).ok()?;
                let image = self.receive_descriptor(zone_offset).ok()?;
                nosefs_core::file::direct::ImageView::new(image, zone_offset, zone_bytes).ok()
            })
            .as_ref()
    }

    /// The descriptor the daemon sent on the socket with `number` (a loan's, or the image's),
    /// taken while [`Remote::lending`] is held.
    fn receive_descriptor(&self, number: u64) -> Result<OwnedFd, Errno> {
        let mut got_number = [0u8; 8];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            &self.socket,
            &mut [std::io::IoSliceMut::new(&mut got_number)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
        )
        .map_err(|_| Errno::EIO)?;
        let mut sent = None;
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(mut fds) = message {
                sent = fds.next();
            }
        }
        match sent {
            Some(fd) if got.bytes == 8 && u64::from_le_bytes(got_number) == number => Ok(fd),
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
        // Hung up, not readable: a loan's memfd may wait on the socket for its thread. Closed
        // or replaced under this connection (a child sharing this process's descriptor table
        // closed it or dup2'd onto it): the daemon saw a hang-up and will not answer.
        let hung_up = matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
            && fds[0]
                .revents()
                .intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL);
        hung_up || !self.socket_is_ours()
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
