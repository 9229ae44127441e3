//! The NVM hash table: every bucket's chain.

use super::*;

impl Checker<'_> {
    pub(super) fn check_chains(&mut self) {
        let g = self.geometry;
        let mut in_chain: HashSet<u64> = HashSet::default();
        for bucket in self.present.records(self.image, Zone::HashTable) {
            let b = self.image.bucket(bucket);
            if b.reserved.get() != 0 {
                self.push(format!("bucket[{bucket}]"), "reserved", "not zero");
            }
            let mut slot = u64::from(b.head.get());
            let mut field = "head";
            let mut structure = Label("bucket", bucket);
            while slot != 0 {
                if slot >= g.pinode_count() {
                    self.push(structure, field, format!("slot {slot} out of range"));
                    break;
                }
                if !in_chain.insert(slot) {
                    self.push(
                        structure,
                        field,
                        format!("slot {slot} is already in a chain (cycle or shared tail)"),
                    );
                    break;
                }
                let p = self.image.pinode(slot);
                self.check_chain_member(bucket, slot, &p, structure, field);
                structure = Label("pinode", slot);
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

    pub(super) fn check_chain_member(
        &mut self,
        bucket: u64,
        slot: u64,
        p: &Pinode,
        structure: Label,
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
}

/// Rebuilds every hash chain from the repaired pinodes: the whole table is cleared, then each
/// valid pinode is linked at the head of its bucket, in slot order.
pub(super) fn rebuild(s: &mut super::repair::Salvage, image: &Image) {
    let g = image.geometry();
    let mut heads: HashMap<u64, u32> = HashMap::default();
    let slots: Vec<u64> = s.pinodes.keys().copied().collect();
    for slot in slots {
        let p = s.pinodes[&slot].clone();
        let name = s.name_of(image, &p);
        let bucket = bucket_of(g.hash_seed, g.bucket_count(), p.parent.get(), &name);
        let head = heads.insert(bucket, slot as u32).unwrap_or(0);
        if p.hash_next.get() != head {
            s.edit(slot).hash_next = zerocopy::little_endian::U32::new(head);
        }
    }
    let span = g.span(Zone::HashTable);
    image
        .region()
        .fill(span.offset, span.bytes(Zone::HashTable), 0);
    for (bucket, head) in heads {
        image
            .region()
            .store_u64(g.bucket_offset(bucket), u64::from(head));
    }
    image
        .region()
        .persist(span.offset, span.bytes(Zone::HashTable));
}
