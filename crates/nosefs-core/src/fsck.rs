//! Checking an image against every invariant of the format (docs/format.md).
//!
//! Each problem is one [`Problem`] naming the structure, the field and what is wrong. fsck reads
//! the image through a shared lock, so it refuses an image that is mounted. With
//! [`FsckOptions::repair`] it fixes what can be fixed without guessing: a damaged primary
//! superblock from the intact backup, and a bitmap that disagrees with the extents.
//!
//! Journals: a log with committed entries is legal (a crash after commit); mount replays it. fsck
//! checks that such entries are well formed and tolerates the pinodes they name being in either
//! their old or their new state, since replay is what settles them.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::format::bitmap;
use crate::format::extent::{self, Extent};
use crate::format::hash_table::bucket_of;
use crate::format::journal::{self, DirEntry};
use crate::format::layout::{Geometry, Zone};
use crate::format::pinode::{self, Pinode, INLINE_NAME_MAX, NAME_MAX};
use crate::format::superblock::{Superblock, BACKUP_OFFSET, PRIMARY_OFFSET, SUPERBLOCK_BYTES};
use crate::format::BLOCK_SIZE;
use crate::image::{read_superblock, Image};
use crate::mkfs::ROOT_INO;
use crate::namespace::fjournal;
use crate::namespace::txn::{log_intact, TAIL_COUNT_MASK};
use crate::pmem::{Access, Region, RegionOptions};

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The structure, e.g. `pinode[17]` or `superblock`.
    pub structure: String,
    /// The field, e.g. `parent`.
    pub field: &'static str,
    /// What is wrong.
    pub detail: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}: {}", self.structure, self.field, self.detail)
    }
}

/// What fsck found and did.
#[derive(Debug, Default)]
pub struct FsckReport {
    /// Problems left in the image.
    pub problems: Vec<Problem>,
    /// Problems found and corrected (with `repair`).
    pub repaired: Vec<Problem>,
    /// Facts worth knowing that are not problems (pending journal replay, unclean unmount).
    pub notes: Vec<String>,
}

impl FsckReport {
    /// The fsck(8) exit code: 0 clean, 1 errors corrected, 4 errors left.
    pub fn exit_code(&self) -> i32 {
        if !self.problems.is_empty() {
            4
        } else if !self.repaired.is_empty() {
            1
        } else {
            0
        }
    }
}

/// fsck options.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsckOptions {
    /// Fix what can be fixed safely (needs exclusive access to the image).
    pub repair: bool,
}

/// Checks the image at `path`. An `Err` is an operational failure (fsck(8) exit 8): the image
/// could not be opened, or is not a noseFS image at all.
pub fn fsck(path: &Path, options: FsckOptions) -> Result<FsckReport> {
    let access = if options.repair {
        Access::ReadWrite
    } else {
        Access::ReadOnly
    };
    let region = Region::open(
        path,
        &RegionOptions {
            access,
            ..RegionOptions::default()
        },
    )?;
    fsck_region(region, options)
}

/// Checks an already-mapped region.
pub fn fsck_region(region: Region, options: FsckOptions) -> Result<FsckReport> {
    let mut report = FsckReport::default();
    let Some(primary) = read_superblock(&region, PRIMARY_OFFSET) else {
        return Err(Error::NotAnImage(format!(
            "{} bytes is too small to hold a superblock",
            region.len()
        )));
    };
    let superblock = match Geometry::from_superblock(&primary, region.len()) {
        Ok(_) => primary,
        Err(primary_error) => {
            let backup = read_superblock(&region, BACKUP_OFFSET)
                .filter(|b| Geometry::from_superblock(b, region.len()).is_ok());
            // With no intact backup there is nothing to check against: not a noseFS image.
            let Some(backup) = backup else {
                return Err(primary_error);
            };
            let mut p = superblock_problem(&primary_error);
            if options.repair {
                restore_primary_superblock(&region)?;
                report.repaired.push(p);
            } else {
                p.detail += " (the backup superblock is intact: fsck --repair restores it)";
                report.problems.push(p);
            }
            backup
        }
    };
    let image = Image::with_superblock(region, superblock)?;
    check_image(&image, options, &mut report);
    Ok(report)
}

fn superblock_problem(error: &Error) -> Problem {
    let (field, detail) = match error {
        Error::Corrupt { field, detail, .. } => (*field, detail.clone()),
        Error::NotAnImage(detail) => ("magic", detail.clone()),
        Error::Unsupported(detail) => ("version", detail.clone()),
        other => ("header", other.to_string()),
    };
    Problem {
        structure: "superblock".into(),
        field,
        detail,
    }
}

fn check_image(image: &Image, options: FsckOptions, report: &mut FsckReport) {
    let sb = image.superblock();
    if !sb.is_clean() {
        report
            .notes
            .push("image was not unmounted cleanly; mount will run recovery".into());
    }
    check_superblock_extras(image, report);
    let pending = check_journals(image, report);
    let scan = Scan::read(image);
    let mut checker = Checker {
        image,
        geometry: image.geometry(),
        scan: &scan,
        pending: &pending,
        report,
    };
    checker.check_chains();
    checker.check_pinodes();
    checker.check_extents();
    let computed = checker.referenced_blocks();
    check_bitmap(image, &computed, &pending, options, report);
}

fn problem(
    structure: impl Into<String>,
    field: &'static str,
    detail: impl Into<String>,
) -> Problem {
    Problem {
        structure: structure.into(),
        field,
        detail: detail.into(),
    }
}

fn check_superblock_extras(image: &Image, report: &mut FsckReport) {
    let sb = image.superblock();
    if sb.reserved.iter().chain(&sb.reserved_tail).any(|&b| b != 0) {
        report.problems.push(problem(
            "superblock",
            "reserved",
            "reserved bytes are not zero",
        ));
    }
    match image.backup_superblock() {
        Some(backup) if same_static_fields(&backup, sb) => {}
        Some(_) => report.problems.push(problem(
            "backup superblock",
            "header",
            "differs from the primary superblock",
        )),
        None => {}
    }
}

fn same_static_fields(a: &Superblock, b: &Superblock) -> bool {
    use zerocopy::IntoBytes;
    let (mut a, mut b) = (a.clone(), b.clone());
    a.state = Default::default();
    b.state = Default::default();
    a.as_bytes() == b.as_bytes()
}

/// Slots named by committed directory-log entries: replay settles them, so fsck accepts them in
/// either state.
#[derive(Debug, Default)]
struct Pending {
    dir_slots: HashSet<u64>,
    file_extents: HashSet<u64>,
    /// Inodes with a committed file log: their lists are mid-change until replay.
    files: HashSet<u64>,
    /// Blocks of extents that a committed INSERT_DATA or REMOVE_DATA entry will validate or free.
    blocks: HashSet<u64>,
}

fn check_journals(image: &Image, report: &mut FsckReport) -> Pending {
    let g = image.geometry();
    let mut pending = Pending::default();
    for index in 0..g.dir_log_count() {
        let log = image.dir_log(index);
        if log.tail.get() == 0 {
            continue;
        }
        let tail = log.tail.get() & TAIL_COUNT_MASK;
        let name = format!("dir_log[{index}]");
        if index == 0 || tail == 0 || tail > journal::DIR_LOG_ENTRIES as u64 {
            let why = if index == 0 {
                "log 0 is reserved"
            } else {
                "not 1 to 63 entries"
            };
            report
                .problems
                .push(problem(name, "tail", format!("{tail}: {why}")));
            continue;
        }
        if log_intact(image, index) == Some(false) {
            report.notes.push(format!(
                "{name} holds a commit torn by a crash (checksum mismatch); mount discards it"
            ));
            continue;
        }
        report.notes.push(format!(
            "{name} holds {tail} committed entries; mount replays them"
        ));
        for (i, word) in log.entries[..tail as usize].iter().enumerate() {
            match DirEntry::decode(word.get()) {
                Ok(e) if u64::from(e.slot) == 0 || u64::from(e.slot) >= g.pinode_count() => {
                    report.problems.push(problem(
                        &name,
                        "entries",
                        format!("entry {i}: slot {} out of range", e.slot),
                    ))
                }
                Ok(e) => {
                    pending.dir_slots.insert(u64::from(e.slot));
                    // Data moving in or out, or a primary pinode changing slot (rename, chmod,
                    // orphaning): until replay its extents may have no valid owner.
                    pend_data(image, u64::from(e.slot), &mut pending);
                }
                Err(why) => {
                    report
                        .problems
                        .push(problem(&name, "entries", format!("entry {i}: {why}")))
                }
            }
        }
    }
    for index in 0..g.file_log_count() {
        check_file_log(image, index, &mut pending, report);
    }
    pending
}

/// The extents and blocks of a pinode named by a committed data entry: replay settles them.
fn pend_data(image: &Image, slot: u64, pending: &mut Pending) {
    let g = image.geometry();
    let mut eno = u64::from(image.pinode(slot).extent_head.get());
    while eno != 0 && eno < g.extent_count() && pending.file_extents.insert(eno) {
        let e = image.extent(eno);
        let start = u64::from(e.start_block.get());
        pending
            .blocks
            .extend(start..start + u64::from(e.block_count.get()));
        eno = u64::from(e.next.get());
    }
}

fn check_file_log(image: &Image, index: u64, pending: &mut Pending, report: &mut FsckReport) {
    let log = image.file_log(index);
    if log.tail.get() == 0 {
        return;
    }
    let name = format!("file_log[{index}]");
    if index == 0 {
        report
            .problems
            .push(problem(name, "tail", "log 0 is reserved"));
        return;
    }
    if fjournal::log_intact(image, index) != Some(true) {
        report.notes.push(format!(
            "{name} holds a commit torn by a crash (checksum mismatch); mount discards it"
        ));
        return;
    }
    if let Err(why) = fjournal::validate(image, index) {
        report.problems.push(problem(&name, "entries", why));
        return;
    }
    let count = log.tail.get() & TAIL_COUNT_MASK;
    report.notes.push(format!(
        "{name} holds {count} committed entries for inode {}; mount replays them",
        log.ino.get()
    ));
    // Until replay, the file's list, its new and old extents and their blocks are in between.
    pending.files.insert(log.ino.get());
    pend_data(image, u64::from(log.slot.get()), pending);
    let entries = fjournal::read_entries(image, index, count).expect("validated");
    for e in entries {
        for eno in [e.old, e.new].into_iter().filter(|&e| e != 0) {
            pending.file_extents.insert(u64::from(eno));
            let x = image.extent(u64::from(eno));
            let start = u64::from(x.start_block.get());
            pending
                .blocks
                .extend(start..start + u64::from(x.block_count.get()));
        }
    }
}

/// What the scan of the pinode table found.
#[derive(Debug, Default)]
struct Scan {
    /// Valid pinodes by slot.
    valid: Vec<(u64, Pinode)>,
    /// Slot of each valid pinode, by slot index (`u32::MAX`: not valid).
    index_of_slot: HashMap<u64, usize>,
    /// For each ino, the slots of its valid primary pinodes.
    primaries: HashMap<u64, Vec<u64>>,
}

impl Scan {
    fn read(image: &Image) -> Scan {
        let mut scan = Scan::default();
        for slot in 0..image.geometry().pinode_count() {
            let p = image.pinode(slot);
            if !p.is_valid() {
                continue;
            }
            if p.is_primary() {
                scan.primaries.entry(p.ino.get()).or_default().push(slot);
            }
            scan.index_of_slot.insert(slot, scan.valid.len());
            scan.valid.push((slot, p));
        }
        scan
    }

    fn pinode(&self, slot: u64) -> Option<&Pinode> {
        self.index_of_slot.get(&slot).map(|&i| &self.valid[i].1)
    }

    /// The primary pinode of `ino`, when there is exactly one.
    fn primary(&self, ino: u64) -> Option<&Pinode> {
        match self.primaries.get(&ino).map(Vec::as_slice) {
            Some([slot]) => self.pinode(*slot),
            _ => None,
        }
    }
}

struct Checker<'a> {
    image: &'a Image,
    geometry: &'a Geometry,
    scan: &'a Scan,
    pending: &'a Pending,
    report: &'a mut FsckReport,
}

impl Checker<'_> {
    fn push(
        &mut self,
        structure: impl Into<String>,
        field: &'static str,
        detail: impl Into<String>,
    ) {
        self.report.problems.push(problem(structure, field, detail));
    }

    /// The full name of a valid pinode, or why it cannot be read.
    fn full_name(&self, p: &Pinode) -> Result<Vec<u8>, String> {
        if p.flags.get() & pinode::FLAG_LONG_NAME == 0 {
            return Ok(p.inline_name().to_vec());
        }
        if usize::from(p.name_len) <= INLINE_NAME_MAX {
            return Err(format!("LONG_NAME set on a {}-byte name", p.name_len));
        }
        let index = u64::from(p.long_name.get());
        if index == 0 || index >= self.geometry.long_name_count() {
            return Err(format!("long-name record {index} out of range"));
        }
        let record = self.image.long_name(index);
        if record.name_len != p.name_len {
            return Err(format!(
                "long-name record {index} holds {} bytes, pinode says {}",
                record.name_len, p.name_len
            ));
        }
        if record.name()[..INLINE_NAME_MAX] != p.name[..] {
            return Err(format!(
                "long-name record {index} does not match the inline prefix"
            ));
        }
        Ok(record.name().to_vec())
    }

    /// Every bucket's chain: in range, valid, hashed to its bucket, acyclic, each slot once.
    fn check_chains(&mut self) {
        let g = self.geometry;
        let mut in_chain: HashSet<u64> = HashSet::new();
        for bucket in 0..g.bucket_count() {
            let b = self.image.bucket(bucket);
            if b.reserved.get() != 0 {
                self.push(format!("bucket[{bucket}]"), "reserved", "not zero");
            }
            let mut slot = u64::from(b.head.get());
            let mut field = "head";
            let mut structure = format!("bucket[{bucket}]");
            while slot != 0 {
                if slot >= g.pinode_count() {
                    self.push(&structure, field, format!("slot {slot} out of range"));
                    break;
                }
                if !in_chain.insert(slot) {
                    self.push(
                        &structure,
                        field,
                        format!("slot {slot} is already in a chain (cycle or shared tail)"),
                    );
                    break;
                }
                let p = self.image.pinode(slot);
                self.check_chain_member(bucket, slot, &p, &structure, field);
                structure = format!("pinode[{slot}]");
                field = "hash_next";
                slot = u64::from(p.hash_next.get());
            }
        }
        for (slot, p) in &self.scan.valid {
            let orphan = p.flags.get() & pinode::FLAG_ORPHAN != 0;
            if !orphan && !in_chain.contains(slot) && !self.pending.dir_slots.contains(slot) {
                self.push(
                    format!("pinode[{slot}]"),
                    "hash_next",
                    "valid but in no hash chain",
                );
            }
            if orphan && in_chain.contains(slot) {
                self.push(
                    format!("pinode[{slot}]"),
                    "flags",
                    "orphan is still in a hash chain",
                );
            }
        }
    }

    fn check_chain_member(
        &mut self,
        bucket: u64,
        slot: u64,
        p: &Pinode,
        structure: &str,
        field: &'static str,
    ) {
        if !p.is_valid() {
            if !self.pending.dir_slots.contains(&slot) {
                self.push(structure, field, format!("links to invalid pinode {slot}"));
            }
            return;
        }
        let Ok(name) = self.full_name(p) else {
            return; // reported by check_pinodes
        };
        let g = self.geometry;
        let want = bucket_of(g.hash_seed, g.bucket_count(), p.parent.get(), &name);
        if want != bucket {
            self.push(
                format!("pinode[{slot}]"),
                "name",
                format!("hashes to bucket {want} but is chained in bucket {bucket}"),
            );
        }
    }

    /// Each valid pinode on its own and against its parent, names and links.
    fn check_pinodes(&mut self) {
        let mut names: HashMap<(u64, Vec<u8>), u64> = HashMap::new();
        let mut long_names: HashMap<u64, u64> = HashMap::new();
        let mut names_per_ino: HashMap<u64, u32> = HashMap::new();
        let mut subdirs: HashMap<u64, u32> = HashMap::new();
        let valid = &self.scan.valid;
        for (slot, p) in valid {
            let here = format!("pinode[{slot}]");
            self.check_pinode_fields(*slot, p);
            if p.flags.get() & pinode::FLAG_ORPHAN == 0 {
                *names_per_ino.entry(p.ino.get()).or_default() += 1;
            }
            if p.flags.get() & pinode::FLAG_LONG_NAME != 0 {
                if let Some(other) = long_names.insert(u64::from(p.long_name.get()), *slot) {
                    self.push(
                        &here,
                        "long_name",
                        format!(
                            "record {} is also used by pinode {other}",
                            p.long_name.get()
                        ),
                    );
                }
            }
            if p.ino.get() == ROOT_INO || p.flags.get() & pinode::FLAG_ORPHAN != 0 {
                continue; // an orphan keeps its old name but holds no place in the tree
            }
            match self.full_name(p) {
                Ok(name) => {
                    if let Some(other) = names.insert((p.parent.get(), name), *slot) {
                        self.push(
                            &here,
                            "name",
                            format!("same parent and name as pinode {other}"),
                        );
                    }
                }
                Err(why) => self.push(&here, "long_name", why),
            }
            if p.is_dir() && p.flags.get() & pinode::FLAG_ORPHAN == 0 {
                *subdirs.entry(p.parent.get()).or_default() += 1;
            }
        }
        self.check_link_counts(&names_per_ino, &subdirs);
        self.check_no_cycles();
    }

    fn check_pinode_fields(&mut self, slot: u64, p: &Pinode) {
        let here = format!("pinode[{slot}]");
        let flags = p.flags.get();
        if flags & !pinode::KNOWN_FLAGS != 0 {
            self.push(
                &here,
                "flags",
                format!("unknown bits {:#x}", flags & !pinode::KNOWN_FLAGS),
            );
        }
        if slot == 0 {
            self.push(&here, "flags", "slot 0 is reserved but marked valid");
        }
        if p.ino.get() == 0 {
            self.push(&here, "ino", "0 is not an inode number");
        }
        if !pinode::is_valid_file_type(p.mode.get()) {
            self.push(
                &here,
                "mode",
                format!("{:#o} has no valid file type", p.mode.get()),
            );
        }
        self.check_name(slot, p);
        self.check_identity(slot, p);
    }

    fn check_name(&mut self, slot: u64, p: &Pinode) {
        let here = format!("pinode[{slot}]");
        let len = usize::from(p.name_len);
        let is_root = p.ino.get() == ROOT_INO;
        if is_root != (len == 0) {
            self.push(
                &here,
                "name_len",
                format!("{len}: only the root has an empty name"),
            );
        }
        let long = p.flags.get() & pinode::FLAG_LONG_NAME != 0;
        if long != (len > INLINE_NAME_MAX) {
            self.push(
                &here,
                "flags",
                format!("LONG_NAME flag disagrees with name_len {len}"),
            );
        }
        debug_assert!(len <= NAME_MAX);
        let inline = p.inline_name();
        if p.name[inline.len()..].iter().any(|&b| b != 0) {
            self.push(&here, "name", "bytes past the name are not zero");
        }
        if let Ok(name) = self.full_name(p) {
            if name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
                self.push(
                    &here,
                    "name",
                    format!(
                        "{:?} is not a valid file name",
                        String::from_utf8_lossy(&name)
                    ),
                );
            }
        }
    }

    /// Root, primary and parent relations of one pinode.
    fn check_identity(&mut self, slot: u64, p: &Pinode) {
        let here = format!("pinode[{slot}]");
        let ino = p.ino.get();
        match self.scan.primaries.get(&ino).map(Vec::len).unwrap_or(0) {
            1 => {}
            0 => self.push(&here, "ino", format!("inode {ino} has no primary pinode")),
            n if p.is_primary() => self.push(
                &here,
                "flags",
                format!("inode {ino} has {n} primary pinodes"),
            ),
            _ => {}
        }
        if let Some(primary) = self.scan.primary(ino) {
            if primary.mode.get() & pinode::S_IFMT != p.mode.get() & pinode::S_IFMT {
                self.push(
                    &here,
                    "mode",
                    format!("file type differs from its primary pinode (inode {ino})"),
                );
            }
        }
        if p.flags.get() & pinode::FLAG_ORPHAN != 0 {
            // Nameless: its old parent may be gone; mount frees it.
            return;
        }
        if ino == ROOT_INO {
            if p.parent.get() != 0 || !p.is_dir() || !p.is_primary() {
                self.push(
                    &here,
                    "parent",
                    "the root must be a primary directory with parent 0",
                );
            }
            return;
        }
        match self.scan.primary(p.parent.get()) {
            Some(parent) if parent.is_dir() => {}
            Some(_) => self.push(
                &here,
                "parent",
                format!("inode {} is not a directory", p.parent.get()),
            ),
            None => self.push(
                &here,
                "parent",
                format!("inode {} does not exist", p.parent.get()),
            ),
        }
        if p.is_dir() && !p.is_primary() {
            self.push(
                &here,
                "flags",
                "a directory cannot have a second name (hard link)",
            );
        }
    }

    fn check_link_counts(
        &mut self,
        names_per_ino: &HashMap<u64, u32>,
        subdirs: &HashMap<u64, u32>,
    ) {
        for (ino, slots) in &self.scan.primaries {
            let [slot] = slots.as_slice() else { continue };
            let Some(p) = self.scan.pinode(*slot) else {
                continue;
            };
            if self.pending.dir_slots.contains(slot) {
                continue;
            }
            let want = if p.is_dir() {
                2 + subdirs.get(ino).copied().unwrap_or(0)
            } else {
                names_per_ino.get(ino).copied().unwrap_or(0)
            };
            let orphan = p.flags.get() & pinode::FLAG_ORPHAN != 0;
            if !orphan && p.nlink.get() != want {
                self.push(
                    format!("pinode[{slot}]"),
                    "nlink",
                    format!("{} but {want} expected", p.nlink.get()),
                );
            }
        }
    }

    /// Following parents from any directory reaches the root.
    fn check_no_cycles(&mut self) {
        let root_ino = Some(ROOT_INO);
        let dirs = self
            .scan
            .valid
            .iter()
            .filter(|(_, p)| p.is_dir() && p.is_primary());
        let dir_count = dirs.clone().count();
        let mut bad = Vec::new();
        for (slot, p) in dirs {
            let mut ino = p.ino.get();
            let mut steps = 0;
            while Some(ino) != root_ino && steps <= dir_count {
                match self.scan.primary(ino) {
                    Some(dir) => ino = dir.parent.get(),
                    None => break, // a missing parent is reported by check_identity
                }
                steps += 1;
            }
            if steps > dir_count {
                bad.push(*slot);
            }
        }
        for slot in bad {
            self.push(
                format!("pinode[{slot}]"),
                "parent",
                "parent chain loops without reaching the root",
            );
        }
    }

    /// Every valid extent, and each file's extent list.
    fn check_extents(&mut self) {
        let g = self.geometry;
        let mut reached: HashSet<u64> = HashSet::new();
        for (slot, p) in &self.scan.valid {
            if self.pending.files.contains(&p.ino.get()) {
                let mut eno = u64::from(p.extent_head.get());
                while eno != 0 && eno < g.extent_count() && reached.insert(eno) {
                    eno = u64::from(self.image.extent(eno).next.get());
                }
            } else if p.is_primary() && p.extent_head.get() != 0 {
                self.walk_extent_list(*slot, p, &mut reached);
            }
        }
        for eno in 1..g.extent_count() {
            let e = self.image.extent(eno);
            if e.is_valid() && !reached.contains(&eno) && !self.pending.file_extents.contains(&eno)
            {
                self.check_extent_record(eno, &e);
                self.push(
                    format!("extent[{eno}]"),
                    "ino",
                    format!("valid but not in the list of inode {}", e.ino.get()),
                );
            }
        }
        self.check_data_disjoint();
        if self.image.extent(0).is_valid() {
            self.push(
                "extent[0]",
                "flags",
                "extent 0 is reserved but marked valid",
            );
        }
    }

    /// No byte of the data zone belongs to two valid extents (blocks may be shared, bytes not).
    /// Extents a pending commit replaces or adds are in between until replay, so they are left
    /// out.
    fn check_data_disjoint(&mut self) {
        let g = self.geometry;
        let mut ranges: Vec<(u64, u64, u64)> = (1..g.extent_count())
            .filter(|eno| !self.pending.file_extents.contains(eno))
            .filter_map(|eno| {
                let e = self.image.extent(eno);
                let addr =
                    u64::from(e.start_block.get()) * BLOCK_SIZE + u64::from(e.block_offset.get());
                e.is_valid().then(|| (addr, u64::from(e.length.get()), eno))
            })
            .collect();
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            let ((a, len, first), (b, _, second)) = (pair[0], pair[1]);
            if a + len > b {
                self.push(
                    format!("extent[{second}]"),
                    "start_block",
                    format!("its data overlaps the data of extent {first}"),
                );
            }
        }
    }

    fn walk_extent_list(&mut self, slot: u64, p: &Pinode, reached: &mut HashSet<u64>) {
        let g = self.geometry;
        let here = format!("pinode[{slot}]");
        let ft = p.mode.get() & pinode::S_IFMT;
        if ft != pinode::S_IFREG && ft != pinode::S_IFLNK {
            self.push(
                &here,
                "extent_head",
                "only regular files and symlinks hold data",
            );
        }
        let (mut prev, mut eno, mut end) = (0u64, u64::from(p.extent_head.get()), 0u64);
        while eno != 0 {
            let at = format!("extent[{eno}]");
            if eno >= g.extent_count() || !reached.insert(eno) {
                self.push(
                    if prev == 0 {
                        here.clone()
                    } else {
                        format!("extent[{prev}]")
                    },
                    "next",
                    format!("extent {eno} out of range or already in a list"),
                );
                return;
            }
            let e = self.image.extent(eno);
            self.check_extent_record(eno, &e);
            if !e.is_valid() && !self.pending.file_extents.contains(&eno) {
                self.push(&at, "flags", "in a file's list but not valid");
            }
            if e.ino.get() != p.ino.get() {
                self.push(
                    &at,
                    "ino",
                    format!("{} but listed by inode {}", e.ino.get(), p.ino.get()),
                );
            }
            if u64::from(e.prev.get()) != prev {
                self.push(
                    &at,
                    "prev",
                    format!("{} but follows extent {prev}", e.prev.get()),
                );
            }
            if e.file_offset.get() < end {
                self.push(
                    &at,
                    "file_offset",
                    format!(
                        "{} overlaps the previous extent ending at {end}",
                        e.file_offset.get()
                    ),
                );
            }
            end = e.file_end().unwrap_or(u64::MAX);
            (prev, eno) = (eno, u64::from(e.next.get()));
        }
        if end > p.size.get() {
            self.push(
                &here,
                "size",
                format!("{} but extents reach {end}", p.size.get()),
            );
        }
    }

    fn check_extent_record(&mut self, eno: u64, e: &Extent) {
        let at = format!("extent[{eno}]");
        let flags = e.flags.get();
        if flags & !extent::KNOWN_FLAGS != 0 {
            self.push(&at, "flags", format!("unknown bits {flags:#x}"));
        }
        let (offset, length) = (u64::from(e.block_offset.get()), u64::from(e.length.get()));
        let blocks = u64::from(e.block_count.get());
        if length == 0 {
            self.push(&at, "length", "0: an extent holds at least one byte");
        }
        if offset >= BLOCK_SIZE {
            self.push(
                &at,
                "block_offset",
                format!("{offset} is not inside a block"),
            );
        }
        if blocks != Extent::blocks_needed(offset, length) {
            self.push(
                &at,
                "block_count",
                format!(
                    "{blocks} but {length} bytes at offset {offset} need {}",
                    Extent::blocks_needed(offset, length)
                ),
            );
        }
        let start = u64::from(e.start_block.get());
        if start + blocks > self.geometry.data_block_count() {
            self.push(
                &at,
                "start_block",
                format!(
                    "run {start}+{blocks} passes the data zone ({} blocks)",
                    self.geometry.data_block_count()
                ),
            );
        }
        if e.file_end().is_none() {
            self.push(&at, "file_offset", "offset plus length overflows");
        }
    }

    /// The blocks covered by valid extents that lie inside the data zone.
    fn referenced_blocks(&self) -> Vec<u8> {
        let g = self.geometry;
        let mut computed = vec![0u8; g.bitmap_bytes() as usize];
        for eno in 1..g.extent_count() {
            let e = self.image.extent(eno);
            if !e.is_valid() {
                continue;
            }
            let start = u64::from(e.start_block.get());
            let end = (start + u64::from(e.block_count.get())).min(g.data_block_count());
            for block in start..end {
                bitmap::set(&mut computed, block, true);
            }
        }
        computed
    }
}

fn check_bitmap(
    image: &Image,
    computed: &[u8],
    pending: &Pending,
    options: FsckOptions,
    report: &mut FsckReport,
) {
    let g = image.geometry();
    let on_media = image.bitmap();
    let mut wrong = Vec::new();
    for block in 0..g.bitmap_bytes() * 8 {
        if bitmap::is_set(&on_media, block) != bitmap::is_set(computed, block)
            && !pending.blocks.contains(&block)
        {
            wrong.push(block);
        }
    }
    if wrong.is_empty() {
        return;
    }
    let shown: Vec<String> = wrong.iter().take(8).map(u64::to_string).collect();
    let more = if wrong.len() > 8 {
        format!(" and {} more", wrong.len() - 8)
    } else {
        String::new()
    };
    let p = problem(
        "bitmap",
        "bits",
        format!(
            "{} blocks disagree with the extents (blocks {}{more})",
            wrong.len(),
            shown.join(", ")
        ),
    );
    if options.repair && !g.read_only_features {
        let span = g.span(Zone::Bitmap);
        image.region().write_bytes(span.offset, computed);
        image.region().persist(span.offset, span.count);
        report.repaired.push(p);
    } else {
        report.problems.push(p);
    }
}

/// Restores the primary superblock from the backup, if the backup is intact. Returns what it did.
pub fn restore_primary_superblock(region: &Region) -> Result<Problem> {
    let backup = read_superblock(region, BACKUP_OFFSET)
        .ok_or_else(|| Error::NotAnImage("too small to hold a backup superblock".into()))?;
    Geometry::from_superblock(&backup, region.len()).map_err(|e| {
        Error::NotAnImage(format!(
            "the primary superblock is damaged and so is the backup ({e})"
        ))
    })?;
    let mut restored = backup;
    restored.state =
        zerocopy::little_endian::U64::new(crate::format::superblock::state_word(false, 0));
    region.write(PRIMARY_OFFSET, &restored);
    region.persist(PRIMARY_OFFSET, SUPERBLOCK_BYTES);
    Ok(problem(
        "superblock",
        "header",
        "primary superblock restored from the backup",
    ))
}
