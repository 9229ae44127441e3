//! fsck against seeded corruption (issue: large images and repair): single-bit flips in every
//! metadata zone of a real tree, and bursts of random bytes. For each: nothing panics or hangs;
//! mount either refuses the damaged image or mounts it; every corruption fsck detects is repaired
//! by `fsck --repair` to an image that checks clean and mounts, and whose whole tree can be walked
//! and read.
//!
//! CI runs a bounded set; `NOSEFS_FUZZ_CASES=N` runs N of each kind (the figures in
//! docs/benchmarks.md came from 5,000). Failing cases print their seed and what was flipped.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use nosefs_core::error::Errno;
use nosefs_core::format::layout::{MkfsParams, Zone};
use nosefs_core::format::marks::{Table, MARKS_OFFSET};
use nosefs_core::fs::{Fs, MountOptions, OnDamage};
use nosefs_core::fsck::{fsck, FsckOptions};
use nosefs_core::image::Image;
use nosefs_core::namespace::{Owner, XattrMode, ROOT_INO};
use nosefs_core::pmem::Access;

const OWNER: Owner = Owner {
    uid: 0,
    gid: 0,
    umask: 0,
};

/// A tree like the one the issue was found with: nested directories, files with data (some
/// fragmented by overwrites), hard links, long names, symlinks.
/// An ACL with a named user and group (the kernel's value format).
fn named_acl() -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (1u16, 6u16, 0u32),
        (2, 6, 2000),
        (4, 4, 0),
        (8, 4, 300),
        (0x10, 6, 0),
        (0x20, 4, 0),
    ] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

fn build(path: &Path) {
    let params = MkfsParams {
        image_bytes: 4 << 20,
        hash_seed: Some(0xf022),
        ..MkfsParams::default()
    };
    nosefs_core::mkfs::mkfs(path, &params).unwrap();
    let fs = Fs::mount(path, &MountOptions::default()).unwrap();
    let mut dirs = vec![ROOT_INO];
    for d in 0..12u64 {
        let parent = dirs[(d as usize * 7) % dirs.len()];
        dirs.push(
            fs.mkdir(parent, format!("dir{d}").as_bytes(), 0o755, OWNER)
                .unwrap()
                .ino,
        );
    }
    fs.setxattr(
        dirs[3],
        b"system.posix_acl_default",
        &named_acl(),
        XattrMode::Any,
    )
    .unwrap();
    let long = "L".repeat(60);
    for i in 0..120u64 {
        let parent = dirs[(i as usize * 5) % dirs.len()];
        let name = if i % 17 == 0 {
            format!("{long}{i}")
        } else {
            format!("file{i}")
        };
        let f = fs
            .create(parent, name.as_bytes(), 0o644, OWNER, true)
            .unwrap();
        if i % 3 == 0 {
            let data: Vec<u8> = (0..(i * 97) % 9000 + 10).map(|b| (b * i) as u8).collect();
            fs.write(f.ino, 0, &data).unwrap();
            if i % 9 == 0 {
                fs.write(f.ino, 100, b"fragment").unwrap(); // a byte-offset overwrite
            }
            fs.fsync(f.ino).unwrap();
        }
        if i % 13 == 0 {
            // A reservation, kept in the attribute blob (alone, or beside an attribute).
            fs.reserve_space(f.ino, i * 10, 9000).unwrap();
        }
        if i % 11 == 0 {
            fs.link(f.ino, ROOT_INO, format!("link{i}").as_bytes())
                .unwrap();
        }
        if i % 23 == 0 {
            fs.symlink(parent, format!("sym{i}").as_bytes(), b"../file1", OWNER)
                .unwrap();
        }
        if i % 7 == 0 {
            // Attributes: a blob of one block or two, and an ACL that sets the mode.
            let value: Vec<u8> = (0..(i * 61) % 6000 + 1).map(|b| (b ^ i) as u8).collect();
            fs.setxattr(f.ino, b"user.tag", &value, XattrMode::Any)
                .unwrap();
            if i % 2 == 0 {
                fs.setxattr(
                    f.ino,
                    b"system.posix_acl_access",
                    &named_acl(),
                    XattrMode::Any,
                )
                .unwrap();
            }
        }
    }
    drop(fs.unmount());
}

/// The metadata byte ranges a corruption may hit: the part of each zone in use.
fn targets(path: &Path) -> Vec<(&'static str, u64, u64)> {
    let image = Image::open(path, Access::ReadOnly).unwrap();
    let g = image.geometry().clone();
    let used = |zone: Zone, table: Option<Table>| {
        let span = g.span(zone);
        let records = table.map_or(span.count, |t| image.mark(t));
        (span.offset, records * zone.record_bytes())
    };
    let mut t = vec![
        ("superblock", 0, 512),
        ("backup superblock", 4096, 512),
        ("marks", MARKS_OFFSET, 24),
    ];
    for (name, zone, table) in [
        ("hash table", Zone::HashTable, None),
        ("pinodes", Zone::PinodeTable, Some(Table::Pinodes)),
        ("long names", Zone::LongNames, Some(Table::LongNames)),
        ("extents", Zone::ExtentTable, Some(Table::Extents)),
        ("bitmap", Zone::Bitmap, None),
    ] {
        let (offset, len) = used(zone, table);
        let len = if zone == Zone::Bitmap {
            len.min(64)
        } else {
            len
        };
        t.push((name, offset, len));
    }
    t
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Mounts and walks the whole tree, reading every file; an `Err` is fine, a panic is not.
fn mount_and_walk(path: &Path) -> Result<u64, String> {
    let fs = Fs::mount(path, &MountOptions::default()).map_err(|e| e.to_string())?;
    let seen = walk(&fs)?;
    drop(fs.unmount());
    Ok(seen)
}

/// Walks the whole tree, reading every file; returns how many names it saw.
fn walk(fs: &Fs) -> Result<u64, String> {
    let mut stack = vec![ROOT_INO];
    let mut seen = 0u64;
    while let Some(dir) = stack.pop() {
        let mut entries = Vec::new();
        fs.readdir(dir, 0, |e| {
            entries.push(e.clone());
            true
        })
        .map_err(|e| e.to_string())?;
        for e in entries {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            seen += 1;
            if seen > 100_000 {
                return Err("the walk does not end".into());
            }
            match e.file_type {
                nosefs_core::format::pinode::S_IFDIR => stack.push(e.ino),
                nosefs_core::format::pinode::S_IFREG => {
                    let mut buf = vec![0u8; 16384];
                    fs.read(e.ino, 0, &mut buf).map_err(|e| e.to_string())?;
                }
                _ => {}
            }
        }
    }
    Ok(seen)
}

/// `errors=ro` on an image a plain mount refused: it mounts read-only, its tree walks, a change
/// is EROFS, and the image file is not written.
fn mount_read_only_after_damage(path: &Path, damaged: &[u8]) -> Result<(), String> {
    let options = MountOptions {
        errors: OnDamage::ReadOnly,
        ..MountOptions::default()
    };
    let outcome = match Fs::mount(path, &options) {
        Ok(fs) => {
            let damage = fs.mount_report().damage.clone();
            let walked = walk(&fs);
            let create = fs.create(ROOT_INO, b"new", 0o644, OWNER, true);
            drop(fs.unmount());
            match (damage, walked, create) {
                (None, ..) => Err("errors=ro mount does not report the damage".into()),
                (_, Err(e), _) => Err(format!("errors=ro mount cannot be walked: {e}")),
                (_, _, Ok(_)) => Err("errors=ro mount took a create".into()),
                (_, _, Err(e)) if e.errno() != Errno::EROFS => Err(format!(
                    "a create on an errors=ro mount failed with {e}, not EROFS"
                )),
                _ => Ok(()),
            }
        }
        Err(e) => Err(format!("errors=ro does not mount the damaged image: {e}")),
    };
    if std::fs::read(path).unwrap() != damaged {
        return Err("errors=ro wrote to the damaged image".into());
    }
    outcome
}

#[derive(Default, Debug)]
struct Tally {
    cases: u64,
    detected: u64,
    repaired_clean: u64,
    /// Mounted although fsck found damage, and left it in place.
    mount_accepted_damage: u64,
    /// Refused by a plain mount, then mounted read-only by `errors=ro`.
    mounted_read_only: u64,
    failures: Vec<String>,
}

/// One corruption: `flips` bit flips (or, with `bytes`, random bytes) in one target.
fn one_case(pristine: &[u8], dir: &Path, seed: u64, bytes: bool, tally: &mut Tally) {
    let path = dir.join(format!("case-{seed}.img"));
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut image = pristine.to_vec();
    std::fs::write(&path, &image).unwrap();
    let zones = targets(&path);
    let (zone, offset, len) = zones[rng.below(zones.len() as u64) as usize];
    let mut what = Vec::new();
    let count = if bytes { 1 + rng.below(8) } else { 1 };
    for _ in 0..count {
        let at = (offset + rng.below(len)) as usize;
        if bytes {
            image[at] = rng.next() as u8;
        } else {
            image[at] ^= 1 << rng.below(8);
        }
        what.push(at);
    }
    std::fs::write(&path, &image).unwrap();
    let label = format!("seed {seed}: {zone} bytes {what:?}");
    tally.cases += 1;
    let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<(), String> {
        let found = match fsck(&path, FsckOptions::default()) {
            Ok(report) => report,
            Err(_) => return Ok(()), // not an image any more (both superblocks): an error is right
        };
        // A mount of the damaged image may refuse it; it must not panic.
        let mount_ok = mount_and_walk(&path).is_ok();
        if found.problems.is_empty() {
            return Ok(());
        }
        tally.detected += 1;
        if std::env::var("NOSEFS_FUZZ_SHOW").is_ok() {
            eprintln!("FOUND {:#?}", found.problems);
        }
        if !mount_ok {
            std::fs::write(&path, &image).unwrap();
            mount_read_only_after_damage(&path, &image)?;
            tally.mounted_read_only += 1;
        }
        if mount_ok {
            // Mount may repair derived state itself (bitmap, link counts, backup superblock);
            // what it must not do is run on damage it leaves in place.
            let after_mount = fsck(&path, FsckOptions::default()).map_err(|e| e.to_string())?;
            if !after_mount.problems.is_empty() {
                tally.mount_accepted_damage += 1;
                if std::env::var("NOSEFS_FUZZ_SHOW").is_ok() {
                    eprintln!("ACCEPTED {}", found.problems[0]);
                }
            }
        }
        std::fs::write(&path, &image).unwrap(); // repair what fsck saw, not what mount did
        let repaired = fsck(&path, FsckOptions { repair: true }).map_err(|e| e.to_string())?;
        let after = fsck(&path, FsckOptions::default()).map_err(|e| e.to_string())?;
        if !after.problems.is_empty() {
            if std::env::var("NOSEFS_FUZZ_SHOW").is_ok() {
                eprintln!("FOUND {:#?}", found.problems);
            }
            return Err(format!(
                "not clean after repair: {:?} (repair said: left {:?})",
                after
                    .problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>(),
                repaired
                    .problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
            ));
        }
        mount_and_walk(&path).map_err(|e| format!("repaired image does not mount: {e}"))?;
        tally.repaired_clean += 1;
        Ok(())
    }));
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(why)) => tally.failures.push(format!("{label}: {why}")),
        Err(_) => tally.failures.push(format!("{label}: PANIC")),
    }
    let _ = std::fs::remove_file(&path);
}

fn cases(default: u64) -> u64 {
    std::env::var("NOSEFS_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn run(bytes: bool, default_cases: u64, first_seed: u64) -> Tally {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let base = dir.path().join("base.img");
    build(&base);
    let pristine = std::fs::read(&base).unwrap();
    assert!(
        fsck(&base, FsckOptions::default())
            .unwrap()
            .problems
            .is_empty(),
        "the tree is clean before any corruption"
    );
    let mut tally = Tally::default();
    // NOSEFS_FUZZ_SEED=N runs only case N (a failure prints its seed).
    let only: Option<u64> = std::env::var("NOSEFS_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok());
    let seeds = match only {
        Some(seed) => seed..seed + 1,
        None => first_seed..first_seed + cases(default_cases),
    };
    for seed in seeds {
        one_case(&pristine, dir.path(), seed, bytes, &mut tally);
    }
    eprintln!(
        "{}: {} cases, {} detected, {} repaired to clean and mounted ({:.1}%), mount ran on {} damaged images without repairing them, {} refused by mount and served by errors=ro, {} failures",
        if bytes { "random bytes" } else { "single-bit flips" },
        tally.cases,
        tally.detected,
        tally.repaired_clean,
        100.0 * tally.repaired_clean as f64 / tally.detected.max(1) as f64,
        tally.mount_accepted_damage,
        tally.mounted_read_only,
        tally.failures.len()
    );
    for f in tally.failures.iter().take(20) {
        eprintln!("  {f}");
    }
    tally
}

#[test]
fn single_bit_flips_are_detected_and_repaired() {
    let tally = run(false, 150, 1);
    assert!(tally.detected > 0, "no flip was detected: {tally:?}");
    assert!(
        tally.mounted_read_only > 0,
        "no case exercised errors=ro: {tally:?}"
    );
    assert!(
        !tally.failures.iter().any(|f| f.ends_with("PANIC")),
        "panics: {:#?}",
        tally.failures
    );
    assert_eq!(
        tally.mount_accepted_damage, 0,
        "mount ran on damage fsck found and left it in place"
    );
    let rate = tally.repaired_clean as f64 / tally.detected as f64;
    assert!(
        rate >= 0.95,
        "{:.1}% of detected flips repaired to clean: {:#?}",
        rate * 100.0,
        tally.failures
    );
}

#[test]
fn random_bytes_never_panic_and_mostly_repair() {
    let tally = run(true, 60, 1_000_000);
    assert!(
        !tally.failures.iter().any(|f| f.ends_with("PANIC")),
        "panics: {:#?}",
        tally.failures
    );
    let rate = tally.repaired_clean as f64 / tally.detected.max(1) as f64;
    assert!(
        rate >= 0.9,
        "{:.1}% repaired: {:#?}",
        rate * 100.0,
        tally.failures
    );
}
