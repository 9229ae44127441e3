//! Pages made ready ahead of the first store into them.
//!
//! An image mapped without `MAP_POPULATE` (what `nosefs mount` and `nosefs run` do: memory should
//! hold what the files hold, not the image's size) pays a page fault, and on a file in /dev/shm
//! a page allocation and zeroing, at the first store into each 4 KiB page: about 2.3 us here,
//! more than a whole 4 KiB append + fsync costs on a populated image (1.7 us). Batching does
//! not make it cheaper (`MADV_POPULATE_WRITE` costs the same per page), so a [`Populator`]
//! takes it off the path that writes: the block allocator asks for the pages just ahead of
//! where it hands out blocks, and a background thread populates them with
//! `MADV_POPULATE_WRITE` while the writer works on. Its thread blocks every signal, so a
//! program served in its own process (the shim's embedded mode) keeps receiving its signals
//! on its own threads.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::mapping::Mapping;
use super::{Access, MappingKind, Region};

/// Bytes populated per call, so that a stop is seen within one chunk.
const CHUNK_BYTES: u64 = 256 << 10;

/// A background thread that populates ranges of a region's mapping on request.
#[derive(Debug)]
pub struct Populator {
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    /// Keeps the mapping (and the image's descriptor) alive while the thread uses it; the
    /// thread is joined before the region's owner gives the image back.
    mapping: Arc<Mapping>,
    queue: Mutex<Queue>,
    wake: Condvar,
    populated_bytes: AtomicU64,
    /// Set when the kernel refused (no `MADV_POPULATE_WRITE`, before Linux 5.14): requests are
    /// dropped from then on.
    refused: AtomicBool,
    /// Asked before each chunk is populated: whether its pages may be taken ([`Populator::gate`]).
    gate: std::sync::OnceLock<GateFn>,
}

struct GateFn(Gate);

impl std::fmt::Debug for GateFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gate")
    }
}

/// What [`Populator::gate`] takes: whether `[offset, offset + len)` may be populated.
pub type Gate = Box<dyn Fn(u64, u64) -> bool + Send + Sync>;

#[derive(Debug, Default)]
struct Queue {
    ranges: VecDeque<(u64, u64)>,
    stop: bool,
}

impl Populator {
    /// A populator for `region`, or `None` where there is nothing to gain: a recording or
    /// anonymous region, a read-only or private mapping, device-dax (no page allocation).
    pub fn start(region: &Region) -> Option<Populator> {
        let info = region.info();
        if region.recorder.is_some()
            || info.access != Access::ReadWrite
            || info.kind != MappingKind::File
        {
            return None;
        }
        let shared = Arc::new(Shared {
            mapping: Arc::clone(&region.mapping),
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            populated_bytes: AtomicU64::new(0),
            refused: AtomicBool::new(false),
            gate: std::sync::OnceLock::new(),
        });
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("nosefs-populate".into())
            .spawn(move || {
                block_signals();
                run(&theirs);
            })
            .ok()?;
        Some(Populator {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Asks for `[offset, offset + len)` of the region to be populated (soon, not now).
    pub fn request(&self, offset: u64, len: u64) {
        if len == 0 || self.shared.refused.load(Ordering::Relaxed) {
            return;
        }
        let mut queue = self.shared.queue.lock().expect("populate queue lock");
        if queue.stop {
            return;
        }
        queue.ranges.push_back((offset, len));
        drop(queue);
        self.shared.wake.notify_one();
    }

    /// From now on, populates a chunk only where `gate` allows it (the block allocator's page
    /// reservations, which populating must not run ahead of: it would take the pages the file
    /// system keeps for the image's metadata). A request stops at its first chunk refused.
    pub fn gate(&self, gate: Gate) {
        let _ = self.shared.gate.set(GateFn(gate));
    }

    /// Bytes populated so far.
    pub fn populated_bytes(&self) -> u64 {
        self.shared.populated_bytes.load(Ordering::Relaxed)
    }

    /// Stops the thread (pending requests are dropped) and waits for it.
    pub fn stop(&self) {
        self.shared.queue.lock().expect("populate queue lock").stop = true;
        self.shared.wake.notify_one();
        let handle = self.thread.lock().expect("populate thread lock").take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

impl Drop for Populator {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(shared: &Shared) {
    loop {
        let (offset, len) = {
            let mut queue = shared.queue.lock().expect("populate queue lock");
            loop {
                if queue.stop {
                    return;
                }
                if let Some(range) = queue.ranges.pop_front() {
                    break range;
                }
                queue = shared.wake.wait(queue).expect("populate queue lock");
            }
        };
        let end = (offset + len).min(shared.mapping.len());
        let mut at = offset;
        while at < end {
            if shared.queue.lock().expect("populate queue lock").stop {
                return;
            }
            let n = CHUNK_BYTES.min(end - at);
            if shared.gate.get().is_some_and(|gate| !(gate.0)(at, n)) {
                break;
            }
            if shared.mapping.populate_write(at, n).is_err() {
                shared.refused.store(true, Ordering::Relaxed);
                return;
            }
            shared.populated_bytes.fetch_add(n, Ordering::Relaxed);
            at += n;
        }
    }
}

/// Blocks every signal in the calling thread (a new thread inherits its creator's mask, so the
/// program's threads are untouched).
fn block_signals() {
    // SAFETY: a filled sigset_t and a null old set are what pthread_sigmask takes; it changes
    // only the calling thread's mask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}
