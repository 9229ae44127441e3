//! CPU wake-up latency, held low while a run lasts.
//!
//! On a virtual machine an idle CPU halts, and waking it again (an interrupt to the host, which
//! reschedules the virtual CPU) costs tens of microseconds. A program whose requests come one at
//! a time across processes (Redis answering a client over a socket) then runs at the speed of
//! those wake-ups, unless something keeps a CPU busy: noseFS's daemon polls for its clients'
//! requests, so its target kept CPUs awake and the others did not. Measured here, Redis with
//! `appendfsync always` on tmpfs: 13,300 SETs per second with idle CPUs halting, 54,862 with a
//! lowest-priority busy loop beside it, 59,931 with the wake-up latency held at 0.
//!
//! `nosefs bench --hold-wakeup-latency` holds `/dev/cpu_dma_latency` (the kernel's PM QoS) at
//! 0 µs, as tuned's latency-performance profile does: idle CPUs poll instead of halting, for
//! every target alike, until the hold is dropped. Not the default: with it, the main job measured
//! the daemon's clients 20-40% slower on SQLite, LMDB and RocksDB (the cause is not established:
//! idle CPUs that poll may take from busy ones on this host), so both ways stay measurable and
//! the report says which one a run used. It needs root; without it the run goes on and the
//! report says so.

use std::fs::File;
use std::io::Write;

const QOS_PATH: &str = "/dev/cpu_dma_latency";

/// The hold (or why there is none); dropping it lets CPUs idle again.
#[derive(Debug)]
pub struct WakeupLatency {
    held: Option<File>,
    why_not: Option<String>,
}

impl WakeupLatency {
    /// Asks for CPU wake-up latency 0 until the returned value is dropped.
    pub fn hold() -> WakeupLatency {
        let held = std::fs::OpenOptions::new()
            .write(true)
            .open(QOS_PATH)
            .and_then(|mut file| file.write_all(&0i32.to_ne_bytes()).map(|()| file));
        match held {
            Ok(file) => WakeupLatency {
                held: Some(file),
                why_not: None,
            },
            Err(e) => WakeupLatency {
                held: None,
                why_not: Some(format!("{QOS_PATH}: {e}")),
            },
        }
    }

    /// No hold: idle CPUs use their idle states (the default).
    pub fn not_held() -> WakeupLatency {
        WakeupLatency {
            held: None,
            why_not: Some("no --hold-wakeup-latency".into()),
        }
    }

    /// Whether the latency is held at 0.
    pub fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        match &self.why_not {
            None => format!(
                "CPU wake-up latency held at 0 us through {QOS_PATH} for the whole run: idle CPUs poll instead of halting, for every target alike"
            ),
            Some(why) => format!(
                "idle CPUs could halt during the run ({why}): targets whose programs wait on each other across processes run at the speed of CPU wake-ups, and one whose daemon polls keeps CPUs awake"
            ),
        }
    }
}
