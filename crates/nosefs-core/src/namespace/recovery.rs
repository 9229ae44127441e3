//! Mount: validate and replay the directory journal, then rebuild every DRAM structure from one
//! scan of the pinode table (seed 001, III-E "Recovery").

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::Mutex;
use smallvec::SmallVec;
use zerocopy::little_endian::U32;

use super::inode::{Inode, InodeTable};
use super::mirror::{MirrorBucket, MirrorEntry};
use super::pool::SlotPools;
use super::{txn, Fs, MountOptions, MountReport, ROOT_INO};
use crate::error::{Error, Result};
use crate::format::hash_table::name_hash;
use crate::format::journal::{DirEntry, DIR_LOG_ENTRIES};
use crate::format::pinode::{self, Pinode, INLINE_NAME_MAX};
use crate::image::Image;

/// Offset of `nlink` in a pinode.
const NLINK_OFFSET: u64 = 64;

pub(super) fn mount(image: Image, options: &MountOptions) -> Result<Fs> {
    if image.geometry().read_only_features {
        return Err(Error::Unsupported(
            "the image uses read-only-compatible features this build does not know; it cannot be mounted for writing".into(),
        ));
    }
    let was_clean = image.superblock().is_clean();
    validate_dir_logs(&image)?;
    let journal = txn::replay(&image);
    let scan = scan_pinodes(&image)?;
    let cpus = options
        .cpus
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let g = image.geometry();
    let mut fs = Fs {
        mirror: (0..g.bucket_count())
            .map(|_| MirrorBucket::default())
            .collect(),
        inodes: InodeTable::default(),
        pinodes: SlotPools::new(cpus, scan.free_slots.iter().copied()),
        long_names: SlotPools::new(cpus, free_long_names(&image, &scan.valid)),
        extents: SlotPools::new(cpus, free_extents(&image)),
        blocks: crate::alloc::BlockAllocator::from_bitmap(&image.bitmap(), g.data_block_count()),
        logs: (0..g.dir_log_count()).map(|_| Mutex::new(())).collect(),
        next_ino: AtomicU64::new(scan.max_ino + 1),
        topology: Mutex::new(()),
        report: MountReport {
            logs_replayed: journal.replayed,
            logs_discarded: journal.discarded,
            orphans_freed: scan.orphans_freed,
            nlinks_fixed: 0,
            was_clean,
        },
        image,
    };
    build_tree(&fs, &scan)?;
    fs.report.nlinks_fixed = fix_link_counts(&fs);
    let count = fs.image.superblock().mount_count() + 1;
    fs.image.set_state(false, count);
    Ok(fs)
}

/// Committed entries are checked before replay trusts them.
fn validate_dir_logs(image: &Image) -> Result<()> {
    let g = image.geometry();
    for log in 0..g.dir_log_count() {
        let l = image.dir_log(log);
        let tail = l.tail.get() & txn::TAIL_COUNT_MASK;
        if l.tail.get() == 0 {
            continue;
        }
        if log == 0 || tail == 0 || tail > DIR_LOG_ENTRIES as u64 {
            return Err(Error::corrupt(
                "dir_log",
                "tail",
                format!("log {log} has tail {tail}; run nosefs fsck"),
            ));
        }
        if txn::log_intact(image, log) == Some(false) {
            continue; // a torn commit: replay discards it, its entries mean nothing
        }
        for word in &l.entries[..tail as usize] {
            let entry = DirEntry::decode(word.get())
                .map_err(|why| Error::corrupt("dir_log", "entries", format!("log {log}: {why}")))?;
            let slot = u64::from(entry.slot);
            if slot == 0
                || slot >= g.pinode_count()
                || check_pinode(image, slot, &image.pinode(slot)).is_err()
            {
                return Err(Error::corrupt(
                    "dir_log",
                    "entries",
                    format!("log {log} names unusable pinode {slot}"),
                ));
            }
        }
    }
    Ok(())
}

struct Scan {
    valid: Vec<(u32, Pinode)>,
    free_slots: Vec<u32>,
    max_ino: u64,
    orphans_freed: u64,
}

/// What must hold for a valid pinode to be used at all (fsck checks the rest).
fn check_pinode(image: &Image, slot: u64, p: &Pinode) -> Result<()> {
    let bad = |field, detail: String| {
        Err(Error::corrupt(
            "pinode",
            field,
            format!("slot {slot}: {detail}; run nosefs fsck"),
        ))
    };
    if p.ino.get() == 0 {
        return bad("ino", "0".into());
    }
    if !pinode::is_valid_file_type(p.mode.get()) {
        return bad("mode", format!("{:#o}", p.mode.get()));
    }
    let long = p.flags.get() & pinode::FLAG_LONG_NAME != 0;
    if long != (usize::from(p.name_len) > INLINE_NAME_MAX) {
        return bad("flags", "LONG_NAME disagrees with name_len".into());
    }
    if long {
        let record = u64::from(p.long_name.get());
        if record == 0
            || record >= image.geometry().long_name_count()
            || image.long_name(record).name_len != p.name_len
        {
            return bad(
                "long_name",
                format!("record {record} does not hold this name"),
            );
        }
    }
    Ok(())
}

fn scan_pinodes(image: &Image) -> Result<Scan> {
    let mut scan = Scan {
        valid: Vec::new(),
        free_slots: Vec::new(),
        max_ino: ROOT_INO,
        orphans_freed: 0,
    };
    for slot in 1..image.geometry().pinode_count() {
        let p = image.pinode(slot);
        if !p.is_valid() {
            scan.free_slots.push(slot as u32);
            continue;
        }
        check_pinode(image, slot, &p)?;
        if p.flags.get() & pinode::FLAG_ORPHAN != 0 {
            // Unlinked while open when the system went down: nothing can open it again.
            txn::free_orphan(image, slot as u32);
            image.region().fence();
            scan.free_slots.push(slot as u32);
            scan.orphans_freed += 1;
            continue;
        }
        scan.max_ino = scan.max_ino.max(p.ino.get());
        scan.valid.push((slot as u32, p));
    }
    Ok(scan)
}

fn free_long_names(image: &Image, valid: &[(u32, Pinode)]) -> Vec<u32> {
    let used: HashSet<u32> = valid
        .iter()
        .filter(|(_, p)| p.flags.get() & pinode::FLAG_LONG_NAME != 0)
        .map(|(_, p)| p.long_name.get())
        .collect();
    (1..image.geometry().long_name_count() as u32)
        .filter(|r| !used.contains(r))
        .collect()
}

fn free_extents(image: &Image) -> Vec<u32> {
    (1..image.geometry().extent_count())
        .filter(|&e| !image.extent(e).is_valid())
        .map(|e| e as u32)
        .collect()
}

/// Inodes, names, listings and the mirror, from the valid pinodes.
fn build_tree(fs: &Fs, scan: &Scan) -> Result<()> {
    let corrupt =
        |detail: String| Error::corrupt("pinode", "parent", format!("{detail}; run nosefs fsck"));
    let mut names: HashMap<u64, Vec<u32>> = HashMap::new();
    for (slot, p) in &scan.valid {
        names.entry(p.ino.get()).or_default().push(*slot);
    }
    for (ino, slots) in &names {
        let primaries: Vec<&(u32, Pinode)> = scan
            .valid
            .iter()
            .filter(|(s, p)| slots.contains(s) && p.is_primary())
            .collect();
        let [(primary, p)] = primaries.as_slice() else {
            return Err(corrupt(format!(
                "inode {ino} has {} primary pinodes",
                primaries.len()
            )));
        };
        let inode = Inode::new(*ino, *primary, p.is_dir());
        inode.data.lock().names = SmallVec::from_slice(slots);
        fs.inodes.insert(Arc::new(inode));
    }
    if fs
        .inodes
        .get(ROOT_INO)
        .and_then(|r| r.dir.as_ref().map(|_| ()))
        .is_none()
    {
        return Err(corrupt("the root directory is missing".into()));
    }
    for (slot, p) in &scan.valid {
        add_to_tree(fs, *slot, p).map_err(corrupt)?;
    }
    Ok(())
}

fn add_to_tree(fs: &Fs, slot: u32, p: &Pinode) -> std::result::Result<(), String> {
    let name = txn::full_name(&fs.image, p);
    let hash = name_hash(fs.image.geometry().hash_seed, p.parent.get(), &name);
    let bucket = &fs.mirror[fs.bucket_index(hash) as usize];
    if p.ino.get() == ROOT_INO {
        bucket.push_unlocked(MirrorEntry { hash, slot, seq: 0 });
        return Ok(());
    }
    let parent = fs.inodes.get(p.parent.get()).ok_or_else(|| {
        format!(
            "slot {slot}: parent inode {} does not exist",
            p.parent.get()
        )
    })?;
    let dir = parent.dir.as_ref().ok_or_else(|| {
        format!(
            "slot {slot}: parent inode {} is not a directory",
            p.parent.get()
        )
    })?;
    let seq = dir.next_seq();
    dir.children.insert(seq, slot);
    bucket.push_unlocked(MirrorEntry { hash, slot, seq });
    if p.is_dir() && p.is_primary() {
        parent.data.lock().subdirs += 1;
    }
    Ok(())
}

/// Link counts are derived state: recompute them and repair any a crash left stale.
fn fix_link_counts(fs: &Fs) -> u64 {
    let mut fixed = 0;
    for inode in fs.inodes.all() {
        let data = inode.data.lock();
        let want = if inode.dir.is_some() {
            2 + data.subdirs
        } else {
            data.names.len() as u32
        };
        let slot = u64::from(inode.primary_slot());
        if fs.image.pinode(slot).nlink.get() != want {
            let offset = fs.image.geometry().pinode_offset(slot) + NLINK_OFFSET;
            fs.image.region().write(offset, &U32::new(want));
            fs.image.region().persist(offset, 4);
            fixed += 1;
        }
    }
    fixed
}
