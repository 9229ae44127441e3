//! The daemon side: shim clients of one mounted image, served over shared memory.
//!
//! One thread (the *door*) owns the listening socket and every client socket: it accepts
//! clients (credentials from SO_PEERCRED and /proc, `allow_other` honoured), hands each a
//! request area (a sealed memfd over SCM_RIGHTS), starts the client's server thread, notices a
//! client's hang-up (its process died or exec'd) and the end of processes that were handed
//! descriptions at fork or exec (pidfds), and releases what they held. It sleeps in `poll` with
//! no timeout: a daemon with no clients uses no CPU.
//!
//! A client's server thread polls the slots while requests keep coming, keeps polling after
//! the last one (yielding its CPU after the first microseconds: see [`crate::wait`]) for
//! [`SERVER_SPIN_IDLE`] while its CPU has nothing else to run and for [`SERVER_SPIN`] once it
//! has, then sleeps on the area's doorbell futex until a client rings it. A slot
//! that is busy while another is gets a server thread of its own, so the threads of one
//! process are served in parallel.
//!
//! Every request is untrusted: copied out of the area, decoded with bounds checks, executed with
//! the client's credentials through the same [`Local`] service the embedded shim uses (paths
//! walked again here, permissions checked here), descriptions named by unguessable tokens this
//! daemon issued. A bad request gets EINVAL or EBADF; a panic while serving one (a broken
//! invariant) gets EIO and the daemon goes on.

use std::collections::{HashMap, HashSet};
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nosefs_core::fs::Fs;
use nosefs_core::namespace::perm::Cred;
use nosefs_core::vfs::{Found, OpenKind, Walked};
use nosefs_core::Errno;
use parking_lot::Mutex;
use rustix::event::{PollFd, PollFlags};
use rustix::net::{
    AddressFamily, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix,
    SocketFlags, SocketType,
};
use rustix::thread::futex;

use crate::proto::{op, Dec, Enc};
use crate::service::{Local, Service, XattrTarget};
use crate::shm::{current_cpu, owner, state, Area};
use crate::wait::Spinner;
use crate::workers::Workers;

mod door;
mod execute;
mod loans;
mod mounts;
mod reuse;

pub use door::proc_cred;
use door::{door, recred, release, release_ticket, watch_size};
use execute::execute;
pub use loans::MAX_LOANS_PER_CONNECTION;
use mounts::{is_mount_point, unescape};

/// How long a server thread keeps polling after its last request before it sleeps, once its
/// CPU is wanted by another thread (see [`SERVER_SPIN_IDLE`]).
pub const SERVER_SPIN: Duration = Duration::from_micros(50);
/// How long it keeps polling while its yields find nothing else to run on its CPU: a client
/// that computes for longer than [`SERVER_SPIN`] between requests (git between two objects,
/// SQLite between two statements) would otherwise find it asleep and wait for its wake-up, tens
/// of microseconds on a virtual machine whose idle CPUs halt (docs/benchmarks.md).
pub const SERVER_SPIN_IDLE: Duration = Duration::from_micros(500);
/// How long a server thread whose client ended waits for the next client before it exits.
const WORKER_IDLE: Duration = Duration::from_secs(10);

/// Slots per client (threads beyond share them).
pub const SLOTS: usize = 16;
/// Bytes per slot: a 64-byte header and the payload.
pub const SLOT_BYTES: usize = 256 << 10;
/// The handshake a client sends first: this, then its prefix.
pub const HELLO: &[u8; 8] = b"NOSEFS03";

/// The abstract socket name of the daemon serving the mount whose device is `major:minor`.
pub fn socket_name(major: u32, minor: u32) -> Vec<u8> {
    format!("nosefs-daemon/{major}:{minor}").into_bytes()
}

/// What the daemon tells the kernel's caches when a client changes something (the FUSE
/// mount's notifier), before it replies.
pub trait Invalidate: Send + Sync {
    /// The name `name` in directory `parent` changed (created, removed, renamed).
    fn entry(&self, parent: u64, name: &[u8]);
    /// The inode's attributes or data changed.
    fn inode(&self, ino: u64);
    /// Only the inode's attributes changed (its mode, owner, times, links or ACLs): what the
    /// kernel caches of its data stays valid.
    fn attributes(&self, ino: u64) {
        self.inode(ino);
    }
    /// The inode's size was set to `size` (truncate, fallocate): besides
    /// [`Invalidate::inode`], a kernel that maps the file learns a larger size at once, so pages
    /// its processes mapped past the old end do not fault SIGBUS.
    fn resized(&self, ino: u64, size: u64) {
        let _ = size;
        self.inode(ino);
    }
    /// `data` was written at `offset`: besides its attributes, what the kernel caches of that
    /// range is stale (and of that range only).
    fn written(&self, ino: u64, offset: u64, data: &[u8]) {
        let _ = (offset, data);
        self.inode(ino);
    }
    /// Whether the kernel may have something mounted on `ino` through the FUSE mount: only on
    /// an inode it holds (a mount point is a name it looked up and keeps), so the daemon reads
    /// the mount table for no other (rename, unlink and rmdir of a mount point are EBUSY).
    fn may_be_mounted_on(&self, ino: u64) -> bool {
        let _ = ino;
        true
    }
}

/// How the daemon serves clients.
pub struct Options {
    /// Serve clients of every user (else only the daemon's own user, as FUSE without
    /// `allow_other`).
    pub allow_other: bool,
    /// Where the kernel's caches are told about changes.
    pub invalidate: Option<Box<dyn Invalidate>>,
    /// Count what is served ([`crate::stats`]; [`Server::stats_report`]).
    pub stats: bool,
    /// Let clients the image's owner trusts read file data from their own read-only view of
    /// the image ([`op::IMAGE_LEND`], `nosefs_core::file::direct`): clients whose user owns
    /// the image file, or root, who could read the image itself anyway.
    pub direct_reads: bool,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("allow_other", &self.allow_other)
            .field("stats", &self.stats)
            .field("direct_reads", &self.direct_reads)
            .finish_non_exhaustive()
    }
}

/// One open file description a client holds.
#[derive(Debug, Clone, Copy)]
struct Description {
    ino: u64,
    kind: OpenKind,
    readable: bool,
    writable: bool,
    /// Connections and tickets holding it.
    refs: u32,
}

/// Descriptions handed to a forked child or an exec'd image, until it claims them.
#[derive(Debug)]
struct Ticket {
    tokens: Vec<u64>,
    /// The process they wait for; its end releases them.
    pidfd: Option<Arc<OwnedFd>>,
}

struct Shared {
    fs: Arc<Fs>,
    options: Options,
    descriptions: Mutex<HashMap<u64, Description>>,
    tokens: Tokens,
    tickets: Mutex<HashMap<u64, Ticket>>,
    stop: AtomicBool,
    /// Slot pairs given a server thread of their own, over the daemon's life.
    pair_threads: AtomicUsize,
    /// What was served, when counted.
    stats: Option<crate::stats::Stats>,
    /// Threads giving back the loans of clients that ended without returning them (a
    /// comparison of each shadow with its file, off the door thread); joined when serving stops.
    returns: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Ended clients' areas, for the next client with the same credentials.
    reuse: Arc<reuse::Reuse>,
    /// The user owning the image file, when clients may read from views of it
    /// ([`Options::direct_reads`]).
    image_owner: Option<u32>,
}

struct Conn {
    /// Shared with the files whose sizes it follows (its size board: [`op::SIZE_WATCH`]).
    area: Arc<Area>,
    /// The credentials requests are checked against: from the socket at connect, then from
    /// /proc at each RECRED.
    cred: parking_lot::RwLock<Cred>,
    /// The client process (its pid and a pidfd, so a RECRED never reads a reused pid).
    pid: i32,
    pidfd: Option<OwnedFd>,
    prefix: Vec<u8>,
    /// Tokens this connection holds a reference on.
    held: Mutex<HashSet<u64>>,
    dead: AtomicBool,
    /// The files whose sizes its board follows, by inode, with their words and whether the
    /// generation board follows them too.
    watched: Mutex<HashMap<u64, (u32, bool)>>,
    /// The socket it connected by: after the handshake it carries only the memfds of loans
    /// ([`op::SHADOW_LEND`]), daemon to client.
    socket: OwnedFd,
    /// Its loans of mapped files' shadows, by number (`nosefs_core::file::lent`): returned
    /// with their last pages at munmap, or, at the connection's end, unreported.
    loans: Mutex<HashMap<u64, nosefs_core::file::lent::LentShadow>>,
    next_loan: std::sync::atomic::AtomicU64,
    /// A RECRED changed its credentials: its area is not reused ([`reuse`]).
    cred_changed: AtomicBool,
    /// Where its area goes when it ends.
    reuse: Arc<reuse::Reuse>,
}

impl Drop for Conn {
    /// The area goes to the pool of reusable ones ([`reuse`]), which hands it out only once
    /// the client process has ended and nothing else here refers to it.
    fn drop(&mut self) {
        let Some(pidfd) = self.pidfd.take() else {
            return;
        };
        if !self.cred_changed.load(Ordering::Acquire) {
            let cred = self.cred.read().clone();
            self.reuse.keep(cred, Arc::clone(&self.area), pidfd);
        }
    }
}

/// A running daemon transport; dropping it stops serving (clients then get EIO).
pub struct Server {
    shared: Arc<Shared>,
    door: Option<std::thread::JoinHandle<()>>,
    wake: OwnedFd,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").finish_non_exhaustive()
    }
}

impl Server {
    /// Starts serving clients of `fs`, mounted (by FUSE) at `mount_point`.
    pub fn start(fs: Arc<Fs>, mount_point: &Path, options: Options) -> std::io::Result<Server> {
        let st = rustix::fs::stat(mount_point)?;
        let name = socket_name(rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
        let listener = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )?;
        bind_when_free(&listener, &SocketAddrUnix::new_abstract_name(&name)?)?;
        rustix::net::listen(&listener, 128)?;
        let (wake_read, wake) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let image_owner = options.direct_reads.then(|| fs.image_owner()).flatten();
        let shared = Arc::new(Shared {
            image_owner,
            fs,
            descriptions: Mutex::new(HashMap::new()),
            tokens: Tokens::new(),
            tickets: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
            returns: Mutex::new(Vec::new()),
            reuse: Arc::default(),
            pair_threads: AtomicUsize::new(0),
            stats: options.stats.then(crate::stats::Stats::default),
            options,
        });
        let door_shared = Arc::clone(&shared);
        let door = std::thread::Builder::new()
            .name("nosefs-door".into())
            .spawn(move || door(door_shared, listener, wake_read))?;
        Ok(Server {
            shared,
            door: Some(door),
            wake,
        })
    }

    /// What was served so far ([`crate::stats::Stats::report`]), if counted.
    pub fn stats_report(&self) -> Option<String> {
        self.shared.stats.as_ref().map(crate::stats::Stats::report)
    }

    /// How many slot pairs were given a server thread of their own so far (clients with
    /// calls in flight from several threads at once).
    pub fn pair_threads(&self) -> usize {
        self.shared.pair_threads.load(Ordering::Relaxed)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = rustix::io::write(&self.wake, b"x");
        if let Some(door) = self.door.take() {
            let _ = door.join();
        }
        // The door ended every client; their loans are given back before the image can be.
        let returns: Vec<_> = self.shared.returns.lock().drain(..).collect();
        for thread in returns {
            let _ = thread.join();
        }
    }
}

/// Binds the listener's name, waiting while another daemon still holds it: the name comes from
/// the mount's device number, which the kernel hands to the next FUSE mount as soon as an
/// unmount releases it, while the daemon that served the old mount may still be closing its
/// listener (tests that mount and unmount in parallel met this: the new daemon could not bind,
/// and its clients reached the old one as it went away).
fn bind_when_free(listener: &OwnedFd, addr: &SocketAddrUnix) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match rustix::net::bind(listener, addr) {
            Err(rustix::io::Errno::ADDRINUSE) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other.map_err(Into::into),
        }
    }
}

/// A ticket: drawn from the kernel's random source (a few per fork or exec).
fn random_token() -> u64 {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).expect("the kernel's random source");
    u64::from_le_bytes(b) | 1
}

/// Description tokens, one per open: a keyed hash (SipHash, whose keys std draws from the
/// kernel's random source) of a counter, as hard to guess as a random draw without a system
/// call per open (measured: `getrandom` was ~1% of the daemon's samples in create+close).
struct Tokens {
    key: std::collections::hash_map::RandomState,
    next: std::sync::atomic::AtomicU64,
}

impl Tokens {
    fn new() -> Tokens {
        Tokens {
            key: std::collections::hash_map::RandomState::new(),
            next: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A fresh token (odd, never 0); the caller checks it is not in use.
    fn draw(&self) -> u64 {
        use std::hash::BuildHasher;
        self.key.hash_one(self.next.fetch_add(1, Ordering::Relaxed)) | 1
    }
}

/// A client's first server thread: polls the slots whose pair has no thread of its own, waits a
/// little after the last request (see [`crate::wait`]), then sleeps on the doorbell. When it
/// finishes a call while another of the client's threads waits in another pair, the client has
/// calls in flight at once: that pair gets a thread of its own ([`serve_own_pair`]), so the
/// threads of one process are served side by side, as separate processes are.
fn serve_client(shared: &Arc<Shared>, conn: &Arc<Conn>) {
    thread_local! {
        /// A request's copy, kept by the pool's thread for its next client: a fresh one per
        /// connection was a payload-sized zeroing (a quarter MiB) for every process.
        static REQUEST: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    }
    let area = &conn.area;
    let mut request = REQUEST.take();
    request.resize(area.payload_bytes(), 0);
    // By pair: own_thread[p] for slots 2p and 2p + 1.
    let mut own_thread = vec![false; area.slots() / 2];
    let mut helpers = Vec::new();
    let mut idle = Spinner::new();
    let mut last_slot = 0;
    loop {
        let mut served = false;
        for slot in posted_first(area, 0..area.slots()) {
            if own_thread[slot / 2] || !take_request(area, slot) {
                continue;
            }
            let call = area.owner(slot).load(Ordering::Acquire) == owner::CALL;
            serve_slot(shared, conn, slot, &mut request);
            served = true;
            last_slot = slot;
            if !call {
                continue;
            }
            let waiting = (0..area.slots()).find(|&s| {
                s / 2 != slot / 2
                    && !own_thread[s / 2]
                    && area.state(s).load(Ordering::Acquire) == state::REQUEST
                    && area.owner(s).load(Ordering::Acquire) == owner::CALL
            });
            if let Some(other) = waiting {
                if let Some(helper) = give_own_thread(shared, conn, other / 2) {
                    own_thread[other / 2] = true;
                    helpers.push(helper);
                }
            }
        }
        if served {
            idle = Spinner::new();
            continue;
        }
        if conn.dead.load(Ordering::SeqCst) || shared.stop.load(Ordering::SeqCst) {
            break;
        }
        if idle.pause_while_idle(SERVER_SPIN, SERVER_SPIN_IDLE, || {
            client_here(area, last_slot)
        }) {
            continue;
        }
        sleep_until_rung(
            shared,
            conn,
            area.server_sleeping(),
            area.doorbell(),
            || {
                (0..area.slots()).any(|s| {
                    !own_thread[s / 2] && area.state(s).load(Ordering::SeqCst) == state::REQUEST
                })
            },
        );
        idle = Spinner::new();
    }
    for helper in helpers {
        let _ = helper.join();
    }
    REQUEST.set(request);
}

/// Starts the own server thread of slot pair `pair`; `None` if the system has no thread to
/// give.
fn give_own_thread(
    shared: &Arc<Shared>,
    conn: &Arc<Conn>,
    pair: usize,
) -> Option<std::thread::JoinHandle<()>> {
    let slots = [2 * pair, 2 * pair + 1];
    // Set before the thread's first poll: a request stored before the client sees the flag
    // (and so rang this thread's doorbell, not the new one's) is found by that poll.
    for slot in slots {
        conn.area.helper(slot).store(1, Ordering::SeqCst);
    }
    let (thread_shared, thread_conn) = (Arc::clone(shared), Arc::clone(conn));
    let spawned = std::thread::Builder::new()
        .name("nosefs-pair".into())
        .spawn(move || serve_own_pair(&thread_shared, &thread_conn, slots));
    match spawned {
        Ok(thread) => {
            shared.pair_threads.fetch_add(1, Ordering::Relaxed);
            Some(thread)
        }
        Err(_) => {
            for slot in slots {
                conn.area.helper(slot).store(0, Ordering::SeqCst);
            }
            None
        }
    }
}

/// The server thread of one slot pair: as [`serve_client`], for those two slots alone.
fn serve_own_pair(shared: &Shared, conn: &Conn, slots: [usize; 2]) {
    let area = &conn.area;
    let mut request = vec![0u8; area.payload_bytes()];
    let mut idle = Spinner::new();
    let mut last_slot = slots[0];
    loop {
        let mut served = false;
        for s in posted_first(area, slots.into_iter()) {
            if take_request(area, s) {
                serve_slot(shared, conn, s, &mut request);
                served = true;
                last_slot = s;
            }
        }
        if served {
            idle = Spinner::new();
            continue;
        }
        if conn.dead.load(Ordering::SeqCst) || shared.stop.load(Ordering::SeqCst) {
            return;
        }
        if idle.pause_while_idle(SERVER_SPIN, SERVER_SPIN_IDLE, || {
            client_here(area, last_slot)
        }) {
            continue;
        }
        let (sleeping, bell) = (
            area.helper_sleeping(slots[0]),
            area.helper_doorbell(slots[0]),
        );
        sleep_until_rung(shared, conn, sleeping, bell, || {
            slots
                .iter()
                .any(|&s| area.state(s).load(Ordering::SeqCst) == state::REQUEST)
        });
        idle = Spinner::new();
    }
}

/// Sleeps on the futex `bell` until a client rings it, unless `pending()` finds a request or the
/// client is gone. `sleeping` is set first, and a client reads it after storing its request, so
/// either the client rings or `pending()` sees the request (both sides SeqCst).
fn sleep_until_rung(
    shared: &Shared,
    conn: &Conn,
    sleeping: &std::sync::atomic::AtomicU32,
    bell: &std::sync::atomic::AtomicU32,
    pending: impl Fn() -> bool,
) {
    let rung = bell.load(Ordering::SeqCst);
    sleeping.store(1, Ordering::SeqCst);
    if !pending() && !conn.dead.load(Ordering::SeqCst) {
        if let Some(stats) = &shared.stats {
            stats.slept();
        }
        let _ = futex::wait(bell, futex::Flags::empty(), rung, None);
    }
    sleeping.store(0, Ordering::SeqCst);
}

/// `slots`, those holding a posted request first. A client thread posts its close before its
/// next call; serving them in that order frees the close's slot before the call is answered,
/// so the thread's next close finds its own pair free (measured: served the other way, two
/// threads' closes spilled into each other's pairs and create+close ran 15% slower with two
/// threads than before pairs had threads of their own).
fn posted_first<'a>(
    area: &'a Area,
    slots: impl Iterator<Item = usize> + Clone + 'a,
) -> impl Iterator<Item = usize> + 'a {
    let posted = move |&slot: &usize| area.owner(slot).load(Ordering::Relaxed) == owner::POSTED;
    let (first, rest) = (
        slots.clone().filter(posted),
        slots.filter(move |s| !posted(s)),
    );
    first.chain(rest)
}

/// Takes slot `slot`'s request, if it holds one, for serving.
fn take_request(area: &Area, slot: usize) -> bool {
    let taken = area.state(slot).load(Ordering::Acquire) == state::REQUEST
        && area
            .state(slot)
            .compare_exchange(
                state::REQUEST,
                state::SERVING,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok();
    if taken {
        area.server_cpu(slot)
            .store(current_cpu(), Ordering::Relaxed);
    }
    taken
}

/// Whether slot `slot`'s client thread last ran on this thread's CPU (a hint the client
/// writes: a lying client only changes how this thread waits for it).
fn client_here(area: &Area, slot: usize) -> bool {
    area.client_cpu(slot).load(Ordering::Relaxed) == current_cpu()
}

/// Where a read's data goes: into the reply in the slot's payload, in place, behind the reply's
/// head (its errno and the data's length), so the data is copied once on this side.
struct ReplyData<'a> {
    area: &'a Area,
    slot: usize,
    /// Bytes put there.
    len: usize,
}

/// The head of a reply that carries data: errno, then the data's length.
const DATA_REPLY_HEAD_BYTES: usize = 8;

impl ReplyData<'_> {
    /// Room for data behind the head.
    fn room(&self) -> usize {
        self.area.payload_bytes() - DATA_REPLY_HEAD_BYTES
    }

    /// Lets `fill` put up to `max` bytes in place; it returns how many it put.
    fn fill(
        &mut self,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, Errno>,
    ) -> Result<usize, Errno> {
        let max = max.min(self.room());
        let n = self
            .area
            .fill(self.slot, DATA_REPLY_HEAD_BYTES, max, fill)?
            .min(max);
        self.len = n;
        Ok(n)
    }

    /// Puts `bytes` after the data (READ_MAPPED's copy of the pieces); the caller left room.
    fn append(&mut self, bytes: &[u8]) -> Result<(), Errno> {
        if DATA_REPLY_HEAD_BYTES + self.len + bytes.len() > self.area.payload_bytes() {
            return Err(Errno::EIO);
        }
        self.area
            .put(self.slot, DATA_REPLY_HEAD_BYTES + self.len, bytes);
        self.len += bytes.len();
        Ok(())
    }
}

fn serve_slot(shared: &Shared, conn: &Conn, slot: usize, request: &mut [u8]) {
    let area = &conn.area;
    let len = (area.len(slot).load(Ordering::Acquire) as usize).min(area.payload_bytes());
    area.get(slot, 0, &mut request[..len]);
    let mut data = ReplyData { area, slot, len: 0 };
    let started = shared.stats.as_ref().map(|_| Instant::now());
    let executed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        execute(shared, conn, &request[..len], &mut data)
    }));
    if let (Some(stats), Some(started)) = (&shared.stats, started) {
        let opcode = request
            .get(..4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        stats.served(opcode, started.elapsed());
    }
    let (reply, tail) = match executed {
        Ok(Ok(reply)) if data.len == 0 && reply.buf.len() <= area.payload_bytes() => (reply, 0),
        Ok(Ok(reply)) if reply.buf.len() == DATA_REPLY_HEAD_BYTES => (reply, data.len),
        Ok(Ok(_)) | Err(_) => (Enc::new(libc::EIO as u32), 0),
        Ok(Err(errno)) => (Enc::new(errno.0 as u32), 0),
    };
    // A reply with data: its head goes before the data `execute` put in place.
    area.put(slot, 0, &reply.buf);
    area.len(slot)
        .store((reply.buf.len() + tail) as u32, Ordering::Release);
    area.state(slot).store(state::REPLY, Ordering::SeqCst);
    if area.client_waiting(slot).load(Ordering::SeqCst) != 0 {
        let _ = futex::wake(area.state(slot), futex::Flags::empty(), 1);
    }
}

/// Where the daemon of the FUSE mount at `mount_point` would listen, from /proc/self/mountinfo:
/// the mount's device and the user that owns it (`user_id=`), or `None` when `mount_point` is
/// not a FUSE mount (whether noseFS's daemon serves it, connecting tells).
pub fn find_daemon(mountinfo: &str, mount_point: &[u8]) -> Option<(u32, u32, u32)> {
    mountinfo.lines().rev().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fields: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        // `fuse.nosefs` where the subtype reaches the kernel, plain `fuse` where it does not;
        // the daemon's socket tells the rest.
        let fstype = *right.first()?;
        if unescape(fields.get(4)?) != mount_point || !(fstype == "fuse" || fstype == "fuse.nosefs")
        {
            return None;
        }
        let (major, minor) = fields.get(2)?.split_once(':')?;
        let owner = right
            .get(2)?
            .split(',')
            .find_map(|o| o.strip_prefix("user_id="))?
            .parse()
            .ok()?;
        Some((major.parse().ok()?, minor.parse().ok()?, owner))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_names_the_daemon() {
        let info = "22 1 0:21 / /proc rw - proc proc rw\n\
                    90 30 0:77 / /mnt/my\\040nose rw,nosuid,nodev - fuse.nosefs /img rw,user_id=1000,group_id=1000,default_permissions\n";
        assert_eq!(find_daemon(info, b"/mnt/my nose"), Some((0, 77, 1000)));
        assert_eq!(find_daemon(info, b"/proc"), None);
        assert_eq!(find_daemon(info, b"/mnt/other"), None);
    }
}
