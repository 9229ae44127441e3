//! What a daemon client's description remembers for its reads: the copy of the file's pieces it
//! reads from its view of the image with (`nosefs_core::file::direct`), and when asking for a
//! new copy pays.

use nosefs_core::file::direct::DirectMap;

/// What a description remembers for its reads ([`Service::read_cached`]): a daemon client's
/// copy of the file's pieces (with the connection and the boards' word it goes with), and
/// how often a copy paid off.
///
/// A copy costs its read more than a plain request does (the daemon gathers the pieces, the
/// client decodes them), and pays off only if later reads land in it before the file changes.
/// They do not where a file changes between every two reads (a database's file it writes
/// too), or where it is fragmented past what one copy describes and read at random: there a
/// copy that answered nothing makes the description read plainly for a while (1, 2, 4, ... up
/// to [`MAX_PLAIN_READS`] reads) before it asks for another; one that answered resets that.
/// The first [`PLAIN_READS_FIRST`] reads of a description are plain too: a process reading each
/// of many files once (a copy, an archive, `git add`: the data, then the end of the file) then
/// neither asks for the image nor fills its size board (measured: make and git commit 7-10%
/// slower when the second read asked).
#[derive(Debug, Default)]
pub struct ReadCache(parking_lot::Mutex<ReadState>);

/// Reads of a description made plainly before it asks for a copy.
pub const PLAIN_READS_FIRST: u32 = 3;

/// Most plain reads a description makes between copies that answered nothing.
pub const MAX_PLAIN_READS: u32 = 1024;

#[derive(Debug, Default)]
struct ReadState {
    copy: Option<CachedPieces>,
    /// Reads so far, up to [`PLAIN_READS_FIRST`].
    reads: u32,
    /// Plain reads to make before the next copy is asked for, and the last such wait.
    plain_left: u32,
    plain_last: u32,
}

/// A copy of a file's pieces, good for reads made through connection `conn` while
/// word `index` of its generation board holds the copy's generation.
#[derive(Debug, Clone)]
pub struct CachedPieces {
    pub conn: u32,
    pub index: u32,
    pub map: std::sync::Arc<DirectMap>,
    /// Whether a read was answered from it.
    pub used: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// When (this process's coarse monotonic clock, ns) reads from it must be noted again as
    /// accesses (`DirectMap::access_holds_ns` after the handout); `u64::MAX`: never.
    pub access_due_ns: u64,
}

impl CachedPieces {
    /// Whether reads may still come from the copy at coarse monotonic time `now_ns`, as far
    /// as access times go: after the due time the read asks the daemon, whose read notes it.
    pub fn access_holds(&self, now_ns: u64) -> bool {
        now_ns < self.access_due_ns
    }
}

/// This process's coarse monotonic clock (a few ms fine, no system call), in ns.
pub fn coarse_now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
}

impl ReadCache {
    /// Keeps `copy` instead of what was kept.
    pub fn keep(&self, copy: Option<CachedPieces>) {
        self.0.lock().copy = copy;
    }

    /// What the next read through connection `conn` tries first: the kept copy, else (one
    /// lock for both) whether it asks for a new one ([`ReadCache::ask_for_copy`]).
    pub fn next_read(&self, conn: u32) -> Result<CachedPieces, bool> {
        let mut state = self.0.lock();
        match state.copy.as_ref().filter(|c| c.conn == conn) {
            Some(copy) => Ok(copy.clone()),
            None => Err(Self::ask(&mut state)),
        }
    }

    /// A read the kept copy could not answer: whether to ask for a new copy with it (else a
    /// plain read). See the type's doc.
    pub fn ask_for_copy(&self) -> bool {
        Self::ask(&mut self.0.lock())
    }

    fn ask(state: &mut ReadState) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if state.reads < PLAIN_READS_FIRST {
            state.reads += 1;
            return false;
        }
        if state.plain_left > 0 {
            state.plain_left -= 1;
            return false;
        }
        match state.copy.take() {
            Some(copy) if !copy.used.load(Relaxed) => {
                state.plain_last = (state.plain_last * 2).clamp(1, MAX_PLAIN_READS);
                state.plain_left = state.plain_last - 1;
                false
            }
            Some(_) => {
                state.plain_last = 0;
                true
            }
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    fn copy() -> CachedPieces {
        CachedPieces {
            conn: 1,
            index: 0,
            map: std::sync::Arc::new(DirectMap::new(0, (0, u64::MAX), Vec::new(), 0).unwrap()),
            used: Default::default(),
            access_due_ns: u64::MAX,
        }
    }

    /// How many of `reads` misses ask for a copy, each copy answering nothing or something.
    fn asked(cache: &ReadCache, reads: usize, answers: bool) -> usize {
        (0..reads)
            .filter(|_| {
                let ask = cache.ask_for_copy();
                if ask {
                    let c = copy();
                    c.used.store(answers, Ordering::Relaxed);
                    cache.keep(Some(c));
                }
                ask
            })
            .count()
    }

    #[test]
    fn copies_that_answer_nothing_are_asked_for_ever_more_rarely() {
        let cache = ReadCache::default();
        for _ in 0..PLAIN_READS_FIRST {
            assert!(!cache.ask_for_copy(), "the first reads are plain");
        }
        // Copies that pay off: every miss asks for another.
        assert_eq!(asked(&cache, 100, true), 100);
        // Copies that answer nothing: waits of 1, 2, 4, ... plain reads, then at most one copy
        // per MAX_PLAIN_READS + 1 reads.
        let waiting = asked(&cache, 10_000, false);
        assert!((15..=30).contains(&waiting), "{waiting} copies");
        let settled = ReadCache::default();
        let _ = asked(&settled, 5_000, false);
        let per_cycle = asked(&settled, 10 * (MAX_PLAIN_READS as usize + 1), false);
        assert_eq!(per_cycle, 10);
        // One that answers (after the wait left) resets the waits.
        assert!(asked(&settled, MAX_PLAIN_READS as usize + 1, true) >= 1);
        assert_eq!(asked(&settled, 50, true), 50);
    }

    #[test]
    fn a_copy_answers_until_its_access_is_due() {
        let mut c = copy();
        assert!(c.access_holds(u64::MAX - 1), "no access time to keep");
        let now = coarse_now_ns();
        c.access_due_ns = now + 1_000;
        assert!(c.access_holds(now));
        assert!(!c.access_holds(now + 1_000));
        assert!(coarse_now_ns() >= now, "the clock runs forward");
    }
}
