//! Running one workload's threads: pinning, a start gate per timed phase, per-operation timing
//! into per-thread histograms.
//!
//! Each thread does its own setup (directories, names, buffers) before the first gate; every timed
//! phase starts when all threads have reached the gate, and the phase's rate is the operations of
//! all threads over the longest thread's time. If a thread fails or panics, the gate opens for
//! everyone with an error instead of leaving the others waiting for ever.

use std::io;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use hdrhistogram::Histogram;
use nosefs_core::pmem::Counters;

use crate::stats::histogram;

/// One thread's measurements of one timed phase.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Operations timed.
    pub ops: u64,
    /// Time from the gate opening to the last operation's end, in ns.
    pub elapsed_ns: u64,
    /// Per-operation latencies in ns.
    pub hist: Histogram<u64>,
    /// Cache lines written back, where the target counts them.
    pub flushes: Option<u64>,
    /// Fences, where the target counts them.
    pub fences: Option<u64>,
}

impl Sample {
    /// Combines the samples of one phase from all threads: operations, flushes and fences add
    /// up, histograms merge, and the phase lasts as long as its slowest thread.
    pub fn combine(samples: &[Sample]) -> Sample {
        let mut hist = histogram();
        for s in samples {
            hist.add(&s.hist).expect("histograms share their bounds");
        }
        let sum = |f: fn(&Sample) -> Option<u64>| samples.iter().map(f).sum::<Option<u64>>();
        Sample {
            ops: samples.iter().map(|s| s.ops).sum(),
            elapsed_ns: samples.iter().map(|s| s.elapsed_ns).max().unwrap_or(0),
            hist,
            flushes: sum(|s| s.flushes),
            fences: sum(|s| s.fences),
        }
    }

    /// Operations per second over the phase.
    pub fn rate(&self) -> f64 {
        self.ops as f64 * 1e9 / self.elapsed_ns.max(1) as f64
    }
}

/// A reusable barrier for `parties` threads that any of them can abort.
#[derive(Debug)]
pub struct Gate {
    parties: usize,
    state: Mutex<GateState>,
    opened: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    waiting: usize,
    generation: u64,
    aborted: bool,
}

impl Gate {
    /// A gate for `parties` threads.
    pub fn new(parties: usize) -> Gate {
        Gate {
            parties,
            state: Mutex::new(GateState::default()),
            opened: Condvar::new(),
        }
    }

    /// Waits until all parties arrive; fails if any party aborted.
    pub fn wait(&self) -> io::Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.aborted {
            return Err(aborted());
        }
        state.waiting += 1;
        if state.waiting == self.parties {
            state.waiting = 0;
            state.generation += 1;
            self.opened.notify_all();
            return Ok(());
        }
        let generation = state.generation;
        while state.generation == generation && !state.aborted {
            state = self.opened.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        if state.generation == generation {
            return Err(aborted());
        }
        Ok(())
    }

    /// Opens the gate for good, with an error for everyone waiting now or later.
    pub fn abort(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).aborted = true;
        self.opened.notify_all();
    }

    /// Waits for all threads, then times `n` operations, `op(0)` to `op(n - 1)`, each on its own.
    pub fn timed(
        &self,
        counters: &dyn Fn() -> Option<Counters>,
        n: usize,
        mut op: impl FnMut(usize) -> io::Result<()>,
    ) -> io::Result<Sample> {
        let mut hist = histogram();
        self.wait()?;
        let before = counters();
        let start = Instant::now();
        // One clock read per operation: each operation's end is the next one's start, so an
        // operation's latency includes the histogram record of the one before it (a few ns,
        // part of the harness cost the report states).
        let mut previous = start;
        for i in 0..n {
            op(i)?;
            let now = Instant::now();
            hist.saturating_record((now.duration_since(previous).as_nanos() as u64).max(1));
            previous = now;
        }
        let elapsed_ns = previous.duration_since(start).as_nanos() as u64;
        let spent = counters().zip(before).map(|(a, b)| a.since(b));
        Ok(Sample {
            ops: n as u64,
            elapsed_ns,
            hist,
            flushes: spent.map(|c: Counters| c.flushes),
            fences: spent.map(|c: Counters| c.fences),
        })
    }
}

fn aborted() -> io::Error {
    io::Error::other("another benchmark thread failed")
}

/// Aborts the gate when dropped without [`Finish::done`]: a thread that fails or panics.
struct Finish<'a> {
    gate: &'a Gate,
    done: bool,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.gate.abort();
        }
    }
}

/// The CPUs to pin threads to, in order: NUMA node 0's first, then node 1's, and so on, so that
/// a sweep fills one node before it spills to the next.
pub fn cpu_order() -> Vec<usize> {
    let allowed = allowed_cpus();
    let mut order: Vec<usize> = Vec::new();
    for node in 0.. {
        let path = format!("/sys/devices/system/node/node{node}/cpulist");
        let Ok(list) = std::fs::read_to_string(path) else {
            break;
        };
        order.extend(
            parse_cpu_list(&list)
                .into_iter()
                .filter(|c| allowed.contains(c)),
        );
    }
    for cpu in allowed {
        if !order.contains(&cpu) {
            order.push(cpu);
        }
    }
    order
}

/// NUMA nodes the machine has (1 where sysfs does not say).
pub fn numa_nodes() -> usize {
    (0..)
        .take_while(|n| std::path::Path::new(&format!("/sys/devices/system/node/node{n}")).exists())
        .count()
        .max(1)
}

fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

/// Parses a sysfs CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(lo), Ok(hi)) = (lo.parse::<usize>(), hi.parse::<usize>()) {
            cpus.extend(lo..=hi);
        }
    }
    cpus
}

fn pin(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    // Pinning is best effort: a container may forbid it, and the run is still valid unpinned.
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// Runs `body(thread, gate)` on `threads` threads, thread `i` pinned to the `i`-th CPU of
/// [`cpu_order`] (wrapping around), and returns each thread's phases in thread order.
pub fn parallel<F>(threads: usize, body: F) -> io::Result<Vec<Vec<Sample>>>
where
    F: Fn(usize, &Gate) -> io::Result<Vec<Sample>> + Sync,
{
    let gate = Gate::new(threads);
    let cpus = cpu_order();
    let results: Vec<io::Result<Vec<Sample>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (gate, body, cpus) = (&gate, &body, &cpus);
                scope.spawn(move || {
                    if !cpus.is_empty() {
                        pin(cpus[i % cpus.len()]);
                    }
                    let mut finish = Finish { gate, done: false };
                    let result = body(i, gate);
                    finish.done = result.is_ok();
                    result
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a benchmark thread panicked")))
            })
            .collect()
    });
    // Report the first real failure, not the "another thread failed" of the threads it stopped.
    let (samples, mut errors): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
    if errors.is_empty() {
        return Ok(samples.into_iter().map(Result::unwrap).collect());
    }
    let secondary = aborted().to_string();
    let first_real = errors
        .iter()
        .position(|e| e.as_ref().is_err_and(|e| e.to_string() != secondary))
        .unwrap_or(0);
    Err(errors.swap_remove(first_real).unwrap_err())
}

/// Combines per-thread phase lists (each thread's phases in the same order) into one sample per
/// phase.
pub fn combine_threads(per_thread: Vec<Vec<Sample>>) -> Vec<Sample> {
    let phases = per_thread.first().map_or(0, Vec::len);
    assert!(
        per_thread.iter().all(|p| p.len() == phases),
        "every thread runs the same phases"
    );
    (0..phases)
        .map(|k| {
            let of_phase: Vec<Sample> = per_thread.iter().map(|p| p[k].clone()).collect();
            Sample::combine(&of_phase)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("0"), vec![0]);
        assert!(!cpu_order().is_empty());
    }

    #[test]
    fn combining_threads_adds_ops_and_takes_the_longest_time() {
        let sample = |ops: u64, ns: u64, lat: u64| {
            let mut hist = histogram();
            for _ in 0..ops {
                hist.record(lat).unwrap();
            }
            Sample {
                ops,
                elapsed_ns: ns,
                hist,
                flushes: Some(ops * 2),
                fences: None,
            }
        };
        let c = Sample::combine(&[sample(100, 1_000, 10), sample(300, 3_000, 10)]);
        assert_eq!(c.ops, 400);
        assert_eq!(c.elapsed_ns, 3_000);
        assert_eq!(c.hist.len(), 400);
        assert_eq!(c.flushes, Some(800));
        assert_eq!(
            c.fences, None,
            "one thread without counters makes the sum unknown"
        );
        assert!((c.rate() - 400.0 / 3e-6).abs() < 1.0);
    }

    #[test]
    fn a_failing_thread_releases_the_others() {
        let result = parallel(3, |i, gate| {
            if i == 1 {
                return Err(io::Error::other("boom"));
            }
            gate.wait()?;
            gate.wait()?;
            Ok(Vec::new())
        });
        assert_eq!(result.unwrap_err().to_string(), "boom");
    }

    #[test]
    fn threads_meet_at_every_phase() {
        let per_thread = parallel(2, |_, gate| {
            let a = gate.timed(&|| None, 10, |_| Ok(()))?;
            let b = gate.timed(&|| None, 20, |_| Ok(()))?;
            Ok(vec![a, b])
        })
        .unwrap();
        let phases = combine_threads(per_thread);
        assert_eq!(phases.len(), 2);
        assert_eq!((phases[0].ops, phases[1].ops), (20, 40));
    }
}
