//! The door thread and a connection's life: accepting a client (credentials, the handshake,
//! its request area), handing it a server thread from the pool, and at its end (hang-up, exit
//! or exec) releasing what it held: descriptions, size watches, hand-over tickets, loans of
//! shadows. Also the credentials a RECRED reads again from /proc.

use super::*;

/// The door: accepts clients, watches their sockets and the pidfds of tickets.
pub(super) fn door(shared: Arc<Shared>, listener: OwnedFd, wake: OwnedFd) {
    let serving = Arc::clone(&shared);
    let workers = Workers::new("nosefs-client", WORKER_IDLE, move |conn: Arc<Conn>| {
        // Released however serving ends (a panic's unwinding too): nothing the client held
        // outlives it.
        let _release = ReleaseOnDrop(&serving, &conn);
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
                end_client(&client.1);
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
                            // No thread serves it.
                            end_client(&conn);
                            release_client(&shared, &conn);
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
        end_client(&conn);
    }
    // Joins every server thread once it has released its client.
    workers.stop();
}

/// A word of `conn`'s size board that follows file `ino`'s size (one per file and connection,
/// kept until the connection ends), or `u32::MAX` when the board is full; with `generations`,
/// the same word of its generation board follows the file's generation from now on.
pub(super) fn watch_size(
    shared: &Shared,
    conn: &Conn,
    ino: u64,
    generations: bool,
) -> Result<u32, Errno> {
    let mut watched = conn.watched.lock();
    if let Some(&(index, following)) = watched.get(&ino) {
        if following || !generations {
            return Ok(index);
        }
    }
    let index = watched.get(&ino).map_or(watched.len() as u32, |w| w.0);
    if conn.area.size_word(index).is_none() {
        return Ok(u32::MAX);
    }
    let sink: Arc<dyn nosefs_core::file::SizeSink> = conn.area.clone();
    shared
        .fs
        .watch_size(ino, sink, index, generations)
        .map_err(|e| e.errno())?;
    watched.insert(ino, (index, generations));
    Ok(index)
}

/// Ends a client: its server thread stops serving and then releases what it held
/// ([`release_client`]). The door does not wait for that: a process's end (make's jobs end
/// while others start) would otherwise keep the next process waiting at the door for the
/// server thread's wake-up and the release.
fn end_client(conn: &Conn) {
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
}

/// Runs [`release_client`] when dropped.
struct ReleaseOnDrop<'a>(&'a Shared, &'a Conn);

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        release_client(self.0, self.1);
    }
}

/// Releases what an ended client held (size watches, loans, descriptions), once no thread
/// serves it any more: run by its server thread after it stopped serving.
fn release_client(shared: &Shared, conn: &Conn) {
    let sink: Arc<dyn nosefs_core::file::SizeSink> = conn.area.clone();
    for (ino, (index, _)) in conn.watched.lock().drain() {
        shared.fs.unwatch_size(ino, &sink, index);
    }
    // Loans the client never returned: the pages it stored and did not report are found by
    // comparison (O(file)), so nothing it stored is lost; on a thread of its own, so that the
    // door goes on admitting clients meanwhile.
    let loans: Vec<_> = conn.loans.lock().drain().map(|(_, lent)| lent).collect();
    if !loans.is_empty() {
        let pending = Arc::new(Mutex::new(loans));
        let (theirs, fs) = (Arc::clone(&pending), Arc::clone(&shared.fs));
        let spawned = std::thread::Builder::new()
            .name("nosefs-return".into())
            .spawn(move || return_unreported(&fs, &theirs));
        match spawned {
            Ok(thread) => {
                let mut returns = shared.returns.lock();
                returns.retain(|t| !t.is_finished());
                returns.push(thread);
            }
            Err(_) => return_unreported(&shared.fs, &pending),
        }
    }
    let held: Vec<u64> = conn.held.lock().drain().collect();
    for token in held {
        release(shared, token);
    }
}

/// Gives back loans whose client ended without returning them (see `release_client`).
fn return_unreported(fs: &Fs, loans: &Mutex<Vec<nosefs_core::file::lent::LentShadow>>) {
    for lent in loans.lock().drain(..) {
        let _ = fs.return_shadow(lent, false);
    }
}

/// Drops one reference on a description; the last closes the inode in the core.
pub(super) fn release(shared: &Shared, token: u64) {
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

pub(super) fn release_ticket(shared: &Shared, ticket: u64) {
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
pub(super) fn recred(shared: &Shared, conn: &Conn) -> Result<(), Errno> {
    let cred = proc_cred(conn.pid).ok_or(Errno::EIO)?;
    // The pid was the client's when the status was read only if the process still runs now.
    let alive = conn
        .pidfd
        .as_ref()
        .is_some_and(|fd| super::reuse::has_ended(fd) == Some(false));
    if !alive {
        return Err(Errno::EIO);
    }
    let own_uid = rustix::process::geteuid().as_raw();
    if !shared.options.allow_other && cred.uid != own_uid {
        conn.dead.store(true, Ordering::Release);
        return Err(Errno::EACCES);
    }
    let mut current = conn.cred.write();
    if *current != cred {
        conn.cred_changed.store(true, Ordering::Release);
        *current = cred;
    }
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
    let area = match shared.reuse.take(&cred).or_else(|| spare.take()) {
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
        watched: Mutex::new(HashMap::new()),
        socket: rustix::io::fcntl_dupfd_cloexec(socket, 0).ok()?,
        loans: Mutex::new(HashMap::new()),
        next_loan: std::sync::atomic::AtomicU64::new(1),
        cred_changed: AtomicBool::new(false),
        reuse: Arc::clone(&shared.reuse),
    });
    if let Some(stats) = &shared.stats {
        stats.connected();
    }
    Some(conn)
}
