//! The recording backend's log: every store, flush and fence, in program order.
//!
//! It also tracks which cache lines are not yet durable, so that any test can assert that an
//! operation which promised durability left nothing in flight ([`Recorder::unpersisted_lines`]),
//! and, on request, the image a power loss would leave right now if nothing in flight persisted
//! ([`Recorder::track_durable`]). That image follows the crash model per thread: a store is
//! durable once a thread that wrote its line back (or the thread that stored it non-temporally)
//! has fenced since.

use std::collections::{BTreeSet, HashMap};

use smallvec::SmallVec;
use std::thread::ThreadId;

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
    /// The durable image and the stores in flight, when tracked.
    durable: Option<Durable>,
}

/// What a power loss would keep: the durable bytes, and the stores not yet durable.
#[derive(Debug)]
struct Durable {
    image: Vec<u8>,
    in_flight: Vec<InFlight>,
    /// Bit per thread that has touched the region, in order of first use.
    threads: HashMap<ThreadId, u32>,
}

/// A store not yet durable.
#[derive(Debug)]
struct InFlight {
    offset: u64,
    bytes: Vec<u8>,
    /// Threads whose next fence makes it durable.
    fenced_by: u64,
}

impl Durable {
    /// Records a store in flight, one piece per cache line (each line is written back alone).
    fn push(&mut self, offset: u64, bytes: &[u8], fenced_by: u64) {
        let mut at = 0usize;
        while at < bytes.len() {
            let start = offset + at as u64;
            let line_end = (start / CACHE_LINE + 1) * CACHE_LINE;
            let n = ((line_end - start) as usize).min(bytes.len() - at);
            self.in_flight.push(InFlight {
                offset: start,
                bytes: bytes[at..at + n].to_vec(),
                fenced_by,
            });
            at += n;
        }
    }

    fn thread_bit(&mut self) -> u64 {
        let next = self.threads.len() as u32;
        let index = *self
            .threads
            .entry(std::thread::current().id())
            .or_insert(next);
        assert!(index < 64, "durable tracking models at most 64 threads");
        1 << index
    }
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
    /// Starts tracking the durable image, from `image`, the region's content now with nothing in
    /// flight.
    pub fn track_durable(&mut self, image: Vec<u8>) {
        self.durable = Some(Durable {
            image,
            in_flight: Vec::new(),
            threads: HashMap::new(),
        });
    }

    /// The image a power loss would leave now if nothing in flight persisted; `None` unless
    /// [`Recorder::track_durable`] was called.
    pub fn durable_image(&self) -> Option<Vec<u8>> {
        self.durable.as_ref().map(|d| d.image.clone())
    }

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
        if let Some(d) = &mut self.durable {
            d.push(offset, bytes, 0);
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
        if let Some(d) = &mut self.durable {
            let bit = d.thread_bit();
            d.push(offset, bytes, bit);
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
        if let Some(d) = &mut self.durable {
            let bit = d.thread_bit();
            for s in &mut d.in_flight {
                if s.offset / CACHE_LINE * CACHE_LINE == line {
                    s.fenced_by |= bit;
                }
            }
        }
        self.events.push(Event::Flush { line, op: self.op });
    }

    pub(super) fn fence(&mut self) {
        self.unfenced.clear();
        if let Some(d) = &mut self.durable {
            d.fence();
        }
        self.events.push(Event::Fence { op: self.op });
    }
}

impl Durable {
    /// The calling thread's fence: its stores become durable, in program order. An older store
    /// of another thread to the same bytes can no longer reach the media after them (the line's
    /// later write-back, or the non-temporal store, supersedes it), so its overlap is dropped.
    fn fence(&mut self) {
        let bit = self.thread_bit();
        let mut kept: Vec<InFlight> = Vec::with_capacity(self.in_flight.len());
        for s in std::mem::take(&mut self.in_flight) {
            if s.fenced_by & bit == 0 {
                kept.push(s);
                continue;
            }
            let at = s.offset as usize;
            self.image[at..at + s.bytes.len()].copy_from_slice(&s.bytes);
            let (start, end) = (s.offset, s.offset + s.bytes.len() as u64);
            kept = kept
                .into_iter()
                .flat_map(|older| older.without(start, end))
                .collect();
        }
        self.in_flight = kept;
    }
}

impl InFlight {
    /// What is left of this store outside `[start, end)`: nothing, itself, or one or two parts.
    fn without(self, start: u64, end: u64) -> SmallVec<[InFlight; 2]> {
        let (s, e) = (self.offset, self.offset + self.bytes.len() as u64);
        if end <= s || e <= start {
            return smallvec::smallvec![self];
        }
        let part = |from: u64, to: u64| InFlight {
            offset: from,
            bytes: self.bytes[(from - s) as usize..(to - s) as usize].to_vec(),
            fenced_by: self.fenced_by,
        };
        let mut parts = SmallVec::new();
        if s < start {
            parts.push(part(s, start));
        }
        if end < e {
            parts.push(part(end, e));
        }
        parts
    }
}
