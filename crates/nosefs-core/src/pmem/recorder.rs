//! The recording backend's log: every store, flush and fence, in program order.
//!
//! It also tracks which cache lines are not yet durable, so that any test can assert that an
//! operation which promised durability left nothing in flight ([`Recorder::unpersisted_lines`]).

use std::collections::BTreeSet;

use super::CACHE_LINE;

/// One persistence event, tagged with the operation that issued it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An ordinary store of `bytes` at `offset`, in the cache until flushed and fenced.
    Store {
        /// Byte offset in the region.
        offset: u64,
        /// The bytes stored.
        bytes: Vec<u8>,
        /// The operation that issued it ([`Recorder::set_op`]).
        op: u32,
    },
    /// A non-temporal store: durable at the next fence without a flush.
    StoreNt {
        /// Byte offset in the region.
        offset: u64,
        /// The bytes stored.
        bytes: Vec<u8>,
        /// The operation that issued it.
        op: u32,
    },
    /// Write-back of the cache line starting at `line`.
    Flush {
        /// Offset of the first byte of the line.
        line: u64,
        /// The operation that issued it.
        op: u32,
    },
    /// A store fence.
    Fence {
        /// The operation that issued it.
        op: u32,
    },
}

/// The ordered log of a recording region.
#[derive(Debug, Default)]
pub struct Recorder {
    events: Vec<Event>,
    op: u32,
    /// Lines stored to and not yet flushed.
    dirty: BTreeSet<u64>,
    /// Lines flushed (or written non-temporally) and not yet fenced.
    unfenced: BTreeSet<u64>,
}

fn lines(offset: u64, len: u64) -> impl Iterator<Item = u64> {
    let first = offset / CACHE_LINE;
    let last = if len == 0 {
        first
    } else {
        (offset + len - 1) / CACHE_LINE
    };
    let count = if len == 0 { 0 } else { last - first + 1 };
    (first..first + count).map(|l| l * CACHE_LINE)
}

impl Recorder {
    /// Tags the events that follow with operation number `op`.
    pub fn set_op(&mut self, op: u32) {
        self.op = op;
    }

    /// The events recorded so far.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Takes the events recorded so far, leaving the log empty (line tracking is kept).
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Cache lines (by offset) that hold stores not yet durable: stored and not flushed, or
    /// flushed and not fenced.
    pub fn unpersisted_lines(&self) -> Vec<u64> {
        self.dirty.union(&self.unfenced).copied().collect()
    }

    pub(super) fn store(&mut self, offset: u64, bytes: &[u8]) {
        for line in lines(offset, bytes.len() as u64) {
            self.unfenced.remove(&line);
            self.dirty.insert(line);
        }
        self.events.push(Event::Store {
            offset,
            bytes: bytes.to_vec(),
            op: self.op,
        });
    }

    pub(super) fn store_nt(&mut self, offset: u64, bytes: &[u8]) {
        for line in lines(offset, bytes.len() as u64) {
            self.dirty.remove(&line);
            self.unfenced.insert(line);
        }
        self.events.push(Event::StoreNt {
            offset,
            bytes: bytes.to_vec(),
            op: self.op,
        });
    }

    pub(super) fn flush(&mut self, line: u64) {
        debug_assert_eq!(line % CACHE_LINE, 0);
        if self.dirty.remove(&line) {
            self.unfenced.insert(line);
        }
        self.events.push(Event::Flush { line, op: self.op });
    }

    pub(super) fn fence(&mut self) {
        self.unfenced.clear();
        self.events.push(Event::Fence { op: self.op });
    }
}
