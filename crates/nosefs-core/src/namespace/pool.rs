//! Per-CPU pools of free table slots (pinodes, long-name records), kept in DRAM and rebuilt at
//! mount from the valid bits and references on the media.
//!
//! A thread allocates from the pool of the CPU it runs on and frees into it; when that pool is
//! empty it steals half of another's. Each pool has its own lock, so threads on different CPUs
//! never contend.

use parking_lot::Mutex;

/// Free slots of one table, split across CPUs.
#[derive(Debug)]
pub struct SlotPools {
    pools: Vec<Mutex<Vec<u32>>>,
}

fn current_cpu() -> usize {
    rustix::thread::sched_getcpu()
}

impl SlotPools {
    /// Pools for `cpus` CPUs, with `free` dealt out round-robin in blocks so each CPU gets nearby
    /// slots.
    pub fn new(cpus: usize, free: impl IntoIterator<Item = u32>) -> SlotPools {
        let cpus = cpus.max(1);
        let mut lists = vec![Vec::new(); cpus];
        for (i, slot) in free.into_iter().enumerate() {
            lists[(i / 64) % cpus].push(slot);
        }
        for list in &mut lists {
            list.reverse(); // pop() hands out the lowest slots first
        }
        SlotPools {
            pools: lists.into_iter().map(Mutex::new).collect(),
        }
    }

    fn home(&self) -> usize {
        current_cpu() % self.pools.len()
    }

    /// A free slot, or `None` when every pool is empty.
    pub fn alloc(&self) -> Option<u32> {
        let home = self.home();
        if let Some(slot) = self.pools[home].lock().pop() {
            return Some(slot);
        }
        for i in 1..self.pools.len() {
            let victim = (home + i) % self.pools.len();
            let mut theirs = self.pools[victim].lock();
            if theirs.is_empty() {
                continue;
            }
            let keep = theirs.len() / 2;
            let mut stolen = theirs.split_off(keep);
            drop(theirs);
            let slot = stolen.pop();
            self.pools[home].lock().extend(stolen);
            return slot;
        }
        None
    }

    /// Returns a slot to this CPU's pool.
    pub fn free(&self, slot: u32) {
        self.pools[self.home()].lock().push(slot);
    }

    /// Free slots in all pools.
    pub fn free_count(&self) -> usize {
        self.pools.iter().map(|p| p.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_is_handed_out_once_then_none() {
        let pools = SlotPools::new(3, 1..=500);
        let mut seen = std::collections::HashSet::new();
        while let Some(slot) = pools.alloc() {
            assert!(seen.insert(slot), "slot {slot} twice");
        }
        assert_eq!(seen.len(), 500, "stealing reaches every pool");
        pools.free(7);
        assert_eq!(pools.alloc(), Some(7));
        assert_eq!(pools.alloc(), None);
    }
}
