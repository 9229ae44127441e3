//! Checking an image against every invariant of the format (docs/format.md).
//!
//! Each problem is one [`Problem`] naming the structure, the field and what is wrong. fsck reads
//! the image through a shared lock, so it refuses an image that is mounted.
//!
//! Journals: a log with committed entries is legal (a crash after commit); mount replays it. fsck
//! checks that such entries are well formed and tolerates the pinodes they name being in either
//! their old or their new state, since replay is what settles them.
//!
//! Repair ([`FsckOptions::repair`], as `e2fsck -y`): when the check finds problems, the metadata
//! is rebuilt from what can be salvaged (`repair`), and the image is checked again. Each record
//! is fixed where the damage leaves one answer (a flipped name length is recomputed from the
//! name, a flipped inode number is found one bit away from the inode that lost its primary), and
//! otherwise cleared; whatever loses its name goes to `/lost+found` as `#<ino>`; hash chains, link
//! counts, marks and the bitmap are then recomputed from the records. What is left after the
//! second check is reported with the reason the repair could not fix it.
//!
//! The check and the repair of each structure live side by side, one module per structure:
//! `superblock` (both copies and the high-water marks), `logs` (the journals), `pinodes`
//! (records, names, the tree and link counts), `chains` (the NVM hash table), `extents` and
//! `blocks` (the bitmap).

mod blocks;
mod chains;
mod extents;
mod logs;
mod pinodes;
mod present;
mod repair;
mod superblock;

use blocks::check_bitmap;
use logs::{check_journals, Pending};
use present::Present;
pub(crate) use superblock::repair_backup;
use superblock::{check_superblock_extras, superblock_problem};
pub use superblock::{restore_primary_superblock, upgrade, Upgrade};

use std::fmt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::file::journal as fjournal;
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
    check_region(region, options).map(|(report, _)| report)
}

/// A repaired copy of the image at `path`, in this process's memory only: the repair's stores
/// land in a private copy-on-write mapping and the image itself is never written. What a mount
/// with `errors=ro` serves when the image is damaged.
pub fn repaired_private_copy(path: &Path, fd_floor: Option<i32>) -> Result<(FsckReport, Image)> {
    let region = Region::open(
        path,
        &RegionOptions {
            access: Access::PrivateCopy,
            fd_floor,
            ..RegionOptions::default()
        },
    )?;
    check_region(region, FsckOptions { repair: true })
}

/// Checks (and with `options.repair`, repairs) a region, and gives back the image.
fn check_region(region: Region, options: FsckOptions) -> Result<(FsckReport, Image)> {
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
    let found = check_image(&image, &mut report.notes);
    if !options.repair || found.is_empty() {
        report.problems.extend(found);
        return Ok((report, image));
    }
    if image.geometry().read_only_features {
        report.problems.extend(found);
        report.notes.push(
            "not repaired: the image uses read-only-compatible features this build does not know"
                .into(),
        );
        return Ok((report, image));
    }
    repair::run(&image, &found, &mut report.notes);
    let mut notes = Vec::new();
    let left = check_image(&image, &mut notes);
    let left_text: HashSet<String> = left.iter().map(Problem::to_string).collect();
    report.repaired.extend(
        found
            .into_iter()
            .filter(|p| !left_text.contains(&p.to_string())),
    );
    report.problems.extend(left.into_iter().map(|mut p| {
        p.detail += " (left after repair: no rule of the repair settles this damage)";
        p
    }));
    report.notes.extend(notes);
    Ok((report, image))
}

/// Every problem of the image; facts that are not problems go to `notes`.
fn check_image(image: &Image, notes: &mut Vec<String>) -> Vec<Problem> {
    let mut report = FsckReport::default();
    let sb = image.superblock();
    if !sb.is_clean() {
        report
            .notes
            .push("image was not unmounted cleanly; mount will run recovery".into());
    }
    let present = Present::of(image);
    check_superblock_extras(image, &mut report);
    let pending = check_journals(image, &present, &mut report);
    let scan = Scan::read(image, &present);
    let mut checker = Checker {
        image,
        geometry: image.geometry(),
        scan: &scan,
        pending: &pending,
        present: &present,
        report: &mut report,
    };
    checker.check_marks();
    checker.check_chains();
    checker.check_pinodes();
    checker.check_extents();
    let computed = blocks::referenced_blocks(image, &present);
    check_bitmap(image, &computed, &pending, &present, &mut report);
    notes.append(&mut report.notes);
    report.problems
}

/// Hash maps keyed by slots, inode numbers and names, with a multiplicative hash: fsck of 10^6
/// names makes millions of inserts, and SipHash's resistance to chosen keys buys nothing against
/// an image (a crafted one slows fsck down, it cannot make it wrong).
type HashMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<FastHasher>>;
/// See [`HashMap`].
type HashSet<K> = std::collections::HashSet<K, std::hash::BuildHasherDefault<FastHasher>>;

/// FxHash's mix (one rotate, xor and multiply per word), then MurmurHash3's finaliser: a
/// product's low bits depend only on its inputs' low bits, and the table indexes by the low bits,
/// so without the finaliser names that differ only in their high bytes ("f0000001", "f0000002")
/// all land in one bucket.
#[derive(Debug, Default, Clone, Copy)]
struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.write_u64(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        for &b in words.remainder() {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// Where a problem is ("pinode[7]"), formatted only when one is reported: fsck labels every
/// record it checks, and most records have no problem.
#[derive(Debug, Clone, Copy)]
struct Label(&'static str, u64);

impl From<Label> for String {
    fn from(label: Label) -> String {
        format!("{}[{}]", label.0, label.1)
    }
}

impl From<&Label> for String {
    fn from(label: &Label) -> String {
        String::from(*label)
    }
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

/// What the scan of the pinode table found.
#[derive(Debug, Default)]
struct Scan {
    /// Valid pinodes by slot.
    valid: Vec<(u64, Pinode)>,
    /// Slot of each valid pinode, by slot index (`u32::MAX`: not valid).
    /// Indexes into `valid` by slot (`u32::MAX`: not valid): a vector, not a map, because
    /// fsck looks a slot up for every name and every chain link.
    index_of_slot: Vec<u32>,
    /// For each ino, the slots of its valid primary pinodes.
    /// Ordered, not hashed: inode numbers grow with the slots, so the scan's lookups in slot
    /// order walk the tree's last path, where a hash map would miss the cache on each.
    primaries: std::collections::BTreeMap<u64, Vec<u64>>,
}

impl Scan {
    /// The valid pinodes, reading only the slots on data pages (`present`).
    fn read(image: &Image, present: &Present) -> Scan {
        let mut scan = Scan {
            index_of_slot: vec![u32::MAX; image.geometry().pinode_count() as usize],
            ..Scan::default()
        };
        for slot in present.records(image, Zone::PinodeTable) {
            let p = image.pinode(slot);
            if !p.is_valid() {
                continue;
            }
            if p.is_primary() {
                scan.primaries.entry(p.ino.get()).or_default().push(slot);
            }
            scan.index_of_slot[slot as usize] = scan.valid.len() as u32;
            scan.valid.push((slot, p));
        }
        scan
    }

    fn pinode(&self, slot: u64) -> Option<&Pinode> {
        let index = *self.index_of_slot.get(usize::try_from(slot).ok()?)?;
        (index != u32::MAX).then(|| &self.valid[index as usize].1)
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
    present: &'a Present,
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
}
