//! The noseFS benchmark harness, `nosefs bench`.
//!
//! It follows "Rethinking benchmarking for NVM file systems" (seed 002): everything an operation
//! needs (names, offsets, buffers, open handles) is prepared before timing; each operation is
//! timed on its own into a per-thread HDR histogram in nanoseconds, merged afterwards; threads are
//! pinned to CPUs and start each phase together; every thread warms up first; runs repeat and
//! report the median with its spread; the harness's own cost per operation is measured and
//! reported; targets are measured side by side in one run (their runs interleaved) so that ratios,
//! not absolute times, carry the result.
//!
//! Code map: [`target`] (what runs: the native library or system calls on a directory),
//! [`floor`] (the native library's persistence work alone, recorded and replayed),
//! [`scratch`] (private tmpfs and ramdisk mounts), [`cleanup`] (undo on drop and on Ctrl-C),
//! [`runner`] (threads, pinning, timed phases), [`workload`] (the micro-benchmarks), [`suite`]
//! (a whole run), [`report`] and [`plot`] (table, JSON, markdown, SVG), [`matrix`] (the
//! seed-000-style file-system comparison of the macro workloads).

#![deny(unsafe_code)]

pub mod cleanup;
pub mod floor;
pub mod matrix;
pub mod plot;
pub mod preload;
pub mod report;
pub mod runner;
pub mod scratch;
pub mod stats;
pub mod suite;
pub mod sys;
pub mod target;
pub mod wakeup;
pub mod workload;
