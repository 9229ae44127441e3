//! Posted writes, the client's side (the daemon's: `server::posts`): a `write` to a file the
//! daemon granted posting on returns once its request is in the area and its sequence number
//! published; its answer is read later ([`Remote::reap`]), and an error in it is told by the
//! next fsync of the description, as the kernel tells a writeback error.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use nosefs_core::Errno;

use super::{Remote, WAKE_SPIN};
use crate::proto::{op, Enc};
use crate::service::Handle;
use crate::shm::{owner, state};

/// Sync writes to a description the daemon refused a grant for, before it is asked again
/// (asking costs the daemon a few locks per write).
const ASK_AGAIN_AFTER_WRITES: u32 = 64;

/// Posts not yet answered before a write is sent as a call instead: a write followed by an
/// fsync (a log's commit) needs one. With four or any number out, SQLite's rollback-journal
/// commits (a burst of page writes, then fsyncs) left the daemon's thread asleep at every
/// third request (11,000-16,800 sleeps in 3,000 transactions against 500-800 with one out, and
/// 20-30% slower: docs/benchmarks.md).
const MAX_IN_FLIGHT: usize = 1;

/// What the connection knows of its posts.
#[derive(Debug, Default)]
pub(super) struct Posts {
    /// Descriptions the daemon granted posting on, with the word of the post board that says
    /// whether it still does.
    grants: HashMap<Handle, u32>,
    /// Descriptions refused a grant, with the sync writes left before asking again.
    refused: HashMap<Handle, u32>,
    /// Errors of posted writes, for the next fsync of their description.
    errors: HashMap<Handle, Errno>,
    /// The description of the post in each slot.
    handles: HashMap<usize, Handle>,
}

impl Remote {
    /// Posts a write of `data` at `offset` of `handle` if the daemon grants that; `None` when
    /// it is to be sent as a call.
    pub(super) fn try_post(
        &self,
        handle: Handle,
        offset: u64,
        data: &[u8],
    ) -> Option<Result<u64, Errno>> {
        if self.dead.load(Ordering::Relaxed) || data.len() > self.chunk_bytes() {
            return None;
        }
        let mut posts = self.posts.lock();
        let word = self.area.post_word(*posts.grants.get(&handle)?)?;
        if word.load(Ordering::Acquire) != 1 {
            posts.grants.remove(&handle);
            return None;
        }
        self.reap(&mut posts);
        if posts.handles.len() >= MAX_IN_FLIGHT {
            // The server is behind: this write waits, so that no backlog builds up for the
            // next call to wait out.
            return None;
        }
        let slot = self.take_slot_reaping(&mut |remote| remote.reap(&mut posts))?;
        self.area
            .owner(slot)
            .store(owner::POSTED_WRITE, Ordering::Release);
        posts.handles.insert(slot, handle);
        self.posts_out.fetch_add(1, Ordering::Relaxed);
        let seq = self.area.posted().load(Ordering::Relaxed).wrapping_add(1);
        let mut e = Enc::new(op::WRITE_POSTED);
        // The data's length ends the request, as a write's.
        e.u32(seq).u64(handle).u64(offset).u32(data.len() as u32);
        self.publish(slot, &e, data);
        self.area.posted().store(seq, Ordering::SeqCst);
        let rang = self.ring(slot);
        if word.load(Ordering::SeqCst) == 1 {
            return Some(Ok(offset));
        }
        // The grant was taken back meanwhile: this write does not return before it is applied
        // (the daemon may not have seen it when it took the grant back).
        posts.grants.remove(&handle);
        let window = if rang { WAKE_SPIN } else { super::CLIENT_SPIN };
        let answered = self.wait_reply(slot, window).map(|_| offset);
        posts.handles.remove(&slot);
        self.posts_out.fetch_sub(1, Ordering::Relaxed);
        self.area.state(slot).store(state::IDLE, Ordering::Release);
        self.area.owner(slot).store(owner::FREE, Ordering::Release);
        Some(answered)
    }

    /// Whether to ask the daemon for a grant with this sync write of `handle`.
    pub(super) fn want_grant(&self, handle: Handle) -> bool {
        let mut posts = self.posts.lock();
        match posts.refused.get_mut(&handle) {
            Some(left) if *left > 0 => {
                *left -= 1;
                false
            }
            _ => true,
        }
    }

    /// The daemon's answer to a grant asked for with a write of `handle`.
    pub(super) fn granted(&self, handle: Handle, word: u32) {
        let mut posts = self.posts.lock();
        if word == u32::MAX {
            posts.refused.insert(handle, ASK_AGAIN_AFTER_WRITES);
        } else {
            posts.refused.remove(&handle);
            posts.grants.insert(handle, word);
        }
    }

    /// Frees the slots of answered posts, keeping their errors.
    pub(super) fn reap(&self, posts: &mut Posts) {
        if posts.handles.is_empty() {
            return;
        }
        let area = &self.area;
        posts.handles.retain(|&slot, &mut handle| {
            if area.state(slot).load(Ordering::Acquire) != state::REPLY {
                return true;
            }
            let mut head = [0u8; 4];
            if area.len(slot).load(Ordering::Acquire) >= 4 {
                area.get(slot, 0, &mut head);
            }
            let errno = i32::from_le_bytes(head);
            if errno != 0 {
                posts.errors.entry(handle).or_insert(Errno(errno));
            }
            area.state(slot).store(state::IDLE, Ordering::Release);
            area.owner(slot).store(owner::FREE, Ordering::Release);
            self.posts_out.fetch_sub(1, Ordering::Relaxed);
            false
        });
    }

    /// Waits until every posted write is applied (before reading what the daemon keeps in the
    /// area: a size word must show them).
    pub(super) fn wait_posts(&self) {
        let mut posts = self.posts.lock();
        let mut rounds = 0u32;
        loop {
            self.reap(&mut posts);
            if posts.handles.is_empty() || self.dead.load(Ordering::Relaxed) {
                return;
            }
            rounds += 1;
            if rounds % 1024 == 0 && self.daemon_gone() {
                self.dead.store(true, Ordering::Relaxed);
                return;
            }
            rustix::thread::sched_yield();
        }
    }

    /// The error a posted write of `handle` met since the last call of this, if any (the
    /// caller's request was served after every post before it, so their answers are in).
    pub(super) fn post_error(&self, handle: Handle) -> Option<Errno> {
        let mut posts = self.posts.lock();
        self.reap(&mut posts);
        posts.errors.remove(&handle)
    }

    /// `handle` is closed: what this side kept for it goes.
    pub(super) fn forget_posts(&self, handle: Handle) {
        let mut posts = self.posts.lock();
        self.reap(&mut posts);
        posts.grants.remove(&handle);
        posts.refused.remove(&handle);
        posts.errors.remove(&handle);
    }
}
