//! File offsets that fork and exec share, as the kernel shares an open file description's.
//!
//! `{ echo first; sort f; echo last; } > out` opens `out` once in the shell; sort inherits the
//! description across fork and exec, writes at the shell's offset and moves it, and the shell's
//! `echo last` must land after sort's output. The shim's descriptions live in each process's
//! memory, so a description alive at a fork moves its offset into a slot of a shared memfd (the
//! *area*): the child inherits the mapping, an exec hands the memfd on, and every process's
//! copy of the description reads and writes the one slot. In embedded mode one process at a
//! time holds the image, so the slot needs no lock across processes; within one process the
//! description's mutex orders its users as before.
//!
//! Layout of the area (native-endian `u64` words): word 0 is the next unused slot (a bump
//! counter shared by every process of the tree, starting at 1); word `i` is slot `i`'s offset.
//! Slots are never reused (a process that dies cannot give its slots back), so a tree that
//! makes more than `SLOTS` descriptions shared keeps the later ones private, with one line on
//! stderr: their offsets then diverge between processes as before.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

use nosefs_core::Errno;
use parking_lot::{Mutex, MutexGuard};

use crate::fdtable::{self, Internal};

/// Slots in the area (8 MiB of address space, touched a page at a time).
pub const SLOTS: usize = 1 << 20;

struct Area {
    fd: OwnedFd,
    words: &'static [AtomicU64],
}

static AREA: OnceLock<Result<Area, Errno>> = OnceLock::new();
static FULL_SAID: AtomicBool = AtomicBool::new(false);

fn io(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error())
}

/// Maps `fd` as the area, keeping the descriptor with the shim's own (high, close-on-exec).
fn map(fd: OwnedFd) -> Result<Area, Errno> {
    let high = rustix::io::fcntl_dupfd_cloexec(&fd, fdtable::internal_fd_floor()).map_err(io)?;
    drop(fd);
    let words = crate::sys::map_shared_words(high.as_fd(), SLOTS)?;
    fdtable::set_internal(Internal::Offsets, Some(high.as_raw_fd()));
    Ok(Area { fd: high, words })
}

fn area() -> Option<&'static Area> {
    AREA.get_or_init(|| {
        let memfd = rustix::fs::memfd_create("nosefs-offsets", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(io)?;
        rustix::fs::ftruncate(&memfd, (SLOTS * 8) as u64).map_err(io)?;
        let area = map(memfd)?;
        area.words[0].store(1, Ordering::Relaxed);
        Ok(area)
    })
    .as_ref()
    .ok()
}

/// At start-up after exec: the area the previous program handed over in descriptor `fd`.
pub fn adopt_area(fd: RawFd) {
    // The descriptor is ours to take: the previous program left it open for us alone.
    let Some(owned) = crate::fdtable::take_handed_over(fd) else {
        return;
    };
    let _ = AREA.set(map(owned));
}

/// A new descriptor numbered from the lowest free one, without close-on-exec, naming the area,
/// for an exec to hand on; `None` if no description was ever shared.
pub fn descriptor_for_exec() -> Option<OwnedFd> {
    let area = AREA.get()?.as_ref().ok()?;
    rustix::io::dup(&area.fd).ok()
}

fn slot(index: u32) -> &'static AtomicU64 {
    let area = area().expect("a description has a slot only after the area was mapped");
    &area.words[index as usize]
}

/// The offset of one open file description: private to the process until a fork shares it.
#[derive(Debug, Default)]
pub struct Offset {
    local: Mutex<u64>,
    /// The area slot holding the offset, or 0 while it is private.
    shared: AtomicU32,
}

/// The locked offset: reads the shared slot when taken and writes it back when dropped.
#[derive(Debug)]
pub struct OffsetGuard<'a> {
    local: MutexGuard<'a, u64>,
    shared: u32,
}

impl Offset {
    /// A private offset.
    pub fn new(value: u64) -> Offset {
        Offset {
            local: Mutex::new(value),
            shared: AtomicU32::new(0),
        }
    }

    /// An offset kept in area slot `index` (adopted across exec); private if the area is gone.
    pub fn in_slot(index: u32, value: u64) -> Offset {
        let valid = index != 0 && (index as usize) < SLOTS && AREA.get().is_some_and(|a| a.is_ok());
        Offset {
            local: Mutex::new(value),
            shared: AtomicU32::new(if valid { index } else { 0 }),
        }
    }

    /// Locks the offset.
    pub fn lock(&self) -> OffsetGuard<'_> {
        let mut local = self.local.lock();
        let shared = self.shared.load(Ordering::Acquire);
        if shared != 0 {
            *local = slot(shared).load(Ordering::Acquire);
        }
        OffsetGuard { local, shared }
    }

    /// The slot, or 0 if private.
    pub fn slot(&self) -> u32 {
        self.shared.load(Ordering::Acquire)
    }

    /// Before a fork: moves the offset into a slot of the area so that both processes share it.
    pub fn share(&self) {
        let local = self.local.lock();
        if self.shared.load(Ordering::Acquire) != 0 {
            return;
        }
        let Some(area) = area() else {
            return;
        };
        let index = area.words[0].fetch_add(1, Ordering::AcqRel);
        if index as usize >= SLOTS {
            if !FULL_SAID.swap(true, Ordering::Relaxed) {
                crate::state::say(
                    "too many descriptions shared across fork; later ones keep per-process offsets",
                );
            }
            return;
        }
        area.words[index as usize].store(*local, Ordering::Release);
        self.shared.store(index as u32, Ordering::Release);
    }
}

impl std::ops::Deref for OffsetGuard<'_> {
    type Target = u64;
    fn deref(&self) -> &u64 {
        &self.local
    }
}

impl std::ops::DerefMut for OffsetGuard<'_> {
    fn deref_mut(&mut self) -> &mut u64 {
        &mut self.local
    }
}

impl Drop for OffsetGuard<'_> {
    fn drop(&mut self) {
        if self.shared != 0 {
            slot(self.shared).store(*self.local, Ordering::Release);
        }
    }
}

/// Before a fork or spawn: every live description's offset becomes shared.
pub fn share_all() {
    for (_, file) in fdtable::all() {
        file.offset.share();
    }
}
