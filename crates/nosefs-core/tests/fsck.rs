//! fsck finds a hand-built tree clean, and names the structure and field of each corruption.

mod common;

use common::*;
use nosefs_core::format::journal::{DirEntry, DIR_OP_INSERT};
use nosefs_core::format::pinode::{self, Pinode};
use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::fsck::{fsck, FsckOptions, FsckReport};
use nosefs_core::image::Image;
use nosefs_core::namespace::txn;
use nosefs_core::namespace::ROOT_INO;
use zerocopy::little_endian::{U32, U64};

const SIZE: u64 = 4 << 20;

fn check(t: &TestImage) -> FsckReport {
    fsck(&t.path, FsckOptions::default()).expect("fsck runs")
}

fn populated() -> TestImage {
    let t = fresh_image(SIZE);
    populate(&open_rw(&t));
    t
}

/// Applies `corrupt` to a freshly populated image and asserts that fsck reports a problem whose
/// text starts with `structure_field` (e.g. `pinode[3].parent`).
fn assert_detects(structure_field: &str, corrupt: impl FnOnce(&Image)) {
    let t = populated();
    corrupt(&open_rw(&t));
    let report = check(&t);
    let lines: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        lines.iter().any(|l| l.starts_with(structure_field)),
        "expected a problem at {structure_field}, got {lines:#?}"
    );
    assert_eq!(report.exit_code(), 4);
}

fn edit_pinode(image: &Image, slot: u64, edit: impl FnOnce(&mut Pinode)) {
    let mut p = image.pinode(slot);
    edit(&mut p);
    write_pinode(image, slot, &p);
}

#[test]
fn a_fresh_image_is_clean() {
    let t = fresh_image(SIZE);
    let report = check(&t);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.exit_code(), 0);
}

/// mkfs leaves the tables as holes of a sparse file; reading one through the mapping has tmpfs
/// allocate it (a check of every slot of a 16 GiB image took 433 MiB), so fsck reads only the
/// pages that hold data, and finds a populated image clean all the same.
#[test]
fn fsck_reads_no_hole_of_a_sparse_image() {
    use std::os::unix::fs::MetadataExt;
    let t = fresh_image(1 << 30);
    populate(&open_rw(&t));
    let held = || std::fs::metadata(&t.path).unwrap().blocks() * 512;
    let before = held();
    let report = check(&t);
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    assert!(
        held() <= before + (64 << 10),
        "fsck made the image hold {} bytes more",
        held() - before
    );
}

#[test]
fn a_populated_image_is_clean() {
    let report = check(&populated());
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    assert_eq!(report.exit_code(), 0);
}

#[test]
fn parent_that_does_not_exist() {
    assert_detects("pinode[3].parent", |i| {
        edit_pinode(i, FILE_SLOT, |p| p.parent = U64::new(99))
    });
}

#[test]
fn parent_that_is_not_a_directory() {
    assert_detects("pinode[5].parent", |i| {
        edit_pinode(i, LONG_SLOT, |p| p.parent = U64::new(FILE_INO))
    });
}

#[test]
fn directory_link_count() {
    assert_detects("pinode[1].nlink", |i| {
        edit_pinode(i, 1, |p| p.nlink = U32::new(2))
    });
}

#[test]
fn file_link_count() {
    assert_detects("pinode[3].nlink", |i| {
        edit_pinode(i, FILE_SLOT, |p| p.nlink = U32::new(1))
    });
}

#[test]
fn valid_pinode_outside_every_chain() {
    assert_detects("pinode[6].hash_next", |i| {
        let stray = new_pinode(9, 1, pinode::S_IFREG, b"stray", true);
        write_pinode(i, 6, &stray);
    });
}

#[test]
fn chain_cycle() {
    assert_detects("pinode[2].hash_next", |i| {
        edit_pinode(i, DIR_SLOT, |p| p.hash_next = U32::new(DIR_SLOT as u32))
    });
}

#[test]
fn chain_through_an_invalid_pinode() {
    let t = populated();
    edit_pinode(&open_rw(&t), DIR_SLOT, |p| p.flags = U32::new(0));
    let lines: Vec<String> = check(&t).problems.iter().map(|p| p.to_string()).collect();
    // Reported at the link that reaches it: a bucket head, or a predecessor's hash_next.
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with("links to invalid pinode 2")
                && (l.starts_with("bucket[") || l.contains("].hash_next"))),
        "{lines:#?}"
    );
}

#[test]
fn chain_slot_out_of_range() {
    assert_detects("pinode[2].hash_next", |i| {
        edit_pinode(i, DIR_SLOT, |p| p.hash_next = U32::new(u32::MAX))
    });
}

#[test]
fn name_in_the_wrong_bucket() {
    assert_detects("pinode[2].name", |i| {
        edit_pinode(i, DIR_SLOT, |p| p.set_name(b"e"))
    });
}

#[test]
fn invalid_file_name() {
    assert_detects("pinode[2].name", |i| {
        edit_pinode(i, DIR_SLOT, |p| p.name[0] = b'/')
    });
}

#[test]
fn duplicate_name() {
    assert_detects("pinode[6].name", |i| {
        let mut dup = new_pinode(9, 1, pinode::S_IFREG, b"d", true);
        dup.nlink = U32::new(1);
        put_pinode(i, 6, dup, b"d");
    });
}

#[test]
fn unknown_file_type() {
    assert_detects("pinode[5].mode", |i| {
        edit_pinode(i, LONG_SLOT, |p| p.mode = U32::new(0o644))
    });
}

#[test]
fn long_name_record_mismatch() {
    assert_detects("pinode[5].long_name", |i| {
        let offset = i.geometry().long_name_offset(LONG_RECORD);
        i.region().write_bytes(offset, &[150]);
        i.region().persist(offset, 1);
    });
}

#[test]
fn long_name_flag_without_a_long_name() {
    // A LONG_NAME flag on a short name must be reported, and must not crash fsck.
    assert_detects("pinode[2].flags", |i| {
        edit_pinode(i, DIR_SLOT, |p| {
            p.flags = U32::new(p.flags.get() | pinode::FLAG_LONG_NAME);
            p.long_name = U32::new(LONG_RECORD as u32); // a real record, of a different length
        })
    });
}

#[test]
fn two_primaries_for_one_inode() {
    assert_detects("pinode[4].flags", |i| {
        edit_pinode(i, LINK_SLOT, |p| {
            p.flags = U32::new(p.flags.get() | pinode::FLAG_PRIMARY)
        })
    });
}

#[test]
fn directory_parent_loop() {
    let t = populated();
    {
        let i = open_rw(&t);
        // Move /d under itself: take it out of its bucket, re-chain it at slot 7 keyed by its own
        // inode, and fix the link counts, so that the loop is the only thing wrong.
        let g = i.geometry();
        let old = i.pinode(DIR_SLOT);
        let bucket =
            nosefs_core::format::hash_table::bucket_of(g.hash_seed, g.bucket_count(), 1, b"d");
        assert_eq!(
            u64::from(i.bucket(bucket).head.get()),
            DIR_SLOT,
            "d heads its bucket"
        );
        let unlinked = nosefs_core::format::hash_table::Bucket {
            head: old.hash_next,
            reserved: U32::new(0),
        };
        i.region()
            .store_u64_persist(g.bucket_offset(bucket), unlinked.to_word());
        edit_pinode(&i, DIR_SLOT, |p| *p = Pinode::zeroed());
        let mut d = old;
        d.parent = U64::new(DIR_INO);
        d.nlink = U32::new(3);
        put_pinode(&i, 7, d, b"d");
        edit_pinode(&i, 1, |p| p.nlink = U32::new(2));
    }
    let lines: Vec<String> = check(&t).problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        lines,
        vec!["pinode[7].parent: parent chain loops without reaching the root"]
    );
}

#[test]
fn overlapping_extents() {
    assert_detects("extent[2].file_offset", |i| {
        let mut e2 = i.extent(2);
        e2.file_offset = U64::new(5000);
        write_extent(i, 2, &e2);
    });
}

#[test]
fn extent_beyond_the_data_zone() {
    assert_detects("extent[2].start_block", |i| {
        let mut e2 = i.extent(2);
        e2.start_block = U32::new(u32::MAX - 1);
        write_extent(i, 2, &e2);
    });
}

#[test]
fn extent_block_count_disagrees_with_length() {
    assert_detects("extent[1].block_count", |i| {
        let mut e1 = i.extent(1);
        e1.block_count = zerocopy::little_endian::U16::new(5);
        write_extent(i, 1, &e1);
    });
}

#[test]
fn extent_outside_any_list() {
    assert_detects("extent[3].ino", |i| {
        write_extent(i, 3, &new_extent(FILE_INO, 20_000, 3, 0, 10))
    });
}

#[test]
fn size_smaller_than_the_extents() {
    assert_detects("pinode[3].size", |i| {
        edit_pinode(i, FILE_SLOT, |p| p.size = U64::new(9_000))
    });
}

#[test]
fn broken_prev_link() {
    assert_detects("extent[2].prev", |i| {
        let mut e2 = i.extent(2);
        e2.prev = U32::new(0);
        write_extent(i, 2, &e2);
    });
}

#[test]
fn bitmap_disagreeing_with_extents_is_reported_then_repaired() {
    let t = populated();
    {
        let image = open_rw(&t);
        set_bitmap(&image, 1..2, false); // referenced but free
        set_bitmap(&image, 40..41, true); // allocated but unreferenced
    }
    let report = check(&t);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(report.problems[0]
        .to_string()
        .starts_with("bitmap.bits: 2 blocks"));
    let repaired = fsck(&t.path, FsckOptions { repair: true }).unwrap();
    assert_eq!(repaired.exit_code(), 1);
    assert_eq!(check(&t).exit_code(), 0, "clean after repair");
}

#[test]
fn malformed_directory_log() {
    assert_detects("dir_log[3].entries", |i| {
        // Garbage with a matching checksum: a committed log that no build of noseFS wrote.
        let offset = i.geometry().dir_log_offset(3);
        let garbage = 0xff << 56;
        i.region().write(offset + 8, &U64::new(garbage));
        let checksum = txn::commit_checksum(i, &[garbage]);
        i.region()
            .store_u64_persist(offset, txn::tail_word(1, checksum));
    });
}

/// Writes a create that was committed (with `checksum`, or the right one) but never applied.
fn commit_unapplied_create(t: &TestImage, checksum: Option<u32>) {
    let image = open_rw(t);
    // The new pinode is written with its valid bit clear, as a commit leaves it.
    let mut p = new_pinode(9, 1, pinode::S_IFREG, b"new", true);
    p.flags = U32::new(pinode::FLAG_PRIMARY);
    p.nlink = U32::new(1);
    write_pinode(&image, 6, &p);
    let offset = image.geometry().dir_log_offset(3);
    let entry = DirEntry {
        op: DIR_OP_INSERT,
        slot: 6,
    }
    .encode();
    image.region().write(offset + 8, &U64::new(entry));
    image.region().persist(offset + 8, 8);
    let checksum = checksum.unwrap_or_else(|| txn::commit_checksum(&image, &[entry]));
    image
        .region()
        .store_u64_persist(offset, txn::tail_word(1, checksum));
}

#[test]
fn committed_directory_log_is_replayable_not_an_error() {
    let t = populated();
    commit_unapplied_create(&t, None);
    let report = check(&t);
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    assert!(report
        .notes
        .iter()
        .any(|n| n.contains("dir_log[3] holds 1 committed")));
    let fs = Fs::mount(&t.path, &MountOptions::default()).unwrap();
    assert_eq!(fs.mount_report().logs_replayed, 1);
    fs.lookup(ROOT_INO, b"new")
        .expect("replay applied the create");
    drop(fs.unmount());
    assert_eq!(check(&t).exit_code(), 0);
}

#[test]
fn torn_directory_log_is_discarded_not_an_error() {
    let t = populated();
    commit_unapplied_create(&t, Some(0xbad));
    let report = check(&t);
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    assert!(
        report.notes.iter().any(|n| n.contains("torn by a crash")),
        "{:?}",
        report.notes
    );
    let fs = Fs::mount(&t.path, &MountOptions::default()).unwrap();
    assert_eq!(fs.mount_report().logs_discarded, 1);
    assert!(
        fs.lookup(ROOT_INO, b"new").is_err(),
        "a torn commit never happened"
    );
    drop(fs.unmount());
    assert_eq!(check(&t).exit_code(), 0);
}

#[test]
fn fsck_refuses_a_mounted_image() {
    let t = populated();
    let _writer = open_rw(&t);
    assert!(matches!(check_err(&t), nosefs_core::Error::InUse(_)));
}

fn check_err(t: &TestImage) -> nosefs_core::Error {
    fsck(&t.path, FsckOptions::default()).expect_err("fsck must fail")
}

#[test]
fn random_metadata_corruption_never_panics() {
    // Media content is never trusted: whatever the bytes, fsck reports, it does not crash.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..40 {
        let t = populated();
        {
            let image = open_rw(&t);
            let meta = image.geometry().metadata_bytes();
            let first = 2 * 4096;
            for _ in 0..(1 + round * 8) {
                let offset = first + next() % (meta - first - 8);
                image.region().write_bytes(offset, &next().to_le_bytes());
            }
            image.region().fence();
        }
        let result = std::panic::catch_unwind(|| fsck(&t.path, FsckOptions::default()));
        assert!(result.is_ok(), "fsck panicked in round {round}");
    }
}

#[test]
fn mount_of_a_randomly_corrupted_image_errors_or_works_but_never_panics() {
    let mut state = 0x1234_5678_9abc_def1u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut refused, mut mounted) = (0, 0);
    for round in 0..60 {
        let t = populated();
        {
            let image = open_rw(&t);
            let meta = image.geometry().metadata_bytes();
            let first = 2 * 4096;
            for _ in 0..(1 + round % 12) {
                let offset = first + next() % (meta - first - 8);
                image.region().write_bytes(offset, &next().to_le_bytes());
            }
            image.region().fence();
        }
        let path = t.path.clone();
        let result =
            std::panic::catch_unwind(move || match Fs::mount(&path, &MountOptions::default()) {
                Ok(fs) => {
                    let mut names = 0;
                    let _ = fs.readdir(ROOT_INO, 0, |_| {
                        names += 1;
                        true
                    });
                    let _ = fs.getattr(ROOT_INO);
                    drop(fs.unmount());
                    true
                }
                Err(_) => false,
            });
        match result {
            Ok(true) => mounted += 1,
            Ok(false) => refused += 1,
            Err(_) => panic!("mount panicked in round {round}"),
        }
    }
    // The seed is fixed, so both paths are exercised every run: corruption that mount detects,
    // and corruption of unused slots that leaves a working file system.
    eprintln!("{mounted} mounted, {refused} refused");
    assert!(
        mounted > 0 && refused > 0,
        "{mounted} mounted, {refused} refused"
    );
}

#[test]
fn mount_frees_orphans() {
    // A file unlinked while open, then a crash: its pinode carries ORPHAN and is in no chain.
    let t = populated();
    {
        let image = open_rw(&t);
        let mut orphan = new_pinode(9, 1, pinode::S_IFREG, b"gone", true);
        orphan.flags = U32::new(orphan.flags.get() | pinode::FLAG_ORPHAN);
        write_pinode(&image, 6, &orphan);
    }
    assert_eq!(check(&t).exit_code(), 0, "an orphan is legal on the media");
    let fs = Fs::mount(&t.path, &MountOptions::default()).unwrap();
    assert_eq!(fs.mount_report().orphans_freed, 1);
    assert!(fs.getattr(9).is_err());
    drop(fs.unmount());
    let image = Image::open(&t.path, nosefs_core::pmem::Access::ReadOnly).unwrap();
    assert!(!image.pinode(6).is_valid());
}

/// `fsck --upgrade` gives an image made without moves the flag, keeps its data, and every crash
/// inside it leaves an image that mounts, or that `fsck --repair` restores (docs/format.md,
/// "Superblock").
#[test]
fn upgrade_adds_moves_and_survives_a_crash_inside_it() {
    use nosefs_core::format::layout::MkfsParams;
    use nosefs_core::fsck::{upgrade, Upgrade};
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("old.img");
    let params = MkfsParams {
        image_bytes: SIZE,
        without_moves: true,
        ..MkfsParams::default()
    };
    nosefs_core::mkfs::mkfs(&path, &params).unwrap();
    let fs = Fs::mount(&path, &MountOptions::default()).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap().ino;
    fs.write(f, 0, &[5; 8192]).unwrap();
    fs.fsync(f).unwrap();
    drop(fs.unmount());
    let old = std::fs::read(&path).unwrap();
    assert_eq!(upgrade(&path).unwrap(), Upgrade::MovesEnabled);
    assert_eq!(upgrade(&path).unwrap(), Upgrade::AlreadyCurrent);
    let new = std::fs::read(&path).unwrap();
    let moves_on = |bytes: &[u8]| u32::from_le_bytes(bytes[24..28].try_into().unwrap()) & 4 != 0;
    assert!(!moves_on(&old) && moves_on(&new));
    let reads_back = |what: &str| {
        let fs = Fs::mount(&path, &MountOptions::default()).expect(what);
        let mut buf = vec![0; 8192];
        assert_eq!(fs.read(f, 0, &mut buf).unwrap(), 8192, "{what}");
        assert!(buf.iter().all(|&b| b == 5), "{what}");
        drop(fs.unmount());
        let report = fsck(&path, FsckOptions::default()).unwrap();
        assert!(report.problems.is_empty(), "{what}: {:#?}", report.problems);
    };
    reads_back("upgraded");
    // A crash before the primary was written: the old primary, the new backup.
    let mut crashed = new.clone();
    crashed[..512].copy_from_slice(&old[..512]);
    std::fs::write(&path, &crashed).unwrap();
    reads_back("crash before the primary");
    // A crash while the primary was written: its flag line persisted, its checksum line not.
    let mut torn = new.clone();
    torn[508..512].copy_from_slice(&old[508..512]);
    std::fs::write(&path, &torn).unwrap();
    assert!(
        Fs::mount(&path, &MountOptions::default()).is_err(),
        "a torn primary is refused"
    );
    let repaired = fsck(&path, FsckOptions { repair: true }).unwrap();
    assert_eq!(repaired.exit_code(), 1, "{:#?}", repaired.problems);
    reads_back("torn primary, repaired");
    assert!(
        moves_on(&std::fs::read(&path).unwrap()),
        "the backup's upgrade restored"
    );
}
