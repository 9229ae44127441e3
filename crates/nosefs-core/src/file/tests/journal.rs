//! The file journal's commit protocol through the public API: fences per fsync, moves (pages
//! rewritten in place, appends grown in place, cuts), lazily cleared logs (settled before another
//! log commits the file, superseded records skipped at mount, frees held while a record may
//! replay).

use super::*;
#[test]
fn fences_per_fsync_are_few() {
    // Data (when fenced apart), commit, apply; the log's clear is settled lazily.
    let h = fresh(None);
    // Raise the extent high-water mark once (format::marks): steady state is what is counted.
    let warm = new_file(&h, b"warm");
    h.fs().write(warm, 0, b"warm").unwrap();
    h.fs().fsync(warm).unwrap();
    let f = new_file(&h, b"f");
    let cases: [(&str, u64, usize, u64); 4] = [
        ("4 KiB append (non-temporal data, fenced)", 0, 4096, 3),
        ("3000-byte append (checksummed data)", 4096, 3000, 2),
        ("1 KiB overwrite", 1000, 1024, 2),
        ("64 KiB write", 0, 65536, 3),
    ];
    for (what, offset, len, fences) in cases {
        h.fs().write(f, offset, &vec![7u8; len]).unwrap();
        let before = crate::pmem::counters();
        h.fs().fsync(f).unwrap();
        let spent = crate::pmem::counters().since(before);
        assert_eq!(spent.fences, fences, "{what} + fsync");
    }
    let before = crate::pmem::counters();
    h.fs().fsync(f).unwrap();
    assert_eq!(
        crate::pmem::counters().since(before).fences,
        0,
        "nothing pending"
    );
}

/// The file's extent list on the media: (extent number, first block) from its pinode's head.
fn media_list(fs: &Fs, ino: u64) -> Vec<(u32, u32)> {
    let slot = fs.inodes.get(ino).unwrap().primary_slot();
    let mut eno = fs.image().pinode(u64::from(slot)).extent_head.get();
    let mut list = Vec::new();
    while eno != 0 {
        let e = fs.image().extent(u64::from(eno));
        list.push((eno, e.start_block.get()));
        eno = e.next.get();
    }
    list
}

/// A page rewritten where its last commit put it commits as a move (issue 41): its extent keeps
/// its number and its place in the list, only its data moves, and its old block is free once
/// the log that moved it is settled. An image made without moves commits a new extent instead.
#[test]
fn a_rewritten_page_moves_its_extent() {
    for moves in [true, false] {
        let mut h = fresh_from(crate::format::layout::MkfsParams {
            without_moves: !moves,
            ..Default::default()
        });
        let f = new_file(&h, b"f");
        let fs = h.fs();
        assert_eq!(fs.image().geometry().moves, moves);
        fs.write(f, 0, &[1; 12_288]).unwrap();
        fs.fsync(f).unwrap();
        fs.write(f, 4096, &[2; 4096]).unwrap();
        fs.fsync(f).unwrap();
        let before = media_list(fs, f);
        assert_eq!(before.len(), 3, "the page is an extent of its own");
        fs.write(f, 4096, &[3; 4096]).unwrap();
        let counted = crate::pmem::counters();
        fs.fsync(f).unwrap();
        let spent = crate::pmem::counters().since(counted);
        let after = media_list(fs, f);
        assert_eq!(after[0], before[0]);
        assert_eq!(after[2], before[2]);
        assert_ne!(after[1].1, before[1].1, "the page's data moved");
        assert_eq!(
            after[1].0 == before[1].0,
            moves,
            "moves {moves}: the same extent"
        );
        assert_eq!(spent.fences, 3, "data, commit, apply");
        let old_block = u64::from(before[1].1);
        let bitmap = fs.image().bitmap();
        assert!(
            !crate::format::bitmap::is_set(&bitmap, old_block),
            "the old block is free"
        );
        assert!(crate::format::bitmap::is_set(
            &bitmap,
            u64::from(after[1].1)
        ));
        let mut want = vec![1; 12_288];
        want[4096..8192].fill(3);
        assert_eq!(read_all(h.fs(), f), want);
        h.remount(false);
        assert_eq!(read_all(h.fs(), f), want);
        assert_eq!(media_list(h.fs(), f), after);
    }
}

/// A record rewritten where it was written, at byte offsets (LMDB's meta record, 120 bytes at 32
/// and at 4,128 in turn; a log frame written as SQLite writes one, a 24-byte header and then its
/// page, again over the same frame), is placed at the offset in its block its committed piece
/// had, so its commit moves that piece's extent: the extents keep their numbers and the list
/// its length, every rewrite (frames appended share an extent, which their first rewrite
/// parts).
#[test]
fn records_rewritten_where_they_were_move_their_extents() {
    let mut h = fresh(None);
    let f = new_file(&h, b"meta");
    let fs = h.fs();
    fs.write(f, 0, &[0; 16_384]).unwrap();
    fs.fsync(f).unwrap();
    for at in [32u64, 4128] {
        fs.write(f, at, &[9; 120]).unwrap();
        fs.fsync(f).unwrap();
    }
    let before = media_list(fs, f);
    for round in 1..=6u8 {
        for at in [32u64, 4128] {
            fs.write(f, at, &[round; 120]).unwrap();
            fs.fsync(f).unwrap();
        }
        let after = media_list(fs, f);
        let numbers = |l: &[(u32, u32)]| l.iter().map(|e| e.0).collect::<Vec<_>>();
        assert_eq!(
            numbers(&after),
            numbers(&before),
            "round {round}: the same extents"
        );
    }
    let log = new_file(&h, b"log");
    let fs = h.fs();
    let frame = |fs: &Fs, k: u64, fill: u8| {
        let at = 32 + k * 4120;
        fs.write(log, at, &[fill; 24]).unwrap();
        fs.write(log, at + 24, &[fill; 4096]).unwrap();
        fs.fsync(log).unwrap();
    };
    // Appended frames grow one extent; the first pass over them parts it, a frame at a time (a
    // move that cuts it, the rest a new extent); every later pass moves them.
    (0..8).for_each(|k| frame(fs, k, 1));
    (0..8).for_each(|k| frame(fs, k, 3));
    let first = media_list(fs, log);
    for k in 0..8 {
        frame(fs, k, 2);
        assert_eq!(
            media_list(fs, log).iter().map(|e| e.0).collect::<Vec<_>>(),
            first.iter().map(|e| e.0).collect::<Vec<_>>(),
            "frame {k} rewritten: the same extents"
        );
    }
    let mut want = vec![0u8; 32 + 8 * 4120];
    want[32..].fill(2);
    assert_eq!(read_all(fs, log), want);
    h.remount(false);
    assert_eq!(read_all(h.fs(), log), want);
    let mut meta = vec![0u8; 16_384];
    meta[32..152].fill(6);
    meta[4128..4248].fill(6);
    assert_eq!(read_all(h.fs(), f), meta);
}

/// An append joined to the file's last extent grows that extent in place, and a truncate inside
/// it cuts it in place (moves that keep the start): the extent keeps its number; the blocks past
/// the cut are free.
#[test]
fn appends_grow_and_truncates_cut_the_last_extent_in_place() {
    let mut h = fresh(None);
    let f = new_file(&h, b"f");
    let fs = h.fs();
    let length = |fs: &Fs| {
        let (eno, _) = media_list(fs, f)[0];
        fs.image().extent(u64::from(eno)).length.get()
    };
    fs.write(f, 0, &[1; 5000]).unwrap();
    fs.fsync(f).unwrap();
    let first = media_list(fs, f);
    for (i, len) in [(0u8, 4096usize), (1, 3000), (2, 100)] {
        fs.append(f, &vec![i + 2; len]).unwrap();
        fs.fsync(f).unwrap();
        assert_eq!(
            media_list(fs, f),
            first,
            "append {i}: the same extent, where it was"
        );
    }
    assert_eq!(length(fs), 5000 + 4096 + 3000 + 100);
    let last_block = u64::from(first[0].1) + 2;
    assert!(crate::format::bitmap::is_set(
        &fs.image().bitmap(),
        last_block
    ));
    fs.truncate(f, 6000).unwrap();
    fs.fsync(f).unwrap();
    assert_eq!(media_list(fs, f), first, "cut in place");
    assert_eq!(length(fs), 6000);
    assert!(
        !crate::format::bitmap::is_set(&fs.image().bitmap(), last_block),
        "the blocks past the cut are free"
    );
    let want = read_all(fs, f);
    h.remount(false);
    assert_eq!(read_all(h.fs(), f), want);
    assert_eq!(media_list(h.fs(), f), first);
}

/// A file committed again through another log first settles the log of its last commit, whose
/// clear that commit left in the cache (`settle`, rule 1): a crash could otherwise replay the
/// older record over the newer one. Through the same log, the newer record replaces it.
#[test]
fn a_file_committed_through_another_log_settles_its_last_one() {
    let mut h = fresh(None);
    let f = new_file(&h, b"f");
    {
        let fs = h.fs();
        let g = fs.image().geometry();
        let in_flight = || fs.image().region().recorder().unwrap().unpersisted_lines();
        let last_log = || {
            let mark = fs
                .inodes
                .get(f)
                .unwrap()
                .file_state()
                .unwrap()
                .lock()
                .last_commit;
            let index = fs.settler.unsettled_log_of(mark).expect("left unsettled");
            index - g.dir_log_count()
        };
        fs.write(f, 0, b"first").unwrap();
        fs.fsync(f).unwrap();
        let first = last_log();
        assert!(
            in_flight().contains(&g.file_log_offset(first)),
            "cleared lazily"
        );
        // Every other log stays free; the first is held, as if another thread committed
        // through it.
        let mut free = Vec::new();
        while let Some(log) = fs.file_logs.alloc(fs.image()) {
            free.push(log);
        }
        free.iter()
            .filter(|&&log| u64::from(log) != first)
            .for_each(|&log| fs.file_logs.free(log));
        fs.write(f, 0, b"second").unwrap();
        fs.fsync(f).unwrap();
        let second = last_log();
        assert_ne!(second, first);
        assert!(
            !in_flight().contains(&g.file_log_offset(first)),
            "the first log was settled before the second commit"
        );
        assert!(in_flight().contains(&g.file_log_offset(second)));
        fs.file_logs.free(first as u32);
    }
    h.remount(false);
    assert_eq!(read_all(h.fs(), f), b"second");
}

/// A file log left unsettled whose slot a later directory commit emptied (the file renamed,
/// which writes its pinode to a new slot, or unlinked) is skipped by recovery (`settle`, rule 3):
/// the image mounts, fscks clean and holds the directory commit's state.
#[test]
fn a_superseded_file_record_is_skipped_at_mount() {
    for unlink in [false, true] {
        let h = fresh(None);
        let fs = h.fs();
        let g = fs.image().geometry();
        let f = new_file(&h, b"f");
        fs.write(f, 0, b"data").unwrap();
        fs.image().region().recorder().unwrap().take_events();
        fs.fsync(f).unwrap();
        // The commit's tail word: its last nonzero store into a file log's first word.
        let events = fs.image().region().recorder().unwrap().take_events();
        let (tail_offset, tail) = events
            .into_iter()
            .filter_map(|e| match e {
                crate::pmem::Event::Store { offset, bytes, .. } => Some((offset, bytes)),
                _ => None,
            })
            .rfind(|(offset, bytes)| {
                bytes.len() == 8
                    && bytes.iter().any(|&b| b != 0)
                    && (1..g.file_log_count()).any(|log| g.file_log_offset(log) == *offset)
            })
            .expect("the commit stored its tail");
        if unlink {
            fs.unlink(ROOT_INO, b"f").unwrap();
        } else {
            fs.rename(ROOT_INO, b"f", ROOT_INO, b"g", RenameFlags::default())
                .unwrap();
        }
        // A crash before the clear reached the media: the record is intact.
        let mut image = fs.image().region().snapshot();
        image[tail_offset as usize..tail_offset as usize + 8].copy_from_slice(&tail);
        let region = crate::pmem::Region::recording_from(&image).unwrap();
        let crashed = Fs::mount_image(
            Image::from_region(region).unwrap(),
            &MountOptions::default(),
        )
        .unwrap();
        assert_eq!(crashed.report.file_logs_superseded, 1, "unlink {unlink}");
        assert_eq!(crashed.report.file_logs_replayed, 0);
        if unlink {
            assert!(crashed.lookup(ROOT_INO, b"f").is_err());
        } else {
            assert_eq!(read_all(&crashed, f), b"data");
        }
        let recovered = crashed.unmount().into_region().snapshot();
        let report = crate::fsck::fsck_region(
            crate::pmem::Region::recording_from(&recovered).unwrap(),
            crate::fsck::FsckOptions::default(),
        )
        .unwrap();
        assert!(report.problems.is_empty(), "{:#?}", report.problems);
    }
}

/// A tail block the file gives up outside a commit (a truncate to 0 keeps the last block as the
/// tail; the next write places its bytes elsewhere and drops it) may belong to an extent the
/// last commit retired, whose record its log may still replay: it must stay out of the pools
/// until the log is settled. Given back at once, an attribute blob took it, and the durable
/// image's bitmap lost the blob's bit (found by the file model test).
#[test]
fn a_tail_block_given_up_after_a_commit_is_held_while_its_record_may_replay() {
    let h = fresh(None);
    let f = new_file(&h, b"f");
    let fs = h.fs();
    let region = fs.image().region();
    region.recorder().unwrap().track_durable(region.snapshot());
    fs.write(f, 0, &[1]).unwrap();
    fs.write(f, 34135, &[2; 16385]).unwrap();
    fs.fsync(f).unwrap();
    let retired: Vec<u32> = media_list(fs, f).iter().map(|e| e.1).collect();
    fs.truncate(f, 0).unwrap();
    fs.write(f, 0, &[3; 4097]).unwrap();
    // The reservation's attribute blob takes a block through a directory commit.
    crate::vfs::ops::fallocate(fs, f, libc::FALLOC_FL_KEEP_SIZE, 0, 1).unwrap();
    let bytes = region.recorder().unwrap().durable_image().unwrap();
    let crashed = Fs::mount_image(
        Image::from_region(crate::pmem::Region::recording_from(&bytes).unwrap()).unwrap(),
        &MountOptions::default(),
    )
    .unwrap();
    assert_eq!(
        crashed.mount_report().bitmap_mismatches,
        0,
        "the blocks of extents {retired:?}, retired by the truncate, were reused too early"
    );
}
