//! How a thread waits for its peer across the shared area before it sleeps on a futex.
//!
//! A client waits for its reply and a server thread for the next request by polling a word.
//! While the peer runs on another CPU, pure spinning answers in tens of nanoseconds. But when
//! more threads want to run than there are CPUs (two clients and their server threads on two
//! CPUs), a pure spinner holds the CPU its peer needs until the scheduler preempts it:
//! measured, two client threads then got less done than one, with a p99.9 of 1-3 ms. So:
//!
//! - a waiter spins purely for [`PURE_SPIN`] only, then gives the CPU away (`sched_yield`)
//!   between polls: a no-op when nothing else wants the CPU, the peer's turn when it does;
//! - a waiter whose peer last ran on its own CPU (each side records its CPU in the slot) yields
//!   from the first poll, since spinning there only delays the peer. Measured with two client
//!   threads on two CPUs: create, rename, unlink and append+fsync 1.1-1.6x faster than with the
//!   pure spin first (docs/benchmarks.md);
//! - but two threads that only ever yield to each other never sleep, so the scheduler never
//!   places them again and could leave them sharing one CPU while the other idles; every
//!   [`SLEEP_EVERY`]-th wait on a peer on the same CPU therefore sleeps at once, and its
//!   wake-up lets the scheduler pick an idle CPU;
//! - a waiter may be given two windows ([`Spinner::pause_while_idle`]): a long one kept while
//!   its yields return at once (nothing else wants its CPU, which would otherwise idle), and a
//!   short one from the first yield that ran another thread ([`CONTENDED_YIELD`]). The server
//!   waits so for its client's next request.
//!
//! After its window the waiter sleeps on the futex. A longer pure spin (10 and 20 us) was
//! measured and dropped: no gain for one client thread, and with two the p99.9 of overwrites
//! went from 0.06-0.8 ms to 1.5-4 ms (a pure spinner whose peer waits for a CPU). Sleeping
//! instead of yielding was measured and dropped too: a wake-up from sleep costs tens of microseconds on this VM, and one client's
//! overwrites fell from 140k to 8k ops/s.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How long a waiter polls without yielding: long enough for a peer on another CPU to answer
/// an ordinary request (an empty round trip is about 0.7 µs, a one-name walk 1.5 µs).
pub const PURE_SPIN: Duration = Duration::from_micros(2);

/// Of the waits on a peer found on the same CPU, one in this many sleeps at once.
pub const SLEEP_EVERY: u32 = 64;

thread_local! {
    static SAME_CPU_WAITS: Cell<u32> = const { Cell::new(0) };
}

/// A yield that returns later than this gave the CPU to another thread: the CPU is wanted.
/// (A `sched_yield` with nothing else to run returns in well under a microsecond.)
pub const CONTENDED_YIELD: Duration = Duration::from_micros(5);

/// One wait's progress.
#[derive(Debug)]
pub struct Spinner {
    start: Instant,
    polls: u32,
    yielding: bool,
    /// A yield of this wait ran another thread ([`CONTENDED_YIELD`]).
    contended: bool,
}

impl Spinner {
    /// A wait starting now.
    pub fn new() -> Spinner {
        Spinner {
            start: Instant::now(),
            polls: 0,
            yielding: false,
            contended: false,
        }
    }

    /// As [`Spinner::pause`], with a window of `idle_window` while every yield finds its CPU
    /// with nothing else to run, and of `busy_window` from the first one that ran another
    /// thread: waiting longer costs no one anything while the CPU would idle, and costs the
    /// threads that want it once they do.
    pub fn pause_while_idle(
        &mut self,
        busy_window: Duration,
        idle_window: Duration,
        peer_here: impl FnOnce() -> bool,
    ) -> bool {
        let window = if self.contended {
            busy_window
        } else {
            idle_window
        };
        self.pause(window, peer_here)
    }

    /// Pauses between two polls; false once `window` has passed (time to sleep). `peer_here`
    /// answers whether the peer last ran on this thread's CPU; it is asked at the first poll and
    /// then with the clock, every 16th.
    pub fn pause(&mut self, window: Duration, peer_here: impl FnOnce() -> bool) -> bool {
        if !self.yielding {
            let poll = self.polls;
            self.polls = self.polls.wrapping_add(1);
            if poll % 16 != 0 {
                std::hint::spin_loop();
                return true;
            }
            if peer_here() {
                self.yielding = true;
                let waits = SAME_CPU_WAITS.with(|w| {
                    w.set(w.get().wrapping_add(1));
                    w.get()
                });
                if waits % SLEEP_EVERY == 0 {
                    return false;
                }
            } else {
                self.yielding = poll > 0 && self.start.elapsed() >= PURE_SPIN;
                return true;
            }
        }
        if self.start.elapsed() >= window {
            return false;
        }
        let before = Instant::now();
        rustix::thread::sched_yield();
        self.contended |= before.elapsed() >= CONTENDED_YIELD;
        true
    }
}

impl Default for Spinner {
    fn default() -> Spinner {
        Spinner::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// This thread on the CPU it runs on, alone; its CPUs before.
    fn pin_here() -> (CpuSet, usize) {
        let allowed = sched_getaffinity(None).unwrap();
        let cpu = crate::shm::current_cpu() as usize - 1;
        let mut only = CpuSet::new();
        only.set(cpu);
        sched_setaffinity(None, &only).unwrap();
        (allowed, cpu)
    }

    #[test]
    fn a_wait_whose_cpu_another_thread_wants_ends_after_the_busy_window() {
        let (allowed, cpu) = pin_here();
        let stop = Arc::new(AtomicBool::new(false));
        let busy = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut only = CpuSet::new();
                only.set(cpu);
                sched_setaffinity(None, &only).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        // Both on one CPU: the spinner's yields run the busy thread, so its window is the busy
        // one, not the minute it would wait while the CPU had nothing else to do.
        let start = Instant::now();
        let mut s = Spinner::new();
        while s.pause_while_idle(Duration::from_micros(200), Duration::from_secs(60), || {
            false
        }) {}
        let waited = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        busy.join().unwrap();
        sched_setaffinity(None, &allowed).unwrap();
        assert!(s.contended, "a yield ran the other thread");
        assert!(
            waited < Duration::from_secs(10),
            "waited {waited:?}: the idle window was kept"
        );
    }

    #[test]
    fn a_wait_ends_after_its_window_and_not_before() {
        let window = Duration::from_micros(200);
        // The clock starts before the spinner's: it counts its window from its creation, so
        // a clock started after it could read a hair under the window.
        let start = Instant::now();
        let mut s = Spinner::new();
        while s.pause(window, || false) {}
        assert!(start.elapsed() >= window);
        let mut s = Spinner::new();
        assert!(s.pause(Duration::from_secs(60), || false));
        let mut sleeps = 0;
        for _ in 0..SLEEP_EVERY {
            let mut s = Spinner::new();
            let mut polls = 0;
            while s.pause(window, || true) {
                polls += 1;
            }
            sleeps += usize::from(polls == 0);
        }
        assert_eq!(
            sleeps, 1,
            "one wait in SLEEP_EVERY on a peer on the same CPU sleeps"
        );
    }
}
