//! `nosefs-floor`: what each operation's persistence work alone costs, measured by replay.
//!
//! A run makes two passes over the same workload, which with one thread makes the same calls in
//! the same order every time. The first pass (untimed) runs it on the native library over an
//! in-memory *recording* image and keeps each call's stores, non-temporal stores, write-backs and
//! fences ([`Trace`]). The second runs it again on [`Floor`], whose every call replays the next
//! recorded call's events on a fresh mapped region in the image directory and does nothing else:
//! no lookups, no locks, no DRAM bookkeeping. Its times are the floor of noseFS's commit protocols
//! on this machine, which no implementation of the same protocols goes below however lean its
//! DRAM side. Measured beside `nosefs` and `tmpfs` in the same run, it says which ratio targets are
//! reachable at all, and how much of an operation is software (`nosefs` minus `nosefs-floor`).
//!
//! Only `dirops` and `fileops` run here, with one thread; reads persist nothing, so the floor has
//! no read rows.

use std::convert::Infallible;
use std::ffi::CStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use nosefs_core::pmem::{counters, Counters, Region, RegionOptions, Trace};

use crate::cleanup::{self, Registered, Undo};
use crate::target::{Native, Target};
use crate::workload::{Measured, Sizes, Workload};

/// Runs `workload` once on the floor target: records it, then times its replay.
pub fn run_once(
    place: &Path,
    workload: Workload,
    threads: usize,
    sizes: &Sizes,
) -> io::Result<Vec<Measured>> {
    if threads != 1 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "nosefs-floor replays one thread's calls in order: run it with --threads 1",
        ));
    }
    if !matches!(workload, Workload::Dirops { .. } | Workload::Fileops) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "nosefs-floor measures the dirops and fileops workloads",
        ));
    }
    let needs = workload.needs(threads, sizes);
    let native = Native::recording(needs)
        .map_err(|e| io::Error::other(format!("cannot prepare a recording image: {e}")))?;
    let recording = Recording {
        native,
        trace: Mutex::new(Trace::new()),
    };
    workload.run_once(&recording, threads, sizes)?;
    let region_bytes = recording.native.region().len();
    let Recording { native, trace } = recording;
    // The recorded image (as large as the native one, in anonymous memory) is not needed for the
    // replay: free it before anything is timed.
    drop(native);
    let trace = trace.into_inner().expect("no recording call panicked");
    let floor = Floor::new(place, region_bytes, trace)?;
    let measured = workload.run_once(&floor, threads, sizes)?;
    floor.check_all_replayed()?;
    Ok(measured.into_iter().filter(|m| m.op != "read").collect())
}

/// The native library on a recording image, keeping each call's events as one operation of a
/// trace.
struct Recording {
    native: Native,
    trace: Mutex<Trace>,
}

impl Recording {
    /// Ends the call that produced `result`: its events become the trace's next operation.
    fn record<R>(&self, result: io::Result<R>) -> io::Result<R> {
        let events = self
            .native
            .region()
            .recorder()
            .expect("a recording image")
            .take_events();
        self.trace
            .lock()
            .expect("no recording call panicked")
            .push_op(&events);
        result
    }
}

impl Target for Recording {
    type Dir = u64;
    type File = u64;
    type Map = Infallible;

    fn root(&self) -> &u64 {
        self.native.root()
    }
    fn mkdir(&self, parent: &u64, name: &CStr) -> io::Result<u64> {
        self.record(self.native.mkdir(parent, name))
    }
    fn create(&self, dir: &u64, name: &CStr) -> io::Result<()> {
        self.record(self.native.create(dir, name))
    }
    fn rename(&self, from: &u64, old: &CStr, to: &u64, new: &CStr) -> io::Result<()> {
        self.record(self.native.rename(from, old, to, new))
    }
    fn unlink(&self, dir: &u64, name: &CStr) -> io::Result<()> {
        self.record(self.native.unlink(dir, name))
    }
    fn stat(&self, dir: &u64, name: &CStr) -> io::Result<u64> {
        self.record(self.native.stat(dir, name))
    }
    fn open(&self, dir: &u64, name: &CStr, create: bool) -> io::Result<u64> {
        self.record(self.native.open(dir, name, create))
    }
    fn pwrite(&self, file: &u64, offset: u64, data: &[u8]) -> io::Result<()> {
        self.record(self.native.pwrite(file, offset, data))
    }
    fn pread(&self, file: &u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.record(self.native.pread(file, offset, buf))
    }
    fn fsync(&self, file: &u64) -> io::Result<()> {
        self.record(self.native.fsync(file))
    }
    fn close(&self, file: u64) -> io::Result<()> {
        self.record(self.native.close(file))
    }
    fn map(&self, _dir: &u64, _name: &CStr, _len: u64, _map_len: u64) -> io::Result<Infallible> {
        // The floor replays recorded image stores; a mapping's stores are not the image's.
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "nosefs-floor has no mmap workload",
        ))
    }
    fn map_write(&self, map: &Infallible, _offset: u64, _data: &[u8]) {
        match *map {}
    }
    fn msync(&self, map: &Infallible, _offset: u64, _len: u64) -> io::Result<()> {
        match *map {}
    }
}

/// Replays a recorded trace, one operation per call, on a mapped region of the recorded
/// image's size (a file in the image directory, removed on drop).
#[derive(Debug)]
pub struct Floor {
    region: Region,
    trace: Trace,
    next: AtomicUsize,
    root: u64,
    path: PathBuf,
    _registered: Registered,
}

impl Floor {
    fn new(place: &Path, region_bytes: u64, trace: Trace) -> io::Result<Floor> {
        let path = place.join(format!("nosefs-floor-{}.img", std::process::id()));
        let registered = cleanup::register(Undo::RemoveFile(path.clone()));
        let options = RegionOptions {
            populate: true,
            ..RegionOptions::default()
        };
        let region = Region::create(&path, Some(region_bytes), &options)
            .map_err(|e| io::Error::other(format!("cannot map {}: {e}", path.display())))?;
        // Every page backed before timing, as for a native image (seed 002).
        region.zero_nt(0, region_bytes);
        region.fence();
        Ok(Floor {
            region,
            trace,
            next: AtomicUsize::new(0),
            root: nosefs_core::namespace::ROOT_INO,
            path,
            _registered: registered,
        })
    }

    fn replay_next(&self) {
        let op = self.next.fetch_add(1, Ordering::Relaxed);
        assert!(
            op < self.trace.op_count(),
            "the replayed workload made more calls than the recorded one"
        );
        self.trace.replay(op, &self.region);
    }

    fn check_all_replayed(&self) -> io::Result<()> {
        let replayed = self.next.load(Ordering::Relaxed);
        if replayed == self.trace.op_count() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "the workload made {replayed} calls on replay but {} when recorded",
                self.trace.op_count()
            )))
        }
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Target for Floor {
    type Dir = u64;
    type File = u64;
    type Map = Infallible;

    fn root(&self) -> &u64 {
        &self.root
    }
    fn mkdir(&self, _parent: &u64, _name: &CStr) -> io::Result<u64> {
        self.replay_next();
        Ok(0)
    }
    fn create(&self, _dir: &u64, _name: &CStr) -> io::Result<()> {
        self.replay_next();
        Ok(())
    }
    fn rename(&self, _from: &u64, _old: &CStr, _to: &u64, _new: &CStr) -> io::Result<()> {
        self.replay_next();
        Ok(())
    }
    fn unlink(&self, _dir: &u64, _name: &CStr) -> io::Result<()> {
        self.replay_next();
        Ok(())
    }
    fn stat(&self, _dir: &u64, _name: &CStr) -> io::Result<u64> {
        self.replay_next();
        Ok(0)
    }
    fn open(&self, _dir: &u64, _name: &CStr, _create: bool) -> io::Result<u64> {
        self.replay_next();
        Ok(0)
    }
    fn pwrite(&self, _file: &u64, _offset: u64, _data: &[u8]) -> io::Result<()> {
        self.replay_next();
        Ok(())
    }
    fn pread(&self, _file: &u64, _offset: u64, _buf: &mut [u8]) -> io::Result<()> {
        self.replay_next();
        Ok(())
    }
    fn fsync(&self, _file: &u64) -> io::Result<()> {
        self.replay_next();
        Ok(())
    }
    fn close(&self, _file: u64) -> io::Result<()> {
        self.replay_next();
        Ok(())
    }
    fn map(&self, _dir: &u64, _name: &CStr, _len: u64, _map_len: u64) -> io::Result<Infallible> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "nosefs-floor has no mmap workload",
        ))
    }
    fn map_write(&self, map: &Infallible, _offset: u64, _data: &[u8]) {
        match *map {}
    }
    fn msync(&self, map: &Infallible, _offset: u64, _len: u64) -> io::Result<()> {
        match *map {}
    }
    fn counters(&self) -> Option<Counters> {
        Some(counters())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per phase: op, operations, flushes and fences per operation.
    fn per_op(measured: &[Measured]) -> Vec<(String, u64, f64, f64)> {
        measured
            .iter()
            .map(|m| {
                let s = &m.sample;
                let per = |n: Option<u64>| n.expect("counted") as f64 / s.ops as f64;
                (m.op.clone(), s.ops, per(s.flushes), per(s.fences))
            })
            .collect()
    }

    #[test]
    fn the_floor_replays_the_native_persistence_work() {
        let place = tempfile::tempdir().unwrap();
        let workload = Workload::Dirops { files: 300 };
        let sizes = Sizes::quick();
        let floor = per_op(&run_once(place.path(), workload, 1, &sizes).unwrap());
        let native = {
            let target =
                Native::new(place.path(), workload.needs(1, &sizes), Default::default()).unwrap();
            per_op(&workload.run_once(&target, 1, &sizes).unwrap())
        };
        assert_eq!(floor.len(), 3);
        // Each image has its own hash seed, so names fall in other buckets and logs, and lazily
        // cleared logs settle a little more or less often: the counts agree within a few percent.
        for (f, n) in floor.iter().zip(&native) {
            assert_eq!((&f.0, f.1), (&n.0, n.1));
            let close = |a: f64, b: f64| (a - b).abs() <= 0.03 * b;
            assert!(
                close(f.2, n.2) && close(f.3, n.3),
                "floor {f:?} native {n:?}"
            );
            assert!(f.3 >= 2.0, "every directory operation fences twice: {f:?}");
        }
        let left: Vec<_> = std::fs::read_dir(place.path()).unwrap().collect();
        assert!(left.is_empty(), "the replay region is removed: {left:?}");
    }

    #[test]
    fn more_than_one_thread_or_another_workload_is_refused() {
        let place = tempfile::tempdir().unwrap();
        let sizes = Sizes::quick();
        let two = run_once(place.path(), Workload::Dirops { files: 10 }, 2, &sizes);
        assert_eq!(two.unwrap_err().kind(), io::ErrorKind::Unsupported);
        let mmap = run_once(place.path(), Workload::Mmap, 1, &sizes);
        assert_eq!(mmap.unwrap_err().kind(), io::ErrorKind::Unsupported);
    }
}
