//! Mount: validate and replay the directory journal, then rebuild every DRAM structure from one
//! scan of the pinode table (seed 001, III-E "Recovery").

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::Mutex;
use zerocopy::little_endian::U32;

use crate::error::{Error, Result};
use crate::file::filemap::Space;
use crate::file::journal as fjournal;
use crate::format::bitmap;
use crate::format::extent::Extent;
use crate::format::hash_table::name_hash;
use crate::format::journal::{DirEntry, DIR_LOG_ENTRIES};
use crate::format::marks::Table;
use crate::format::pinode::{self, Pinode, INLINE_NAME_MAX};
use crate::format::xattr::XATTR_PINODE_NAME;
use crate::format::BLOCK_SIZE;
use crate::fs::{Fs, MountOptions, MountReport};
use crate::image::Image;
use crate::inode::{Inode, InodeTable};
use crate::namespace::mirror::MirrorEntry;
use crate::namespace::{txn, ROOT_INO};
use crate::pool::SlotPools;

/// Offset of `nlink` in a pinode.
const NLINK_OFFSET: u64 = 64;

pub(crate) fn mount(image: Image, options: &MountOptions) -> Result<Fs> {
    if image.geometry().read_only_features && !options.read_only {
        return Err(Error::Unsupported(
            "the image uses read-only-compatible features this build does not know; it cannot be mounted for writing".into(),
        ));
    }
    let was_clean = image.superblock().is_clean();
    let marks = read_marks(&image)?;
    validate_dir_logs(&image, &marks)?;
    validate_file_logs(&image)?;
    let journal = txn::replay(&image);
    let file_journal = fjournal::replay(&image);
    let scan = scan_pinodes(&image, &marks)?;
    let free_extents = free_extents(&image, &marks);
    let data = load_data(&image, &scan, &marks, free_extents.len() as u64)?;
    let cpus = options
        .cpus
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let g = image.geometry();
    let mut fs = Fs {
        mirror: crate::namespace::mirror::Buckets::new(g.bucket_count() as usize),
        inodes: InodeTable::default(),
        pinodes: marks.pools(cpus, Table::Pinodes, scan.free_slots.iter().copied()),
        long_names: marks.pools(cpus, Table::LongNames, free_long_names(&scan.valid, &marks)),
        extents: marks.pools(cpus, Table::Extents, free_extents),
        blocks: crate::alloc::BlockAllocator::from_bitmap(&data.used, g.data_block_count(), cpus),
        logs: (0..g.dir_log_count())
            .map(|_| crate::padded::CachePadded::default())
            .collect(),
        settler: crate::settle::Settler::new(g.dir_log_count(), g.file_log_count(), cpus),
        file_logs: SlotPools::new(cpus, 1..g.file_log_count() as u32),
        sync_writes: options.sync,
        read_only: options.read_only,
        atime: options.atime,
        shadows: crate::file::mmap::Shadows::new(
            options.compare_mapped_pages,
            options.msync_whole_file,
        ),
        next_ino: AtomicU64::new(scan.max_ino + 1),
        topology: Mutex::new(()),
        removed_dirs: Mutex::new(Default::default()),
        linkable_tmpfiles: Mutex::new(Default::default()),
        compactor: Default::default(),
        report: MountReport {
            logs_replayed: journal.replayed,
            logs_discarded: journal.discarded,
            orphans_freed: scan.orphans_freed,
            nlinks_fixed: 0,
            file_logs_replayed: file_journal.replayed,
            file_logs_discarded: file_journal.discarded,
            file_logs_superseded: file_journal.superseded,
            bitmap_mismatches: data.mismatches,
            was_clean,
            damage: None,
        },
        image,
    };
    let tree = build_tree(&fs, &scan)?;
    check_chains(&fs.image, &scan, &tree.bucket_of_slot)?;
    repair_derived(&fs.image, &data);
    fs.report.nlinks_fixed = fix_link_counts(&fs.image, &tree.inodes);
    let count = fs.image.superblock().mount_count() + 1;
    fs.image.set_state(false, count);
    Ok(fs)
}

/// How far into each table mount reads: the high-water marks, validated, or the whole tables of
/// an image that keeps none.
struct Marks {
    /// `(mark, table count)` by [`Table`].
    by_table: [(u64, u64); 3],
    kept: bool,
}

impl Marks {
    fn get(&self, table: Table) -> u64 {
        self.by_table[table as usize].0
    }

    /// The table's free slots: `listed` below the mark, and the never-used tail above it.
    fn pools(&self, cpus: usize, table: Table, listed: impl IntoIterator<Item = u32>) -> SlotPools {
        let (mark, count) = self.by_table[table as usize];
        SlotPools::with_fresh(cpus, listed, mark..count, self.kept.then_some(table))
    }
}

fn read_marks(image: &Image) -> Result<Marks> {
    let mut by_table = [(0, 0); 3];
    for table in Table::ALL {
        let (mark, count) = (image.mark(table), image.table_count(table));
        let lowest = crate::format::marks::lowest(table, image.geometry().root_slot);
        if mark < lowest || mark > count {
            return Err(Error::corrupt(
                "marks",
                table.field(),
                format!("{mark} is outside {lowest}..={count}; run nosefs fsck"),
            ));
        }
        by_table[table as usize] = (mark, count);
    }
    Ok(Marks {
        by_table,
        kept: image.geometry().high_water_marks,
    })
}

/// Committed entries are checked before replay trusts them.
fn validate_dir_logs(image: &Image, marks: &Marks) -> Result<()> {
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
                || slot >= marks.get(Table::Pinodes)
                || check_pinode(image, slot, &image.pinode(slot), marks).is_err()
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

/// What mount keeps of one valid pinode once [`check_pinode`] passed it: 48 bytes instead of the
/// record's 128, so the scan of 10^6 names holds 48 MB of DRAM, not 128. Names are read again from
/// the image when they are needed (mount is the image's only user, so they cannot change).
#[derive(Debug, Clone, Copy)]
struct Found {
    ino: u64,
    parent: u64,
    slot: u32,
    mode: u32,
    flags: u32,
    nlink: u32,
    hash_next: u32,
    extent_head: u32,
    long_name: u32,
}

impl Found {
    fn new(slot: u32, p: &Pinode) -> Found {
        Found {
            ino: p.ino.get(),
            parent: p.parent.get(),
            slot,
            mode: p.mode.get(),
            flags: p.flags.get(),
            nlink: p.nlink.get(),
            hash_next: p.hash_next.get(),
            extent_head: p.extent_head.get(),
            long_name: p.long_name.get(),
        }
    }

    fn is_primary(&self) -> bool {
        self.flags & pinode::FLAG_PRIMARY != 0
    }

    fn file_type(&self) -> u32 {
        self.mode & pinode::S_IFMT
    }

    /// An attribute pinode: its parent is the inode whose attributes it holds.
    fn is_xattr(&self) -> bool {
        self.flags & pinode::FLAG_XATTR != 0
    }
}

struct Scan {
    /// In slot order.
    valid: Vec<Found>,
    /// Slots read: those below the pinode mark.
    slots_read: u64,
    free_slots: Vec<u32>,
    max_ino: u64,
    orphans_freed: u64,
}

/// What must hold for a valid pinode to be used at all (fsck checks the rest).
fn check_pinode(image: &Image, slot: u64, p: &Pinode, marks: &Marks) -> Result<()> {
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
    if p.flags.get() & !pinode::KNOWN_FLAGS != 0 {
        return bad("flags", format!("unknown bits {:#x}", p.flags.get()));
    }
    if p.flags.get() & pinode::FLAG_XATTR != 0 {
        return check_xattr_pinode(image, p).or_else(|detail| bad("flags", detail));
    }
    let is_root = p.ino.get() == ROOT_INO;
    if is_root != (p.name_len == 0) || (is_root && (p.parent.get() != 0 || !p.is_primary())) {
        return bad(
            "name_len",
            "only the root has an empty name and no parent".into(),
        );
    }
    let inline = p.inline_name();
    if p.name[inline.len()..].iter().any(|&b| b != 0)
        || inline.iter().any(|&b| b == 0 || b == b'/')
        || inline == b"."
        || inline == b".."
    {
        return bad("name", "not a valid file name".into());
    }
    let long = p.flags.get() & pinode::FLAG_LONG_NAME != 0;
    if long != (usize::from(p.name_len) > INLINE_NAME_MAX) {
        return bad("flags", "LONG_NAME disagrees with name_len".into());
    }
    if long {
        let record = u64::from(p.long_name.get());
        if record == 0
            || record >= marks.get(Table::LongNames)
            || image.long_name(record).name_len != p.name_len
            || image.long_name(record).name()[..INLINE_NAME_MAX] != p.name[..]
            || image
                .long_name(record)
                .name()
                .iter()
                .any(|&b| b == 0 || b == b'/')
        {
            return bad(
                "long_name",
                format!("record {record} does not hold this name"),
            );
        }
    }
    Ok(())
}

/// What an attribute pinode must be: a primary (it owns its blob) named
/// [`XATTR_PINODE_NAME`], not an orphan, on an image with the feature.
fn check_xattr_pinode(image: &Image, p: &Pinode) -> std::result::Result<(), String> {
    let flags = p.flags.get();
    let ok = image.geometry().xattrs
        && flags & pinode::FLAG_PRIMARY != 0
        && flags & (pinode::FLAG_ORPHAN | pinode::FLAG_LONG_NAME) == 0
        && p.mode.get() & pinode::S_IFMT == pinode::S_IFREG
        && p.inline_name() == XATTR_PINODE_NAME
        && p.name[XATTR_PINODE_NAME.len()..].iter().all(|&b| b == 0)
        && p.parent.get() != 0
        && p.ino.get() != ROOT_INO;
    if ok {
        Ok(())
    } else {
        Err("not a well-formed attribute pinode".into())
    }
}

fn scan_pinodes(image: &Image, marks: &Marks) -> Result<Scan> {
    let mut scan = Scan {
        valid: Vec::new(),
        slots_read: marks.get(Table::Pinodes),
        free_slots: Vec::new(),
        max_ino: ROOT_INO,
        orphans_freed: 0,
    };
    let mut freed_orphans = HashSet::new();
    for slot in 1..marks.get(Table::Pinodes) {
        let p = image.pinode(slot);
        if !p.is_valid() {
            scan.free_slots.push(slot as u32);
            continue;
        }
        check_pinode(image, slot, &p, marks)?;
        if p.flags.get() & pinode::FLAG_ORPHAN != 0 {
            // Unlinked while open when the system went down: nothing can open it again.
            txn::free_orphan(image, slot as u32);
            image.region().fence();
            scan.free_slots.push(slot as u32);
            scan.orphans_freed += 1;
            freed_orphans.insert(p.ino.get());
            continue;
        }
        scan.max_ino = scan.max_ino.max(p.ino.get());
        scan.valid.push(Found::new(slot as u32, &p));
    }
    if !freed_orphans.is_empty() {
        // Their attributes go with them.
        scan.valid.retain(|f| {
            let goes = f.is_xattr() && freed_orphans.contains(&f.parent);
            if goes {
                txn::free_xattr_pinode(image, f.slot);
                image.region().fence();
                scan.free_slots.push(f.slot);
            }
            !goes
        });
    }
    Ok(scan)
}

fn free_long_names(valid: &[Found], marks: &Marks) -> Vec<u32> {
    let used: HashSet<u32> = valid
        .iter()
        .filter(|f| f.flags & pinode::FLAG_LONG_NAME != 0)
        .map(|f| f.long_name)
        .collect();
    (1..marks.get(Table::LongNames) as u32)
        .filter(|r| !used.contains(r))
        .collect()
}

fn free_extents(image: &Image, marks: &Marks) -> Vec<u32> {
    (1..marks.get(Table::Extents))
        .filter(|&e| !image.extent(e).is_valid())
        .map(|e| e as u32)
        .collect()
}

/// An intact committed file log is checked before replay trusts it; a torn one is discarded.
fn validate_file_logs(image: &Image) -> Result<()> {
    for log in 1..image.geometry().file_log_count() {
        if fjournal::log_intact(image, log) == Some(true) {
            fjournal::validate(image, log).map_err(|why| {
                Error::corrupt(
                    "file_log",
                    "entries",
                    format!("log {log}: {why}; run nosefs fsck"),
                )
            })?;
        }
    }
    if image.file_log(0).tail.get() != 0 {
        return Err(Error::corrupt(
            "file_log",
            "tail",
            "log 0 is reserved; run nosefs fsck",
        ));
    }
    Ok(())
}

/// What the extent lists say of the data zone. No file's data state is built here: a file gets
/// it on first use ([`Fs::file_of`](crate::fs::Fs)), so a mount holds no DRAM per file with data.
struct Data {
    /// Blocks marked in the bitmap or held by an extent: mount hands out neither.
    used: Vec<u8>,
    /// Blocks on which bitmap and extents disagree.
    mismatches: u64,
}

/// Walks every file's extent list, checking what the rest of mount relies on: extents in range
/// and valid, owned by the file, in file order without overlap, and no data-zone byte held twice
/// in the whole image.
fn load_data(image: &Image, scan: &Scan, marks: &Marks, free_extent_count: u64) -> Result<Data> {
    let g = image.geometry();
    let mut all = Space::default();
    let mut covered = vec![0u8; g.bitmap_bytes() as usize];
    let mut reached_extents = 0u64;
    for found in scan
        .valid
        .iter()
        .filter(|f| f.is_primary() && f.extent_head != 0)
    {
        let p = image.pinode(u64::from(found.slot));
        let extents = file_extents(image, found.slot, &p, &mut all, marks)?;
        reached_extents += extents.len() as u64;
        for &(_, _, addr, len) in &extents {
            let (first, end) = (addr / BLOCK_SIZE, (addr + len).div_ceil(BLOCK_SIZE));
            (first..end).for_each(|b| bitmap::set(&mut covered, b, true));
        }
    }
    let on_media = image.bitmap();
    let mismatches: u64 = on_media
        .iter()
        .zip(&covered)
        .map(|(u, c)| u64::from((u ^ c).count_ones()))
        .sum();
    let valid_extents = (marks.get(Table::Extents) - 1) - free_extent_count;
    if reached_extents != valid_extents {
        return Err(Error::corrupt(
            "extent",
            "flags",
            format!(
                "{} valid extents are in no file's list; run nosefs fsck",
                valid_extents.abs_diff(reached_extents)
            ),
        ));
    }
    // Extents are the truth and every one is accounted for: a bitmap that disagrees is rewritten
    // from them (repair_derived), and the allocator works from them.
    Ok(Data {
        used: covered,
        mismatches,
    })
}

/// One file's extents (eno, file offset, data-zone address, length), checked.
fn file_extents(
    image: &Image,
    slot: u32,
    p: &Pinode,
    all: &mut Space,
    marks: &Marks,
) -> Result<Vec<(u32, u64, u64, u64)>> {
    let g = image.geometry();
    let bad = |detail: String| {
        Error::corrupt(
            "extent",
            "next",
            format!("pinode {slot}: {detail}; run nosefs fsck"),
        )
    };
    let mut out = Vec::new();
    let mut eno = u64::from(p.extent_head.get());
    let mut end = 0u64;
    while eno != 0 {
        if eno >= marks.get(Table::Extents) || out.len() as u64 >= g.extent_count() {
            return Err(bad(format!("extent {eno} out of range or the list loops")));
        }
        let e = image.extent(eno);
        let offset = u64::from(e.block_offset.get());
        let len = u64::from(e.length.get());
        let start = u64::from(e.start_block.get());
        let usable = e.is_valid()
            && e.ino.get() == p.ino.get()
            && len > 0
            && offset < BLOCK_SIZE
            && start + Extent::blocks_needed(offset, len) <= g.data_block_count()
            && e.file_offset.get() >= end
            && e.file_offset.get().checked_add(len).is_some()
            && u64::from(e.block_count.get()) == Extent::blocks_needed(offset, len)
            && e.flags.get() & !crate::format::extent::KNOWN_FLAGS == 0
            && u64::from(e.prev.get())
                == out
                    .last()
                    .map_or(0, |x: &(u32, u64, u64, u64)| u64::from(x.0));
        let addr = start * BLOCK_SIZE + offset;
        if !usable || !all.try_add(addr, len) {
            return Err(bad(format!("extent {eno} is unusable or overlaps another")));
        }
        end = e.file_offset.get() + len;
        out.push((eno as u32, e.file_offset.get(), addr, len));
        eno = u64::from(e.next.get());
    }
    if end > p.size.get() {
        return Err(bad(format!(
            "the extents reach byte {end}, past the size {}",
            p.size.get()
        )));
    }
    Ok(out)
}

/// What [`build_tree`] found on the way, for the checks after it.
struct Tree {
    /// The NVM bucket of each valid slot (`u64::MAX` for the others), for [`check_chains`].
    bucket_of_slot: Vec<u64>,
    /// Every inode with the link count its primary pinode holds, for [`fix_link_counts`].
    inodes: Vec<(Arc<Inode>, u32)>,
}

/// Inodes, names, listings and the mirror, from the valid pinodes.
fn build_tree(fs: &Fs, scan: &Scan) -> Result<Tree> {
    let corrupt =
        |detail: String| Error::corrupt("pinode", "parent", format!("{detail}; run nosefs fsck"));
    // The names grouped by inode: a sort of 8-byte keys, not a hash map of 10^6 groups, whose
    // random inserts cost a cache miss each.
    let mut by_ino: Vec<(u64, u32)> = (0..scan.valid.len() as u32)
        .filter(|&i| !scan.valid[i as usize].is_xattr())
        .map(|i| (scan.valid[i as usize].ino, i))
        .collect();
    by_ino.sort_unstable();
    let mut inodes = Vec::with_capacity(by_ino.len());
    fs.inodes.reserve(by_ino.len());
    for group in by_ino.chunk_by(|a, b| a.0 == b.0) {
        let ino = group[0].0;
        let found = |&(_, i): &(u64, u32)| &scan.valid[i as usize];
        let mut primaries = group.iter().map(found).filter(|f| f.is_primary());
        let (Some(primary), None) = (primaries.next(), primaries.next()) else {
            let count = group.iter().map(found).filter(|f| f.is_primary()).count();
            return Err(corrupt(format!("inode {ino} has {count} primary pinodes")));
        };
        let file_type = primary.file_type();
        if group.len() > 1 && file_type == pinode::S_IFDIR {
            return Err(corrupt(format!("directory {ino} has a second name")));
        }
        if group.iter().map(found).any(|f| f.file_type() != file_type) {
            return Err(corrupt(format!(
                "a name of inode {ino} has another file type"
            )));
        }
        let inode = Inode::new(ino, primary.slot, primary.mode, None);
        if group.len() > 1 {
            inode
                .data
                .lock()
                .set_names(group.iter().map(|g| found(g).slot));
        }
        let inode = Arc::new(inode);
        fs.inodes.insert(Arc::clone(&inode));
        inodes.push((inode, primary.nlink));
    }
    if fs
        .inodes
        .get(ROOT_INO)
        .and_then(|r| r.dir().map(|_| ()))
        .is_none()
    {
        return Err(corrupt("the root directory is missing".into()));
    }
    let mut bucket_of_slot = vec![u64::MAX; scan.slots_read as usize];
    // Names of one directory tend to sit together: the last parent is kept, not looked up again.
    let mut parent: Option<Arc<Inode>> = None;
    for found in &scan.valid {
        if found.is_xattr() {
            bucket_of_slot[found.slot as usize] = attach_xattrs(fs, found).map_err(corrupt)?;
            continue;
        }
        let is_root = found.ino == ROOT_INO;
        if !is_root && parent.as_ref().map_or(true, |p| p.ino != found.parent) {
            parent = Some(fs.inodes.get(found.parent).ok_or_else(|| {
                corrupt(format!(
                    "slot {}: parent inode {} does not exist",
                    found.slot, found.parent
                ))
            })?);
        }
        let parent = if is_root { None } else { parent.as_deref() };
        bucket_of_slot[found.slot as usize] = add_to_tree(fs, found, parent).map_err(corrupt)?;
    }
    Ok(Tree {
        bucket_of_slot,
        inodes,
    })
}

/// Gives an attribute pinode to its inode; returns its bucket. It is in no listing and not in
/// the mirror (no lookup by name ever finds it), but in its NVM bucket's chain.
fn attach_xattrs(fs: &Fs, found: &Found) -> std::result::Result<u64, String> {
    let owner = fs.inodes.get(found.parent).ok_or_else(|| {
        format!(
            "slot {}: attributes of missing inode {}",
            found.slot, found.parent
        )
    })?;
    if owner.xattrs.load(std::sync::atomic::Ordering::Relaxed) != 0 {
        return Err(format!("inode {} has two attribute pinodes", found.parent));
    }
    owner
        .xattrs
        .store(found.slot, std::sync::atomic::Ordering::Relaxed);
    // Whether it holds an access ACL: read now, so permission checks need not.
    let set = {
        let _locked = owner.data.lock();
        fs.load_xattrs(&owner).map_err(|e| e.to_string())?
    };
    owner.note_acl(set.get(crate::namespace::acl::ACCESS).is_some());
    let reserved = set.reserved();
    if !reserved.is_empty() && fs.image.geometry().reservations {
        fs.restore_reservation(&owner, reserved)
            .map_err(|e| e.to_string())?;
    }
    Ok(fs.xattr_bucket(found.parent))
}

/// Adds one name to its directory's listing and the mirror; returns its bucket. `parent` is the
/// name's parent inode (`None` only for the root).
fn add_to_tree(fs: &Fs, found: &Found, parent: Option<&Inode>) -> std::result::Result<u64, String> {
    let slot = found.slot;
    let p = fs.image.pinode(u64::from(slot));
    let (hash, twin) = txn::with_full_name(&fs.image, &p, |name| {
        let hash = name_hash(fs.image.geometry().hash_seed, found.parent, name);
        let twin = fs.mirror[fs.bucket_index(hash) as usize].candidates(hash, |e| {
            let q = fs.image.pinode(u64::from(e.slot));
            q.parent.get() == found.parent
                && txn::with_full_name(&fs.image, &q, |other| other == name)
        });
        (hash, twin)
    });
    if let Some(twin) = twin {
        return Err(format!("slots {slot} and {} hold the same name", twin.slot));
    }
    let index = fs.bucket_index(hash);
    let bucket = &fs.mirror[index as usize];
    let Some(parent) = parent else {
        bucket.push_unlocked(MirrorEntry { hash, slot, seq: 0 });
        return Ok(index);
    };
    let dir = parent.dir().ok_or_else(|| {
        format!(
            "slot {slot}: parent inode {} is not a directory",
            found.parent
        )
    })?;
    let seq = dir.next_seq();
    dir.children.insert(seq, slot);
    bucket.push_unlocked(MirrorEntry { hash, slot, seq });
    if found.file_type() == pinode::S_IFDIR && found.is_primary() {
        parent.data.lock().subdirs += 1;
    }
    Ok(index)
}

/// The NVM hash table against the names mount found: every chain holds only valid names of its
/// bucket, without a cycle, and every valid name is in one. Linear in the buckets and names; the
/// links are followed in DRAM, from the scan.
fn check_chains(image: &Image, scan: &Scan, bucket_of_slot: &[u64]) -> Result<()> {
    let g = image.geometry();
    let corrupt = |field, detail: String| {
        Err(Error::corrupt(
            "bucket",
            field,
            format!("{detail}; run nosefs fsck"),
        ))
    };
    let mut next = vec![0u32; bucket_of_slot.len()];
    for found in &scan.valid {
        next[found.slot as usize] = found.hash_next;
    }
    let mut visited = vec![0u64; bucket_of_slot.len().div_ceil(64)];
    let mut linked = 0usize;
    let span = g.span(crate::format::layout::Zone::HashTable);
    let mut chunk = vec![0u8; 64 << 10];
    let mut bucket = 0u64;
    while bucket < g.bucket_count() {
        let words = ((g.bucket_count() - bucket) as usize).min(chunk.len() / 8);
        image
            .region()
            .read_bytes(span.offset + bucket * 8, &mut chunk[..words * 8]);
        for word in chunk[..words * 8].chunks_exact(8) {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            if word >> 32 != 0 {
                return corrupt("reserved", format!("bucket {bucket}: not zero"));
            }
            let mut at = word as u32 as usize;
            while at != 0 {
                if bucket_of_slot.get(at) != Some(&bucket) {
                    return corrupt(
                        "head",
                        format!(
                            "bucket {bucket}'s chain reaches slot {at}, not a name of this bucket"
                        ),
                    );
                }
                if visited[at / 64] & (1 << (at % 64)) != 0 {
                    return corrupt(
                        "head",
                        format!("bucket {bucket}'s chain loops at slot {at}"),
                    );
                }
                visited[at / 64] |= 1 << (at % 64);
                linked += 1;
                at = next[at] as usize;
            }
            bucket += 1;
        }
    }
    if linked != scan.valid.len() {
        return corrupt(
            "head",
            format!(
                "{} valid names are in no hash chain",
                scan.valid.len() - linked
            ),
        );
    }
    Ok(())
}

/// Derived state that disagrees with what it derives from is rewritten: the bitmap from the
/// extents, the backup superblock from the (checksummed) primary.
fn repair_derived(image: &Image, data: &Data) {
    if data.mismatches > 0 {
        let span = image.geometry().span(crate::format::layout::Zone::Bitmap);
        image.region().write_bytes(span.offset, &data.used);
        image.region().persist(span.offset, span.count);
    }
    crate::fsck::repair_backup(image);
}

/// Link counts are derived state: recompute them and repair any a crash left stale. `inodes` has
/// each inode with the count its primary pinode held at the scan.
fn fix_link_counts(image: &Image, inodes: &[(Arc<Inode>, u32)]) -> u64 {
    let mut fixed = 0;
    for (inode, on_media) in inodes {
        let data = inode.data.lock();
        let want = if inode.dir().is_some() {
            2 + data.subdirs
        } else {
            data.name_count() as u32
        };
        if *on_media != want {
            let slot = u64::from(inode.primary_slot());
            let offset = image.geometry().pinode_offset(slot) + NLINK_OFFSET;
            image.region().write(offset, &U32::new(want));
            image.region().persist(offset, 4);
            fixed += 1;
        }
    }
    fixed
}
