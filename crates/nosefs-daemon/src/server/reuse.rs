//! Request areas of ended clients, kept for the next client with the same credentials.
//!
//! A fresh area costs its memfd, its mapping and the first touch of its pages, and its end an
//! munmap (a TLB shootdown on every CPU the daemon's threads ran on) and the freeing of those
//! pages: about a tenth of a millisecond of the daemon's CPU per process on this machine, which
//! make's and git's short processes pay each. An ended client's area is reset and handed to the
//! next client instead, when nothing but the daemon can reach it any more and that client could
//! not learn or do anything through it that its own connection does not allow:
//!
//! - the client process has ended (its pidfd says so): a client never keeps a descriptor of its
//!   area and its forked children do not inherit the mapping (`Area::open`), so with the
//!   process gone only descriptors it passed on itself remain, which is the client handing its
//!   own connection to another process, as it could hand its socket;
//! - its credentials never changed while it was connected (no RECRED that changed them), and
//!   the next client's are the same (uid, gid and groups): whoever still reaches the area held
//!   these credentials, so requests written into it could have been sent on a connection of
//!   their own;
//! - nothing in the daemon refers to it (a server thread, a size watch): the area's only
//!   reference is the pool's.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use nosefs_core::namespace::perm::Cred;
use parking_lot::Mutex;

use crate::shm::Area;

/// Areas kept at most; an older one is unmapped when a newer comes.
const KEPT: usize = 8;

struct Kept {
    cred: Cred,
    area: Arc<Area>,
    /// The process of the client that used it, to know when it has ended.
    pidfd: OwnedFd,
}

/// The pool of ended clients' areas.
#[derive(Default)]
pub(super) struct Reuse {
    kept: Mutex<Vec<Kept>>,
}

impl std::fmt::Debug for Reuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reuse")
            .field("kept", &self.kept.lock().len())
            .finish()
    }
}

impl Reuse {
    /// Keeps `area` of a connection that ends, used with `cred` all along by the process of
    /// `pidfd`.
    pub(super) fn keep(&self, cred: Cred, area: Arc<Area>, pidfd: OwnedFd) {
        let mut kept = self.kept.lock();
        if kept.len() >= KEPT {
            kept.remove(0);
        }
        kept.push(Kept { cred, area, pidfd });
    }

    /// An area for a client with `cred`, reset as new, if an ended client's may be reused.
    pub(super) fn take(&self, cred: &Cred) -> Option<Area> {
        let mut kept = self.kept.lock();
        let index = kept
            .iter()
            .position(|k| k.cred == *cred && Arc::strong_count(&k.area) == 1 && ended(&k.pidfd))?;
        let area = Arc::try_unwrap(kept.remove(index).area).ok()?;
        drop(kept);
        area.reset();
        Some(area)
    }
}

/// Whether the process of `pidfd` has ended (the pidfd polls readable).
fn ended(pidfd: &OwnedFd) -> bool {
    has_ended(pidfd) == Some(true)
}

/// Whether the process of `pidfd` has ended, asked without waiting; `None` when the kernel did
/// not answer.
pub(super) fn has_ended(pidfd: &OwnedFd) -> Option<bool> {
    let mut poll = [rustix::event::PollFd::new(
        pidfd,
        rustix::event::PollFlags::IN,
    )];
    let now = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut poll, Some(&now))
        .ok()
        .map(|n| n == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pidfd_of(child: &std::process::Child) -> OwnedFd {
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap()
    }

    fn cred(uid: u32) -> Cred {
        Cred {
            uid,
            gid: uid,
            groups: Default::default(),
        }
    }

    #[test]
    fn an_area_is_reused_only_once_its_client_ended_and_only_with_the_same_credentials() {
        let reuse = Reuse::default();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let area = Area::create(4, 4096).unwrap();
        area.state(1).store(3, std::sync::atomic::Ordering::Release);
        reuse.keep(cred(1000), Arc::new(area), pidfd_of(&child));
        assert!(reuse.take(&cred(1000)).is_none(), "its client still runs");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(reuse.take(&cred(1001)).is_none(), "other credentials");
        let area = reuse.take(&cred(1000)).expect("reused");
        assert_eq!(area.state(1).load(std::sync::atomic::Ordering::Acquire), 0);
        assert!(reuse.take(&cred(1000)).is_none(), "taken once");
    }

    #[test]
    fn an_area_something_else_still_refers_to_is_not_reused() {
        let reuse = Reuse::default();
        let area = Arc::new(Area::create(4, 4096).unwrap());
        let watcher = Arc::clone(&area);
        reuse.keep(cred(0), area, pidfd_of_ended());
        assert!(reuse.take(&cred(0)).is_none());
        drop(watcher);
        assert!(reuse.take(&cred(0)).is_some());
    }

    /// A pidfd of a process that has ended.
    fn pidfd_of_ended() -> OwnedFd {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let fd = pidfd_of(&child);
        child.wait().unwrap();
        fd
    }

    #[test]
    fn at_most_kept_areas_are_kept_the_oldest_going_first() {
        let reuse = Reuse::default();
        for uid in 0..KEPT as u32 + 1 {
            reuse.keep(
                cred(uid),
                Arc::new(Area::create(2, 4096).unwrap()),
                pidfd_of_ended(),
            );
        }
        assert!(reuse.take(&cred(0)).is_none(), "the oldest went");
        for uid in 1..KEPT as u32 + 1 {
            assert!(reuse.take(&cred(uid)).is_some());
        }
    }
}
