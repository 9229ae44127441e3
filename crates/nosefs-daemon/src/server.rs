//! The daemon side: shim clients of one mounted image, served over shared memory.
//!
//! One thread (the *door*) owns the listening socket and every client socket: it accepts
//! clients (credentials from SO_PEERCRED and /proc, `allow_other` honoured), hands each a
//! request area (a sealed memfd over SCM_RIGHTS), starts the client's server thread, notices a
//! client's hang-up (its process died or exec'd) and the end of processes that were handed
//! descriptions at fork or exec (pidfds), and releases what they held. It sleeps in `poll` with
//! no timeout: a daemon with no clients uses no CPU.
//!
//! A client's server thread polls the slots while requests keep coming, keeps polling for
//! [`SERVER_SPIN`] after the last one (yielding its CPU after the first microseconds: see
//! [`crate::wait`]), then sleeps on the area's doorbell futex until a client rings it. A slot
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
use crate::workers::{Done, Workers};

/// How long a server thread keeps polling after its last request before it sleeps.
pub const SERVER_SPIN: Duration = Duration::from_micros(50);
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
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("allow_other", &self.allow_other)
            .field("stats", &self.stats)
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
    /// Set by its server thread when it stops serving the connection (after `dead`).
    finished: Done,
    /// The files whose sizes its board follows, by inode, with their words.
    watched: Mutex<HashMap<u64, u32>>,
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
        let shared = Arc::new(Shared {
            fs,
            descriptions: Mutex::new(HashMap::new()),
            tokens: Tokens::new(),
            tickets: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
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

/// The door: accepts clients, watches their sockets and the pidfds of tickets.
fn door(shared: Arc<Shared>, listener: OwnedFd, wake: OwnedFd) {
    let serving = Arc::clone(&shared);
    let workers = Workers::new("nosefs-client", WORKER_IDLE, move |conn: Arc<Conn>| {
        let _finished = conn.finished.when_dropped();
        serve_client(&serving, &conn);
    });
    // The next client's request area, made while no one waits for it.
    let mut spare = Area::create(SLOTS, SLOT_BYTES).ok();
    let mut clients: Vec<(OwnedFd, Arc<Conn>)> = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        let tickets: Vec<(u64, Arc<OwnedFd>)> = shared
            .tickets
            .lock()
            .iter()
            .filter_map(|(t, k)| k.pidfd.as_ref().map(|fd| (*t, Arc::clone(fd))))
            .collect();
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(2 + clients.len() + tickets.len());
        fds.push(PollFd::new(&listener, PollFlags::IN));
        fds.push(PollFd::new(&wake, PollFlags::IN));
        for (socket, _) in &clients {
            fds.push(PollFd::new(socket, PollFlags::IN));
        }
        for (_, fd) in &tickets {
            fds.push(PollFd::new(&**fd, PollFlags::IN));
        }
        if rustix::event::poll(&mut fds, None).is_err() {
            continue;
        }
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        let (client_ready, ticket_ready) = ready[2..].split_at(clients.len());
        for (k, (ticket, _)) in tickets.iter().enumerate() {
            if ticket_ready[k] {
                release_ticket(&shared, *ticket);
            }
        }
        // Clients that hung up (or sent anything: the socket carries nothing after the
        // handshake, so a message is a protocol error and ends the client too).
        let mut kept = Vec::with_capacity(clients.len());
        for (index, client) in clients.drain(..).enumerate() {
            if client_ready[index] {
                end_client(&shared, &client.1);
            } else {
                kept.push(client);
            }
        }
        clients = kept;
        if ready[0] {
            if let Ok(socket) = rustix::net::accept_with(&listener, SocketFlags::CLOEXEC) {
                if let Some(conn) = admit(&shared, &socket, &mut spare) {
                    match workers.run(Arc::clone(&conn)) {
                        Ok(()) => clients.push((socket, conn)),
                        Err(_) => {
                            // No thread serves it: nothing to wait for.
                            conn.finished.set();
                            end_client(&shared, &conn);
                        }
                    }
                }
                if spare.is_none() {
                    spare = Area::create(SLOTS, SLOT_BYTES).ok();
                }
            }
        }
    }
    for (_, conn) in clients {
        end_client(&shared, &conn);
    }
    workers.stop();
}

/// A word of `conn`'s size board that follows file `ino`'s size (one per file and connection,
/// kept until the connection ends), or `u32::MAX` when the board is full.
fn watch_size(shared: &Shared, conn: &Conn, ino: u64) -> Result<u32, Errno> {
    let mut watched = conn.watched.lock();
    if let Some(&index) = watched.get(&ino) {
        return Ok(index);
    }
    let index = watched.len() as u32;
    if conn.area.size_word(index).is_none() {
        return Ok(u32::MAX);
    }
    let sink: Arc<dyn nosefs_core::file::SizeSink> = conn.area.clone();
    shared
        .fs
        .watch_size(ino, sink, index)
        .map_err(|e| e.errno())?;
    watched.insert(ino, index);
    Ok(index)
}

fn end_client(shared: &Shared, conn: &Conn) {
    conn.dead.store(true, Ordering::SeqCst);
    let area = &conn.area;
    for bell in std::iter::once(area.doorbell()).chain(
        (0..area.slots())
            .step_by(2)
            .map(|s| area.helper_doorbell(s)),
    ) {
        bell.fetch_add(1, Ordering::SeqCst);
        let _ = futex::wake(bell, futex::Flags::empty(), 1);
    }
    conn.finished.wait();
    let sink: Arc<dyn nosefs_core::file::SizeSink> = conn.area.clone();
    for (ino, index) in conn.watched.lock().drain() {
        shared.fs.unwatch_size(ino, &sink, index);
    }
    let held: Vec<u64> = conn.held.lock().drain().collect();
    for token in held {
        release(shared, token);
    }
}

/// Drops one reference on a description; the last closes the inode in the core.
fn release(shared: &Shared, token: u64) {
    let mut descriptions = shared.descriptions.lock();
    let Some(d) = descriptions.get_mut(&token) else {
        return;
    };
    d.refs -= 1;
    if d.refs == 0 {
        let d = descriptions.remove(&token).expect("present");
        drop(descriptions);
        if d.kind != OpenKind::Path {
            let _ = shared.fs.close(d.ino);
        }
    }
}

fn release_ticket(shared: &Shared, ticket: u64) {
    let Some(t) = shared.tickets.lock().remove(&ticket) else {
        return;
    };
    for token in t.tokens {
        release(shared, token);
    }
}

/// The client's credentials: uid and gid from the socket, supplementary groups from /proc.
fn peer_cred(socket: &OwnedFd) -> Option<(i32, Cred)> {
    let ucred = rustix::net::sockopt::socket_peercred(socket).ok()?;
    let pid = ucred.pid.as_raw_nonzero().get();
    let groups = match crate::sys::peer_groups(socket) {
        Some(groups) => groups.into_iter().collect(),
        None => proc_cred(pid)?.groups,
    };
    Some((
        pid,
        Cred {
            uid: ucred.uid.as_raw(),
            gid: ucred.gid.as_raw(),
            groups,
        },
    ))
}

/// The credentials a process's file-system calls are checked with, from /proc: the
/// file-system uid and gid (the fourth column; equal to the effective ones unless set apart
/// with setfsuid) and the supplementary groups.
pub fn proc_cred(pid: i32) -> Option<Cred> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<Vec<u32>> {
        let line = status.lines().find_map(|l| l.strip_prefix(name))?;
        Some(
            line.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect(),
        )
    };
    let uids = field("Uid:")?;
    let gids = field("Gid:")?;
    Some(Cred {
        uid: *uids.get(3)?,
        gid: *gids.get(3)?,
        groups: field("Groups:").unwrap_or_default().into_iter().collect(),
    })
}

/// RECRED: the client's credentials again, read by the daemon from /proc. A client whose new
/// uid the mount does not admit (no `allow_other`) loses its connection.
fn recred(shared: &Shared, conn: &Conn) -> Result<(), Errno> {
    let cred = proc_cred(conn.pid).ok_or(Errno::EIO)?;
    // The pid was the client's when the status was read only if the process still runs now.
    let alive = conn.pidfd.as_ref().is_some_and(|fd| {
        let mut poll = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
        let now = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut poll, Some(&now)).is_ok_and(|n| n == 0)
    });
    if !alive {
        return Err(Errno::EIO);
    }
    let own_uid = rustix::process::geteuid().as_raw();
    if !shared.options.allow_other && cred.uid != own_uid {
        conn.dead.store(true, Ordering::Release);
        return Err(Errno::EACCES);
    }
    *conn.cred.write() = cred;
    Ok(())
}

/// The handshake: the client's prefix in, its request area (`spare`, when one is ready) out.
fn admit(shared: &Arc<Shared>, socket: &OwnedFd, spare: &mut Option<Area>) -> Option<Arc<Conn>> {
    let (pid, cred) = peer_cred(socket)?;
    let own_uid = rustix::process::geteuid().as_raw();
    let allowed = shared.options.allow_other || cred.uid == own_uid;
    let mut hello = [0u8; 8 + libc::PATH_MAX as usize];
    let n = rustix::net::recv(socket, &mut hello, RecvFlags::empty())
        .ok()?
        .0;
    let prefix = hello[..n].strip_prefix(HELLO)?.to_vec();
    if !allowed {
        let _ = rustix::net::send(
            socket,
            &(libc::EACCES as u32).to_le_bytes(),
            SendFlags::NOSIGNAL,
        );
        return None;
    }
    if !prefix.starts_with(b"/")
        || prefix.len() < 2
        || prefix.contains(&0)
        || prefix.ends_with(b"/")
    {
        let _ = rustix::net::send(
            socket,
            &(libc::EINVAL as u32).to_le_bytes(),
            SendFlags::NOSIGNAL,
        );
        return None;
    }
    let area = match spare.take() {
        Some(area) => area,
        None => Area::create(SLOTS, SLOT_BYTES).ok()?,
    };
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [area.fd().as_fd()];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return None;
    }
    rustix::net::sendmsg(
        socket,
        &[IoSlice::new(&0u32.to_le_bytes())],
        &mut control,
        SendFlags::NOSIGNAL,
    )
    .ok()?;
    let pidfd = rustix::process::Pid::from_raw(pid)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
    let conn = Arc::new(Conn {
        area: Arc::new(area),
        cred: parking_lot::RwLock::new(cred),
        pid,
        pidfd,
        prefix,
        held: Mutex::new(HashSet::new()),
        dead: AtomicBool::new(false),
        finished: Done::default(),
        watched: Mutex::new(HashMap::new()),
    });
    if let Some(stats) = &shared.stats {
        stats.connected();
    }
    Some(conn)
}

/// A client's first server thread: polls the slots whose pair has no thread of its own, waits a
/// little after the last request (see [`crate::wait`]), then sleeps on the doorbell. When it
/// finishes a call while another of the client's threads waits in another pair, the client has
/// calls in flight at once: that pair gets a thread of its own ([`serve_own_pair`]), so the
/// threads of one process are served side by side, as separate processes are.
fn serve_client(shared: &Arc<Shared>, conn: &Arc<Conn>) {
    let area = &conn.area;
    let mut request = vec![0u8; area.payload_bytes()];
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
        if idle.pause(SERVER_SPIN, || client_here(area, last_slot)) {
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
        if idle.pause(SERVER_SPIN, || client_here(area, last_slot)) {
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

/// A description this client may use: adopted on first use from another connection of the
/// same family (fork) only through a ticket, so a token is a capability.
fn description(shared: &Shared, conn: &Conn, token: u64) -> Result<Description, Errno> {
    if !conn.held.lock().contains(&token) {
        return Err(Errno(libc::EBADF));
    }
    shared
        .descriptions
        .lock()
        .get(&token)
        .copied()
        .ok_or(Errno(libc::EBADF))
}

fn readable(d: &Description) -> Result<u64, Errno> {
    match (d.kind, d.readable) {
        (OpenKind::Dir, _) => Err(Errno::EISDIR),
        (OpenKind::File, true) => Ok(d.ino),
        _ => Err(Errno(libc::EBADF)),
    }
}

fn writable(d: &Description) -> Result<u64, Errno> {
    if d.writable && d.kind == OpenKind::File {
        Ok(d.ino)
    } else {
        Err(Errno(libc::EBADF))
    }
}

/// Walks a path sent with a path operation again, with the client's credentials.
fn rewalk(local: &Local<'_>, d: &mut Dec<'_>) -> Result<Found, Errno> {
    let mut path = d.bytes()?.to_vec();
    let trailing_slash = d.bool()?;
    if d.bool()? {
        path.extend_from_slice(b"/."); // walked again, it names the directory itself again
    }
    match local.walk(path, false)? {
        Walked::Found(mut found) => {
            found.trailing_slash = trailing_slash;
            Ok(found)
        }
        Walked::Outside(_) => Err(Errno::EINVAL),
    }
}

fn ok() -> Enc {
    Enc::new(0)
}

/// Decodes and runs one request. A read puts its data in the reply in place (`data`), behind
/// the head it returns.
fn execute(
    shared: &Shared,
    conn: &Conn,
    request: &[u8],
    data: &mut ReplyData<'_>,
) -> Result<Enc, Errno> {
    let room = data.area.payload_bytes();
    let cred = || conn.cred.read().clone();
    let local = Local {
        fs: &shared.fs,
        prefix: &conn.prefix,
        cred: &cred,
    };
    let inval = shared.options.invalidate.as_deref();
    let mut d = Dec::new(request);
    let opcode = d.u32()?;
    let mut reply = ok();
    match opcode {
        op::NOP => {}
        op::RECRED => recred(shared, conn)?,
        op::WALK => {
            let path = d.bytes()?.to_vec();
            let follow = d.bool()?;
            reply.walked(&local.walk(path, follow)?);
        }
        op::WALK_IN => {
            let dir = dir_description(shared, conn, d.u64()?)?;
            let dir_path = d.bytes()?;
            let name = d.bytes()?;
            match local.walk_in(dir.ino, dir_path, name, d.bool()?)? {
                Some(f) => reply.u8(1).found(&f),
                None => reply.u8(0),
            };
        }
        op::OPEN => {
            let found = rewalk(&local, &mut d)?;
            let (flags, mode, umask) = (d.i32()?, d.u32()?, d.u32()?);
            open(
                shared,
                conn,
                &local,
                &found,
                (flags, mode, umask),
                &mut reply,
            )?;
        }
        op::OPEN_IN => {
            let dir = dir_description(shared, conn, d.u64()?)?;
            let (dir_path, name, follow) = (d.bytes()?, d.bytes()?, d.bool()?);
            let (flags, mode, umask) = (d.i32()?, d.u32()?, d.u32()?);
            let mark = reply.buf.len();
            crate::service::open_again(flags, || {
                reply.buf.truncate(mark);
                match local.walk_in(dir.ino, dir_path, name, follow)? {
                    Some(found) => {
                        reply.u8(1).found(&found);
                        Ok(open(
                            shared,
                            conn,
                            &local,
                            &found,
                            (flags, mode, umask),
                            &mut reply,
                        ))
                    }
                    None => {
                        reply.u8(0);
                        Ok(Ok(()))
                    }
                }
            })?;
        }
        op::UNLINK_IN | op::RENAME_IN => {
            let name_in = |d: &mut Dec<'_>| -> Result<Option<Found>, Errno> {
                let dir = dir_description(shared, conn, d.u64()?)?;
                let (dir_path, name) = (d.bytes()?, d.bytes()?);
                local.walk_in(dir.ino, dir_path, name, false)
            };
            let first = name_in(&mut d)?;
            let second = if opcode == op::RENAME_IN {
                Some(name_in(&mut d)?)
            } else {
                None
            };
            let done: Vec<Found> = match (first, second) {
                (Some(f), None) => {
                    local.unlink(&f)?;
                    vec![f]
                }
                (Some(a), Some(Some(b))) => {
                    local.rename(&a, &b, d.u32()?)?;
                    vec![a, b]
                }
                _ => Vec::new(), // a name needs the full walk: nothing done
            };
            if let Some(i) = inval {
                for f in &done {
                    i.entry(f.parent, &f.name);
                    i.inode(f.parent);
                    if let Some(a) = f.attr {
                        i.inode(a.ino);
                    }
                }
            }
            reply.bool(!done.is_empty());
        }
        op::OPEN_PATH => {
            let path = d.bytes()?.to_vec();
            let follow = d.bool()?;
            let (flags, mode, umask) = (d.i32()?, d.u32()?, d.u32()?);
            let mark = reply.buf.len();
            crate::service::open_again(flags, || {
                reply.buf.truncate(mark);
                let walked = local.walk(path.clone(), follow)?;
                reply.walked(&walked);
                Ok(match &walked {
                    Walked::Found(found) => open(
                        shared,
                        conn,
                        &local,
                        found,
                        (flags, mode, umask),
                        &mut reply,
                    ),
                    Walked::Outside(_) => Ok(()),
                })
            })?;
        }
        op::CLOSE => {
            let token = d.u64()?;
            if conn.held.lock().remove(&token) {
                release(shared, token);
            }
        }
        op::READ => {
            let ino = readable(&description(shared, conn, d.u64()?)?)?;
            let offset = d.u64()?;
            let len = d.u32()? as usize;
            let n = data.fill(len, |buf| local.read(ino, offset, buf))?;
            // As `Enc::bytes` would put it: the length, then the bytes (already in place).
            reply.u32(n as u32);
        }
        op::WRITE => {
            let ino = writable(&description(shared, conn, d.u64()?)?)?;
            let offset = d.u64()?;
            let append = d.bool()?;
            let data = d.bytes()?;
            let at = local.write(ino, offset, data, append)?;
            if let Some(i) = inval {
                i.written(ino, at, data);
            }
            reply.u64(at);
        }
        op::FSYNC => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind == OpenKind::File {
                local.fsync(desc.ino)?;
            }
        }
        op::FTRUNCATE => {
            let ino = writable(&description(shared, conn, d.u64()?)?).map_err(|_| Errno::EINVAL)?;
            let size = d.u64()?;
            local.ftruncate(ino, size)?;
            if let Some(i) = inval {
                i.resized(ino, size);
            }
        }
        op::FSTAT => {
            let desc = description(shared, conn, d.u64()?)?;
            reply.attr(&local.fstat(desc.ino)?);
        }
        op::FSETATTR => {
            let desc = description(shared, conn, d.u64()?)?;
            let change = d.setattr()?;
            if change.size.is_some() {
                return Err(Errno::EINVAL);
            }
            local.fsetattr(desc.ino, &change, d.bool()?)?;
            if let Some(i) = inval {
                i.inode(desc.ino);
            }
        }
        op::READDIR => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind != OpenKind::Dir {
                return Err(Errno::ENOTDIR);
            }
            let cookie = d.u64()?;
            // Each entry costs at most 4 + 255 + 20 bytes: never more than the reply holds.
            let max = (d.u32()? as usize).min((room - 16) / 280).max(1);
            let entries = local.readdir(desc.ino, cookie, max)?;
            reply.u32(entries.len() as u32);
            for e in &entries {
                reply.entry(e);
            }
        }
        op::LISTING_END => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind != OpenKind::Dir {
                return Err(Errno::ENOTDIR);
            }
            reply.u64(local.listing_end(desc.ino)?);
        }
        op::SIZE_WATCH => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind != OpenKind::File {
                return Err(Errno::EINVAL);
            }
            let index = watch_size(shared, conn, desc.ino)?;
            reply.u64(u64::from(index));
        }
        op::PATH_OF => {
            let desc = description(shared, conn, d.u64()?)?;
            reply.bytes(&local.path_of(desc.ino)?);
        }
        op::DATA_MAP => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind != OpenKind::File {
                return Err(Errno::EINVAL);
            }
            let (start, len) = (d.u64()?, d.u64()?);
            // 25 bytes a run: never more than the reply holds.
            let max = (d.u32()? as usize).min((room - 16) / 25);
            let runs = local.data_map(desc.ino, start, len, max)?;
            reply.u32(runs.len() as u32);
            for r in &runs {
                let flags = u8::from(r.last) | (u8::from(r.pending) << 1);
                reply.u64(r.logical).u64(r.physical).u64(r.length).u8(flags);
            }
        }
        op::SEEK_HOLE => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind != OpenKind::File {
                return Err(Errno::EINVAL);
            }
            let at = local.seek_hole(desc.ino, d.u64()?, d.bool()?)?;
            reply.u64(at);
        }
        op::FALLOCATE => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind != OpenKind::File {
                return Err(Errno(libc::ENODEV));
            }
            let ino = writable(&desc)?;
            local.fallocate(ino, d.i32()?, d.i64()?, d.i64()?)?;
            if let Some(i) = inval {
                i.resized(ino, local.fstat(ino)?.size);
            }
        }
        op::TRUNCATE => {
            let found = rewalk(&local, &mut d)?;
            let size = d.i64()?;
            local.truncate(&found, size)?;
            if let (Some(i), Some(a)) = (inval, found.attr) {
                i.resized(a.ino, size as u64);
            }
        }
        op::MKDIR | op::MKNOD | op::SYMLINK | op::LINK => {
            let (found, other) = match opcode {
                op::LINK => {
                    let from = rewalk(&local, &mut d)?;
                    (rewalk(&local, &mut d)?, Some(from))
                }
                _ => (rewalk(&local, &mut d)?, None),
            };
            match opcode {
                op::MKDIR => local.mkdir(&found, d.u32()?, d.u32()?)?,
                op::MKNOD => {
                    let (mode, rdev, umask) = (d.u32()?, d.u64()?, d.u32()?);
                    let attr = local.mknod(&found, mode, rdev, umask)?;
                    reply.attr(&attr);
                }
                op::SYMLINK => local.symlink(d.bytes()?, &found)?,
                _ => {
                    let from = other.expect("link has a source");
                    local.link(&from, &found)?;
                    if let (Some(i), Some(a)) = (inval, from.attr) {
                        i.inode(a.ino);
                    }
                }
            }
            if let Some(i) = inval {
                i.entry(found.parent, &found.name);
                i.inode(found.parent);
            }
        }
        op::READLINK => {
            let found = rewalk(&local, &mut d)?;
            reply.bytes(&local.readlink(&found)?);
        }
        op::UNLINK | op::RMDIR => {
            let found = rewalk(&local, &mut d)?;
            if opcode == op::UNLINK {
                local.unlink(&found)?;
            } else {
                let last = d.bytes()?;
                if found.attr.is_some_and(|a| a.is_dir()) && is_mount_point(&found.path) {
                    // Something is mounted on it through the FUSE mount: the kernel says EBUSY.
                    return Err(Errno(libc::EBUSY));
                }
                local.rmdir(&found, last)?;
            }
            if let Some(i) = inval {
                i.entry(found.parent, &found.name);
                i.inode(found.parent);
                if let Some(a) = found.attr {
                    i.inode(a.ino);
                }
            }
        }
        op::RENAME => {
            let from = rewalk(&local, &mut d)?;
            let to = rewalk(&local, &mut d)?;
            local.rename(&from, &to, d.u32()?)?;
            if let Some(i) = inval {
                for f in [&from, &to] {
                    i.entry(f.parent, &f.name);
                    i.inode(f.parent);
                    if let Some(a) = f.attr {
                        i.inode(a.ino);
                    }
                }
            }
        }
        op::SETATTR => {
            let found = rewalk(&local, &mut d)?;
            let change = d.setattr()?;
            if change.size.is_some() {
                return Err(Errno::EINVAL);
            }
            local.setattr(&found, &change, d.bool()?)?;
            if let (Some(i), Some(a)) = (inval, found.attr) {
                i.inode(a.ino);
            }
        }
        op::STATFS => {
            let s = local.statfs()?;
            reply
                .u64(s.blocks)
                .u64(s.blocks_free)
                .u64(s.inodes)
                .u64(s.inodes_free);
        }
        op::SYNC_ALL => local.sync_all()?,
        op::FLINK => {
            let desc = description(shared, conn, d.u64()?)?;
            let to = rewalk(&local, &mut d)?;
            local.flink(desc.ino, &to)?;
            if let Some(i) = inval {
                i.entry(to.parent, &to.name);
                i.inode(to.parent);
                i.inode(desc.ino);
            }
        }
        op::XATTR | op::FXATTR => {
            let (ino, out) = if opcode == op::XATTR {
                let found = rewalk(&local, &mut d)?;
                let call = d.xattr_call()?;
                let ino = found.existing()?.ino;
                (ino, local.xattr(XattrTarget::Path(&found), call)?)
            } else {
                let desc = description(shared, conn, d.u64()?)?;
                if desc.kind == OpenKind::Path {
                    return Err(Errno::EBADF); // as fgetxattr on an O_PATH descriptor
                }
                let call = d.xattr_call()?;
                (desc.ino, local.xattr(XattrTarget::Handle(desc.ino), call)?)
            };
            // A change may change the mode (an ACL), and the kernel caches ACLs with the inode.
            if let Some(i) = inval {
                i.inode(ino);
            }
            reply.bytes(&out);
        }
        op::HOLD => {
            let n = d.u32()? as usize;
            let mut tokens = Vec::with_capacity(n.min(4096));
            for _ in 0..n {
                let token = d.u64()?;
                description(shared, conn, token)?;
                tokens.push(token);
            }
            let mut descriptions = shared.descriptions.lock();
            for t in &tokens {
                if let Some(desc) = descriptions.get_mut(t) {
                    desc.refs += 1;
                }
            }
            drop(descriptions);
            let ticket = random_token();
            shared.tickets.lock().insert(
                ticket,
                Ticket {
                    tokens,
                    pidfd: None,
                },
            );
            reply.u64(ticket);
        }
        op::CLAIM => {
            let ticket = d.u64()?;
            let n = d.u32()? as usize;
            let mut keep = HashSet::new();
            for _ in 0..n {
                keep.insert(d.u64()?);
            }
            let t = shared.tickets.lock().remove(&ticket).ok_or(Errno::ENOENT)?;
            for token in t.tokens {
                if keep.contains(&token) && conn.held.lock().insert(token) {
                    continue; // the ticket's reference is now this connection's
                }
                release(shared, token);
            }
        }
        op::BIND => {
            let ticket = d.u64()?;
            let pid = d.i32()?;
            if pid <= 0 {
                return Err(Errno::EINVAL); // no process has it
            }
            let pidfd = rustix::process::Pid::from_raw(pid).and_then(|p| {
                rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
            });
            let mut tickets = shared.tickets.lock();
            match (tickets.get_mut(&ticket), pidfd) {
                (Some(t), Some(fd)) => t.pidfd = Some(Arc::new(fd)),
                (Some(_), None) => {
                    drop(tickets);
                    release_ticket(shared, ticket); // the process is gone already
                }
                (None, _) => {} // claimed already
            }
        }
        _ => return Err(Errno(libc::ENOSYS)),
    }
    Ok(reply)
}

/// A description `token` names for `conn` that can hold names (a directory, or an O_PATH one):
/// ENOTDIR for a file.
fn dir_description(shared: &Shared, conn: &Conn, token: u64) -> Result<Description, Errno> {
    let dir = description(shared, conn, token)?;
    if dir.kind == OpenKind::File {
        return Err(Errno::ENOTDIR);
    }
    Ok(dir)
}

/// `open` of a found path for a client: the description, its token held by the connection, the
/// kernel's caches invalidated where a create or truncate changed what they may hold; the
/// reply gets the attributes, the kind and the token.
fn open(
    shared: &Shared,
    conn: &Conn,
    local: &Local<'_>,
    found: &Found,
    (flags, mode, umask): (i32, u32, u32),
    reply: &mut Enc,
) -> Result<(), Errno> {
    let inval = shared.options.invalidate.as_deref();
    let opened = local.open(found, flags, mode, umask)?;
    if found.attr.is_none() {
        if let Some(i) = inval {
            i.entry(found.parent, &found.name);
            i.inode(found.parent);
        }
    } else if flags & libc::O_TRUNC != 0 && opened.kind == OpenKind::File {
        if let Some(i) = inval {
            i.inode(opened.attr.ino);
        }
    }
    let accmode = flags & libc::O_ACCMODE;
    if opened.kind != OpenKind::Path {
        shared.fs.open(opened.attr.ino).map_err(|e| e.errno())?;
    }
    let mut descriptions = shared.descriptions.lock();
    let token = loop {
        let token = shared.tokens.draw();
        if !descriptions.contains_key(&token) {
            break token;
        }
    };
    descriptions.insert(
        token,
        Description {
            ino: opened.attr.ino,
            kind: opened.kind,
            readable: opened.kind != OpenKind::Path
                && (accmode == libc::O_RDONLY || accmode == libc::O_RDWR),
            writable: opened.kind != OpenKind::Path
                && (accmode == libc::O_WRONLY || accmode == libc::O_RDWR),
            refs: 1,
        },
    );
    drop(descriptions);
    conn.held.lock().insert(token);
    reply.attr(&opened.attr).kind(opened.kind).u64(token);
    Ok(())
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

/// Whether the kernel has something mounted at `path` (a directory of the FUSE mount that a
/// client is about to remove: rmdir(2) answers EBUSY for a mount point).
fn is_mount_point(path: &[u8]) -> bool {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    mountinfo.lines().any(|line| {
        line.split(' ')
            .nth(4)
            .is_some_and(|point| unescape(point) == path)
    })
}

/// mountinfo's octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
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
