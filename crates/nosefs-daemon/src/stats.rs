//! What the daemon served, when asked (`nosefs mount -o stats=PATH`): requests by kind, the
//! time spent executing them (work, as opposed to waiting for them), the times a server thread
//! went to sleep on a doorbell and was woken, and connections (one per client process). Issue
//! 39's first measurement: requests per transaction and server CPU per request of a real
//! program. Off by default, so a request costs no clock reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::proto::op;

/// Request kinds counted, indexed by op code (op codes are small).
const KINDS: usize = 64;

/// Counters, updated with relaxed atomics by every server thread.
#[derive(Debug)]
pub struct Stats {
    requests: [AtomicU64; KINDS],
    work_ns: [AtomicU64; KINDS],
    sleeps: AtomicU64,
    connections: AtomicU64,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats {
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            work_ns: std::array::from_fn(|_| AtomicU64::new(0)),
            sleeps: AtomicU64::new(0),
            connections: AtomicU64::new(0),
        }
    }
}

impl Stats {
    /// One request of kind `opcode`, executed in `work`.
    pub fn served(&self, opcode: u32, work: Duration) {
        let kind = (opcode as usize).min(KINDS - 1);
        self.requests[kind].fetch_add(1, Ordering::Relaxed);
        self.work_ns[kind].fetch_add(work.as_nanos() as u64, Ordering::Relaxed);
    }

    /// A server thread slept on a doorbell (and was woken, or the client left).
    pub fn slept(&self) {
        self.sleeps.fetch_add(1, Ordering::Relaxed);
    }

    /// A client process connected.
    pub fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// A plain-text table: one line per request kind served (count, total and mean work), then
    /// the totals, sleeps and connections.
    pub fn report(&self) -> String {
        let mut out = String::from("kind\trequests\twork_us\tmean_work_ns\n");
        let (mut all, mut all_ns) = (0u64, 0u64);
        for kind in 0..KINDS {
            let n = self.requests[kind].load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            let ns = self.work_ns[kind].load(Ordering::Relaxed);
            (all, all_ns) = (all + n, all_ns + ns);
            out += &format!("{}\t{n}\t{}\t{}\n", name(kind as u32), ns / 1000, ns / n);
        }
        out += &format!(
            "all\t{all}\t{}\t{}\n",
            all_ns / 1000,
            all_ns.checked_div(all).unwrap_or(0)
        );
        out += &format!("sleeps\t{}\n", self.sleeps.load(Ordering::Relaxed));
        out += &format!(
            "connections\t{}\n",
            self.connections.load(Ordering::Relaxed)
        );
        out
    }
}

/// The op code's name.
fn name(opcode: u32) -> String {
    let known = [
        (op::WALK, "walk"),
        (op::WALK_IN, "walk_in"),
        (op::OPEN, "open"),
        (op::CLOSE, "close"),
        (op::READ, "read"),
        (op::WRITE, "write"),
        (op::FSYNC, "fsync"),
        (op::FTRUNCATE, "ftruncate"),
        (op::FSTAT, "fstat"),
        (op::FSETATTR, "fsetattr"),
        (op::READDIR, "readdir"),
        (op::FALLOCATE, "fallocate"),
        (op::TRUNCATE, "truncate"),
        (op::MKDIR, "mkdir"),
        (op::MKNOD, "mknod"),
        (op::SYMLINK, "symlink"),
        (op::READLINK, "readlink"),
        (op::UNLINK, "unlink"),
        (op::RMDIR, "rmdir"),
        (op::RENAME, "rename"),
        (op::LINK, "link"),
        (op::SETATTR, "setattr"),
        (op::STATFS, "statfs"),
        (op::SYNC_ALL, "sync_all"),
        (op::HOLD, "hold"),
        (op::CLAIM, "claim"),
        (op::BIND, "bind"),
        (op::NOP, "nop"),
        (op::RECRED, "recred"),
        (op::SEEK_HOLE, "seek_hole"),
        (op::LISTING_END, "listing_end"),
        (op::XATTR, "xattr"),
        (op::FXATTR, "fxattr"),
        (op::FLINK, "flink"),
        (op::OPEN_PATH, "open_path"),
        (op::OPEN_IN, "open_in"),
        (op::UNLINK_IN, "unlink_in"),
        (op::RENAME_IN, "rename_in"),
        (op::DATA_MAP, "data_map"),
        (op::PATH_OF, "path_of"),
        (op::SIZE_WATCH, "size_watch"),
        (op::SHADOW_LEND, "shadow_lend"),
        (op::SHADOW_TAKE, "shadow_take"),
        (op::SHADOW_RETURN, "shadow_return"),
        (op::READ_MAPPED, "read_mapped"),
        (op::IMAGE_LEND, "image_lend"),
    ];
    known
        .iter()
        .find(|(code, _)| *code == opcode)
        .map_or_else(|| format!("op{opcode}"), |(_, name)| (*name).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_counts_each_kind_and_the_totals() {
        let s = Stats::default();
        s.served(op::WRITE, Duration::from_nanos(3000));
        s.served(op::WRITE, Duration::from_nanos(1000));
        s.served(op::FSYNC, Duration::from_nanos(8000));
        s.slept();
        s.connected();
        let r = s.report();
        assert!(r.contains("write\t2\t4\t2000\n"), "{r}");
        assert!(r.contains("fsync\t1\t8\t8000\n"), "{r}");
        assert!(r.contains("all\t3\t12\t4000\n"), "{r}");
        assert!(r.contains("sleeps\t1\nconnections\t1\n"), "{r}");
    }
}
