//! Recorded persistence work, replayed on real memory: the persistence floor of an operation.
//!
//! A [`Trace`] keeps, operation by operation, the stores, non-temporal stores, write-backs and
//! fences that a recording region saw ([`super::Event`]), compactly. [`Trace::replay`] performs
//! exactly those on another region with the real instructions, and nothing else: no lookups, no
//! locks, no DRAM bookkeeping. Timed, it is what an operation's commit protocol alone costs on the
//! machine, the floor that no implementation of the same protocol can go below; `nosefs bench
//! --target nosefs-floor` reports it beside the real operations.
//!
//! Atomic read-modify-writes (the bitmap's `fetch_or`) were recorded as the stores they made and
//! replay as plain stores; the floor leaves out their lock prefix, which is the implementation's
//! choice, not the protocol's.

use super::{Event, Region, CACHE_LINE};

/// One replayed step. Store bytes live in [`Trace::bytes`], in step order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Store { offset: u64, len: u32 },
    StoreNt { offset: u64, len: u32 },
    Flush { line: u64 },
    Fence,
}

/// The persistence events of a sequence of operations.
#[derive(Debug, Default)]
pub struct Trace {
    steps: Vec<Step>,
    bytes: Vec<u8>,
    /// Per operation: its first step and the offset of its first stored byte.
    ops: Vec<(usize, usize)>,
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Trace {
        Trace::default()
    }

    /// Appends one operation made of `events` (possibly none: an operation that persists nothing)
    /// and returns its index.
    pub fn push_op(&mut self, events: &[Event]) -> usize {
        self.ops.push((self.steps.len(), self.bytes.len()));
        for event in events {
            let step = match event {
                Event::Store { offset, bytes, .. } => {
                    self.bytes.extend_from_slice(bytes);
                    Step::Store {
                        offset: *offset,
                        len: u32::try_from(bytes.len()).expect("a store under 4 GiB"),
                    }
                }
                Event::StoreNt { offset, bytes, .. } => {
                    self.bytes.extend_from_slice(bytes);
                    Step::StoreNt {
                        offset: *offset,
                        len: u32::try_from(bytes.len()).expect("a store under 4 GiB"),
                    }
                }
                Event::Flush { line, .. } => Step::Flush { line: *line },
                Event::Fence { .. } => Step::Fence,
            };
            self.steps.push(step);
        }
        self.ops.len() - 1
    }

    /// Operations recorded.
    pub fn op_count(&self) -> usize {
        self.ops.len()
    }

    /// Steps (stores, write-backs, fences) of operation `op`.
    pub fn step_count(&self, op: usize) -> usize {
        self.op_steps(op).len()
    }

    fn op_steps(&self, op: usize) -> &[Step] {
        let first = self.ops[op].0;
        let end = self.ops.get(op + 1).map_or(self.steps.len(), |next| next.0);
        &self.steps[first..end]
    }

    /// Performs operation `op`'s stores, write-backs and fences on `region`, in their recorded
    /// order. `region` must be at least as large as the one recorded (checked by its bounds
    /// checks, which panic).
    pub fn replay(&self, op: usize, region: &Region) {
        let mut at = self.ops[op].1;
        for step in self.op_steps(op) {
            match *step {
                Step::Store { offset, len } => {
                    let end = at + len as usize;
                    region.write_bytes(offset, &self.bytes[at..end]);
                    at = end;
                }
                Step::StoreNt { offset, len } => {
                    let end = at + len as usize;
                    region.copy_nt(offset, &self.bytes[at..end]);
                    at = end;
                }
                Step::Flush { line } => region.flush(line, CACHE_LINE),
                Step::Fence => region.fence(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_repeats_each_operation_exactly() {
        let recording = Region::recording(1 << 16).unwrap();
        let mut trace = Trace::new();
        recording.write_bytes(100, b"hello");
        recording.persist(100, 5);
        let events = recording.recorder().unwrap().take_events();
        assert_eq!(trace.push_op(&events), 0);
        assert_eq!(trace.push_op(&[]), 1, "an operation that persists nothing");
        recording.copy_nt(4096, &[7u8; 4096]);
        recording.store_u64(8192, 42);
        recording.flush(8192, 8);
        recording.fence();
        let events = recording.recorder().unwrap().take_events();
        assert_eq!(trace.push_op(&events), 2);
        assert_eq!(trace.op_count(), 3);
        assert_eq!(
            (
                trace.step_count(0),
                trace.step_count(1),
                trace.step_count(2)
            ),
            (3, 0, 4)
        );

        let replayed = Region::recording(1 << 16).unwrap();
        for op in 0..trace.op_count() {
            trace.replay(op, &replayed);
        }
        assert_eq!(replayed.snapshot(), recording.snapshot());
        let events = replayed.recorder().unwrap().take_events();
        let kinds: Vec<&str> = events
            .iter()
            .map(|e| match e {
                Event::Store { .. } => "store",
                Event::StoreNt { .. } => "nt",
                Event::Flush { .. } => "flush",
                Event::Fence { .. } => "fence",
            })
            .collect();
        assert_eq!(
            kinds,
            ["store", "flush", "fence", "nt", "store", "flush", "fence"]
        );
    }
}
