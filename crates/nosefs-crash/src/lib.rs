//! The noseFS crash-consistency checker.
//!
//! It runs workloads on an image in the recording pmem backend, and for every operation builds
//! the images a crash could leave at each of its fences and at its end (see [`states`] for the
//! crash model). Each image is mounted (recovery), checked with fsck, and compared with an
//! oracle: the tree must equal the state before the operation or after it. The recovered file
//! system must then stay usable. Crashes during recovery itself are enumerated too, for images
//! whose recovery had work to do. A call that returns has made its effects durable: at the point
//! after its last fence, every crash image must recover to the state after it (a plain write,
//! which promises nothing before fsync, excepted). Stores still in flight when an operation
//! returns (a write's data, a directory log's lazily stored clear) stay in flight into the next
//! one's crash states ([`states::Carry`]).

#![forbid(unsafe_code)]

pub mod states;
pub mod tree;
pub mod workload;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use nosefs_core::format::layout::{Geometry, MkfsParams};
use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::fsck::{fsck_region, FsckOptions};
use nosefs_core::image::Image;
use nosefs_core::namespace::{Owner, ROOT_INO};
use nosefs_core::pmem::Region;

use states::{image_key, Carry, CrashPoint, Enumerator};
use tree::{durable_tree_of, file_data, tree_of, FileData, Tree};
use workload::Op;

/// How hard to look.
#[derive(Debug, Clone)]
pub struct Config {
    /// Image size (small images keep each mount cheap).
    pub image_bytes: u64,
    /// Enumerate every crash state at a point when there are at most this many.
    pub exhaustive_limit: usize,
    /// Otherwise, this many random ones (plus none and all persisted).
    pub samples: usize,
    /// Seed of the sampling.
    pub seed: u64,
    /// Per operation, how many recovered images also get their recovery crashed.
    pub recovery_crashes: usize,
    /// Run the usability round on every this-many-th unique image (1: all).
    pub usability_every: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            image_bytes: 1 << 20,
            exhaustive_limit: 512,
            samples: 64,
            seed: 1,
            recovery_crashes: 2,
            usability_every: 4,
        }
    }
}

/// A crash state that broke a promise, with what reproduces it.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The workload's label, e.g. `single:3`.
    pub workload: String,
    /// The operation's index in the workload.
    pub op_index: usize,
    /// The operation.
    pub op: Op,
    /// Where it crashed and what persisted.
    pub point: CrashPoint,
    /// The seed the sampling used.
    pub seed: u64,
    /// What went wrong.
    pub reason: String,
    /// The crash image, for `nosefs fsck` and debugging.
    pub image: Vec<u8>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "crash state broke a promise: {}", self.reason)?;
        writeln!(
            f,
            "  workload {} op {} ({:?}), crash before fence {}, persisted per cache line {:?}",
            self.workload, self.op_index, self.op, self.point.fence, self.point.prefix
        )?;
        write!(
            f,
            "  reproduce: nosefs crash-check --workload {} --seed {} --write-failure-image crash.img",
            self.workload, self.seed
        )
    }
}

/// What a run explored and found.
#[derive(Debug, Default)]
pub struct Report {
    /// Crash images built, by operation type.
    pub images_by_op: BTreeMap<&'static str, u64>,
    /// Distinct images checked (after deduplication).
    pub unique_images: u64,
    /// Images a crash during recovery could leave, checked.
    pub recovery_images: u64,
    /// Workloads run.
    pub workloads: u64,
    /// Operations run.
    pub operations: u64,
    /// Failures.
    pub failures: Vec<Failure>,
}

/// The checker: one report and one deduplication set across workloads.
#[derive(Debug)]
pub struct Checker {
    config: Config,
    seen: HashSet<u64>,
    /// What was explored and found so far.
    pub report: Report,
}

struct Oracle<'a> {
    before: &'a Tree,
    after: &'a Tree,
    /// Whether the operation promised its effects durable on return.
    durable_on_return: bool,
}

impl Checker {
    /// A checker with `config`.
    pub fn new(config: Config) -> Checker {
        Checker {
            config,
            seen: HashSet::new(),
            report: Report::default(),
        }
    }

    /// A fresh file system holding [`workload::setup`].
    fn fresh(&self) -> Fs {
        let params = MkfsParams {
            image_bytes: self.config.image_bytes,
            ..MkfsParams::default()
        };
        let mut g = Geometry::for_mkfs(&params).expect("valid checker geometry");
        g.hash_seed = 0x5eed;
        let region = Region::recording(params.image_bytes).expect("memory");
        nosefs_core::mkfs::format_region(&region, &g, (0, 0)).expect("format");
        let fs = Fs::mount_image(
            Image::from_region(region).expect("image"),
            &MountOptions::default(),
        )
        .expect("mount");
        for op in workload::setup() {
            workload::run(&fs, &op).expect("setup succeeds");
        }
        fs.sync_all().expect("sync");
        fs
    }

    /// Runs `ops` and checks every crash state of every operation.
    pub fn check(&mut self, label: &str, ops: &[Op]) {
        let fs = self.fresh();
        self.report.workloads += 1;
        // Files with writes since their last commit, with the state a crash must show for them.
        let mut pending: HashMap<u64, FileData> = HashMap::new();
        // What the media holds between operations: durable bytes and stores still in flight.
        let mut carry = Carry::durable(fs.image().region().snapshot());
        for (index, op) in ops.iter().enumerate() {
            let before_tree = durable_tree_of(&fs, &pending);
            if let Some(ino) = op.writes_to().and_then(|p| workload::ino_of(&fs, p).ok()) {
                if fs.getattr(ino).is_ok_and(|a| a.mode & 0o170000 == 0o100000) {
                    pending.entry(ino).or_insert_with(|| file_data(&fs, ino));
                }
            }
            fs.image()
                .region()
                .recorder()
                .expect("recording")
                .take_events();
            // An errno is a legitimate outcome; an operation that fails commits nothing (an
            // insert past the end is EINVAL and leaves the file's unsynced writes unsynced).
            let outcome = workload::run(&fs, op);
            let events = fs
                .image()
                .region()
                .recorder()
                .expect("recording")
                .take_events();
            let committed = op.commits().filter(|_| outcome.is_ok());
            if let Some(ino) = committed.and_then(|p| workload::ino_of(&fs, p).ok()) {
                pending.remove(&ino);
            }
            let after_tree = durable_tree_of(&fs, &pending);
            self.report.operations += 1;
            let seed = self.config.seed ^ (index as u64).wrapping_mul(0x9e37_79b9);
            let oracle = Oracle {
                before: &before_tree,
                after: &after_tree,
                // A plain write promises nothing until fsync: its data may stay in flight.
                durable_on_return: op.durable_on_return(),
            };
            carry = self.explore(label, index, op, carry, &events, &oracle, seed);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn explore(
        &mut self,
        label: &str,
        index: usize,
        op: &Op,
        carry: Carry,
        events: &[nosefs_core::pmem::Event],
        oracle: &Oracle<'_>,
        seed: u64,
    ) -> Carry {
        let mut enumerator = Enumerator::resume(carry, events);
        let mut recovery_budget = self.config.recovery_crashes;
        while let Some(point) = enumerator.advance() {
            let returned = enumerator.at_end();
            let images = enumerator.images(
                point,
                self.config.exhaustive_limit,
                self.config.samples,
                seed ^ point as u64,
            );
            for (crash, image) in images {
                *self.report.images_by_op.entry(op.kind()).or_default() += 1;
                if !self.seen.insert(image_key(&image)) {
                    continue;
                }
                self.report.unique_images += 1;
                let usability = self.report.unique_images % self.config.usability_every == 0;
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    self.check_image(&image, oracle, returned, usability, &mut recovery_budget)
                }));
                let reason = match outcome {
                    Ok(Ok(recovery_images)) => {
                        self.report.recovery_images += recovery_images;
                        continue;
                    }
                    Ok(Err(reason)) => reason,
                    Err(panic) => format!("panicked: {}", panic_message(&panic)),
                };
                self.fail(label, index, op, crash, seed, reason, image);
            }
            if returned {
                break;
            }
            enumerator.pass_fence();
        }
        enumerator.into_carry()
    }

    #[allow(clippy::too_many_arguments)]
    fn fail(
        &mut self,
        label: &str,
        index: usize,
        op: &Op,
        point: CrashPoint,
        seed: u64,
        reason: String,
        image: Vec<u8>,
    ) {
        self.report.failures.push(Failure {
            workload: label.to_string(),
            op_index: index,
            op: op.clone(),
            point,
            seed,
            reason,
            image,
        });
    }

    /// Mount, oracle, fsck, optionally a crash during this recovery, and usability. `returned`:
    /// the crash came after the operation returned.
    fn check_image(
        &self,
        image: &[u8],
        oracle: &Oracle<'_>,
        returned: bool,
        usability: bool,
        recovery_budget: &mut usize,
    ) -> Result<u64, String> {
        let fs = mount(image)?;
        let tree = tree_of(&fs);
        let (is_before, is_after) = (tree == *oracle.before, tree == *oracle.after);
        if !is_before && !is_after && !reserved_old_or_new(&tree, oracle) {
            return Err(format!(
                "recovered tree is neither the state before nor after the operation: {}",
                diff(&tree, oracle)
            ));
        }
        if returned && oracle.durable_on_return && tree != *oracle.after {
            return Err(format!(
                "the operation returned before its effects were durable: {}",
                diff(&tree, oracle)
            ));
        }
        let report = fs.mount_report().clone();
        let recovery_events = fs
            .image()
            .region()
            .recorder()
            .expect("recording")
            .take_events();
        let recovered = fs.unmount().into_region().snapshot();
        fsck_clean(&recovered)?;
        let mut recovery_images = 0;
        if report.bitmap_mismatches != 0 {
            return Err(format!(
                "mount found {} bitmap bits disagreeing with the extents",
                report.bitmap_mismatches
            ));
        }
        let recovery_worked = report.logs_replayed
            + report.logs_discarded
            + report.file_logs_replayed
            + report.file_logs_discarded
            + report.file_logs_superseded
            + report.nlinks_fixed
            > 0;
        if recovery_worked && *recovery_budget > 0 {
            *recovery_budget -= 1;
            recovery_images = self.crash_recovery(image, &recovery_events, &tree)?;
        }
        if usability {
            use_everything(&recovered)?;
        }
        Ok(recovery_images)
    }

    /// Crashes the recovery of `image` at each of its fences: mounting again must reach the same
    /// tree, and fsck must find it clean.
    fn crash_recovery(
        &self,
        image: &[u8],
        events: &[nosefs_core::pmem::Event],
        recovered: &Tree,
    ) -> Result<u64, String> {
        let mut enumerator = Enumerator::new(image.to_vec(), events);
        let mut checked = 0;
        while let Some(point) = enumerator.advance() {
            for (crash, again) in enumerator.images(
                point,
                self.config.exhaustive_limit / 4,
                self.config.samples / 4,
                self.config.seed,
            ) {
                let fs = mount(&again)
                    .map_err(|e| format!("after a crash in recovery at {crash:?}: {e}"))?;
                if tree_of(&fs) != *recovered {
                    return Err(format!(
                        "a crash during recovery at {crash:?} changed the recovered tree"
                    ));
                }
                fsck_clean(&fs.unmount().into_region().snapshot())?;
                checked += 1;
            }
            enumerator.pass_fence();
        }
        Ok(checked)
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".into())
}

fn mount(image: &[u8]) -> Result<Fs, String> {
    let region = Region::recording_from(image).map_err(|e| e.to_string())?;
    let image = Image::from_region(region).map_err(|e| format!("image refused: {e}"))?;
    Fs::mount_image(
        image,
        &MountOptions {
            cpus: Some(1),
            ..MountOptions::default()
        },
    )
    .map_err(|e| format!("mount failed: {e}"))
}

fn fsck_clean(image: &[u8]) -> Result<(), String> {
    let region = Region::recording_from(image).map_err(|e| e.to_string())?;
    let report =
        fsck_region(region, FsckOptions::default()).map_err(|e| format!("fsck failed: {e}"))?;
    if report.problems.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    Err(format!("fsck found problems: {}", lines.join("; ")))
}

/// A punch, truncate, collapse or insert of a file with reserved ranges commits the file, then
/// its ranges: a crash between keeps the old ranges with the new data (more reserved, never
/// less). Everything else must be the state after, and each file's ranges old or new.
fn reserved_old_or_new(tree: &Tree, oracle: &Oracle<'_>) -> bool {
    if !tree::same_but_reserved(tree, oracle.after) {
        return false;
    }
    tree.iter().all(|(path, node)| {
        let was = |t: &Tree| t.get(path).map(|n| &n.reserved) == Some(&node.reserved);
        was(oracle.before) || was(oracle.after)
    })
}

fn diff(tree: &Tree, oracle: &Oracle<'_>) -> String {
    let describe = |other: &Tree| {
        let missing: Vec<&String> = other.keys().filter(|k| !tree.contains_key(*k)).collect();
        let extra: Vec<&String> = tree.keys().filter(|k| !other.contains_key(*k)).collect();
        let changed: Vec<&String> = tree
            .iter()
            .filter(|(k, v)| other.get(*k).is_some_and(|o| o != *v))
            .map(|(k, _)| k)
            .collect();
        format!("missing {missing:?}, extra {extra:?}, changed {changed:?}")
    };
    format!(
        "vs before: {}; vs after: {}",
        describe(oracle.before),
        describe(oracle.after)
    )
}

/// The recovered file system must work: create, rename and remove, then remove everything,
/// remount, and find it empty and clean.
fn use_everything(image: &[u8]) -> Result<(), String> {
    let fs = mount(image)?;
    fn e(what: &'static str) -> impl Fn(nosefs_core::Error) -> String {
        move |err| format!("after recovery, {what} failed: {err}")
    }
    let owner = Owner::default();
    let f = fs
        .create(ROOT_INO, b"zz-new", 0o644, owner, true)
        .map_err(e("create"))?;
    let d = fs
        .mkdir(ROOT_INO, b"zz-dir", 0o755, owner)
        .map_err(e("mkdir"))?;
    fs.rename(ROOT_INO, b"zz-new", d.ino, b"moved", Default::default())
        .map_err(e("rename"))?;
    fs.symlink(d.ino, b"link", b"moved", owner)
        .map_err(e("symlink"))?;
    let data = workload::pattern(42, 6000);
    fs.write(f.ino, 100, &data).map_err(e("write"))?;
    fs.fsync(f.ino).map_err(e("fsync"))?;
    let mut back = vec![0u8; data.len()];
    fs.read(f.ino, 100, &mut back).map_err(e("read"))?;
    if back != data {
        return Err("after recovery, a written and fsynced file reads back wrong".into());
    }
    debug_assert!(f.ino > 0);
    let paths: Vec<String> = tree_of(&fs).into_keys().rev().collect();
    for path in paths {
        let attr = fs
            .resolve(ROOT_INO, path.as_bytes(), false)
            .map_err(e("resolve"))?;
        let (dir, name) = path.rsplit_once('/').expect("absolute path");
        let parent = fs
            .resolve(
                ROOT_INO,
                if dir.is_empty() { b"/" } else { dir.as_bytes() },
                true,
            )
            .map_err(e("resolve"))?;
        if attr.is_dir() {
            fs.rmdir(parent.ino, name.as_bytes()).map_err(e("rmdir"))?;
        } else {
            fs.unlink(parent.ino, name.as_bytes())
                .map_err(e("unlink"))?;
        }
    }
    let emptied = fs.unmount().into_region().snapshot();
    fsck_clean(&emptied)?;
    let fs = mount(&emptied)?;
    if !tree_of(&fs).is_empty() {
        return Err("after removing everything and remounting, names remain".into());
    }
    Ok(())
}
