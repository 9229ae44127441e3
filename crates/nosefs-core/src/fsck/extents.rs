//! Extents: each record, each file's list, and that no data byte is held twice.

use super::*;

impl Checker<'_> {
    pub(super) fn check_extents(&mut self) {
        let g = self.geometry;
        let mut reached: HashSet<u64> = HashSet::default();
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
        let on_data_pages = self.present.records(self.image, Zone::ExtentTable);
        for eno in on_data_pages.filter(|&eno| eno != 0) {
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
        // Read only where its page holds data (a hole reads as zeros: not valid).
        let zero_present = (self.present).records(self.image, Zone::ExtentTable).next() == Some(0);
        if zero_present && self.image.extent(0).is_valid() {
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
    pub(super) fn check_data_disjoint(&mut self) {
        let mut ranges: Vec<(u64, u64, u64)> = (self.present)
            .records(self.image, Zone::ExtentTable)
            .filter(|&eno| eno != 0 && !self.pending.file_extents.contains(&eno))
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

    pub(super) fn walk_extent_list(&mut self, slot: u64, p: &Pinode, reached: &mut HashSet<u64>) {
        let g = self.geometry;
        let here = Label("pinode", slot);
        let ft = p.mode.get() & pinode::S_IFMT;
        if ft != pinode::S_IFREG && ft != pinode::S_IFLNK {
            self.push(
                here,
                "extent_head",
                "only regular files and symlinks hold data",
            );
        }
        let (mut prev, mut eno, mut end) = (0u64, u64::from(p.extent_head.get()), 0u64);
        while eno != 0 {
            let at = Label("extent", eno);
            if eno >= g.extent_count() || !reached.insert(eno) {
                self.push(
                    if prev == 0 {
                        String::from(here)
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
                self.push(at, "flags", "in a file's list but not valid");
            }
            if e.ino.get() != p.ino.get() {
                self.push(
                    at,
                    "ino",
                    format!("{} but listed by inode {}", e.ino.get(), p.ino.get()),
                );
            }
            if u64::from(e.prev.get()) != prev {
                self.push(
                    at,
                    "prev",
                    format!("{} but follows extent {prev}", e.prev.get()),
                );
            }
            if e.file_offset.get() < end {
                self.push(
                    at,
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
                here,
                "size",
                format!("{} but extents reach {end}", p.size.get()),
            );
        }
    }

    pub(super) fn check_extent_record(&mut self, eno: u64, e: &Extent) {
        let at = Label("extent", eno);
        let flags = e.flags.get();
        if flags & !extent::KNOWN_FLAGS != 0 {
            self.push(at, "flags", format!("unknown bits {flags:#x}"));
        }
        let (offset, length) = (u64::from(e.block_offset.get()), u64::from(e.length.get()));
        let blocks = u64::from(e.block_count.get());
        if length == 0 {
            self.push(at, "length", "0: an extent holds at least one byte");
        }
        if offset >= BLOCK_SIZE {
            self.push(
                at,
                "block_offset",
                format!("{offset} is not inside a block"),
            );
        }
        if blocks != Extent::blocks_needed(offset, length) {
            self.push(
                at,
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
                at,
                "start_block",
                format!(
                    "run {start}+{blocks} passes the data zone ({} blocks)",
                    self.geometry.data_block_count()
                ),
            );
        }
        if e.file_end().is_none() {
            self.push(at, "file_offset", "offset plus length overflows");
        }
    }
}

// ---- Repair ----

use super::repair::Salvage;
use std::collections::BTreeMap;
use zerocopy::little_endian::U32;

/// Data-zone byte ranges already held by an extent: `start → end`.
#[derive(Default)]
struct Claimed(BTreeMap<u64, u64>);

impl Claimed {
    /// Claims `[addr, addr + len)` unless some of it is held already.
    fn try_claim(&mut self, addr: u64, len: u64) -> bool {
        let end = addr + len;
        if let Some((_, &before_end)) = self.0.range(..end).next_back() {
            if before_end > addr {
                return false;
            }
        }
        self.0.insert(addr, end);
        true
    }
}

/// Cuts each file's extent list at its first unusable extent (out of range, invalid, another
/// file's, overlapping the file's earlier bytes or another file's data), fixes what has one
/// answer (`prev`, `block_count`, unknown flags, an owner number no file has), extends a size the
/// list passes, and frees every extent no list reaches.
pub(super) fn repair_lists(s: &mut Salvage, image: &Image) {
    let owners: HashSet<u64> = s
        .pinodes
        .values()
        .filter(|p| p.is_primary())
        .map(|p| p.ino.get())
        .collect();
    let mut reached: HashSet<u64> = HashSet::default();
    let mut claimed = Claimed::default();
    let slots: Vec<u64> = s.pinodes.keys().copied().collect();
    for slot in slots {
        let p = s.pinodes[&slot].clone();
        if !p.is_primary() || p.extent_head.get() == 0 {
            continue;
        }
        let ft = p.mode.get() & pinode::S_IFMT;
        if ft != pinode::S_IFREG && ft != pinode::S_IFLNK {
            s.edit(slot).extent_head = U32::new(0);
            continue;
        }
        let carried = s.renumbered.get(&slot).copied();
        let (mut prev, mut eno, mut end) = (0u64, u64::from(p.extent_head.get()), 0u64);
        while eno != 0 {
            let Some(e) = usable_extent(image, eno, &p, carried, &owners, end, &reached) else {
                break;
            };
            let addr =
                u64::from(e.start_block.get()) * BLOCK_SIZE + u64::from(e.block_offset.get());
            if !claimed.try_claim(addr, u64::from(e.length.get())) {
                break;
            }
            let mut fixed = e.clone();
            fixed.ino = p.ino;
            fixed.prev = U32::new(prev as u32);
            fixed.flags = U32::new(e.flags.get() & extent::KNOWN_FLAGS);
            fixed.block_count = zerocopy::little_endian::U16::new(Extent::blocks_needed(
                u64::from(e.block_offset.get()),
                u64::from(e.length.get()),
            ) as u16);
            if fixed != e {
                write_extent(image, eno, &fixed);
            }
            reached.insert(eno);
            end = e.file_end().expect("checked by usable_extent");
            (prev, eno) = (eno, u64::from(e.next.get()));
        }
        if eno != 0 {
            // Cut here: the previous extent (or the pinode) ends the list.
            if prev == 0 {
                s.edit(slot).extent_head = U32::new(0);
            } else {
                let mut last = image.extent(prev);
                last.next = U32::new(0);
                write_extent(image, prev, &last);
            }
        }
        if end > s.pinodes[&slot].size.get() {
            s.edit(slot).size = zerocopy::little_endian::U64::new(end);
        }
    }
    for eno in Present::of(image).records(image, Zone::ExtentTable) {
        if !reached.contains(&eno) {
            let mut e = image.extent(eno);
            if e.is_valid() {
                e.flags = U32::new(0);
                write_extent(image, eno, &e);
            }
        }
    }
    image.region().fence();
}

/// Extent `eno` when it can stay in `p`'s list after the bytes up to `end`.
fn usable_extent(
    image: &Image,
    eno: u64,
    p: &Pinode,
    carried: Option<u64>,
    owners: &HashSet<u64>,
    end: u64,
    reached: &HashSet<u64>,
) -> Option<Extent> {
    let g = image.geometry();
    if eno >= g.extent_count() || reached.contains(&eno) {
        return None;
    }
    let e = image.extent(eno);
    let owner = e.ino.get();
    // Another file's extent stays that file's; a number no file has is a flipped one.
    let ours = owner == p.ino.get() || Some(owner) == carried || !owners.contains(&owner);
    let (offset, length) = (u64::from(e.block_offset.get()), u64::from(e.length.get()));
    let fits = length > 0
        && offset < BLOCK_SIZE
        && Extent::blocks_needed(offset, length) <= u64::from(u16::MAX)
        && u64::from(e.start_block.get()) + Extent::blocks_needed(offset, length)
            <= g.data_block_count()
        && e.file_end().is_some()
        && e.file_offset.get() >= end;
    (e.is_valid() && ours && fits).then_some(e)
}

fn write_extent(image: &Image, eno: u64, e: &Extent) {
    let offset = image.geometry().extent_offset(eno);
    image.region().write(offset, e);
    image.region().flush(offset, extent::EXTENT_BYTES);
}
