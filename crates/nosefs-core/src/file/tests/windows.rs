//! The fragmentation policy: crowded windows rewritten at fsync, by a copy of the whole window
//! or into the run they already hold (`file::inplace`), with what a crash, a remount and the
//! block counts must find after.

use super::*;

#[test]
fn fragmented_windows_are_rewritten_at_fsync() {
    let h = fresh(None);
    let f = new_file(&h, b"f");
    let mut want: Vec<u8> = (0..128 * 1024).map(|i| (i % 251) as u8).collect();
    h.fs().write(f, 0, &want).unwrap();
    h.fs().fsync(f).unwrap();
    let mut seed = 12345u64;
    for i in 0..400u64 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset = (seed >> 20) % (want.len() as u64 - 100);
        let data = [i as u8; 100];
        h.fs().write(f, offset, &data).unwrap();
        want[offset as usize..offset as usize + 100].copy_from_slice(&data);
        h.fs().fsync(f).unwrap();
        assert!(
            h.fs().file_pieces(f).unwrap() <= 2 * (WINDOW_MAX_PIECES + 3),
            "two windows never hold much more than the threshold after fsync"
        );
    }
    assert_eq!(read_all(h.fs(), f), want);
}

/// `count` overwrites of 100 bytes, 1,900 bytes apart from `first`, the `i`th filled with
/// `fill + i` and synced while `i < synced`; `want` follows them.
fn overwrite_spread(
    h: &Harness,
    f: u64,
    want: &mut [u8],
    (first, count, synced): (u64, u64, u64),
    fill: u8,
) {
    for i in 0..count {
        let offset = first + i * 1900;
        let data = [fill + i as u8; 100];
        h.fs().write(f, offset, &data).unwrap();
        want[offset as usize..offset as usize + 100].copy_from_slice(&data);
        if i < synced {
            h.fs().fsync(f).unwrap();
        }
    }
}

/// Window 0 of a 64 KiB file written in one piece, then 100-byte overwrites 1,900 bytes apart,
/// each synced, until a commit finds the window crowded: where the window's data starts before
/// the overwrites, and the file's expected contents.
fn crowd_a_window_by_synced_overwrites(h: &Harness, f: u64) -> (u64, Vec<u8>) {
    let mut want: Vec<u8> = (0..WINDOW_BYTES).map(|i| (i % 251) as u8).collect();
    h.fs().write(f, 0, &want).unwrap();
    h.fs().fsync(f).unwrap();
    let base = h.fs().data_map(f, 0, WINDOW_BYTES, 4).unwrap()[0].physical;
    let overwrites = WINDOW_MAX_PIECES as u64 / 2;
    overwrite_spread(h, f, &mut want, (700, overwrites, overwrites), 200);
    (base, want)
}

#[test]
fn a_crowded_window_is_rewritten_into_the_run_it_already_holds() {
    let mut h = fresh(None);
    let f = new_file(&h, b"f");
    let (base, want) = crowd_a_window_by_synced_overwrites(&h, f);
    let map = h.fs().data_map(f, 0, WINDOW_BYTES, 64).unwrap();
    // The overwrite synced by the commit that found the window crowded stays where it was
    // written (the run still holds the bytes it replaces for the media); the others' bytes
    // were copied into the run, which holds the rest of the window again.
    let last = 700 + (WINDOW_MAX_PIECES as u64 / 2 - 1) * 1900;
    assert_eq!(
        map.iter()
            .map(|r| (r.physical, r.length))
            .filter(|&(_, length)| length != 100)
            .collect::<Vec<_>>(),
        vec![(base, last), (base + last + 100, WINDOW_BYTES - last - 100)],
    );
    assert_eq!(map.len(), 3);
    assert_contents(h.fs(), f, &want, "after the rewrite");
    let free = h.fs().free_data_blocks();
    h.remount(false);
    assert_eq!(
        h.fs().free_data_blocks(),
        free,
        "the blocks free in DRAM are those no extent holds"
    );
    assert_contents(h.fs(), f, &want, "after a remount");
}

#[test]
fn a_crowded_window_keeps_pending_writes_over_bytes_the_media_still_needs() {
    let mut h = fresh(None);
    let f = new_file(&h, b"f");
    let (base, mut want) = crowd_a_window_by_synced_overwrites(&h, f);
    // Crowd it again, the last overwrites pending at the fsync that finds it crowded: their
    // ranges in the run are the committed bytes a crash before the commit point must keep.
    let half = WINDOW_MAX_PIECES as u64 / 2;
    overwrite_spread(&h, f, &mut want, (1500, half + 1, half - 2), 100);
    let before = h.fs().image().region().snapshot();
    let stores = stores_of(h.fs(), |fs| fs.fsync(f).unwrap());
    let map = h.fs().data_map(f, 0, WINDOW_BYTES, 64).unwrap();
    assert_eq!(map[0].physical, base, "rewritten into its run");
    assert!(
        map.len() <= 7,
        "the three pending writes and the run around them: {map:?}"
    );
    assert_contents(h.fs(), f, &want, "after the rewrite");
    every_cut(&before, &stores, "in-place rewrite", |fs, what| {
        let got = read_all(fs, f);
        let mut synced = want.clone();
        for i in WINDOW_MAX_PIECES as u64 / 2 - 2..WINDOW_MAX_PIECES as u64 / 2 + 1 {
            let offset = (1500 + i * 1900) as usize;
            synced[offset..offset + 100].copy_from_slice(&got[offset..offset + 100]);
        }
        assert_eq!(
            got, synced,
            "{what}: a byte outside the pending writes changed"
        );
        assert!(
            got == want || got[1500 + 14 * 1900] != 100 + 14,
            "{what}: only whole commits"
        );
    });
    h.remount(false);
    assert_contents(h.fs(), f, &want, "after a remount");
}

#[test]
fn a_window_is_not_rewritten_over_another_window_s_bytes_in_its_run() {
    let h = fresh(None);
    let f = new_file(&h, b"f");
    let mut want = vec![1u8; 60_000];
    h.fs().write(f, 0, &want).unwrap();
    h.fs().fsync(f).unwrap();
    // Packed into the free end of the run's last block (the file's tail block), past the end of
    // window 0's bytes there, until it is full.
    h.fs().write(f, 70_000, &[2; 100]).unwrap();
    h.fs().write(f, 80_000, &[5; 1340]).unwrap();
    h.fs().fsync(f).unwrap();
    // Window 0 grows past the end of its run: those bytes' place in the run is window 1's.
    h.fs().write(f, 60_000, &[3; 500]).unwrap();
    want.extend_from_slice(&[3; 500]);
    want.resize(70_000, 0);
    want.extend_from_slice(&[2; 100]);
    want.resize(80_000, 0);
    want.extend_from_slice(&[5; 1340]);
    let overwrites = WINDOW_MAX_PIECES as u64 / 2;
    overwrite_spread(&h, f, &mut want, (700, overwrites, overwrites), 40);
    assert!(
        h.fs().file_pieces(f).unwrap() < WINDOW_MAX_PIECES,
        "the window was rewritten"
    );
    assert_contents(h.fs(), f, &want, "window 1's bytes in the run's last block");
}

#[test]
fn random_small_overwrites_truncates_and_punches_keep_data_and_space_exact() {
    let mut h = fresh(None);
    let f = new_file(&h, b"f");
    let file_bytes = 4 * WINDOW_BYTES as usize;
    let mut want: Vec<u8> = (0..file_bytes).map(|i| (i % 253) as u8).collect();
    h.fs().write(f, 0, &want).unwrap();
    h.fs().fsync(f).unwrap();
    let in_place_before = super::inplace::REWRITES_IN_PLACE.load(Ordering::Relaxed);
    let mut seed = 0x5eed_u64;
    let mut next = |below: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % below
    };
    for i in 0..3000u64 {
        match next(100) {
            0 => {
                let size = next(file_bytes as u64 + 5000) as usize;
                h.fs().truncate(f, size as u64).unwrap();
                want.resize(size, 0);
            }
            1 | 2 => {
                let (offset, len) = (next(file_bytes as u64), 1 + next(9000));
                h.fs().punch_hole(f, offset, len).unwrap();
                let end = ((offset + len) as usize).min(want.len());
                if (offset as usize) < end {
                    want[offset as usize..end].fill(0);
                }
            }
            3..=40 => h.fs().fsync(f).unwrap(),
            _ => {
                let offset = next(file_bytes as u64) as usize;
                let longest = if next(4) == 0 { 5000 } else { 600 };
                let len = 1 + next(longest) as usize;
                let data = vec![i as u8 ^ 0x5a; len];
                h.fs().write(f, offset as u64, &data).unwrap();
                if want.len() < offset + len {
                    want.resize(offset + len, 0);
                }
                want[offset..offset + len].copy_from_slice(&data);
            }
        }
        if i % 500 == 499 {
            assert_contents(h.fs(), f, &want, &format!("op {i}"));
            h.fs().sync_all().unwrap();
            let free = h.fs().free_data_blocks();
            h.remount(true);
            assert_eq!(h.fs().free_data_blocks(), free, "op {i}: free blocks");
            assert_contents(h.fs(), f, &want, &format!("op {i}: after a remount"));
        }
    }
    assert!(
        super::inplace::REWRITES_IN_PLACE.load(Ordering::Relaxed) > in_place_before,
        "some windows were rewritten in place"
    );
}

/// Page-sized overwrites at byte offsets leave each old block they start or end in partly in
/// use; with the piece limit alone a file settled at 1.7x its size. The space bound
/// (`crowding::pins_too_much`) keeps it under the 1.5x the file system promises.
#[test]
fn random_page_sized_overwrites_pin_at_most_half_again_the_file() {
    let mut h = fresh(None);
    let free_before = h.fs().free_data_blocks();
    let f = new_file(&h, b"f");
    let file_bytes = 32 * WINDOW_BYTES as usize;
    let mut want = vec![0xa5u8; file_bytes];
    h.fs().write(f, 0, &want).unwrap();
    h.fs().fsync(f).unwrap();
    let mut seed = 0x0b5e_55ed_u64;
    let mut most_pinned = 0.0f64;
    for i in 0..5_000u64 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset = ((seed >> 20) % (file_bytes as u64 - 4096)) as usize;
        let data = [i as u8; 4096];
        h.fs().write(f, offset as u64, &data).unwrap();
        want[offset..offset + 4096].copy_from_slice(&data);
        h.fs().fsync(f).unwrap();
        let used = (free_before - h.fs().free_data_blocks()) * BLOCK_SIZE;
        if i >= 1_000 {
            most_pinned = most_pinned.max(used as f64 / file_bytes as f64);
        }
    }
    assert!(
        most_pinned <= 1.5,
        "the file pinned {most_pinned:.3}x its size"
    );
    assert_contents(h.fs(), f, &want, "after the overwrites");
    h.fs().sync_all().unwrap();
    // A tail block whose bytes were all overwritten stays the file's (for its next small
    // write) until unmount; a remount finds it free.
    let kept_tail = {
        let inode = h.fs().inode(f).unwrap();
        let state = h.fs().file_of(&inode).unwrap().lock();
        let tail = state.tail_block();
        u64::from(tail.is_some_and(|b| !state.map.refs().touched(b)))
    };
    let free = h.fs().free_data_blocks();
    // st_blocks counts what the file pins, as a block file system counts what it allocated.
    let used = free_before - free - kept_tail;
    let sectors = BLOCK_SIZE / 512;
    assert_eq!(
        h.fs().getattr(f).unwrap().blocks,
        used * sectors,
        "st_blocks"
    );
    h.remount(true);
    assert_eq!(
        h.fs().free_data_blocks(),
        free + kept_tail,
        "free blocks after a remount"
    );
    assert_eq!(
        h.fs().getattr(f).unwrap().blocks,
        used * sectors,
        "st_blocks of the file not yet loaded, from its extents"
    );
    assert_contents(h.fs(), f, &want, "after a remount");
}
