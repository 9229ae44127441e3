//! Mapped files through the core API: one shadow per file in the process (mappings, read and
//! write coherent), msync durable and atomic, only dirty pages written, private mappings
//! private; a seeded model of stores, writes, reads and syncs with crash remounts, with the
//! kernel's write tracking and with the compare fallback.

mod common;

use common::OWNER;

use nosefs_core::fs::{Fs, MountOptions};
use nosefs_core::namespace::ROOT_INO;

const PAGE: usize = 4096;

fn file_with(fs: &Fs, name: &[u8], bytes: &[u8]) -> u64 {
    let ino = fs.create(ROOT_INO, name, 0o644, OWNER, true).unwrap().ino;
    fs.write(ino, 0, bytes).unwrap();
    fs.fsync(ino).unwrap();
    ino
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(fs.read(ino, 0, &mut buf).unwrap(), size);
    buf
}

#[test]
fn stores_are_seen_by_every_mapping_and_by_read_and_survive_msync_and_remount() {
    let t = common::fresh_image(32 << 20);
    let fs = Fs::mount(&t.path, &MountOptions::default()).unwrap();
    eprintln!("write tracking: {}", fs.write_tracking());
    let ino = file_with(&fs, b"m", &vec![b'.'; 64 * PAGE]);
    let a = fs.map(ino, 0, 64 * PAGE, true).unwrap();
    let b = fs.map(ino, 16 * PAGE as u64, 8 * PAGE, true).unwrap();
    a.store(16 * PAGE + 5, b"through a");
    let mut seen = [0u8; 9];
    b.load(5, &mut seen);
    assert_eq!(
        &seen, b"through a",
        "two mappings of one file share their pages"
    );
    let mut read = [0u8; 9];
    fs.read(ino, 16 * PAGE as u64 + 5, &mut read).unwrap();
    assert_eq!(&read, b"through a", "read sees a store before msync");
    fs.write(ino, 100, b"through write").unwrap();
    let mut mapped = [0u8; 13];
    a.load(100, &mut mapped);
    assert_eq!(&mapped, b"through write", "a mapping sees write");
    let private = fs.map(ino, 0, PAGE, false).unwrap();
    private.store(0, b"private");
    fs.msync(&a).unwrap();
    drop((a, b, private));
    drop(fs.unmount());
    let fs = Fs::mount(&t.path, &MountOptions::default()).unwrap();
    let after = read_all(&fs, ino);
    assert_eq!(&after[16 * PAGE + 5..16 * PAGE + 14], b"through a");
    assert_eq!(&after[100..113], b"through write");
    assert_eq!(
        &after[..7],
        b".......",
        "a private mapping's store stays private"
    );
    drop(fs.unmount());
}

#[test]
fn msync_writes_only_the_dirty_pages() {
    let t = common::fresh_image(32 << 20);
    let fs = Fs::mount(&t.path, &MountOptions::default()).unwrap();
    let ino = file_with(&fs, b"m", &vec![7u8; 256 * PAGE]);
    assert_eq!(fs.file_pieces(ino).unwrap(), 1);
    let before = fs.free_data_blocks();
    let m = fs.map(ino, 0, 256 * PAGE, true).unwrap();
    m.store(100 * PAGE + 1, b"x");
    m.store(200 * PAGE, b"y");
    fs.msync(&m).unwrap();
    // Two pages in new blocks, the rest where they were: five pieces, two blocks more in use
    // (the replaced blocks go back once no unsettled commit can name them).
    assert_eq!(fs.file_pieces(ino).unwrap(), 5);
    assert!(
        before - fs.free_data_blocks() <= 4,
        "msync copied more than the dirty pages"
    );
    fs.msync(&m).unwrap();
    assert_eq!(
        fs.file_pieces(ino).unwrap(),
        5,
        "a clean msync writes nothing"
    );
    drop(m);
    drop(fs.unmount());
}

#[test]
fn stores_left_by_an_unmapped_mapping_are_synced_by_fsync() {
    let t = common::fresh_image(32 << 20);
    let fs = Fs::mount(&t.path, &MountOptions::default()).unwrap();
    let ino = file_with(&fs, b"m", &[0u8; 3 * PAGE]);
    let m = fs.map(ino, 0, 3 * PAGE, true).unwrap();
    m.store(PAGE, b"kept after munmap");
    drop(m);
    fs.fsync(ino).unwrap();
    drop(fs.unmount());
    let fs = Fs::mount(&t.path, &MountOptions::default()).unwrap();
    assert_eq!(&read_all(&fs, ino)[PAGE..PAGE + 17], b"kept after munmap");
    drop(fs.unmount());
}

#[test]
fn msync_of_a_range_commits_that_range_and_fsync_the_rest() {
    let t = common::fresh_image(16 << 20);
    let bytes = std::fs::read(&t.path).unwrap();
    let fs = common::fsck_and_mount(&bytes, 1);
    let ino = file_with(&fs, b"m", &vec![b'.'; 16 * PAGE]);
    let fs = common::track_durable(fs);
    let a = fs.map(ino, 0, 16 * PAGE, true).unwrap();
    let b = fs.map(ino, 8 * PAGE as u64, 8 * PAGE, true).unwrap();
    a.store(PAGE + 3, b"one");
    b.store(2 * PAGE + 3, b"ten"); // file page 10, through the other mapping
    fs.msync_range(&b, 2 * PAGE, 10).unwrap(); // file page 10 only
    let crashed = common::fsck_and_mount(&common::crash_image(&fs), 1);
    let after = read_all(&crashed, ino);
    assert_eq!(
        &after[10 * PAGE + 3..10 * PAGE + 6],
        b"ten",
        "the range is durable"
    );
    assert_eq!(
        &after[PAGE + 3..PAGE + 6],
        b"...",
        "a page outside it is not yet"
    );
    drop(crashed);
    fs.fsync(ino).unwrap();
    let crashed = common::fsck_and_mount(&common::crash_image(&fs), 1);
    assert_eq!(
        &read_all(&crashed, ino)[PAGE + 3..PAGE + 6],
        b"one",
        "fsync takes the rest"
    );
    drop((a, b));
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Random stores through a mapping interleaved with writes, reads and syncs, byte for
/// byte against a model; after each sync a crash image must hold exactly the synced state, and
/// a crash between syncs exactly the last one (atomic: never a mix).
#[test]
fn a_model_of_stores_writes_and_syncs_with_crashes() {
    model(false, false);
}

#[test]
fn the_same_model_with_the_compare_fallback() {
    model(true, false);
}

/// The model over a file with holes: views protect only the pages that held data when they
/// were made, so stores into holes, and into pages `write` filled after the mapping was made,
/// must be found all the same.
#[test]
fn the_same_model_over_a_sparse_file() {
    model(false, true);
}

/// A large sparse mapping (LMDB maps its whole map size): reading holes through it leaves
/// them holes, and a sync writes only the pages stored to, in holes and in data alike.
#[test]
fn a_sparse_mapping_stays_sparse_and_syncs_only_the_stored_pages() {
    let t = common::fresh_image(64 << 20);
    let fs = Fs::mount(&t.path, &MountOptions::default()).unwrap();
    let len = 16384 * PAGE; // 64 MiB, one page of data
    let ino = fs.create(ROOT_INO, b"s", 0o644, OWNER, true).unwrap().ino;
    fs.truncate(ino, len as u64).unwrap();
    fs.write(ino, 10 * PAGE as u64, &[5u8; PAGE]).unwrap();
    fs.fsync(ino).unwrap();
    assert_eq!(fs.file_pieces(ino).unwrap(), 1);
    let m = fs.map(ino, 0, len, true).unwrap();
    let mut page = vec![0u8; PAGE];
    for p in (100..1100).chain([10]) {
        m.load(p * PAGE, &mut page);
    }
    let before = fs.free_data_blocks();
    fs.msync(&m).unwrap();
    assert_eq!(fs.file_pieces(ino).unwrap(), 1, "reads made no data");
    assert_eq!(before, fs.free_data_blocks(), "reads took no space");
    m.store(5000 * PAGE + 7, b"hole");
    m.store(10 * PAGE + 3, b"data");
    fs.msync(&m).unwrap();
    assert!(
        before - fs.free_data_blocks() <= 4,
        "msync copied more than the two stored pages"
    );
    // The page stored to in the hole, far past every page touched before, is in the file
    // (the scan reaches it): its block is taken at this msync, not later.
    assert!(
        before - fs.free_data_blocks() >= 1,
        "msync left out the page stored to in the hole"
    );
    drop(m);
    let mut got = vec![0u8; 4];
    fs.read(ino, 5000 * PAGE as u64 + 7, &mut got).unwrap();
    assert_eq!(&got, b"hole");
    fs.read(ino, 10 * PAGE as u64 + 3, &mut got).unwrap();
    assert_eq!(&got, b"data");
    fs.read(ino, 4000 * PAGE as u64, &mut got).unwrap();
    assert_eq!(got, [0u8; 4], "a hole still reads as zeros");
    drop(fs.unmount());
}

fn model(compare: bool, sparse: bool) {
    for seed in 1..=6u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let t = common::fresh_image(16 << 20);
        let bytes = std::fs::read(&t.path).unwrap();
        let fs = common::fsck_and_mount_with(&bytes, 1, compare);
        if compare {
            assert!(fs.write_tracking().starts_with("compare"));
        }
        let len = 32 * PAGE;
        let mut model = vec![1u8; len];
        if sparse {
            // Data in every other run of four pages, holes between.
            for (p, chunk) in model.chunks_mut(PAGE).enumerate() {
                if (p / 4) % 2 == 1 {
                    chunk.fill(0);
                }
            }
        }
        let ino = if sparse {
            let ino = fs.create(ROOT_INO, b"m", 0o644, OWNER, true).unwrap().ino;
            fs.truncate(ino, len as u64).unwrap();
            for (p, chunk) in model.chunks(PAGE).enumerate() {
                if (p / 4) % 2 == 0 {
                    fs.write(ino, (p * PAGE) as u64, chunk).unwrap();
                }
            }
            fs.fsync(ino).unwrap();
            ino
        } else {
            file_with(&fs, b"m", &model)
        };
        let fs = common::track_durable(fs);
        let mut synced = model.clone();
        let m = fs.map(ino, 0, len, true).unwrap();
        for step in 0..60 {
            match rng.below(10) {
                0..=4 => {
                    let at = rng.below(model.len() as u64) as usize;
                    let n = (1 + rng.below(3 * PAGE as u64) as usize).min(model.len() - at);
                    let fill = vec![(step as u8).wrapping_add(2); n];
                    m.store(at, &fill);
                    model[at..at + n].copy_from_slice(&fill);
                }
                5 | 6 => {
                    let at = rng.below(len as u64) as usize;
                    let n = 1 + rng.below(2 * PAGE as u64) as usize;
                    let n = n.min(len - at);
                    let fill = vec![(step as u8).wrapping_add(100); n];
                    fs.write(ino, at as u64, &fill).unwrap();
                    if at + n > model.len() {
                        model.resize(at + n, 0);
                    }
                    model[at..at + n].copy_from_slice(&fill);
                }
                7 => {
                    let at = rng.below(model.len() as u64);
                    let mut got = vec![0u8; 777];
                    let n = fs.read(ino, at, &mut got).unwrap();
                    assert_eq!(
                        &got[..n],
                        &model[at as usize..(at as usize + n)],
                        "seed {seed} step {step}: read"
                    );
                }
                _ => {
                    fs.msync(&m).unwrap();
                    synced = model.clone();
                }
            }
            // A crash now recovers to the last sync, exactly.
            if step % 15 == 14 {
                let crashed = common::fsck_and_mount(&common::crash_image(&fs), 1);
                assert!(
                    read_all(&crashed, ino) == synced,
                    "seed {seed} step {step}: crash state is not the last msync"
                );
            }
        }
        fs.msync(&m).unwrap();
        let crashed = common::fsck_and_mount(&common::crash_image(&fs), 1);
        assert!(
            read_all(&crashed, ino) == model,
            "seed {seed}: the final msync is durable"
        );
        drop(m);
    }
}

/// A shadow lent to another process (here: borrowed in this one, through its own mapping of the
/// memfd, as a daemon's client does): writes are seen by the borrower at once and its stores by
/// readers at once; the pages it reports become durable at the next commit and only those are
/// written; a borrower that ends without reporting loses nothing; a read-only loan cannot
/// store or report.
#[test]
fn a_lent_shadow_is_coherent_and_its_reported_pages_durable() {
    use nosefs_core::file::lent::BorrowedMapping;
    use nosefs_core::file::mmap::MapRequest;
    use std::os::fd::AsFd;
    let t = common::fresh_image(32 << 20);
    let fs = Fs::mount(&t.path, &MountOptions::default()).unwrap();
    let ino = file_with(&fs, b"m", &vec![b'.'; 64 * PAGE]);
    let lent = fs.lend_shadow(ino, true).unwrap();
    let request = MapRequest {
        shared: true,
        prot: libc::PROT_READ | libc::PROT_WRITE,
        at: None,
    };
    let memfd = lent.memfd().unwrap();
    let borrowed = match BorrowedMapping::map(memfd.as_fd(), 0, 64 * PAGE, &request) {
        Ok(b) => b,
        Err(e) if e.errno().0 == libc::EOPNOTSUPP => {
            eprintln!("skipped: this kernel cannot track stores");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    fs.write(ino, 3 * PAGE as u64, b"written").unwrap();
    let mut seen = [0u8; 7];
    borrowed.load(3 * PAGE, &mut seen);
    assert_eq!(&seen, b"written", "the borrower sees a write at once");
    borrowed.store(10 * PAGE, b"stored");
    borrowed.store(40 * PAGE, b"stored");
    let mut read = [0u8; 6];
    fs.read(ino, 10 * PAGE as u64, &mut read).unwrap();
    assert_eq!(
        &read, b"stored",
        "a reader sees the borrower's store at once"
    );
    let runs = borrowed.take_written(memfd.as_fd(), None).unwrap();
    assert_eq!(runs, vec![(10, 1), (40, 1)], "only the stored pages");
    assert!(
        borrowed
            .take_written(memfd.as_fd(), None)
            .unwrap()
            .is_empty(),
        "re-armed"
    );
    let before = fs.free_data_blocks();
    fs.take_lent_writes(&lent, &runs).unwrap();
    fs.fsync(ino).unwrap();
    assert!(
        before - fs.free_data_blocks() <= 3,
        "two pages written, not the file"
    );
    // Stores the borrower never reports: taken when the loan ends unreported.
    borrowed.store(50 * PAGE, b"lost");
    drop(borrowed);
    fs.return_shadow(lent, false).unwrap();
    fs.fsync(ino).unwrap();
    // A read-only loan: the memfd refuses a writable mapping, and reports are EBADF.
    let reader = fs.lend_shadow(ino, false).unwrap();
    assert!(BorrowedMapping::map(reader.memfd().unwrap().as_fd(), 0, PAGE, &request).is_err());
    assert_eq!(
        fs.take_lent_writes(&reader, &[(0, 1)])
            .unwrap_err()
            .errno()
            .0,
        libc::EBADF
    );
    fs.return_shadow(reader, true).unwrap();
    drop(fs.unmount());
    let fs = Fs::mount(&t.path, &MountOptions::default()).unwrap();
    let after = read_all(&fs, ino);
    assert_eq!(&after[3 * PAGE..3 * PAGE + 7], b"written");
    assert_eq!(&after[10 * PAGE..10 * PAGE + 6], b"stored");
    assert_eq!(&after[40 * PAGE..40 * PAGE + 6], b"stored");
    assert_eq!(&after[50 * PAGE..50 * PAGE + 4], b"lost");
    assert_eq!(after[PAGE], b'.');
    drop(fs.unmount());
}
