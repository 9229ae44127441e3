//! The noseFS benchmark harness.
//!
//! It follows "Rethinking benchmarking for NVM file systems" (seed 002): everything an operation
//! needs (names, buffers, the directory handle) is prepared before timing; each operation is timed
//! on its own into an HDR histogram in nanoseconds; runs repeat and report the median with its
//! spread; the harness's own cost per operation is measured and reported; targets are measured
//! side by side in one run so that ratios, not absolute times, carry the result.

#![forbid(unsafe_code)]

pub mod dirops;
pub mod fileops;
pub mod stats;
pub mod target;
