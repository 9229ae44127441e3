//! The shared request area of one client connection, and (with `sys`) the crate's only `unsafe`:
//! mapping the memfd and touching its words and bytes.
//!
//! Layout (little-endian, offsets in bytes):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | magic `NOSEFSRQ` |
//! | 8 | 4 | version ([`VERSION`]) |
//! | 12 | 4 | slot count |
//! | 16 | 4 | bytes per slot (its 64-byte header and payload) |
//! | 64 | 4 | `server_sleeping`: 1 while the connection's first server thread waits on `doorbell` |
//! | 68 | 4 | `doorbell`: futex word; a client bumps it to wake that thread |
//! | 128 + i·64 | 64 | slot i's header: `owner` (see [`owner`]), `state`, `client_waiting`, `len`, then `helper` (1 once the slot's pair has a server thread of its own), `helper_sleeping` and `helper_doorbell` (that thread's sleep, as above; a pair's thread uses its even slot's words), `server_cpu` and `client_cpu` (the CPU each side last ran on, plus one: see `wait`) |
//! | P + i·(slot − 64) | slot − 64 | slot i's payload: the request, then the reply; P is the first page boundary after the slot headers |
//! | P + slots·(slot − 64) | 8 · [`SIZE_WORDS`] | the size board: word k holds the size of the file the client's watch k follows, stored by the daemon at every change of it (`nosefs_core::Fs::watch_size`) |
//! | after it | 8 · [`SIZE_WORDS`] | the generation board: word k holds that file's generation (`nosefs_core::file::direct`), stored before its size |
//!
//! The slot headers share the first page(s), and the payloads follow: the server scans every
//! slot's state, and with a header beside each payload that scan touched a page per slot, a page
//! the kernel allocated, mapped into both processes and freed again for every connection (16
//! page faults per process in the daemon alone, make's jobs being short processes).
//!
//! A slot's `state` goes idle (0) → request (1, client) → serving (2, server) → reply (3, server)
//! → idle (client). Slots come in pairs (2k, 2k + 1): a client thread uses its pair first, one
//! slot for its call and the other for the close it posted before. A pair is served by the
//! connection's first server thread until two of the client's threads are seen waiting at once;
//! the daemon then gives the waiting pair a thread of its own and sets `helper`, and the client
//! rings that thread's doorbell instead. Payload bytes are handed over by the Release store and Acquire load of
//! `state`. The daemon never trusts the area: it copies a request out before decoding it (so a
//! client changing it meanwhile changes only what is decoded, which is validated), and bounds
//! every length by the slot's size. A read's data is stored straight into the reply
//! ([`Area::fill`]), never read back.

use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use nosefs_core::pmem::copy_nonoverlapping;
use rustix::mm::{MapFlags, ProtFlags};

/// The area's magic number.
pub const MAGIC: u64 = u64::from_le_bytes(*b"NOSEFSRQ");
/// The layout's version.
pub const VERSION: u32 = 6;
/// Bytes before the first slot.
pub const HEADER_BYTES: usize = 128;
/// Bytes of a slot's header.
pub const SLOT_HEADER_BYTES: usize = 64;
/// Words of the size board after the slots: files a client can follow without asking.
pub const SIZE_WORDS: usize = 1024;

/// Slot states.
pub mod state {
    /// Free for a request.
    pub const IDLE: u32 = 0;
    /// A request waits for the server.
    pub const REQUEST: u32 = 1;
    /// The server is executing it.
    pub const SERVING: u32 = 2;
    /// The reply is ready.
    pub const REPLY: u32 = 3;
}

/// Slot owners (the `owner` word; written by the client only, so the daemon reads it as a
/// hint).
pub mod owner {
    /// No client thread uses the slot.
    pub const FREE: u32 = 0;
    /// A client thread's call: it waits for the reply.
    pub const CALL: u32 = 1;
    /// A posted request: no one waits; the next call that finds it answered takes the slot.
    pub const POSTED: u32 = 2;
}

/// The first (even) slot of slot `slot`'s pair.
pub const fn pair_first(slot: usize) -> usize {
    slot & !1
}

/// Where the payloads start: the first page boundary after the slot headers (`None` on overflow,
/// for a count read from a client's area).
fn payloads_offset(slots: usize) -> Option<usize> {
    slots
        .checked_mul(SLOT_HEADER_BYTES)?
        .checked_add(HEADER_BYTES)?
        .checked_next_multiple_of(PAGE_BYTES)
}

/// The bytes of an area of `slots` slots of `slot_bytes` (header and payload) each.
fn area_bytes(slots: usize, slot_bytes: usize) -> usize {
    payloads_offset(slots).expect("a sane slot count")
        + slots * (slot_bytes - SLOT_HEADER_BYTES)
        + SIZE_WORDS * 16
}

/// The page size the payloads are aligned to.
const PAGE_BYTES: usize = 4096;

/// One mapped request area.
#[derive(Debug)]
pub struct Area {
    base: NonNull<u8>,
    bytes: usize,
    slots: usize,
    slot_bytes: usize,
    /// The memfd: kept by the daemon (to hand over, and to reuse the area); the client closes
    /// its copy once mapped (see [`Area::open`]).
    fd: Option<OwnedFd>,
}

// SAFETY: the mapping is shared memory reached only through atomics and raw-pointer copies;
// nothing in it is a Rust reference to non-atomic data, so any thread may use it.
unsafe impl Send for Area {}
// SAFETY: as for Send.
unsafe impl Sync for Area {}

/// The daemon stores a watched file's generation, then its size, into the client's boards.
impl nosefs_core::file::SizeSink for Area {
    fn store(&self, index: u32, size: u64, generation: Option<u64>) {
        use std::sync::atomic::Ordering::Release;
        if let (Some(s), Some(g)) = (self.size_word(index), self.generation_word(index)) {
            if let Some(generation) = generation {
                g.store(generation, Release);
            }
            s.store(size, Release);
        }
    }
}

impl Area {
    /// Creates a new area of `slots` slots of `slot_bytes` each in a fresh memfd (the daemon).
    pub fn create(slots: usize, slot_bytes: usize) -> rustix::io::Result<Area> {
        assert!(slots > 0 && slots % 2 == 0);
        assert!(slot_bytes > SLOT_HEADER_BYTES && slot_bytes % 64 == 0);
        let bytes = area_bytes(slots, slot_bytes);
        let fd = rustix::fs::memfd_create(
            "nosefs-requests",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )?;
        rustix::fs::ftruncate(&fd, bytes as u64)?;
        // The client cannot grow or shrink it under the daemon (SIGBUS on a mapped page).
        rustix::fs::fcntl_add_seals(
            &fd,
            rustix::fs::SealFlags::SHRINK
                | rustix::fs::SealFlags::GROW
                | rustix::fs::SealFlags::SEAL,
        )?;
        let area = Area::map(fd, bytes, slots, slot_bytes)?;
        area.write_header();
        Ok(area)
    }

    fn write_header(&self) {
        self.write_u64(0, MAGIC);
        self.write_u32(8, VERSION);
        self.write_u32(12, self.slots as u32);
        self.write_u32(16, self.slot_bytes as u32);
    }

    /// The daemon, before handing an area an ended client used to the next one: the header
    /// as [`Area::create`] wrote it and every slot's header zero (idle, free, no helper, no
    /// one asleep), whatever the last client left there. Payloads and the size board are left:
    /// a payload is read only after its client's request, and a board word only after the
    /// daemon stored the size of the file it was given for.
    pub fn reset(&self) {
        self.write_header();
        let end = payloads_offset(self.slots).expect("checked");
        for offset in (20..end).step_by(4) {
            self.write_u32(offset, 0);
        }
    }

    /// Maps an area the daemon sent (the client); `None` when it is not one.
    ///
    /// The client keeps no descriptor of it, and a forked child does not inherit the mapping
    /// (`MADV_DONTFORK`): once the client process has ended, only the daemon can reach the
    /// area, which may then serve the next client with the same credentials
    /// (`server::door`'s reuse).
    pub fn open(fd: OwnedFd) -> Option<Area> {
        let bytes = rustix::fs::fstat(&fd).ok()?.st_size as usize;
        if bytes < HEADER_BYTES {
            return None;
        }
        let probe = Area::map(fd, bytes, 0, 0).ok()?;
        if probe.read_u64(0) != MAGIC || probe.read_u32(8) != VERSION {
            return None;
        }
        let slots = probe.read_u32(12) as usize;
        let slot_bytes = probe.read_u32(16) as usize;
        if slots == 0 || slots % 2 != 0 || slot_bytes <= SLOT_HEADER_BYTES || slot_bytes % 64 != 0 {
            return None;
        }
        let fits = slots
            .checked_mul(slot_bytes - SLOT_HEADER_BYTES)
            .and_then(|b| b.checked_add(payloads_offset(slots)?.checked_add(SIZE_WORDS * 16)?))
            .is_some_and(|b| b <= bytes);
        if !fits {
            return None;
        }
        let mut area = probe;
        area.slots = slots;
        area.slot_bytes = slot_bytes;
        // SAFETY: advice on exactly the range mapped in `map`, which `area` owns; DONTFORK
        // changes only what a fork copies, not this process's view.
        unsafe {
            rustix::mm::madvise(
                area.base.as_ptr().cast(),
                area.bytes,
                rustix::mm::Advice::LinuxDontFork,
            )
        }
        .ok()?;
        area.fd = None;
        Some(area)
    }

    /// Leaves the mapping as it is, unmapped only by the process's end or exec: at exit, an
    /// munmap would flush the TLB of every CPU the process ran on first; in a forked child,
    /// which never had the mapping (`MADV_DONTFORK`), the range may hold something else since.
    pub fn leave(self) {
        std::mem::forget(self);
    }

    fn map(fd: OwnedFd, bytes: usize, slots: usize, slot_bytes: usize) -> rustix::io::Result<Area> {
        // SAFETY: a fresh shared mapping of the whole memfd; nothing else in this process
        // refers to that address range, and it is unmapped only in Drop.
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                bytes,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd.as_fd(),
                0,
            )?
        };
        Ok(Area {
            base: NonNull::new(base.cast()).expect("mmap never returns null"),
            bytes,
            slots,
            slot_bytes,
            fd: Some(fd),
        })
    }

    /// The memfd, to send to the client (the daemon's areas keep theirs).
    pub fn fd(&self) -> &OwnedFd {
        self.fd.as_ref().expect("the daemon's area keeps its memfd")
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Payload bytes of a slot.
    pub fn payload_bytes(&self) -> usize {
        self.slot_bytes - SLOT_HEADER_BYTES
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        assert!(
            offset % 4 == 0 && offset + 4 <= self.bytes,
            "word {offset} out of the area"
        );
        // SAFETY: in bounds and aligned (checked above; the mapping is page-aligned); the
        // memory stays mapped while `self` lives, and is only ever accessed atomically or by
        // raw-pointer copies, never through a non-atomic reference.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    fn read_u32(&self, offset: usize) -> u32 {
        self.word(offset).load(std::sync::atomic::Ordering::Acquire)
    }

    fn write_u32(&self, offset: usize, value: u32) {
        self.word(offset)
            .store(value, std::sync::atomic::Ordering::Release);
    }

    fn read_u64(&self, offset: usize) -> u64 {
        u64::from(self.read_u32(offset)) | u64::from(self.read_u32(offset + 4)) << 32
    }

    fn write_u64(&self, offset: usize, value: u64) {
        self.write_u32(offset, value as u32);
        self.write_u32(offset + 4, (value >> 32) as u32);
    }

    /// 1 while the server thread sleeps on the doorbell.
    pub fn server_sleeping(&self) -> &AtomicU32 {
        self.word(64)
    }

    /// The futex word a sleeping server waits on.
    pub fn doorbell(&self) -> &AtomicU32 {
        self.word(68)
    }

    /// Word `index` of the size board (`None` past its end).
    pub fn size_word(&self, index: u32) -> Option<&AtomicU64> {
        self.board_word(index, 0)
    }

    /// Word `index` of the generation board (`None` past its end).
    pub fn generation_word(&self, index: u32) -> Option<&AtomicU64> {
        self.board_word(index, SIZE_WORDS)
    }

    /// Word `index` of the board starting `board` words after the size board's first.
    fn board_word(&self, index: u32, board: usize) -> Option<&AtomicU64> {
        let index = index as usize;
        if index >= SIZE_WORDS {
            return None;
        }
        let offset = payloads_offset(self.slots).expect("checked")
            + self.slots * self.payload_bytes()
            + (board + index) * 8;
        assert!(
            offset + 8 <= self.bytes,
            "size word {index} out of the area"
        );
        // SAFETY: in bounds (checked above; `open` checked the board fits) and 8-byte aligned
        // (the header and slots are multiples of 64 bytes, the mapping page-aligned); the memory
        // stays mapped while `self` lives and is only accessed atomically.
        Some(unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU64>() })
    }

    /// Where slot `slot`'s header is.
    fn slot_offset(&self, slot: usize) -> usize {
        assert!(slot < self.slots, "slot {slot} of {}", self.slots);
        HEADER_BYTES + slot * SLOT_HEADER_BYTES
    }

    /// Where slot `slot`'s payload is.
    fn payload_offset(&self, slot: usize) -> usize {
        assert!(slot < self.slots, "slot {slot} of {}", self.slots);
        payloads_offset(self.slots).expect("checked") + slot * self.payload_bytes()
    }

    /// Who uses slot `slot` (see [`owner`]).
    pub fn owner(&self, slot: usize) -> &AtomicU32 {
        self.word(self.slot_offset(slot))
    }

    /// Slot `slot`'s state (see [`state`]); also the futex word a waiting client sleeps on.
    pub fn state(&self, slot: usize) -> &AtomicU32 {
        self.word(self.slot_offset(slot) + 4)
    }

    /// 1 while the client waits on the slot's state with a futex.
    pub fn client_waiting(&self, slot: usize) -> &AtomicU32 {
        self.word(self.slot_offset(slot) + 8)
    }

    /// Length of the request or reply in the payload.
    pub fn len(&self, slot: usize) -> &AtomicU32 {
        self.word(self.slot_offset(slot) + 12)
    }

    /// 1 once slot `slot`'s pair has a server thread of its own (set by the daemon).
    pub fn helper(&self, slot: usize) -> &AtomicU32 {
        self.word(self.slot_offset(slot) + 16)
    }

    /// 1 while the own server thread of slot `slot`'s pair sleeps on [`Area::helper_doorbell`].
    pub fn helper_sleeping(&self, slot: usize) -> &AtomicU32 {
        self.word(self.slot_offset(pair_first(slot)) + 20)
    }

    /// The futex word the own server thread of slot `slot`'s pair sleeps on.
    pub fn helper_doorbell(&self, slot: usize) -> &AtomicU32 {
        self.word(self.slot_offset(pair_first(slot)) + 24)
    }

    /// The CPU the thread serving slot `slot` last ran on, plus one (0: unknown).
    pub fn server_cpu(&self, slot: usize) -> &AtomicU32 {
        self.word(self.slot_offset(slot) + 28)
    }

    /// The CPU the client thread of slot `slot` last ran on, plus one (0: unknown).
    pub fn client_cpu(&self, slot: usize) -> &AtomicU32 {
        self.word(self.slot_offset(slot) + 32)
    }

    /// Copies `data` into slot `slot`'s payload at `at`.
    pub fn put(&self, slot: usize, at: usize, data: &[u8]) {
        let end = at.checked_add(data.len()).expect("no overflow");
        assert!(end <= self.payload_bytes(), "payload overrun");
        let offset = self.payload_offset(slot) + at;
        // The core's copy, not `std`'s: `memcpy` stalls at some distances between buffers here.
        // SAFETY: the destination is inside the mapping (bounds checked above) and does not
        // overlap `data`, which is private memory.
        unsafe { copy_nonoverlapping(data.as_ptr(), self.base.as_ptr().add(offset), data.len()) };
    }

    /// Lets `fill` store into `len` bytes of slot `slot`'s payload at `at`, in place: a read's
    /// data goes from the image straight into the reply.
    pub fn fill<R>(
        &self,
        slot: usize,
        at: usize,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> R,
    ) -> R {
        let end = at.checked_add(len).expect("no overflow");
        assert!(end <= self.payload_bytes(), "payload overrun");
        let offset = self.payload_offset(slot) + at;
        // SAFETY: the bytes are inside the mapping (bounds checked above), which outlives the
        // call, and the slot is the serving thread's until it stores the reply state, so no
        // other thread of this process touches them. The client may store into them meanwhile
        // (only a hostile one: it waits for the reply); `fill` (a read of the image) only stores
        // into the slice and never reads it back, so that changes nothing but the bytes that
        // client gets.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(offset), len) };
        fill(bytes)
    }

    /// Copies `out.len()` bytes of slot `slot`'s payload from `at` into `out`.
    pub fn get(&self, slot: usize, at: usize, out: &mut [u8]) {
        let end = at.checked_add(out.len()).expect("no overflow");
        assert!(end <= self.payload_bytes(), "payload overrun");
        let offset = self.payload_offset(slot) + at;
        // SAFETY: the source is inside the mapping (bounds checked above); `out` is private.
        // A peer writing the bytes meanwhile changes only the values copied, which the reader
        // validates.
        unsafe { copy_nonoverlapping(self.base.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
    }
}

/// The CPU the calling thread runs on, plus one (0 if unknown): a hint, stale as soon as the
/// scheduler moves the thread.
pub fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu has no arguments and no preconditions; glibc answers from the
    // thread's rseq area (a load, no system call), else with getcpu(2).
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).map_or(0, |c| c + 1)
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range mapped in `map`; no reference into it outlives
        // `self` (every accessor borrows `self`).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.bytes) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_area_round_trips_and_validates() {
        let area = Area::create(4, 4096).unwrap();
        area.put(3, 10, b"hello");
        let fd = area.fd().try_clone().unwrap();
        let client = Area::open(fd).unwrap();
        assert_eq!(client.slots(), 4);
        assert_eq!(client.payload_bytes(), 4096 - 64);
        let mut out = [0u8; 5];
        client.get(3, 10, &mut out);
        assert_eq!(&out, b"hello");
        area.state(2)
            .store(state::REPLY, std::sync::atomic::Ordering::Release);
        assert_eq!(
            client.state(2).load(std::sync::atomic::Ordering::Acquire),
            state::REPLY
        );
    }

    #[test]
    fn every_slot_header_is_on_the_first_page_and_payloads_start_on_the_next() {
        let area = Area::create(16, 256 << 10).unwrap();
        for slot in 0..16 {
            assert!(area.slot_offset(slot) + SLOT_HEADER_BYTES <= PAGE_BYTES);
            assert_eq!(
                area.payload_offset(slot),
                PAGE_BYTES + slot * area.payload_bytes()
            );
        }
        let board = area.size_word(0).unwrap() as *const AtomicU64 as usize;
        assert_eq!(
            board - area.base.as_ptr() as usize,
            PAGE_BYTES + 16 * area.payload_bytes()
        );
        // The generation board follows; its last word is the area's last.
        let first = area.generation_word(0).unwrap() as *const AtomicU64 as usize;
        assert_eq!(first - board, SIZE_WORDS * 8);
        let last =
            area.generation_word(SIZE_WORDS as u32 - 1).unwrap() as *const AtomicU64 as usize;
        assert_eq!(last + 8 - area.base.as_ptr() as usize, area.bytes);
    }

    #[test]
    fn a_reset_area_is_as_created_whatever_its_last_client_stored() {
        use std::sync::atomic::Ordering;
        let area = Area::create(4, 4096).unwrap();
        let client = Area::open(area.fd().try_clone().unwrap()).unwrap();
        // A client that scribbled on every header word it can reach.
        for offset in (0..payloads_offset(4).unwrap()).step_by(4) {
            client.write_u32(offset, 0xdead_beef);
        }
        area.reset();
        let fresh = Area::create(4, 4096).unwrap();
        for offset in (0..payloads_offset(4).unwrap()).step_by(4) {
            assert_eq!(
                area.read_u32(offset),
                fresh.read_u32(offset),
                "header word at {offset}"
            );
        }
        assert_eq!(area.state(3).load(Ordering::Acquire), state::IDLE);
        assert_eq!(area.doorbell().load(Ordering::Acquire), 0);
        // And the next client opens it as a fresh one.
        assert_eq!(
            Area::open(area.fd().try_clone().unwrap()).unwrap().slots(),
            4
        );
    }

    #[test]
    fn an_area_claiming_more_slots_than_it_holds_is_refused() {
        let area = Area::create(4, 4096).unwrap();
        area.write_u32(12, 6);
        assert!(Area::open(area.fd().try_clone().unwrap()).is_none());
    }

    #[test]
    fn a_foreign_memfd_is_refused() {
        let fd = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 8192).unwrap();
        assert!(Area::open(fd).is_none());
    }
}
