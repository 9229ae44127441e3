//! How a thread waits for its peer across the shared area before it sleeps on a futex.
//!
//! A client waits for its reply and a server thread for the next request by polling a word.
//! While the peer runs on another CPU, pure spinning answers in tens of nanoseconds. But when
//! more threads want to run than there are CPUs (two clients and their server threads on two
//! CPUs), a pure spinner holds the CPU its peer needs until the scheduler preempts it:
//! measured, two client threads then got less done than one, with a p99.9 of 1-3 ms. So a
//! waiter spins purely for [`PURE_SPIN`] only, then gives the CPU away (`sched_yield`)
//! between polls: a no-op when nothing else wants the CPU, the peer's turn when it does. After
//! its window the waiter sleeps on the futex. Measured alternatives, dropped (docs/
//! benchmarks.md): yielding at once when the peer last ran on the same CPU (one thread then
//! ran at two speeds from run to run: the pair ping-ponged on one CPU while the other idled),
//! and sleeping instead of yielding (a wake-up from sleep costs tens of microseconds here).

use std::time::{Duration, Instant};

/// How long a waiter polls without yielding: long enough for a peer on another CPU to answer
/// an ordinary request (an empty round trip is about 0.7 µs, a one-name walk 1.5 µs).
pub const PURE_SPIN: Duration = Duration::from_micros(2);

/// One wait's progress.
#[derive(Debug)]
pub struct Spinner {
    start: Instant,
    polls: u32,
    yielding: bool,
}

impl Spinner {
    /// A wait starting now.
    pub fn new() -> Spinner {
        Spinner {
            start: Instant::now(),
            polls: 0,
            yielding: false,
        }
    }

    /// Pauses between two polls; false once `window` has passed (time to sleep).
    pub fn pause(&mut self, window: Duration) -> bool {
        if !self.yielding {
            self.polls = self.polls.wrapping_add(1);
            // The clock is read every 16 polls: a poll is a few nanoseconds, the clock 20.
            if self.polls % 16 != 0 {
                std::hint::spin_loop();
                return true;
            }
            self.yielding = self.start.elapsed() >= PURE_SPIN;
            return true;
        }
        if self.start.elapsed() >= window {
            return false;
        }
        rustix::thread::sched_yield();
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

    #[test]
    fn a_wait_ends_after_its_window_and_not_before() {
        let window = Duration::from_micros(200);
        let mut s = Spinner::new();
        let start = Instant::now();
        while s.pause(window) {}
        assert!(start.elapsed() >= window);
        let mut s = Spinner::new();
        assert!(s.pause(Duration::from_secs(60)));
    }
}
