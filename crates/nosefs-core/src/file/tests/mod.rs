//! File data through the public API: NCOW placement, packing, merging, the fragmentation policy,
//! truncate, limits, ENOSPC, and crash recovery of commits (the commit protocol's own: the
//! `journal` submodule).

use super::*;
use crate::fs::MountOptions;
use crate::image::Image;
use crate::namespace::tests::{errno, fresh, fresh_from, Harness, OWNER};
use crate::namespace::{RenameFlags, SetAttr, ROOT_INO};

mod journal;
mod windows;

fn new_file(h: &Harness, name: &[u8]) -> u64 {
    h.fs()
        .create(ROOT_INO, name, 0o644, OWNER, true)
        .unwrap()
        .ino
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut buf = vec![0xee; size + 10];
    let n = fs.read(ino, 0, &mut buf).unwrap();
    assert_eq!(n, size);
    buf.truncate(n);
    buf
}

/// Asserts that file `f` holds `want`, naming the first byte that differs (not dumping both).
fn assert_contents(fs: &Fs, f: u64, want: &[u8], what: &str) {
    let got = read_all(fs, f);
    let differs = got.iter().zip(want).position(|(a, b)| a != b);
    assert!(
        got.len() == want.len() && differs.is_none(),
        "{what}: {} bytes, {} wanted; first difference at {differs:?}",
        got.len(),
        want.len()
    );
}

#[test]
fn a_small_overwrite_copies_nothing_else() {
    let h = fresh(None);
    let f = new_file(&h, b"f");
    h.fs().write(f, 0, &[b'a'; 4096]).unwrap();
    h.fs().fsync(f).unwrap();
    let free = h.fs().free_data_blocks();
    h.fs().write(f, 1024, &[b'b'; 1024]).unwrap();
    assert_eq!(
        h.fs().file_pieces(f).unwrap(),
        3,
        "the extent is split around the new 1 KiB"
    );
    assert_eq!(
        free - h.fs().free_data_blocks(),
        1,
        "one block for the 1 KiB (its rest is the file's tail), none for a copy"
    );
    h.fs().fsync(f).unwrap();
    let mut want = vec![b'a'; 4096];
    want[1024..2048].fill(b'b');
    assert_eq!(read_all(h.fs(), f), want);
}

#[test]
fn a_sparse_file_counts_the_blocks_it_holds_after_a_remount_before_any_open() {
    let mut h = fresh(None);
    let f = new_file(&h, b"sparse");
    h.fs().write(f, 0, &[b'a'; 16384]).unwrap();
    h.fs().write(f, 1 << 30, b"z").unwrap();
    h.fs().fsync(f).unwrap();
    h.fs().punch_hole(f, 4096, 8192).unwrap();
    let blocks = |fs: &Fs| fs.getattr(f).unwrap().blocks;
    let loaded = blocks(h.fs());
    assert_eq!(
        loaded,
        3 * 8,
        "8 KiB of 'a' and the 'z', in whole 4 KiB blocks (512-byte units)"
    );
    h.remount(false);
    assert_eq!(
        blocks(h.fs()),
        loaded,
        "counted from the extent list on the media, not as a dense 1 GiB"
    );
    assert_eq!(blocks(h.fs()), loaded, "the count kept for the next stat");
    let mut byte = [0u8; 1];
    h.fs().read(f, 1 << 30, &mut byte).unwrap();
    assert_eq!(
        (byte[0], blocks(h.fs())),
        (b'z', loaded),
        "and the same once loaded"
    );
    h.fs().write(f, 1 << 20, &[b'y'; 4096]).unwrap();
    assert_eq!(blocks(h.fs()), loaded + 8, "the state counts from then on");
}

#[test]
fn small_writes_pack_into_blocks_and_merge_into_one_extent() {
    let mut h = fresh(None);
    let f = new_file(&h, b"log");
    let free = h.fs().free_data_blocks();
    for i in 0..64u8 {
        h.fs().append(f, &[i; 1024]).unwrap();
    }
    assert_eq!(
        free - h.fs().free_data_blocks(),
        16,
        "64 KiB of 1 KiB appends fill 16 blocks"
    );
    h.fs().fsync(f).unwrap();
    assert_eq!(
        h.fs().file_pieces(f).unwrap(),
        1,
        "contiguous appends merge"
    );
    h.remount(false);
    let data = read_all(h.fs(), f);
    assert_eq!(data.len(), 64 * 1024);
    assert!((0..64).all(|i| data[i * 1024..(i + 1) * 1024].iter().all(|&b| b == i as u8)));
    let usage = crate::info::Usage::scan(h.fs().image());
    assert_eq!(usage.space_amplification(), Some(1.0));
}

/// A SQLite log frame's length: a 24-byte header, then its 4 KiB page.
const FRAME: u64 = 24 + 4096;

/// The header and page of frame `k` in lap `lap` of a test's log (bytes that tell them apart).
fn frame_bytes(lap: u8, k: u64) -> (Vec<u8>, Vec<u8>) {
    let tag = lap.wrapping_mul(31).wrapping_add(k as u8);
    (vec![tag; 24], vec![tag ^ 0x5a; 4096])
}

/// Asserts that log `f` holds lap `lap`'s first `frames` frames from byte 32 on.
fn assert_frames(fs: &Fs, f: u64, lap: u8, frames: u64) {
    let data = read_all(fs, f);
    for k in 0..frames {
        let (header, page) = frame_bytes(lap, k);
        let at = (32 + k * FRAME) as usize;
        assert_eq!(&data[at..at + 24], &header[..], "frame {k}'s header");
        assert_eq!(
            &data[at + 24..at + FRAME as usize],
            &page[..],
            "frame {k}'s page"
        );
    }
}

#[test]
fn a_write_continuing_the_last_one_continues_its_run_of_the_data_zone() {
    // SQLite's log: each frame a 24-byte header, then the 4 KiB page right after it, each frame
    // synced; a second lap overwrites the first from its start.
    let mut h = fresh(None);
    let f = new_file(&h, b"wal");
    let free = h.fs().free_data_blocks();
    for lap in 0..2u8 {
        for k in 0..40 {
            let (header, page) = frame_bytes(lap, k);
            h.fs().write(f, 32 + k * FRAME, &header).unwrap();
            h.fs().write(f, 32 + k * FRAME + 24, &page).unwrap();
            h.fs().fsync(f).unwrap();
        }
        // The first lap's frames are one run and one piece. The second lap rewrites each frame
        // where it was (`records_rewritten_where_they_were_move_their_extents`): a piece each,
        // still one after another in the data zone (the block count below).
        let most = if lap == 0 { 3 } else { 41 };
        assert!(
            h.fs().file_pieces(f).unwrap() <= most,
            "lap {lap}: {} pieces",
            h.fs().file_pieces(f).unwrap()
        );
    }
    let used = free - h.fs().free_data_blocks();
    assert!(
        used <= (32 + 40 * FRAME).div_ceil(4096) + 2,
        "{used} blocks for a log of {} bytes: no half-empty block per frame",
        32 + 40 * FRAME
    );
    h.remount(false);
    assert_frames(h.fs(), f, 1, 40);
}

/// The same log, with the block after the tail block taken whenever a frame's page comes (as
/// another file's write or an old frame's block not yet free takes it): the page cannot follow
/// its header there, so the header is placed again with the page. Each frame stays one piece
/// (apart, the two pieces of each of 16 frames crowded a 64 KiB window past the rewrite
/// threshold); the bytes are the frames'.
#[test]
fn a_page_that_cannot_follow_its_header_takes_the_header_along() {
    const FRAMES: u64 = 40;
    let mut h = fresh(None);
    let f = new_file(&h, b"wal");
    let free = h.fs().free_data_blocks();
    for lap in 0..3u8 {
        for k in 0..FRAMES {
            let (header, page) = frame_bytes(lap, k);
            let fs = h.fs();
            fs.write(f, 32 + k * FRAME, &header).unwrap();
            let inode = fs.inodes.get(f).unwrap();
            let file = fs.file_of(&inode).unwrap();
            let (_, end) = file.lock().tail.expect("the header went to the tail block");
            let after = end / BLOCK_SIZE;
            let taken = fs.blocks.alloc_exact(after, 1);
            fs.write(f, 32 + k * FRAME + 24, &page).unwrap();
            let at = 32 + k * FRAME;
            let piece = file
                .lock()
                .map
                .get(at)
                .expect("a piece starts at the header");
            assert_eq!(
                piece.len, FRAME,
                "lap {lap}, frame {k}: header and page one piece"
            );
            fs.fsync(f).unwrap();
            if taken {
                fs.blocks.free(after, 1);
            }
        }
        let pieces = h.fs().file_pieces(f).unwrap() as u64;
        assert!(pieces <= FRAMES + 1, "lap {lap}: {pieces} pieces");
    }
    let used = free - h.fs().free_data_blocks();
    assert!(
        used <= 2 * (32 + FRAMES * FRAME).div_ceil(4096) + 2,
        "{used} blocks for a log of {} bytes",
        32 + FRAMES * FRAME
    );
    h.remount(false);
    assert_frames(h.fs(), f, 2, FRAMES);
}

/// A rejoined write's bytes (the earlier write's, then its own) land in order across the
/// ranges of a placement, whichever range the boundary between them falls in, with and without
/// non-temporal stores.
#[test]
fn joined_bytes_are_stored_in_order_across_ranges() {
    let h = fresh(None);
    let fs = h.fs();
    let first = fs.blocks.alloc(4).expect("space");
    let base = fs.image().geometry().block_offset(0);
    for (prefix_len, data_len) in [(24usize, 4096usize), (24, 40), (300, 5000), (7, 1)] {
        let prefix: Vec<u8> = (0..prefix_len).map(|i| i as u8 | 0x80).collect();
        let data: Vec<u8> = (0..data_len).map(|i| (i % 127) as u8).collect();
        let total = (prefix_len + data_len) as u64;
        // Three ranges: a short one inside the prefix (or past it), then two apart.
        let cut = (prefix_len as u64 / 2).max(1).min(total - 1);
        let rest = total - cut;
        let placement: Placement = smallvec::smallvec![
            (first * BLOCK_SIZE + 100, cut),
            (first * BLOCK_SIZE + 8192 + 3, rest / 2),
            (first * BLOCK_SIZE + 12_288 + 50, rest - rest / 2),
        ];
        fs.store_data_joined(&placement, &prefix, &data);
        let mut got = Vec::new();
        for &(addr, len) in &placement {
            let mut bytes = vec![0u8; len as usize];
            fs.image().region().read_bytes(base + addr, &mut bytes);
            got.extend_from_slice(&bytes);
        }
        let want: Vec<u8> = prefix.iter().chain(&data).copied().collect();
        assert_eq!(got, want, "prefix {prefix_len}, data {data_len}");
    }
    fs.blocks.free(first, 4);
}

#[test]
fn holes_truncate_and_append_behave_as_posix_says() {
    let mut h = fresh(None);
    let f = new_file(&h, b"f");
    h.fs().write(f, 10_000, b"end").unwrap();
    let data = read_all(h.fs(), f);
    assert_eq!(data.len(), 10_003);
    assert!(
        data[..10_000].iter().all(|&b| b == 0),
        "a hole reads as zeros"
    );
    h.fs().truncate(f, 5).unwrap();
    h.fs().truncate(f, 20).unwrap();
    assert_eq!(read_all(h.fs(), f), vec![0; 20], "regrown bytes are zero");
    assert_eq!(h.fs().append(f, b"xy").unwrap(), 20);
    h.fs().fsync(f).unwrap();
    h.remount(false);
    let mut want = vec![0; 20];
    want.extend_from_slice(b"xy");
    assert_eq!(read_all(h.fs(), f), want);
    let d = h.fs().mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap().ino;
    assert_eq!(errno(h.fs().write(d, 0, b"x")), Errno::EISDIR);
    assert_eq!(errno(h.fs().truncate(d, 0)), Errno::EISDIR);
}

#[test]
fn absurd_offsets_are_errors_not_panics() {
    let h = fresh(None);
    let f = new_file(&h, b"f");
    assert_eq!(errno(h.fs().write(f, u64::MAX - 1, b"xy")), Errno::EFBIG);
    assert_eq!(errno(h.fs().write(f, MAX_FILE_BYTES, b"x")), Errno::EFBIG);
    assert_eq!(errno(h.fs().truncate(f, u64::MAX)), Errno::EFBIG);
    let mut buf = [0u8; 4];
    assert_eq!(errno(h.fs().read(f, u64::MAX, &mut buf)), Errno::EINVAL);
    assert_eq!(h.fs().read(f, MAX_FILE_BYTES - 1, &mut buf).unwrap(), 0);
    // Past the largest file but a valid offset: nothing to read, as the kernel answers.
    assert_eq!(h.fs().read(f, 1 << 62, &mut buf).unwrap(), 0);
}

/// fallocate answers as the kernel's vfs_fallocate: flags that do not go together are
/// EOPNOTSUPP, a range past the largest file is EFBIG (ext4's answer), both before the file
/// system looks at the range.
#[test]
fn fallocate_refuses_as_the_kernel_does() {
    use crate::vfs::ops::fallocate;
    use libc::{
        FALLOC_FL_COLLAPSE_RANGE as COLLAPSE, FALLOC_FL_INSERT_RANGE as INSERT,
        FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO,
    };
    let h = fresh(None);
    let f = new_file(&h, b"f");
    h.fs().write(f, 0, &[7; 100]).unwrap();
    let fs = h.fs();
    let past = MAX_FILE_BYTES as i64;
    for (mode, offset, len, want) in [
        (PUNCH, 0, 4, Errno::EOPNOTSUPP),
        (COLLAPSE | KEEP, 0, 4096, Errno::EOPNOTSUPP),
        (INSERT | KEEP, 0, 4096, Errno::EOPNOTSUPP),
        (0x100, 0, 4, Errno::EOPNOTSUPP),
        (0, past, 1, Errno::EFBIG),
        (KEEP, past - 1, 2, Errno::EFBIG),
        (PUNCH | KEEP, 1 << 50, 4096, Errno::EFBIG),
        (ZERO, 1 << 50, 4096, Errno::EFBIG),
        (0, i64::MAX, 2, Errno::EFBIG),
        (0, -1, 4, Errno::EINVAL),
        (0, 0, 0, Errno::EINVAL),
    ] {
        assert_eq!(
            fallocate(fs, f, mode, offset, len),
            Err(want),
            "mode {mode:#x} at {offset}"
        );
    }
    assert_eq!(fs.getattr(f).unwrap().size, 100);
    assert_eq!(fallocate(fs, f, 0, past - 1, 1), Ok(()));
    assert_eq!(fs.getattr(f).unwrap().size, MAX_FILE_BYTES);
}

#[test]
fn unsynced_writes_vanish_in_a_crash_and_synced_ones_stay() {
    let mut h = fresh(None);
    let f = new_file(&h, b"f");
    h.fs().write(f, 0, &[1; 5000]).unwrap();
    h.fs().fsync(f).unwrap();
    h.fs().write(f, 100, &[2; 300]).unwrap();
    h.fs().write(f, 5000, &[3; 300]).unwrap();
    assert_eq!(
        h.fs().getattr(f).unwrap().size,
        5300,
        "stat sees pending writes"
    );
    h.remount(false);
    assert_eq!(read_all(h.fs(), f), vec![1; 5000]);
}

#[test]
fn sync_mount_makes_every_write_durable() {
    let h = fresh(None);
    let image = h.fs.unwrap().unmount();
    let fs = Fs::mount_image(
        image,
        &MountOptions {
            sync: true,
            cpus: Some(2),
            ..MountOptions::default()
        },
    )
    .unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap().ino;
    fs.write(f, 0, b"durable").unwrap();
    let crashed = Image::from_region(
        crate::pmem::Region::recording_from(&fs.image().region().snapshot()).unwrap(),
    )
    .unwrap();
    let fs = Fs::mount_image(crashed, &MountOptions::default()).unwrap();
    let mut buf = [0u8; 16];
    let n = fs.read(f, 0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"durable");
}

#[test]
fn enospc_leaves_a_clean_image_and_deleting_gives_the_space_back() {
    let mut h = fresh(None);
    let chunk = vec![9u8; 256 * 1024];
    let fill = |h: &Harness, prefix: &str| -> u64 {
        let mut written = 0u64;
        for i in 0.. {
            let f = new_file(h, format!("{prefix}{i}").as_bytes());
            match h.fs().write(f, 0, &chunk) {
                Ok(_) => written += chunk.len() as u64,
                Err(e) => {
                    assert_eq!(e.errno(), Errno::ENOSPC);
                    break;
                }
            }
            h.fs().fsync(f).unwrap();
        }
        written
    };
    let first = fill(&h, "a");
    assert!(first > 0);
    h.remount(true);
    let names: Vec<Vec<u8>> = {
        let mut v = Vec::new();
        h.fs()
            .readdir(ROOT_INO, 0, |e| {
                v.push(e.name);
                true
            })
            .unwrap();
        v
    };
    for name in names.iter().filter(|n| n.starts_with(b"a")) {
        h.fs().unlink(ROOT_INO, name).unwrap();
    }
    let second = fill(&h, "b");
    assert!(
        second.abs_diff(first) * 100 <= first,
        "fill {first}, delete all, fill {second}: within 1%"
    );
    h.remount(false);
}

/// The stores `op` issues, after checking it left none in flight.
fn stores_of(fs: &Fs, op: impl FnOnce(&Fs)) -> Vec<(u64, Vec<u8>)> {
    fs.image().region().recorder().unwrap().take_events();
    op(fs);
    assert_eq!(
        crate::namespace::tests::in_flight_besides_clears(fs),
        Vec::<u64>::new(),
        "stores left in flight"
    );
    let region = fs.image().region();
    let mut recorder = region.recorder().unwrap();
    recorder
        .take_events()
        .into_iter()
        .filter_map(|e| match e {
            crate::pmem::Event::Store { offset, bytes, .. }
            | crate::pmem::Event::StoreNt { offset, bytes, .. } => Some((offset, bytes)),
            _ => None,
        })
        .collect()
}

/// For the image a crash leaves after every prefix of `stores` on top of `base`: fsck must find
/// it clean, mount must recover it, `check` must accept what it shows, and the recovered image
/// must be clean after unmount.
fn every_cut(base: &[u8], stores: &[(u64, Vec<u8>)], label: &str, check: impl Fn(&Fs, &str)) {
    for cut in 0..=stores.len() {
        let mut bytes = base.to_vec();
        for (at, data) in &stores[..cut] {
            bytes[*at as usize..*at as usize + data.len()].copy_from_slice(data);
        }
        let what = format!("{label}, cut {cut} of {}", stores.len());
        check_clean(&bytes, &what);
        let region = crate::pmem::Region::recording_from(&bytes).unwrap();
        let fs = Fs::mount_image(
            Image::from_region(region).unwrap(),
            &MountOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{what}: mount failed: {e}"));
        check(&fs, &what);
        check_clean(&fs.unmount().into_region().snapshot(), &what);
    }
}

fn check_clean(bytes: &[u8], what: &str) {
    let report = crate::fsck::fsck_region(
        crate::pmem::Region::recording_from(bytes).unwrap(),
        crate::fsck::FsckOptions::default(),
    )
    .unwrap();
    assert!(report.problems.is_empty(), "{what}: {:#?}", report.problems);
}

#[test]
fn crash_at_every_store_of_an_fsync_and_a_truncate() {
    type Op = fn(&Fs, u64);
    let cases: [(usize, u64, usize, Op); 4] = [
        (0, 0, 3000, |fs, f| fs.fsync(f).unwrap()),
        (8192, 1000, 100, |fs, f| fs.fsync(f).unwrap()),
        (8192, 4096, 40_000, |fs, f| fs.fsync(f).unwrap()),
        (8192, 1000, 100, |fs, f| fs.truncate(f, 2000).unwrap()),
    ];
    for (i, (setup_len, offset, len, op)) in cases.into_iter().enumerate() {
        let h = fresh(None);
        let f = new_file(&h, b"f");
        if setup_len > 0 {
            h.fs().write(f, 0, &vec![1u8; setup_len]).unwrap();
            h.fs().fsync(f).unwrap();
        }
        let before = read_all(h.fs(), f);
        h.fs().write(f, offset, &vec![2u8; len]).unwrap();
        let base = h.fs().image().region().snapshot();
        let stores = stores_of(h.fs(), |fs| op(fs, f));
        let after = read_all(h.fs(), f);
        every_cut(&base, &stores, &format!("case {i}"), |fs, what| {
            let got = read_all(fs, f);
            assert!(
                got == before || got == after,
                "{what}: neither before nor after"
            );
        });
    }
}

#[test]
fn an_open_file_outlives_its_last_name_until_closed() {
    let mut h = fresh(None);
    let f = new_file(&h, b"f");
    h.fs().write(f, 0, &[5; 10_000]).unwrap();
    h.fs().fsync(f).unwrap();
    let free = h.fs().free_data_blocks();
    h.fs().open(f).unwrap();
    h.fs().unlink(ROOT_INO, b"f").unwrap();
    assert_eq!(errno(h.fs().lookup(ROOT_INO, b"f")), Errno::ENOENT);
    assert_eq!(h.fs().getattr(f).unwrap().nlink, 0);
    h.fs().write(f, 10_000, b"more").unwrap();
    h.fs().fsync(f).unwrap();
    assert_eq!(read_all(h.fs(), f).len(), 10_004);
    // A new file may take the old name meanwhile.
    new_file(&h, b"f");
    h.fs().close(f).unwrap();
    assert_eq!(errno(h.fs().getattr(f)), Errno::ENOENT);
    assert!(h.fs().free_data_blocks() >= free, "its blocks came back");
    h.remount(true);

    // A crash while it is open: mount frees the orphan.
    let g = new_file(&h, b"g");
    h.fs().write(g, 0, &[6; 5000]).unwrap();
    h.fs().fsync(g).unwrap();
    h.fs().open(g).unwrap();
    h.fs().unlink(ROOT_INO, b"g").unwrap();
    let report = h.remount(false);
    assert_eq!(report.orphans_freed, 1);
    assert_eq!(errno(h.fs().getattr(g)), Errno::ENOENT);
}

#[test]
fn crash_at_every_store_of_an_orphaning_unlink_and_its_close() {
    let h = fresh(None);
    let f = new_file(&h, b"f");
    h.fs().write(f, 0, &[5; 6000]).unwrap();
    h.fs().fsync(f).unwrap();
    h.fs().open(f).unwrap();
    for (step, op) in [("unlink", 0), ("close", 1)] {
        let base = h.fs().image().region().snapshot();
        let stores = stores_of(h.fs(), |fs| {
            if op == 0 {
                fs.unlink(ROOT_INO, b"f").unwrap();
            } else {
                fs.close(f).unwrap();
            }
        });
        every_cut(&base, &stores, step, |fs, what| {
            // Either the name is still there with its data, or the file is gone entirely.
            match fs.lookup(ROOT_INO, b"f") {
                Ok(a) => assert_eq!(read_all(fs, a.ino), vec![5; 6000], "{what}"),
                Err(e) => assert_eq!(e.errno(), Errno::ENOENT, "{what}"),
            }
        });
    }
}

#[test]
fn a_rename_over_an_open_file_orphans_it() {
    let mut h = fresh(None);
    let target = new_file(&h, b"target");
    h.fs().write(target, 0, b"old contents").unwrap();
    h.fs().fsync(target).unwrap();
    let source = new_file(&h, b"source");
    h.fs().open(target).unwrap();
    h.fs()
        .rename(
            ROOT_INO,
            b"source",
            ROOT_INO,
            b"target",
            RenameFlags::default(),
        )
        .unwrap();
    assert_eq!(h.fs().lookup(ROOT_INO, b"target").unwrap().ino, source);
    assert_eq!(read_all(h.fs(), target), b"old contents");
    assert_eq!(h.fs().getattr(target).unwrap().nlink, 0);
    // Still fully usable through its descriptor: fchmod, fchown, futimens (issue 25).
    let change = crate::namespace::SetAttr {
        mode: Some(0o600),
        uid: Some(7),
        gid: Some(8),
        mtime_ns: Some(1_000_000_000),
        ..Default::default()
    };
    let attr = h.fs().setattr(target, &change).unwrap();
    assert_eq!(
        (
            attr.mode & 0o7777,
            attr.uid,
            attr.gid,
            attr.mtime_ns,
            attr.nlink
        ),
        (0o600, 7, 8, 1_000_000_000, 0)
    );
    h.fs().write(target, 0, b"new").unwrap();
    h.fs().fsync(target).unwrap();
    assert_eq!(read_all(h.fs(), target), b"new contents");
    h.remount(true); // fsck accepts the orphan; mount frees it
    assert_eq!(h.fs().mount_report().orphans_freed, 1);
}

#[test]
fn a_file_without_extents_takes_size_and_times_from_its_pinode() {
    let mut h = fresh(None);
    let f = new_file(&h, b"sparse");
    h.fs().truncate(f, 5000).unwrap();
    h.remount(true);
    // Mount makes no data state for a file without extents; its first use makes it from the
    // pinode, so the size a truncate committed and a utimens made before that use both hold.
    let mtime_ns = 1_234_567_890_123;
    let change = SetAttr {
        mtime_ns: Some(mtime_ns),
        ..SetAttr::default()
    };
    h.fs().setattr(f, &change).unwrap();
    assert_eq!(h.fs().getattr(f).unwrap().size, 5000);
    assert_eq!(h.fs().getattr(f).unwrap().mtime_ns, mtime_ns);
    assert_eq!(read_all(h.fs(), f), vec![0; 5000]);
    assert_eq!(
        h.fs().getattr(f).unwrap().mtime_ns,
        mtime_ns,
        "a read keeps mtime"
    );
    h.fs().write(f, 6000, b"x").unwrap();
    assert_eq!(h.fs().getattr(f).unwrap().size, 6001);
    h.fs().fsync(f).unwrap();
    h.remount(false);
    let mut want = vec![0; 6001];
    want[6000] = b'x';
    assert_eq!(read_all(h.fs(), f), want);
}

#[test]
fn a_removed_file_without_state_refuses_writes() {
    let h = fresh(None);
    let f = new_file(&h, b"gone");
    let free = h.fs().free_data_blocks();
    h.fs().unlink(ROOT_INO, b"gone").unwrap();
    assert_eq!(errno(h.fs().write(f, 0, b"late")), Errno::ENOENT);
    assert_eq!(errno(h.fs().truncate(f, 10)), Errno::ENOENT);
    assert_eq!(free, h.fs().free_data_blocks(), "nothing allocated");
}

#[test]
fn reads_update_an_access_time_older_than_the_last_change_once() {
    let h = fresh(None);
    let ino = new_file(&h, b"f");
    h.fs().write(ino, 0, b"some bytes").unwrap();
    h.fs().fsync(ino).unwrap();
    let old = crate::namespace::SetAttr {
        atime_ns: Some(1_000),
        ..Default::default()
    };
    h.fs().setattr(ino, &old).unwrap();
    let before = h.fs().getattr(ino).unwrap();
    assert_eq!(before.atime_ns, 1_000);
    read_all(h.fs(), ino);
    let first = h.fs().getattr(ino).unwrap().atime_ns;
    assert!(
        first >= before.mtime_ns,
        "relatime: an atime older than mtime moves"
    );
    read_all(h.fs(), ino);
    assert_eq!(
        h.fs().getattr(ino).unwrap().atime_ns,
        first,
        "relatime: one store per change, not per read"
    );
    // A listing of a directory counts as reading it.
    let dir = h.fs().getattr(crate::namespace::ROOT_INO).unwrap();
    h.fs().setattr(crate::namespace::ROOT_INO, &old).unwrap();
    h.fs()
        .readdir(crate::namespace::ROOT_INO, 0, |_| true)
        .unwrap();
    assert!(h.fs().getattr(crate::namespace::ROOT_INO).unwrap().atime_ns >= dir.mtime_ns);
}

#[test]
fn a_file_whose_pieces_share_its_last_block_is_removed_after_a_remount() {
    // Found by CPython's test_shutil under the shim: zipfile rewrites a header inside a file
    // still in its first block, the program forks (the embedded shim unmounts), and the file
    // is removed after the next mount. Its three extents share one block, which must go back
    // to the allocator once.
    let mut h = fresh(None);
    let f = new_file(&h, b"f");
    h.fs().write(f, 0, &[b'a'; 100]).unwrap();
    h.fs().write(f, 10, &[b'b'; 5]).unwrap();
    let free = h.fs().free_data_blocks();
    h.remount(true);
    h.fs().unlink(ROOT_INO, b"f").unwrap();
    h.remount(true);
    assert_eq!(h.fs().free_data_blocks(), free + 1);
}

/// Issue 37: a punch that drops a whole committed piece between two committed ones left the
/// piece before it linked to the retired extent (`extent[..].flags: in a file's list but not
/// valid`), found by fsstress on the FUSE mount.
#[test]
fn a_punch_dropping_a_middle_extent_relinks_its_neighbours() {
    let mut h = fresh(None);
    let f = new_file(&h, b"f");
    let fs = h.fs();
    fs.write(f, 303_104, &[0x63; 16384]).unwrap();
    fs.write(f, 704_512, &[0x61; 90112]).unwrap();
    fs.write(f, 1_349_923, &[0x62; 213]).unwrap();
    fs.fsync(f).unwrap();
    assert_eq!(fs.file_pieces(f).unwrap(), 3);
    fs.punch_hole(f, 522_124, 810_807).unwrap();
    assert_eq!(fs.file_pieces(f).unwrap(), 2);
    let want = {
        let mut v = vec![0u8; 1_349_923 + 213];
        v[303_104..319_488].fill(0x63);
        v[1_349_923..].fill(0x62);
        v
    };
    assert_eq!(read_all(h.fs(), f), want);
    h.remount(true); // fsck inside
    assert_eq!(read_all(h.fs(), f), want);
    h.remount(false);
    assert_eq!(read_all(h.fs(), f), want);
}

/// The same gap made by an overwrite whose new piece a punch drops before any commit: the
/// overwritten extent retires with no new extent beside it.
#[test]
fn an_overwrite_punched_away_before_its_commit_relinks_the_list() {
    let mut h = fresh(None);
    let f = new_file(&h, b"f");
    let fs = h.fs();
    for i in 0..3u64 {
        fs.write(f, i * 20_000, &[1 + i as u8; 5000]).unwrap();
    }
    fs.fsync(f).unwrap();
    fs.write(f, 20_000, &[9; 5000]).unwrap();
    fs.punch_hole(f, 19_000, 7000).unwrap();
    h.remount(true);
    let data = read_all(h.fs(), f);
    assert!(data[..5000].iter().all(|&b| b == 1));
    assert!(data[5000..40_000].iter().all(|&b| b == 0));
    assert!(data[40_000..].iter().all(|&b| b == 3));
}

/// Writes by others than root clear set-id bits (Linux's file_remove_privs), also after a
/// remount rebuilt the inode, and cost nothing more for files without them.
#[test]
fn writes_by_others_clear_set_id_bits() {
    use crate::namespace::perm::Cred;
    let mut h = fresh(None);
    let f = new_file(&h, b"f");
    let nobody = || Cred {
        uid: 65534,
        gid: 65534,
        groups: Default::default(),
    };
    let chmod = |fs: &Fs, mode| {
        let change = SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        };
        fs.setattr(f, &change).unwrap();
    };
    let mode = |fs: &Fs| fs.getattr(f).unwrap().mode & 0o7777;
    chmod(h.fs(), 0o6775);
    h.fs().write_by(f, Some(0), b"x", Cred::root).unwrap();
    assert_eq!(mode(h.fs()), 0o6775, "root keeps them");
    h.fs().write_by(f, None, b"y", nobody).unwrap();
    assert_eq!(mode(h.fs()), 0o775);
    chmod(h.fs(), 0o2644);
    h.fs().fsync(f).unwrap();
    h.remount(false);
    h.fs().write_by(f, Some(0), b"z", nobody).unwrap();
    assert_eq!(
        mode(h.fs()),
        0o644,
        "outside the group, without group-execute"
    );
    h.fs().write_by(f, Some(0), b"z", nobody).unwrap();
    assert_eq!(read_all(h.fs(), f), b"zy");
}
