//! Posted writes: a client's `write` answered before the daemon applies it, so that a write
//! followed by an fsync (a log commit) costs the client one wait instead of two.
//!
//! A client may post writes to a file only while the daemon *grants* it (a word of its post
//! board at 1, [`grant`]): while nothing can read the file without asking the daemon first.
//! Then every way of observing the file meets the posts before it observes anything:
//!
//! - every request of every client, before it is served, applies every client's posts whose
//!   sequence numbers were published before ([`settle`]); the client's own next request too, so
//!   its requests keep their order;
//! - the kernel holds no inode of the file (FUSE lookups, and the kernel's page and attribute
//!   caches that follow): the first lookup takes every grant on it back and applies the posts to
//!   it before the kernel gets the inode ([`revoke`], from the FUSE frontend);
//! - no other client follows the file's size in its shared memory (`SIZE_WATCH`), and no shadow
//!   of it is lent (a mapping reads memory, not the daemon): either takes the grants back.
//!
//! Taking a grant back is a Dekker handshake: the daemon stores 0 into the word, then reads the
//! client's published sequence number and applies what it names; the client publishes its post,
//! then reads the word, and waits for the answer when it finds 0. So either the daemon applies
//! the post before the new observer looks, or the client does not return before it is applied.
//!
//! A connection's posts are applied under its `post_lock`, in sequence order, by whichever
//! thread gets there first (its own server thread, another client's, a lookup's). The area is
//! the client's and not trusted: a sequence number that was never published is not applied
//! by others (its own server thread applies it once it is), and a lying client can only
//! reorder its own writes.

use super::*;

/// A connection that may post to a file, and the word of its post board that says so.
type Grant = (Arc<Conn>, u32);

/// What the daemon granted: for each file, the connections that may post to it and the word
/// of their post board that says so.
#[derive(Default)]
pub(super) struct Grants {
    by_ino: Mutex<HashMap<u64, Vec<Grant>>>,
    /// Connections that were ever granted: the ones [`settle`] looks at.
    posting: parking_lot::RwLock<Vec<Arc<Conn>>>,
    /// Whether grants are given at all: only where the daemon hears of every inode the kernel
    /// takes hold of (or there is no kernel mount).
    enabled: AtomicBool,
}

impl Grants {
    pub(super) fn enable(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Release);
    }
}

/// The words of a connection's post board in use, by file; a word is given back when the
/// connection closes its last description of the file (a SQLite journal per transaction would
/// otherwise use them all up).
#[derive(Debug, Default)]
pub(super) struct PostWords {
    by_ino: HashMap<u64, u32>,
    free: Vec<u32>,
    next: u32,
}

impl PostWords {
    /// The word for file `ino`, given now if it has none; `None` when the board is full.
    fn word_for(&mut self, area: &Area, ino: u64) -> Option<u32> {
        if let Some(&word) = self.by_ino.get(&ino) {
            return Some(word);
        }
        let word = match self.free.pop() {
            Some(word) => word,
            None => {
                area.post_word(self.next)?;
                self.next += 1;
                self.next - 1
            }
        };
        self.by_ino.insert(ino, word);
        Some(word)
    }
}

/// Free space below which no grant is given: a posted write that meets ENOSPC can tell it only
/// at the next fsync of its description (as the kernel tells writeback errors), so posting
/// stops well before the image fills (a connection has at most 4 MiB of posts in flight).
pub(super) const FREE_BYTES_PER_GRANT: u64 = 64 << 20;

/// How long a connection's own server thread waits before it applies the posts it finds
/// (`NOSEFS_TEST_POST_DELAY_US`, for tests only): everyone else must then meet the posts on
/// their own way in, as they would when that thread is slow to run.
pub(super) fn test_delay() -> Option<std::time::Duration> {
    static DELAY: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| {
        let us: u64 = std::env::var("NOSEFS_TEST_POST_DELAY_US")
            .ok()?
            .parse()
            .ok()?;
        Some(std::time::Duration::from_micros(us))
    })
}

/// Applies every connection's published posts (the daemon, before it serves any request).
pub(super) fn settle(shared: &Shared) {
    let posting = shared.grants.posting.read_recursive();
    for conn in posting.iter() {
        if has_unapplied(conn) {
            drain(shared, conn);
        }
    }
}

/// Whether `conn` published posts not yet applied.
pub(super) fn has_unapplied(conn: &Conn) -> bool {
    conn.area.posted().load(Ordering::SeqCst) != conn.applied.load(Ordering::Acquire)
}

/// Applies `conn`'s published posts in sequence order; how many.
pub(super) fn drain(shared: &Shared, conn: &Conn) -> usize {
    let _applier = conn.post_lock.lock();
    let applied = conn.applied.load(Ordering::Acquire);
    let target = conn.area.posted().load(Ordering::SeqCst);
    let mut done = 0;
    for (_, slot) in published(&conn.area, applied, target) {
        done += usize::from(apply(shared, conn, slot, None));
    }
    conn.applied.store(target, Ordering::Release);
    done
}

/// Applies `conn`'s published posts to file `ino` alone, in sequence order (a lookup of it by
/// the kernel: see [`revoke`]). Its others stay for the next [`drain`]: they are to files the
/// kernel holds no inode of, or were posted after the client saw their grant taken back.
fn drain_file(shared: &Shared, conn: &Conn, ino: u64) {
    let _applier = conn.post_lock.lock();
    let applied = conn.applied.load(Ordering::Acquire);
    let target = conn.area.posted().load(Ordering::SeqCst);
    for (_, slot) in published(&conn.area, applied, target) {
        if post_target(shared, conn, slot) == Some(ino) {
            apply(shared, conn, slot, Some(ino));
        }
    }
}

/// The slots holding posts with sequence numbers in `(applied, target]`, by sequence number.
fn published(area: &Area, applied: u32, target: u32) -> Vec<(u32, usize)> {
    let span = target.wrapping_sub(applied);
    let mut found = Vec::new();
    if span == 0 {
        return found;
    }
    for slot in 0..area.slots() {
        if area.owner(slot).load(Ordering::Acquire) != owner::POSTED_WRITE
            || area.state(slot).load(Ordering::Acquire) != state::REQUEST
        {
            continue;
        }
        let mut head = [0u8; 8];
        area.get(slot, 0, &mut head);
        let seq = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let after = seq.wrapping_sub(applied);
        if after != 0 && after <= span {
            found.push((after, slot));
        }
    }
    found.sort_unstable();
    found
}

/// The file a posted write in `slot` goes to, if its description is `conn`'s.
fn post_target(shared: &Shared, conn: &Conn, slot: usize) -> Option<u64> {
    let mut head = [0u8; 16];
    conn.area.get(slot, 0, &mut head);
    let token = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
    execute::description(shared, conn, token)
        .ok()
        .map(|d| d.ino)
}

/// Serves the post in `slot` (under the connection's `post_lock`), only a write to `only_ino`
/// when given; false if the client took it back meanwhile (only a hostile one does).
fn apply(shared: &Shared, conn: &Conn, slot: usize, only_ino: Option<u64>) -> bool {
    thread_local! {
        static REQUEST: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    }
    if !take_post(&conn.area, slot) {
        return false;
    }
    let mut request = REQUEST.take();
    request.resize(conn.area.payload_bytes(), 0);
    serve_slot_by(shared, conn, slot, &mut request, |request, _| {
        execute::posted_write(shared, conn, request, only_ino)
    });
    REQUEST.set(request);
    true
}

/// Whether `conn` may post its writes to file `ino` from now on: the word of its post board
/// that says so (set to 1), or `u32::MAX` when not.
pub(super) fn grant(shared: &Shared, conn: &Conn, ino: u64) -> u32 {
    let Some(conn) = conn.me.upgrade() else {
        return u32::MAX;
    };
    let conn = &conn;
    let fs = &shared.fs;
    if !shared.grants.enabled.load(Ordering::Acquire)
        || fs.writes_are_sync()
        || fs.free_data_blocks() * 4096 < FREE_BYTES_PER_GRANT
    {
        return u32::MAX;
    }
    let sink: Arc<dyn nosefs_core::file::SizeSink> = conn.area.clone();
    let mut by_ino = shared.grants.by_ino.lock();
    // Under the lock: whatever takes grants back registers itself first (the kernel's hold, a
    // watch, a shadow), then takes this lock, so it either is seen here or sees this grant.
    let kernel_holds = shared
        .options
        .invalidate
        .as_deref()
        .is_some_and(|i| i.may_hold(ino));
    if kernel_holds || fs.size_watched_by_other(ino, &sink) || fs.is_shadowed(ino) {
        return u32::MAX;
    }
    let Some(word) = conn.post_words.lock().word_for(&conn.area, ino) else {
        return u32::MAX;
    };
    let granted = by_ino.entry(ino).or_default();
    if !granted.iter().any(|(c, _)| Arc::ptr_eq(c, conn)) {
        granted.push((Arc::clone(conn), word));
    }
    conn.area
        .post_word(word)
        .expect("allocated above")
        .store(1, Ordering::SeqCst);
    drop(by_ino);
    let mut posting = shared.grants.posting.write();
    if !posting.iter().any(|c| Arc::ptr_eq(c, conn)) {
        posting.push(Arc::clone(conn));
    }
    word
}

/// Who takes grants back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Revoker {
    /// A request the daemon serves: every post of the connections is applied.
    Daemon,
    /// The FUSE frontend, about to hand the kernel the inode: only the posts to this file are
    /// applied (the others may be to files the kernel holds, whose invalidation from inside a
    /// FUSE request could wait on that very request).
    Kernel,
}

/// Takes back every grant on file `ino` (but `except`'s) and applies the posts to it.
pub(super) fn revoke(shared: &Shared, ino: u64, except: Option<&Conn>, by: Revoker) {
    let taken: Vec<Grant> = {
        let mut by_ino = shared.grants.by_ino.lock();
        let Some(granted) = by_ino.get_mut(&ino) else {
            return;
        };
        let (taken, kept): (Vec<_>, Vec<_>) = granted
            .drain(..)
            .partition(|(c, _)| !except.is_some_and(|e| std::ptr::eq(Arc::as_ptr(c), e)));
        *granted = kept;
        if granted.is_empty() {
            by_ino.remove(&ino);
        }
        taken
    };
    for (conn, word) in &taken {
        if let Some(w) = conn.area.post_word(*word) {
            w.store(0, Ordering::SeqCst);
        }
    }
    for (conn, _) in &taken {
        match by {
            Revoker::Daemon => {
                drain(shared, conn);
            }
            Revoker::Kernel => drain_file(shared, conn, ino),
        }
    }
}

/// A connection ends: its posts are applied and its grants forgotten (before its descriptions
/// are released).
pub(super) fn forget(shared: &Shared, conn: &Conn) {
    drain(shared, conn);
    let inos: Vec<u64> = conn.post_words.lock().by_ino.keys().copied().collect();
    {
        let mut by_ino = shared.grants.by_ino.lock();
        for ino in inos {
            if let Some(granted) = by_ino.get_mut(&ino) {
                granted.retain(|(c, _)| !std::ptr::eq(Arc::as_ptr(c), conn));
                if granted.is_empty() {
                    by_ino.remove(&ino);
                }
            }
        }
    }
    shared
        .grants
        .posting
        .write()
        .retain(|c| !std::ptr::eq(Arc::as_ptr(c), conn));
}

/// `conn` closed a description of file `ino`: if it holds none of the file any more, its grant
/// on the file ends and the word goes back to the board (its posts to the file were applied
/// before the close was served).
pub(super) fn closed(shared: &Shared, conn: &Conn, ino: u64) {
    if !conn.post_words.lock().by_ino.contains_key(&ino) {
        return;
    }
    let still_open = {
        let held = conn.held.lock();
        let descriptions = shared.descriptions.lock();
        held.iter()
            .any(|t| descriptions.get(t).is_some_and(|d| d.ino == ino))
    };
    if still_open {
        return;
    }
    let mut by_ino = shared.grants.by_ino.lock();
    if let Some(granted) = by_ino.get_mut(&ino) {
        granted.retain(|(c, _)| !std::ptr::eq(Arc::as_ptr(c), conn));
        if granted.is_empty() {
            by_ino.remove(&ino);
        }
    }
    let mut words = conn.post_words.lock();
    if let Some(word) = words.by_ino.remove(&ino) {
        if let Some(w) = conn.area.post_word(word) {
            w.store(0, Ordering::SeqCst);
        }
        words.free.push(word);
    }
}
