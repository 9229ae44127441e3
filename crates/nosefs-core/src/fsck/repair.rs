//! The repair driver and the state it rebuilds the metadata in.
//!
//! Order, each step relying on the ones before it:
//! 1. the journals settle (malformed logs cleared, intact ones replayed when that is safe);
//! 2. the marks cover every record in use, so nothing below is hidden from mount;
//! 3. pinode records: fields fixed where the damage leaves one answer, else the record cleared or
//!    its name given up (it goes to lost+found);
//! 4. identities: one primary pinode per inode (a flipped `ino` found one bit away, a hard link
//!    promoted, a duplicate renumbered), hard links agreeing with their primary;
//! 5. the tree: every name under an existing directory, unique, and no directory cycle; what has
//!    no place goes to `/lost+found` (created if missing) as `#<ino>`;
//! 6. extent lists: each cut at its first unusable extent; extents no list reaches are freed;
//! 7. derived state: link counts, hash chains, marks, the bitmap, the backup superblock.
//!
//! Pinodes are repaired in DRAM ([`Salvage`]) and written once, at the end; extents and long-name
//! records are written as they are fixed. A repair is not crash-atomic (neither is e2fsck's): an
//! interrupted one is run again.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use zerocopy::little_endian::{I64, U32, U64};
use zerocopy::FromZeros;

use super::*;
use crate::format::long_name::LongName;
use crate::format::pinode::{FLAG_PRIMARY, FLAG_VALID, S_IFDIR};

/// The valid pinodes as the repair leaves them, and what else it has decided.
pub(super) struct Salvage {
    /// Valid pinodes by slot.
    pub(super) pinodes: BTreeMap<u64, Pinode>,
    /// Slots whose record must be written: changed, or cleared when absent from `pinodes`.
    pub(super) touched: BTreeSet<u64>,
    /// Long-name records to write.
    pub(super) long_names: BTreeMap<u64, LongName>,
    /// The next unused inode number.
    pub(super) next_ino: u64,
    /// Primary pinodes given a new inode number: slot → the number their extents still carry.
    pub(super) renumbered: HashMap<u64, u64>,
    /// `/lost+found`, once found or made.
    pub(super) lost_found: Option<u64>,
    /// Slots of records held out of `pinodes` while the tree is repaired (attribute pinodes):
    /// not free for a new directory.
    pub(super) held: BTreeSet<u64>,
    pinode_count: u64,
}

impl Salvage {
    fn load(image: &Image) -> Salvage {
        let g = image.geometry();
        let pinodes: BTreeMap<u64, Pinode> = Present::of(image)
            .records(image, Zone::PinodeTable)
            .map(|slot| (slot, image.pinode(slot)))
            .filter(|(_, p)| p.is_valid())
            .collect();
        let next_ino = pinodes.values().map(|p| p.ino.get()).max().unwrap_or(0) + 1;
        Salvage {
            pinodes,
            touched: BTreeSet::new(),
            long_names: BTreeMap::new(),
            next_ino: next_ino.max(ROOT_INO + 1),
            renumbered: HashMap::default(),
            lost_found: None,
            held: BTreeSet::new(),
            pinode_count: g.pinode_count(),
        }
    }

    /// Pinode `slot` for changing.
    pub(super) fn edit(&mut self, slot: u64) -> &mut Pinode {
        self.touched.insert(slot);
        self.pinodes.get_mut(&slot).expect("editing a valid pinode")
    }

    /// Frees pinode `slot`.
    pub(super) fn clear(&mut self, slot: u64) {
        self.pinodes.remove(&slot);
        self.touched.insert(slot);
    }

    /// A fresh inode number.
    pub(super) fn new_ino(&mut self) -> u64 {
        self.next_ino += 1;
        self.next_ino - 1
    }

    /// The lowest free slot, preferring `wanted`.
    fn free_slot(&self, wanted: u64) -> Option<u64> {
        let free = |s: &u64| !self.pinodes.contains_key(s) && !self.held.contains(s);
        if wanted != 0 && wanted < self.pinode_count && free(&wanted) {
            return Some(wanted);
        }
        (1..self.pinode_count).find(free)
    }

    /// Adds a new directory `name` under `parent` with mode 0700; returns its inode number.
    pub(super) fn add_directory(
        &mut self,
        parent: u64,
        name: &[u8],
        wanted_slot: u64,
    ) -> Option<u64> {
        let slot = self.free_slot(wanted_slot)?;
        let ino = if parent == 0 {
            ROOT_INO
        } else {
            self.new_ino()
        };
        let now = I64::new(crate::mkfs::now_ns());
        let mut p = Pinode::new_zeroed();
        p.ino = U64::new(ino);
        p.parent = U64::new(parent);
        p.flags = U32::new(FLAG_VALID | FLAG_PRIMARY);
        p.mode = U32::new(S_IFDIR | if parent == 0 { 0o755 } else { 0o700 });
        p.nlink = U32::new(2);
        (p.atime_ns, p.mtime_ns, p.ctime_ns) = (now, now, now);
        set_inline_name(&mut p, name);
        self.pinodes.insert(slot, p);
        self.touched.insert(slot);
        Some(ino)
    }

    /// The full name of valid pinode `p` (its records were repaired: the name is readable).
    pub(super) fn name_of(&self, image: &Image, p: &Pinode) -> Vec<u8> {
        if p.flags.get() & pinode::FLAG_LONG_NAME == 0 {
            return p.inline_name().to_vec();
        }
        let index = u64::from(p.long_name.get());
        match self.long_names.get(&index) {
            Some(record) => record.name().to_vec(),
            None => image.long_name(index).name().to_vec(),
        }
    }

    /// Writes every touched pinode and long-name record.
    fn write(&self, image: &Image) {
        let g = image.geometry();
        let region = image.region();
        for (&index, record) in &self.long_names {
            let offset = g.long_name_offset(index);
            region.write(offset, record);
            region.flush(offset, crate::format::long_name::LONG_NAME_BYTES);
        }
        for &slot in &self.touched {
            let offset = g.pinode_offset(slot);
            match self.pinodes.get(&slot) {
                Some(p) => region.write(offset, p),
                None => region.write(offset, &Pinode::new_zeroed()),
            }
            region.flush(offset, pinode::PINODE_BYTES);
        }
        region.fence();
    }
}

/// Sets an inline name (at most [`INLINE_NAME_MAX`] bytes), clearing any long-name reference.
pub(super) fn set_inline_name(p: &mut Pinode, name: &[u8]) {
    assert!(name.len() <= INLINE_NAME_MAX, "inline names are short");
    p.name = [0; INLINE_NAME_MAX];
    p.name[..name.len()].copy_from_slice(name);
    p.name_len = name.len() as u8;
    p.flags = U32::new(p.flags.get() & !pinode::FLAG_LONG_NAME);
    p.long_name = U32::new(0);
}

/// Whether a problem lies where replaying a journal could follow a damaged link.
fn endangers_replay(p: &Problem) -> bool {
    !(p.structure == "bitmap"
        || p.structure == "marks"
        || p.structure.contains("superblock")
        || p.field == "nlink")
}

/// Repairs the image so that a second check finds it clean, saying in `notes` what it did that a
/// problem line does not (logs discarded, names moved to lost+found).
pub(super) fn run(image: &Image, found: &[Problem], notes: &mut Vec<String>) {
    let replay_safe = !found.iter().any(endangers_replay);
    logs::repair_logs(image, replay_safe, notes);
    superblock::repair_marks(image);
    let mut salvage = Salvage::load(image);
    let xattrs = pinodes::take_xattrs(&mut salvage);
    pinodes::repair_records(&mut salvage, image);
    pinodes::repair_identities(&mut salvage, image);
    pinodes::repair_tree(&mut salvage, image, notes);
    pinodes::restore_xattrs(&mut salvage, image, xattrs, notes);
    extents::repair_lists(&mut salvage, image);
    pinodes::drop_broken_xattrs(&mut salvage, image, notes);
    pinodes::repair_link_counts(&mut salvage);
    chains::rebuild(&mut salvage, image);
    salvage.write(image);
    superblock::repair_marks(image);
    blocks::repair_bitmap(image);
    superblock::repair_backup(image);
}
