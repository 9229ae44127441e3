//! The directory and file journals: committed logs are legal (mount replays them), anything else
//! in a log is a problem.

use super::*;

/// Slots named by committed directory-log entries: replay settles them, so fsck accepts them in
/// either state.
#[derive(Debug, Default)]
pub(super) struct Pending {
    pub(super) dir_slots: HashSet<u64>,
    pub(super) file_extents: HashSet<u64>,
    /// Inodes with a committed file log: their lists are mid-change until replay.
    pub(super) files: HashSet<u64>,
    /// Blocks of extents that a committed INSERT_DATA or REMOVE_DATA entry will validate or free.
    pub(super) blocks: HashSet<u64>,
}

/// Reads only the logs on data pages (`present`): a log in a hole reads as zeros, an empty log.
pub(super) fn check_journals(image: &Image, present: &Present, report: &mut FsckReport) -> Pending {
    let g = image.geometry();
    let mut pending = Pending::default();
    for index in present.touched_records(image, Zone::DirJournal) {
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
    for index in present.touched_records(image, Zone::FileJournal) {
        check_file_log(image, index, &mut pending, report);
    }
    pending
}

/// The extents and blocks of a pinode named by a committed data entry: replay settles them.
pub(super) fn pend_data(image: &Image, slot: u64, pending: &mut Pending) {
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

pub(super) fn check_file_log(
    image: &Image,
    index: u64,
    pending: &mut Pending,
    report: &mut FsckReport,
) {
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
    if fjournal::superseded(image, index) {
        report.notes.push(format!(
            "{name} holds an applied commit for inode {}, whose pinode a later directory commit moved or removed; mount skips it",
            log.ino.get()
        ));
        return;
    }
    report.notes.push(format!(
        "{name} holds {count} committed entries for inode {}; mount replays them",
        log.ino.get()
    ));
    // Until replay, the file's list, its new and old extents and their blocks are in between.
    pending.files.insert(log.ino.get());
    pend_data(image, u64::from(log.slot.get()), pending);
    let (entries, moves) = fjournal::read_entries(image, index, count).expect("validated");
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
    // A moved extent points at either run until replay; both are in between.
    for m in moves {
        pending.file_extents.insert(u64::from(m.eno));
        for (start, count) in crate::file::apply::move_runs(image, &m) {
            pending.blocks.extend(start..start + count);
        }
    }
}

/// Settles the journals before the rest of the repair: a log that is malformed or torn is
/// cleared; an intact committed one is replayed as mount would when `replay_safe` (the damage
/// found lies outside what replay walks: chains, pinodes, extents), and otherwise discarded, since
/// applying it could follow a damaged link. Says what it did in `notes`.
pub(super) fn repair_logs(image: &Image, replay_safe: bool, notes: &mut Vec<String>) {
    let g = image.geometry();
    let present = Present::of(image);
    for index in present.touched_records(image, Zone::DirJournal) {
        let tail = image.dir_log(index).tail.get();
        if tail == 0 {
            continue;
        }
        let usable = dir_log_usable(image, index) && log_intact(image, index) == Some(true);
        if !usable || !replay_safe {
            if usable {
                notes.push(format!(
                    "dir_log[{index}]: committed entries discarded: replaying them could follow damaged links"
                ));
            }
            image.region().store_u64_persist(g.dir_log_offset(index), 0);
        }
    }
    for index in present.touched_records(image, Zone::FileJournal) {
        if image.file_log(index).tail.get() == 0 {
            continue;
        }
        let usable = index != 0
            && fjournal::log_intact(image, index) == Some(true)
            && fjournal::validate(image, index).is_ok();
        if !usable || !replay_safe {
            if usable {
                notes.push(format!(
                    "file_log[{index}]: committed entries discarded: replaying them could follow damaged links"
                ));
            }
            image
                .region()
                .store_u64_persist(g.file_log_offset(index), 0);
        }
    }
    if replay_safe {
        let dir = crate::namespace::txn::replay(image);
        let file = fjournal::replay(image);
        if dir.replayed + file.replayed > 0 {
            notes.push(format!(
                "replayed {} directory and {} file logs, as mount would",
                dir.replayed, file.replayed
            ));
        }
    }
}

/// A directory log's tail and entries are well formed (the checksum is checked apart).
fn dir_log_usable(image: &Image, index: u64) -> bool {
    let g = image.geometry();
    let log = image.dir_log(index);
    let count = log.tail.get() & TAIL_COUNT_MASK;
    index != 0
        && count != 0
        && count <= journal::DIR_LOG_ENTRIES as u64
        && log.entries[..count as usize].iter().all(|w| {
            DirEntry::decode(w.get())
                .is_ok_and(|e| e.slot != 0 && u64::from(e.slot) < g.pinode_count())
        })
}
