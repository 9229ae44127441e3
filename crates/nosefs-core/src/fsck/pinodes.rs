//! Pinodes: each record, its name, its place in the tree, and link counts.

use super::*;

impl Checker<'_> {
    pub(super) fn check_pinodes(&mut self) {
        let mut names: HashMap<(u64, Vec<u8>), u64> = HashMap::default();
        let mut long_names: HashMap<u64, u64> = HashMap::default();
        let mut names_per_ino: HashMap<u64, u32> = HashMap::default();
        let mut subdirs: HashMap<u64, u32> = HashMap::default();
        let valid = &self.scan.valid;
        for (slot, p) in valid {
            let here = Label("pinode", *slot);
            self.check_pinode_fields(*slot, p);
            if p.flags.get() & pinode::FLAG_ORPHAN == 0 {
                *names_per_ino.entry(p.ino.get()).or_default() += 1;
            }
            if p.flags.get() & pinode::FLAG_LONG_NAME != 0 {
                if let Some(other) = long_names.insert(u64::from(p.long_name.get()), *slot) {
                    self.push(
                        here,
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
                            here,
                            "name",
                            format!("same parent and name as pinode {other}"),
                        );
                    }
                }
                Err(why) => self.push(here, "long_name", why),
            }
            if p.is_dir() && p.flags.get() & pinode::FLAG_ORPHAN == 0 {
                *subdirs.entry(p.parent.get()).or_default() += 1;
            }
        }
        self.check_link_counts(&names_per_ino, &subdirs);
        self.check_no_cycles();
    }

    pub(super) fn check_pinode_fields(&mut self, slot: u64, p: &Pinode) {
        let here = Label("pinode", slot);
        let flags = p.flags.get();
        if flags & !pinode::KNOWN_FLAGS != 0 {
            self.push(
                here,
                "flags",
                format!("unknown bits {:#x}", flags & !pinode::KNOWN_FLAGS),
            );
        }
        if slot == 0 {
            self.push(here, "flags", "slot 0 is reserved but marked valid");
        }
        if p.ino.get() == 0 {
            self.push(here, "ino", "0 is not an inode number");
        }
        if !pinode::is_valid_file_type(p.mode.get()) {
            self.push(
                here,
                "mode",
                format!("{:#o} has no valid file type", p.mode.get()),
            );
        }
        self.check_name(slot, p);
        self.check_identity(slot, p);
    }

    pub(super) fn check_name(&mut self, slot: u64, p: &Pinode) {
        let here = Label("pinode", slot);
        if p.flags.get() & pinode::FLAG_XATTR != 0 {
            if !is_xattr_pinode_shape(p) || !self.geometry.xattrs {
                self.push(
                    here,
                    "flags",
                    "XATTR set on a pinode that is no attribute pinode",
                );
            } else if let Err(why) = read_xattr_blob(self.image, p) {
                self.push(here, "size", format!("attribute blob: {why}"));
            }
            return;
        }
        let len = usize::from(p.name_len);
        let is_root = p.ino.get() == ROOT_INO;
        if is_root != (len == 0) {
            self.push(
                here,
                "name_len",
                format!("{len}: only the root has an empty name"),
            );
        }
        let long = p.flags.get() & pinode::FLAG_LONG_NAME != 0;
        if long != (len > INLINE_NAME_MAX) {
            self.push(
                here,
                "flags",
                format!("LONG_NAME flag disagrees with name_len {len}"),
            );
        }
        debug_assert!(len <= NAME_MAX);
        let inline = p.inline_name();
        if p.name[inline.len()..].iter().any(|&b| b != 0) {
            self.push(here, "name", "bytes past the name are not zero");
        }
        if let Ok(name) = self.full_name(p) {
            if name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
                self.push(
                    here,
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
    pub(super) fn check_identity(&mut self, slot: u64, p: &Pinode) {
        let here = Label("pinode", slot);
        let ino = p.ino.get();
        match self.scan.primaries.get(&ino).map(Vec::len).unwrap_or(0) {
            1 => {}
            0 => self.push(here, "ino", format!("inode {ino} has no primary pinode")),
            n if p.is_primary() => self.push(
                here,
                "flags",
                format!("inode {ino} has {n} primary pinodes"),
            ),
            _ => {}
        }
        if let Some(primary) = self.scan.primary(ino) {
            if primary.mode.get() & pinode::S_IFMT != p.mode.get() & pinode::S_IFMT {
                self.push(
                    here,
                    "mode",
                    format!("file type differs from its primary pinode (inode {ino})"),
                );
            }
        }
        if p.flags.get() & pinode::FLAG_ORPHAN != 0 {
            // Nameless: its old parent may be gone; mount frees it.
            return;
        }
        if p.flags.get() & pinode::FLAG_XATTR != 0 {
            let owner = self.scan.primary(p.parent.get());
            if !owner.is_some_and(|o| o.flags.get() & pinode::FLAG_XATTR == 0) {
                self.push(
                    here,
                    "parent",
                    format!(
                        "attributes of inode {}, which does not exist",
                        p.parent.get()
                    ),
                );
            }
            return;
        }
        if ino == ROOT_INO {
            if p.parent.get() != 0 || !p.is_dir() || !p.is_primary() {
                self.push(
                    here,
                    "parent",
                    "the root must be a primary directory with parent 0",
                );
            }
            return;
        }
        match self.scan.primary(p.parent.get()) {
            Some(parent) if parent.is_dir() => {}
            Some(_) => self.push(
                here,
                "parent",
                format!("inode {} is not a directory", p.parent.get()),
            ),
            None => self.push(
                here,
                "parent",
                format!("inode {} does not exist", p.parent.get()),
            ),
        }
        if p.is_dir() && !p.is_primary() {
            self.push(
                here,
                "flags",
                "a directory cannot have a second name (hard link)",
            );
        }
    }

    pub(super) fn check_link_counts(
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
            // An attribute pinode's link count means nothing (it is written as 1).
            let xattr = p.flags.get() & pinode::FLAG_XATTR != 0;
            if !orphan && !xattr && p.nlink.get() != want {
                self.push(
                    format!("pinode[{slot}]"),
                    "nlink",
                    format!("{} but {want} expected", p.nlink.get()),
                );
            }
        }
    }

    /// Following parents from any directory reaches the root.
    pub(super) fn check_no_cycles(&mut self) {
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
}

/// The fixed fields of an attribute pinode (`format::xattr`).
fn is_xattr_pinode_shape(p: &Pinode) -> bool {
    let flags = p.flags.get();
    flags & pinode::FLAG_PRIMARY != 0
        && flags & (pinode::FLAG_ORPHAN | pinode::FLAG_LONG_NAME) == 0
        && p.mode.get() & pinode::S_IFMT == pinode::S_IFREG
        && p.inline_name() == XATTR_PINODE_NAME
        && p.name[XATTR_PINODE_NAME.len()..].iter().all(|&b| b == 0)
        && p.parent.get() != 0
        && p.ino.get() != ROOT_INO
}

/// An attribute pinode's blob, read through its extent list with every field checked.
fn read_xattr_blob(image: &Image, p: &Pinode) -> Result<XattrSet, String> {
    let g = image.geometry();
    let size = p.size.get();
    if size > BLOB_MAX as u64 {
        return Err(format!("{size} bytes"));
    }
    let mut blob = vec![0u8; size as usize];
    let mut filled = 0u64;
    let mut eno = u64::from(p.extent_head.get());
    let mut steps = 0;
    while eno != 0 {
        steps += 1;
        if eno >= g.extent_count() || steps > 1 + BLOB_MAX / 4096 {
            return Err(format!("extent {eno} out of range or the list loops"));
        }
        let e = image.extent(eno);
        let (at, len) = (e.file_offset.get(), u64::from(e.length.get()));
        let start = u64::from(e.start_block.get());
        let blocks =
            crate::format::extent::Extent::blocks_needed(u64::from(e.block_offset.get()), len);
        if !e.is_valid()
            || e.ino.get() != p.ino.get()
            || at != filled
            || at + len > size
            || u64::from(e.block_offset.get()) >= BLOCK_SIZE
            || start + blocks > g.data_block_count()
        {
            return Err(format!(
                "extent {eno} does not hold the next bytes of the blob"
            ));
        }
        let from = g.block_offset(start) + u64::from(e.block_offset.get());
        image
            .region()
            .read_bytes(from, &mut blob[at as usize..(at + len) as usize]);
        filled += len;
        eno = u64::from(e.next.get());
    }
    if filled != size {
        return Err(format!("extents hold {filled} of {size} bytes"));
    }
    XattrSet::decode(&blob)
}

// ---- Repair (see `repair` for the order of the steps) ----

/// Settles the XATTR flag by the name, which a flipped bit cannot forge: a pinode named
/// `/xattrs` (no file name holds a `/`) is an attribute pinode, any other is not. Then takes the
/// attribute pinodes out of the salvage, so the tree's repair neither moves nor renames them;
/// [`restore_xattrs`] puts back those whose owner survived.
pub(super) fn take_xattrs(s: &mut Salvage) -> Vec<(u64, Pinode)> {
    let slots: Vec<u64> = s.pinodes.keys().copied().collect();
    let mut taken = Vec::new();
    for slot in slots {
        let p = &s.pinodes[&slot];
        let flagged = p.flags.get() & pinode::FLAG_XATTR != 0;
        // The name's bytes decide; a flipped length or padding byte is fixed below.
        let padded = p.name[XATTR_PINODE_NAME.len()..].iter().all(|&b| b == 0);
        let exact = usize::from(p.name_len) == XATTR_PINODE_NAME.len();
        let named = p.name.starts_with(XATTR_PINODE_NAME) && (flagged || padded && exact);
        if flagged && !named {
            let q = s.edit(slot);
            q.flags = U32::new(q.flags.get() & !pinode::FLAG_XATTR);
            continue;
        }
        if named {
            let mut p = s.pinodes.remove(&slot).expect("listed");
            let flags = pinode::FLAG_VALID | FLAG_PRIMARY | pinode::FLAG_XATTR;
            let mut fixed = p.clone();
            set_inline_name(&mut fixed, XATTR_PINODE_NAME);
            fixed.flags = U32::new(flags);
            fixed.mode = U32::new(S_IFREG);
            if fixed != p {
                p = fixed;
                s.touched.insert(slot);
            }
            s.held.insert(slot);
            taken.push((slot, p));
        }
    }
    taken
}

/// After the extent lists' repair (which may have cut a blob's list where another file claimed
/// its blocks): drops each attribute pinode whose blob no longer reads back whole, with the
/// extents left in its list, noting each.
pub(super) fn drop_broken_xattrs(s: &mut Salvage, image: &Image, notes: &mut Vec<String>) {
    let broken: Vec<(u64, Pinode)> = s
        .pinodes
        .iter()
        .filter(|(_, p)| p.flags.get() & pinode::FLAG_XATTR != 0)
        .filter(|(_, p)| read_xattr_blob(image, p).is_err())
        .map(|(&slot, p)| (slot, p.clone()))
        .collect();
    let g = image.geometry();
    for (slot, p) in broken {
        let mut eno = u64::from(p.extent_head.get());
        let mut steps = 0;
        while eno != 0 && eno < g.extent_count() && steps < 1 + BLOB_MAX / 4096 {
            let mut e = image.extent(eno);
            if !e.is_valid() || e.ino.get() != p.ino.get() {
                break;
            }
            let next = u64::from(e.next.get());
            e.flags = U32::new(e.flags.get() & !crate::format::extent::FLAG_VALID);
            let offset = g.extent_offset(eno);
            image.region().write(offset, &e);
            image
                .region()
                .flush(offset, crate::format::extent::EXTENT_BYTES);
            eno = next;
            steps += 1;
        }
        s.clear(slot);
        notes.push(format!(
            "pinode[{slot}]: the extended attributes of inode {} were damaged and are dropped",
            p.parent.get()
        ));
    }
}

/// Puts back the attribute pinodes [`take_xattrs`] took whose owner is an inode of the repaired
/// tree and whose blob reads back whole, one per owner (the newest: the highest `ino`); clears
/// the rest, noting each.
pub(super) fn restore_xattrs(
    s: &mut Salvage,
    image: &Image,
    mut taken: Vec<(u64, Pinode)>,
    notes: &mut Vec<String>,
) {
    let owners: HashSet<u64> = s
        .pinodes
        .values()
        .filter(|p| p.is_primary())
        .map(|p| p.ino.get())
        .collect();
    let mut served: HashSet<u64> = HashSet::default();
    taken.sort_by_key(|(_, p)| std::cmp::Reverse(p.ino.get()));
    for (slot, p) in taken {
        let owner = p.parent.get();
        let usable = image.geometry().xattrs
            && owners.contains(&owner)
            && !served.contains(&owner)
            && !owners.contains(&p.ino.get())
            && read_xattr_blob(image, &p).is_ok();
        if usable {
            served.insert(owner);
            s.pinodes.insert(slot, p);
        } else {
            notes.push(format!(
                "pinode[{slot}]: the extended attributes of inode {owner} could not be kept"
            ));
            s.touched.insert(slot);
        }
    }
}

use super::repair::{set_inline_name, Salvage};
use crate::format::long_name::LongName;
use crate::format::xattr::{XattrSet, BLOB_MAX, XATTR_PINODE_NAME};
use pinode::{FLAG_LONG_NAME, FLAG_ORPHAN, FLAG_PRIMARY, S_IFDIR, S_IFMT, S_IFREG};
use zerocopy::little_endian::{U32, U64};

/// The name lost+found takes in the root.
pub(super) const LOST_FOUND: &[u8] = b"lost+found";

/// Each record on its own: flags, inode number, file type and name. Orphans (which mount would
/// free) and records beyond saving are cleared; names beyond saving become `#<ino>` under
/// lost+found later (their parent is set to 0 here, which no directory has).
pub(super) fn repair_records(s: &mut Salvage, image: &Image) {
    let parents: HashSet<u64> = s.pinodes.values().map(|p| p.parent.get()).collect();
    let slots: Vec<u64> = s.pinodes.keys().copied().collect();
    for slot in slots {
        let p = s.pinodes[&slot].clone();
        let flags = p.flags.get();
        if slot == 0 || flags & FLAG_ORPHAN != 0 {
            s.clear(slot);
            continue;
        }
        if flags & !pinode::KNOWN_FLAGS != 0 {
            s.edit(slot).flags = U32::new(flags & pinode::KNOWN_FLAGS);
        }
        if p.ino.get() == 0 {
            if !p.is_primary() {
                s.clear(slot);
                continue;
            }
            let ino = owner_of_list(image, &p).unwrap_or_else(|| s.new_ino());
            s.edit(slot).ino = U64::new(ino);
        }
        if !pinode::is_valid_file_type(p.mode.get()) {
            // A directory is what other names live under; anything else becomes a plain file.
            let ft = if parents.contains(&s.pinodes[&slot].ino.get()) {
                S_IFDIR
            } else {
                S_IFREG
            };
            let mode = (p.mode.get() & !S_IFMT) | ft;
            s.edit(slot).mode = U32::new(mode);
        }
        if s.pinodes[&slot].ino.get() == ROOT_INO {
            let root = s.edit(slot);
            set_inline_name(root, b"");
            root.parent = U64::new(0);
            root.flags = U32::new(root.flags.get() | FLAG_PRIMARY);
            root.mode = U32::new((root.mode.get() & !S_IFMT) | S_IFDIR);
            continue;
        }
        if !repair_name(s, image, slot) {
            if s.pinodes[&slot].is_primary() {
                s.edit(slot).parent = U64::new(0); // placed in lost+found by repair_tree
            } else {
                s.clear(slot);
            }
        }
    }
}

/// The inode number the first extent of a primary's list carries, when the pinode's own is lost.
fn owner_of_list(image: &Image, p: &Pinode) -> Option<u64> {
    let eno = u64::from(p.extent_head.get());
    (eno != 0 && eno < image.geometry().extent_count())
        .then(|| image.extent(eno))
        .filter(|e| e.is_valid() && e.ino.get() != 0)
        .map(|e| e.ino.get())
}

/// Makes a non-root pinode's name readable and legal. Returns false when no name can be trusted.
fn repair_name(s: &mut Salvage, image: &Image, slot: u64) -> bool {
    let p = s.pinodes[&slot].clone();
    let g = image.geometry();
    let index = u64::from(p.long_name.get());
    let record = (index != 0 && index < g.long_name_count())
        .then(|| image.long_name(index))
        .filter(|r| {
            usize::from(r.name_len) > INLINE_NAME_MAX && r.name()[..INLINE_NAME_MAX] == p.name[..]
        });
    let long = p.flags.get() & FLAG_LONG_NAME != 0 || usize::from(p.name_len) > INLINE_NAME_MAX;
    let name = match record {
        // The record holds a name with this inline prefix: it is the name.
        Some(r) if long && !s.long_names.contains_key(&index) => {
            let fixed = legal_name(r.name());
            let q = s.edit(slot);
            q.flags = U32::new(q.flags.get() | FLAG_LONG_NAME);
            q.name_len = r.name_len;
            if fixed != r.name() {
                s.long_names.insert(index, LongName::new(&fixed));
                s.edit(slot).name.copy_from_slice(&fixed[..INLINE_NAME_MAX]);
            }
            fixed
        }
        _ => {
            let Some(len) = inline_length(&p) else {
                return false;
            };
            let fixed = legal_name(&p.name[..len]);
            set_inline_name(s.edit(slot), &fixed);
            fixed
        }
    };
    !(name.is_empty() || name == b"." || name == b"..")
}

/// The length of an inline name: `name_len` when the bytes agree with it, else up to the first
/// zero byte (a flipped length); `None` when there is no name at all.
fn inline_length(p: &Pinode) -> Option<usize> {
    let stated = usize::from(p.name_len);
    if (1..=INLINE_NAME_MAX).contains(&stated)
        && p.name[stated - 1] != 0
        && p.name[stated..].iter().all(|&b| b == 0)
    {
        return Some(stated);
    }
    let first_zero = p
        .name
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(INLINE_NAME_MAX);
    (first_zero > 0).then_some(first_zero)
}

/// A name with `/` and NUL (which no name may hold) replaced by `_`.
fn legal_name(name: &[u8]) -> Vec<u8> {
    name.iter()
        .map(|&b| if b == b'/' || b == 0 { b'_' } else { b })
        .collect()
}

/// Slots of primary pinodes by inode number, and of the other names.
fn identities(s: &Salvage) -> (HashMap<u64, Vec<u64>>, HashMap<u64, Vec<u64>>) {
    let (mut primaries, mut links): (HashMap<u64, Vec<u64>>, HashMap<u64, Vec<u64>>) =
        Default::default();
    for (&slot, p) in &s.pinodes {
        let map = if p.is_primary() {
            &mut primaries
        } else {
            &mut links
        };
        map.entry(p.ino.get()).or_default().push(slot);
    }
    (primaries, links)
}

/// One primary pinode per inode, and names that agree with it.
pub(super) fn repair_identities(s: &mut Salvage, image: &Image) {
    let (mut primaries, links) = identities(s);
    let parents: HashSet<u64> = s.pinodes.values().map(|p| p.parent.get()).collect();
    let mut missing: Vec<u64> = parents
        .iter()
        .chain(links.keys())
        .copied()
        .filter(|ino| *ino != 0 && !primaries.contains_key(ino))
        .collect();
    if !primaries.contains_key(&ROOT_INO) {
        missing.push(ROOT_INO);
    }
    missing.sort_unstable();
    missing.dedup();
    for ino in missing {
        if let Some(slot) = flipped_ino(s, &primaries, &parents, &links, ino) {
            let old = s.pinodes[&slot].ino.get();
            s.edit(slot).ino = U64::new(ino);
            primaries
                .get_mut(&old)
                .expect("listed")
                .retain(|&x| x != slot);
            primaries.entry(ino).or_default().push(slot);
        } else if let Some(slot) = best_link(s, links.get(&ino), parents.contains(&ino)) {
            let p = s.edit(slot);
            p.flags = U32::new(p.flags.get() | FLAG_PRIMARY);
            primaries.entry(ino).or_default().push(slot);
        } else if ino == ROOT_INO {
            if let Some(root) = s.add_directory(0, b"", u64::from(image.geometry().root_slot)) {
                let slot = *s
                    .pinodes
                    .iter()
                    .find(|(_, p)| p.ino.get() == root)
                    .expect("added")
                    .0;
                primaries.entry(ROOT_INO).or_default().push(slot);
            }
        }
    }
    settle_duplicate_primaries(s, image, &mut primaries);
    let slots: Vec<u64> = s.pinodes.keys().copied().collect();
    for slot in slots {
        let p = &s.pinodes[&slot];
        if p.is_primary() {
            continue;
        }
        let primary = primaries
            .get(&p.ino.get())
            .and_then(|list| list.first())
            .map(|slot| &s.pinodes[slot]);
        let agrees =
            primary.is_some_and(|q| !q.is_dir() && q.mode.get() & S_IFMT == p.mode.get() & S_IFMT);
        if !agrees {
            s.clear(slot); // a hard link to nothing, to a directory, or of another file type
        }
    }
}

/// The one primary pinode whose `ino` is a single bit away from `ino` and that looks like the
/// damaged one: its own number is duplicated or used by nothing, and its type fits the names that
/// point at `ino`.
fn flipped_ino(
    s: &Salvage,
    primaries: &HashMap<u64, Vec<u64>>,
    parents: &HashSet<u64>,
    links: &HashMap<u64, Vec<u64>>,
    ino: u64,
) -> Option<u64> {
    let mut found = None;
    for bit in 0..64 {
        let other = ino ^ (1 << bit);
        let Some(slots) = primaries.get(&other) else {
            continue;
        };
        let unused = !parents.contains(&other) && !links.contains_key(&other);
        for &slot in slots {
            let p = &s.pinodes[&slot];
            let fits = if parents.contains(&ino) || ino == ROOT_INO {
                p.is_dir()
            } else {
                links[&ino]
                    .iter()
                    .all(|l| s.pinodes[l].mode.get() & S_IFMT == p.mode.get() & S_IFMT)
            };
            if fits && (slots.len() > 1 || unused) {
                if found.is_some() {
                    return None; // two candidates: no single answer
                }
                found = Some(slot);
            }
        }
    }
    found
}

/// The name of an inode without a primary that should become it: a directory when names live
/// under the inode, else the one that looks most like a former primary (it has a size, extents or
/// a link count; hard links have none).
fn best_link(s: &Salvage, links: Option<&Vec<u64>>, is_parent: bool) -> Option<u64> {
    let links = links?;
    let score = |slot: &u64| {
        let p = &s.pinodes[slot];
        let primary_like = p.nlink.get() != 0 || p.extent_head.get() != 0 || p.size.get() != 0;
        (p.is_dir() == is_parent, primary_like)
    };
    links
        .iter()
        .copied()
        .max_by_key(|slot| (score(slot), std::cmp::Reverse(*slot)))
        .filter(|slot| !is_parent || s.pinodes[slot].is_dir())
}

/// Keeps one primary per inode (the one whose extents carry its number, else the lowest slot);
/// another that looks like a hard link with a flipped PRIMARY bit is demoted, the rest become
/// files of their own under new inode numbers.
fn settle_duplicate_primaries(
    s: &mut Salvage,
    image: &Image,
    primaries: &mut HashMap<u64, Vec<u64>>,
) {
    let mut inos: Vec<u64> = primaries
        .iter()
        .filter(|(_, slots)| slots.len() > 1)
        .map(|(ino, _)| *ino)
        .collect();
    inos.sort_unstable();
    for ino in inos {
        let slots = primaries[&ino].clone();
        let keep = slots
            .iter()
            .copied()
            .find(|slot| owner_of_list(image, &s.pinodes[slot]) == Some(ino))
            .unwrap_or(slots[0]);
        for slot in slots.into_iter().filter(|&x| x != keep) {
            let p = &s.pinodes[&slot];
            let like_a_link =
                !p.is_dir() && p.nlink.get() == 0 && p.extent_head.get() == 0 && p.size.get() == 0;
            if like_a_link {
                let q = s.edit(slot);
                q.flags = U32::new(q.flags.get() & !FLAG_PRIMARY);
            } else {
                let new = s.new_ino();
                s.renumbered.insert(slot, ino);
                s.edit(slot).ino = U64::new(new);
                primaries.insert(new, vec![slot]);
            }
        }
        primaries.insert(ino, vec![keep]);
    }
}

/// Every name under an existing directory, unique in it, and every directory reachable from the
/// root; the rest goes to lost+found.
pub(super) fn repair_tree(s: &mut Salvage, image: &Image, notes: &mut Vec<String>) {
    let mut dirs: HashSet<u64> = s
        .pinodes
        .values()
        .filter(|p| p.is_primary() && p.is_dir())
        .map(|p| p.ino.get())
        .collect();
    let mut homeless = Vec::new();
    let mut names: HashMap<(u64, Vec<u8>), u64> = HashMap::default();
    let slots: Vec<u64> = s.pinodes.keys().copied().collect();
    for &slot in &slots {
        let p = s.pinodes[&slot].clone();
        if p.ino.get() == ROOT_INO {
            continue;
        }
        let mut parent = p.parent.get();
        if parent != 0 && !dirs.contains(&parent) {
            // A parent one bit away from exactly one directory: the flipped link, set right.
            let near: Vec<u64> = (0..64)
                .map(|b| parent ^ (1 << b))
                .filter(|d| dirs.contains(d) && *d != p.ino.get())
                .collect();
            parent = if let [d] = near[..] { d } else { 0 };
            if parent != 0 {
                s.edit(slot).parent = U64::new(parent);
            }
        }
        let name = s.name_of(image, &p);
        if parent == 0 || names.contains_key(&(parent, name.clone())) {
            homeless.push(slot);
            continue;
        }
        names.insert((parent, name), slot);
    }
    homeless.extend(directories_in_cycles(s));
    let (mut moved, mut dropped) = (0, 0);
    for slot in homeless {
        if !s.pinodes[&slot].is_primary() {
            s.clear(slot);
            dropped += 1;
            continue;
        }
        let Some(lf) = lost_found(s, &mut names, &mut dirs) else {
            s.clear(slot);
            dropped += 1;
            continue;
        };
        names.retain(|_, v| *v != slot);
        let ino = s.pinodes[&slot].ino.get();
        let mut name = format!("#{ino}").into_bytes();
        if names.contains_key(&(lf, name.clone())) {
            name = format!("#{ino}.{slot}").into_bytes();
        }
        let p = s.edit(slot);
        p.parent = U64::new(lf);
        set_inline_name(p, &name);
        names.insert((lf, name), slot);
        moved += 1;
    }
    if moved + dropped > 0 {
        notes.push(format!(
            "{moved} files and directories without a usable name or place moved to /lost+found as #<ino>; {dropped} extra names removed"
        ));
    }
}

/// The first directory found on each parent cycle that does not reach the root.
fn directories_in_cycles(s: &Salvage) -> Vec<u64> {
    let dirs: HashMap<u64, (u64, u64)> = s
        .pinodes
        .iter()
        .filter(|(_, p)| p.is_primary() && p.is_dir())
        .map(|(&slot, p)| (p.ino.get(), (slot, p.parent.get())))
        .collect();
    let mut reaches_root: HashMap<u64, bool> = [(ROOT_INO, true)].into_iter().collect();
    let mut cut = Vec::new();
    let mut inos: Vec<u64> = dirs.keys().copied().collect();
    inos.sort_unstable();
    for start in inos {
        let mut path = Vec::new();
        let mut on_path = HashSet::default();
        let mut ino = start;
        let ok = loop {
            if let Some(&known) = reaches_root.get(&ino) {
                break known;
            }
            if !on_path.insert(ino) {
                cut.push(dirs[&ino].0); // back on the path: a cycle; cut it at this directory
                break true; // once moved to lost+found it reaches the root
            }
            path.push(ino);
            match dirs.get(&ino) {
                Some(&(_, parent)) => ino = parent,
                None => break true, // a missing parent was dealt with by repair_tree
            }
        };
        for ino in path {
            reaches_root.insert(ino, ok);
        }
    }
    cut
}

/// The inode number of `/lost+found`, made if missing.
fn lost_found(
    s: &mut Salvage,
    names: &mut HashMap<(u64, Vec<u8>), u64>,
    dirs: &mut HashSet<u64>,
) -> Option<u64> {
    if let Some(ino) = s.lost_found {
        return Some(ino);
    }
    let existing = names
        .get(&(ROOT_INO, LOST_FOUND.to_vec()))
        .map(|slot| &s.pinodes[slot])
        .filter(|p| p.is_primary() && p.is_dir())
        .map(|p| p.ino.get());
    let ino = match existing {
        Some(ino) => ino,
        None => {
            let mut name = LOST_FOUND.to_vec();
            if names.contains_key(&(ROOT_INO, name.clone())) {
                name = format!("lost+found.{}", s.next_ino).into_bytes();
            }
            let ino = s.add_directory(ROOT_INO, &name, 0)?;
            let slot = *s.pinodes.iter().rev().find(|(_, p)| p.ino.get() == ino)?.0;
            names.insert((ROOT_INO, name), slot);
            dirs.insert(ino);
            ino
        }
    };
    s.lost_found = Some(ino);
    Some(ino)
}

/// Link counts from the names: a directory has 2 plus its subdirectories, a file its names.
pub(super) fn repair_link_counts(s: &mut Salvage) {
    let mut names: HashMap<u64, u32> = HashMap::default();
    let mut subdirs: HashMap<u64, u32> = HashMap::default();
    for p in s.pinodes.values() {
        *names.entry(p.ino.get()).or_default() += 1;
        if p.is_dir() && p.is_primary() && p.ino.get() != ROOT_INO {
            *subdirs.entry(p.parent.get()).or_default() += 1;
        }
    }
    let slots: Vec<u64> = s.pinodes.keys().copied().collect();
    for slot in slots {
        let p = &s.pinodes[&slot];
        if !p.is_primary() {
            continue;
        }
        let ino = p.ino.get();
        let want = if p.is_dir() {
            2 + subdirs.get(&ino).copied().unwrap_or(0)
        } else {
            names.get(&ino).copied().unwrap_or(1)
        };
        if p.nlink.get() != want {
            s.edit(slot).nlink = U32::new(want);
        }
    }
}
