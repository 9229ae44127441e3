//! Crash states of one operation under the pmem crash model (see `nosefs_core::pmem`).
//!
//! A store becomes durable only when its cache line is flushed after it and a fence follows.
//! Between fences, any subset of the stores in flight may have reached the media, torn at 8-byte
//! boundaries, except that within one cache line they persist in program order: a crash keeps a
//! prefix of each line's in-flight stores. Non-temporal stores are durable at the next fence.
//!
//! Stores an operation leaves in flight when it returns (a plain write's data, a directory log's
//! lazily stored clear) stay in flight into the next operation: [`Carry`] takes them along, and
//! a crash during the next operation may keep or lose each of them.

use std::collections::BTreeMap;

use nosefs_core::pmem::{Event, CACHE_LINE};

/// One 8-byte-aligned piece of a store.
#[derive(Debug, Clone)]
struct Chunk {
    offset: u64,
    bytes: Vec<u8>,
    flushed: bool,
    /// Stored by an earlier operation.
    carried: bool,
}

/// Cache lines (by offset) with the indexes of their chunks in flight, in program order.
type Lines = Vec<(u64, Vec<usize>)>;

/// The media state between two operations: what is durable, and the stores still in flight.
#[derive(Debug, Clone)]
pub struct Carry {
    durable: Vec<u8>,
    in_flight: Vec<Chunk>,
}

impl Carry {
    /// An image with nothing in flight.
    pub fn durable(image: Vec<u8>) -> Carry {
        Carry {
            durable: image,
            in_flight: Vec::new(),
        }
    }

    /// Cache lines with stores in flight.
    pub fn lines_in_flight(&self) -> usize {
        let mut lines: Vec<u64> = self
            .in_flight
            .iter()
            .map(|c| c.offset / CACHE_LINE)
            .collect();
        lines.sort_unstable();
        lines.dedup();
        lines.len()
    }
}

/// A crash point: the fence it precedes (or the end of the operation), and what persisted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashPoint {
    /// Index of the fence the crash precedes, counting from 0; `fences` means after the last.
    pub fence: usize,
    /// For each cache line with stores in flight (by offset), how many of them persisted.
    pub prefix: Vec<(u64, usize)>,
}

/// The crash images of one operation, built from the image before it and its events.
#[derive(Debug)]
pub struct Enumerator<'a> {
    durable: Vec<u8>,
    in_flight: Vec<Chunk>,
    events: &'a [Event],
    next_event: usize,
    fence: usize,
}

fn chunks(offset: u64, bytes: &[u8], flushed: bool) -> impl Iterator<Item = Chunk> + '_ {
    let end = offset + bytes.len() as u64;
    let mut at = offset;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let stop = ((at / 8) + 1) * 8;
        let stop = stop.min(end);
        let piece = &bytes[(at - offset) as usize..(stop - offset) as usize];
        let chunk = Chunk {
            offset: at,
            bytes: piece.to_vec(),
            flushed,
            carried: false,
        };
        at = stop;
        Some(chunk)
    })
}

impl<'a> Enumerator<'a> {
    /// Starts from the image as it was before the operation, nothing in flight.
    pub fn new(before: Vec<u8>, events: &'a [Event]) -> Enumerator<'a> {
        Enumerator::resume(Carry::durable(before), events)
    }

    /// Starts from the state an earlier operation left.
    pub fn resume(carry: Carry, events: &'a [Event]) -> Enumerator<'a> {
        let mut in_flight = carry.in_flight;
        in_flight.iter_mut().for_each(|c| c.carried = true);
        Enumerator {
            durable: carry.durable,
            in_flight,
            events,
            next_event: 0,
            fence: 0,
        }
    }

    /// Whether the point `advance` last returned is the end of the events (after the last
    /// fence), not a fence.
    pub fn at_end(&self) -> bool {
        self.next_event > self.events.len()
    }

    /// The state at the end, for the next operation. Call once [`Enumerator::at_end`].
    pub fn into_carry(self) -> Carry {
        assert!(self.at_end(), "the carry is taken at the end of the events");
        Carry {
            durable: self.durable,
            in_flight: self.in_flight,
        }
    }

    /// Advances to the next crash point (the next fence, or the end); `None` once past the end.
    /// The caller then asks for images with [`Enumerator::images`].
    pub fn advance(&mut self) -> Option<usize> {
        if self.next_event > self.events.len() {
            return None;
        }
        while let Some(event) = self.events.get(self.next_event) {
            self.next_event += 1;
            match event {
                Event::Store { offset, bytes, .. } => {
                    self.in_flight.extend(chunks(*offset, bytes, false))
                }
                Event::StoreNt { offset, bytes, .. } => {
                    self.in_flight.extend(chunks(*offset, bytes, true))
                }
                Event::Flush { line, .. } => {
                    for c in &mut self.in_flight {
                        if c.offset / CACHE_LINE * CACHE_LINE == *line {
                            c.flushed = true;
                        }
                    }
                }
                Event::Fence { .. } => {
                    let point = self.fence;
                    self.fence += 1;
                    return Some(point);
                }
            }
        }
        self.next_event += 1; // past the end
        Some(self.fence)
    }

    /// Stores that are still in flight (not durable) at this point.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The crash images at the current point: every prefix combination of the lines this
    /// operation stored to when there are at most `limit`, else `samples` random ones (seeded)
    /// plus none and all. Lines only earlier operations left in flight are combined with each of
    /// those three ways: none of them persisted, all, or a random choice.
    pub fn images(
        &self,
        point: usize,
        limit: usize,
        samples: usize,
        seed: u64,
    ) -> Vec<(CrashPoint, Vec<u8>)> {
        let mut by_line: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, c) in self.in_flight.iter().enumerate() {
            by_line
                .entry(c.offset / CACHE_LINE * CACHE_LINE)
                .or_default()
                .push(i);
        }
        let (carried, lines): (Lines, Lines) = by_line
            .into_iter()
            .partition(|(_, members)| members.iter().all(|&i| self.in_flight[i].carried));
        let total = lines
            .iter()
            .try_fold(1usize, |acc, (_, c)| acc.checked_mul(c.len() + 1));
        let own: Vec<Vec<usize>> = match total {
            Some(n) if n <= limit => (0..n).map(|k| mixed_radix(k, &lines)).collect(),
            _ => sampled(&lines, samples, seed),
        };
        let variants: Vec<Vec<usize>> = if carried.is_empty() {
            vec![Vec::new()]
        } else {
            let mut v = sampled(&carried, 1, seed ^ 0xca77);
            v.dedup();
            v
        };
        let lines: Lines = lines.into_iter().chain(carried).collect();
        let prefixes = own.into_iter().flat_map(|prefix| {
            variants.iter().map(move |variant| {
                let mut full = prefix.clone();
                full.extend_from_slice(variant);
                full
            })
        });
        prefixes
            .into_iter()
            .map(|prefix| {
                let mut image = self.durable.clone();
                for ((_, members), &keep) in lines.iter().zip(&prefix) {
                    for &i in &members[..keep] {
                        let c = &self.in_flight[i];
                        image[c.offset as usize..c.offset as usize + c.bytes.len()]
                            .copy_from_slice(&c.bytes);
                    }
                }
                let crash = CrashPoint {
                    fence: point,
                    prefix: lines.iter().map(|(l, _)| *l).zip(prefix).collect(),
                };
                (crash, image)
            })
            .collect()
    }

    /// Applies the fence the last `advance` stopped at: flushed stores become durable.
    pub fn pass_fence(&mut self) {
        let (durable, still): (Vec<Chunk>, Vec<Chunk>) =
            self.in_flight.drain(..).partition(|c| c.flushed);
        for c in durable {
            self.durable[c.offset as usize..c.offset as usize + c.bytes.len()]
                .copy_from_slice(&c.bytes);
        }
        self.in_flight = still;
    }
}

fn mixed_radix(mut k: usize, lines: &[(u64, Vec<usize>)]) -> Vec<usize> {
    lines
        .iter()
        .map(|(_, members)| {
            let radix = members.len() + 1;
            let digit = k % radix;
            k /= radix;
            digit
        })
        .collect()
}

fn sampled(lines: &[(u64, Vec<usize>)], samples: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut state = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = vec![
        vec![0; lines.len()],
        lines.iter().map(|(_, m)| m.len()).collect(),
    ];
    for _ in 0..samples {
        out.push(
            lines
                .iter()
                .map(|(_, m)| (next() % (m.len() as u64 + 1)) as usize)
                .collect(),
        );
    }
    out
}

/// A 64-bit key of an image for deduplication: two CRC-32C with different seeds (hardware
/// accelerated, so hashing whole images stays cheap).
pub fn image_key(image: &[u8]) -> u64 {
    let a = crc32c::crc32c(image);
    let b = crc32c::crc32c_append(0x9e37_79b9, image);
    (u64::from(a) << 32) | u64::from(b)
}
