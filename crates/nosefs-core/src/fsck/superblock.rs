//! The superblock copies and the high-water marks in block 0.

use super::*;
use crate::format::marks::Table;

pub(super) fn superblock_problem(error: &Error) -> Problem {
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

pub(super) fn check_superblock_extras(image: &Image, report: &mut FsckReport) {
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

pub(super) fn same_static_fields(a: &Superblock, b: &Superblock) -> bool {
    use zerocopy::IntoBytes;
    let (mut a, mut b) = (a.clone(), b.clone());
    a.state = Default::default();
    b.state = Default::default();
    a.as_bytes() == b.as_bytes()
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

impl Checker<'_> {
    /// Each high-water mark inside its table and above every record in use (`format::marks`).
    pub(super) fn check_marks(&mut self) {
        if !self.geometry.high_water_marks {
            return;
        }
        let highest = highest_in_use(self.image, self.scan);
        for table in Table::ALL {
            let (mark, count) = (self.image.mark(table), self.image.table_count(table));
            let lowest = lowest_mark(self.image, table);
            if mark < lowest || mark > count {
                self.push(
                    "marks",
                    table.field(),
                    format!("{mark} is outside {lowest}..={count}"),
                );
            } else if let Some(top) = highest[table as usize].filter(|&top| top >= mark) {
                self.push(
                    "marks",
                    table.field(),
                    format!("{mark} but record {top} is in use (mount would not see it)"),
                );
            }
        }
    }
}

fn lowest_mark(image: &Image, table: Table) -> u64 {
    crate::format::marks::lowest(table, image.geometry().root_slot)
}

/// The highest record in use in each table (by [`Table`] index), from a full scan.
fn highest_in_use(image: &Image, scan: &Scan) -> [Option<u64>; 3] {
    let g = image.geometry();
    let pinodes = scan.valid.iter().map(|(slot, _)| *slot).max();
    let long_names = scan
        .valid
        .iter()
        .filter(|(_, p)| p.flags.get() & pinode::FLAG_LONG_NAME != 0)
        .map(|(_, p)| u64::from(p.long_name.get()))
        .filter(|&r| r < g.long_name_count())
        .max();
    let extents = Present::of(image)
        .records(image, Zone::ExtentTable)
        .filter(|&e| e != 0 && image.extent(e).is_valid())
        .last();
    [pinodes, long_names, extents]
}

/// Sets every mark inside its table and above every record in use: a mark that is too low is
/// raised (nothing is lost, the records are all still there), one past its table is lowered.
pub(super) fn repair_marks(image: &Image) {
    if !image.geometry().high_water_marks {
        return;
    }
    let highest = highest_in_use(image, &Scan::read(image, &Present::of(image)));
    for table in Table::ALL {
        let count = image.table_count(table);
        let mark = image.mark(table).clamp(lowest_mark(image, table), count);
        let want = highest[table as usize].map_or(mark, |top| mark.max(top + 1));
        if want != image.mark(table) {
            image
                .region()
                .store_u64_persist(table.mark_offset(), want.min(count));
        }
    }
}

/// Rewrites the backup superblock from the (valid) primary when they differ.
pub(crate) fn repair_backup(image: &Image) {
    let primary = image.superblock();
    if image
        .backup_superblock()
        .is_some_and(|b| same_static_fields(&b, primary))
    {
        return;
    }
    let mut backup = primary.clone();
    backup.state = zerocopy::little_endian::U64::new(0);
    image.region().write(BACKUP_OFFSET, &backup);
    image.region().persist(BACKUP_OFFSET, SUPERBLOCK_BYTES);
}

/// What `nosefs fsck --upgrade` did to an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upgrade {
    /// The image had every feature this build adds.
    AlreadyCurrent,
    /// `incompat` bit `MOVES` was set (docs/format.md, "Superblock").
    MovesEnabled,
    /// The image's extent table is too large for moves: nothing changed.
    MovesImpossible {
        /// Its extent slots.
        extents: u64,
    },
}

/// Adds to an image the features this build would give it at mkfs that need nothing but a flag:
/// today `MOVES`. The image must be fsck-clean and not in use. Crash-safe: the backup is written
/// and fenced before the primary, so a crash leaves either the old primary (the next mount
/// rewrites the backup from it) or a primary whose checksum a tear broke, which
/// `nosefs fsck --repair` restores from the upgraded backup.
pub fn upgrade(path: &std::path::Path) -> Result<Upgrade> {
    let report = fsck(path, FsckOptions { repair: false })?;
    if let Some(first) = report.problems.first() {
        return Err(Error::InvalidArgument(format!(
            "fsck finds {} problems (first: {first}): repair the image before upgrading it",
            report.problems.len()
        )));
    }
    let region = Region::open(
        path,
        &RegionOptions {
            access: Access::ReadWrite,
            ..RegionOptions::default()
        },
    )?;
    let image = Image::from_region(region)?;
    let mut sb = image.superblock().clone();
    if sb.incompat.get() & crate::format::superblock::INCOMPAT_MOVES != 0 {
        return Ok(Upgrade::AlreadyCurrent);
    }
    let extents = image.geometry().extent_count();
    if extents > crate::format::superblock::MAX_MOVE_EXTENTS {
        return Ok(Upgrade::MovesImpossible { extents });
    }
    sb.incompat = zerocopy::little_endian::U32::new(
        sb.incompat.get() | crate::format::superblock::INCOMPAT_MOVES,
    );
    sb.seal();
    let region = image.region();
    let mut backup = sb.clone();
    backup.state = zerocopy::little_endian::U64::new(0);
    region.write(BACKUP_OFFSET, &backup);
    region.persist(BACKUP_OFFSET, SUPERBLOCK_BYTES);
    region.write(PRIMARY_OFFSET, &sb);
    region.persist(PRIMARY_OFFSET, SUPERBLOCK_BYTES);
    Ok(Upgrade::MovesEnabled)
}
