use super::*;
use crate::error::Error;

fn shm_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").expect("/dev/shm is writable")
}

#[test]
fn recording_logs_stores_flushes_and_fences_in_order() {
    let region = Region::recording(4096).unwrap();
    region.recorder().unwrap().set_op(7);
    region.write_bytes(100, &[1, 2, 3]);
    region.flush(100, 3);
    region.fence();
    let events = region.recorder().unwrap().take_events();
    assert_eq!(
        events,
        vec![
            Event::Store {
                offset: 100,
                bytes: vec![1, 2, 3],
                op: 7
            },
            Event::Flush { line: 64, op: 7 },
            Event::Fence { op: 7 },
        ]
    );
    let mut back = [0u8; 3];
    region.read_bytes(100, &mut back);
    assert_eq!(back, [1, 2, 3]);
}

#[test]
fn unpersisted_lines_track_flush_and_fence() {
    let region = Region::recording(4096).unwrap();
    region.write_bytes(60, &[9; 8]); // straddles lines 0 and 64
    assert_eq!(region.recorder().unwrap().unpersisted_lines(), vec![0, 64]);
    region.flush(60, 4); // only line 0
    assert_eq!(region.recorder().unwrap().unpersisted_lines(), vec![0, 64]);
    region.fence();
    assert_eq!(region.recorder().unwrap().unpersisted_lines(), vec![64]);
    region.persist(64, 1);
    assert!(region.recorder().unwrap().unpersisted_lines().is_empty());
    // A store after a flush makes the line dirty again, even before the fence.
    region.write_bytes(0, &[1]);
    region.flush(0, 1);
    region.write_bytes(0, &[2]);
    region.fence();
    assert_eq!(region.recorder().unwrap().unpersisted_lines(), vec![0]);
}

#[test]
fn atomic_store_is_persisted_and_little_endian() {
    let region = Region::recording(4096).unwrap();
    region.store_u64_persist(64, 0x0102_0304_0506_0708);
    assert_eq!(region.load_u64(64), 0x0102_0304_0506_0708);
    let mut raw = [0u8; 8];
    region.read_bytes(64, &mut raw);
    assert_eq!(raw, [8, 7, 6, 5, 4, 3, 2, 1]);
    assert!(region.recorder().unwrap().unpersisted_lines().is_empty());
}

#[test]
#[should_panic(expected = "unaligned atomic store")]
fn unaligned_atomic_store_is_a_bug() {
    Region::recording(4096).unwrap().store_u64(4, 1);
}

#[test]
#[should_panic(expected = "outside region")]
fn out_of_bounds_access_is_a_bug() {
    let region = Region::recording(4096).unwrap();
    region.write_bytes(4090, &[0; 8]);
}

#[test]
fn nt_copy_needs_only_a_fence() {
    let region = Region::recording(8192).unwrap();
    region.copy_nt(10, &[5; 300]);
    assert!(!region.recorder().unwrap().unpersisted_lines().is_empty());
    region.fence();
    assert!(region.recorder().unwrap().unpersisted_lines().is_empty());
}

#[test]
fn nt_copy_on_a_real_mapping_copies_every_byte() {
    let dir = shm_dir();
    let path = dir.path().join("nt.img");
    let region = Region::create(&path, Some(1 << 16), &RegionOptions::default()).unwrap();
    let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    // Every alignment of start and length exercises the head, body and tail paths.
    for start in [0u64, 1, 15, 16, 63, 100] {
        for len in [0usize, 1, 15, 16, 17, 64, 4999] {
            region.fill(0, 1 << 16, 0xAA);
            region.copy_nt(start + 4096, &src[..len]);
            region.fence();
            let mut back = vec![0u8; len + 2];
            region.read_bytes(start + 4095, &mut back);
            assert_eq!(back[0], 0xAA, "byte before, start {start} len {len}");
            assert_eq!(&back[1..=len], &src[..len], "start {start} len {len}");
            assert_eq!(back[len + 1], 0xAA, "byte after, start {start} len {len}");
        }
    }
}

#[test]
fn counters_count_lines_and_fences_per_thread() {
    let region = Region::recording(4096).unwrap();
    let before = counters();
    region.flush(0, 200); // lines 0, 64, 128, 192
    region.fence();
    region.persist(10, 1);
    let spent = counters().since(before);
    assert_eq!(
        spent,
        Counters {
            flushes: 5,
            fences: 2
        }
    );
    let other = std::thread::spawn(counters).join().unwrap();
    assert_eq!(other, Counters::default(), "counters are per thread");
}

#[test]
fn real_flush_instructions_run_on_a_mapping() {
    let dir = shm_dir();
    let path = dir.path().join("flush.img");
    for kind in [
        FlushKind::Clwb,
        FlushKind::ClflushOpt,
        FlushKind::Clflush,
        FlushKind::None,
    ] {
        if !kind.is_supported() {
            continue;
        }
        let options = RegionOptions {
            flush: Some(kind),
            ..RegionOptions::default()
        };
        let region = Region::create(&path, Some(1 << 16), &options).unwrap();
        assert_eq!(region.flush_kind(), kind);
        region.write_bytes(123, b"durable");
        region.persist(123, 7);
        region.store_u64_persist(4096, 42);
        drop(region);
        let reopened = Region::open(&path, &RegionOptions::default()).unwrap();
        let mut back = [0u8; 7];
        reopened.read_bytes(123, &mut back);
        assert_eq!(&back, b"durable", "{kind}");
        assert_eq!(reopened.load_u64(4096), 42, "{kind}");
    }
}

#[test]
fn a_second_writer_is_refused_while_readers_share() {
    let dir = shm_dir();
    let path = dir.path().join("lock.img");
    let writer = Region::create(&path, Some(1 << 16), &RegionOptions::default()).unwrap();
    let second = Region::open(&path, &RegionOptions::default());
    assert!(matches!(second, Err(Error::InUse(_))), "{second:?}");
    let reader = RegionOptions {
        access: Access::ReadOnly,
        ..RegionOptions::default()
    };
    assert!(matches!(Region::open(&path, &reader), Err(Error::InUse(_))));
    drop(writer);
    let r1 = Region::open(&path, &reader).unwrap();
    let _r2 = Region::open(&path, &reader).expect("readers share the lock");
    assert!(matches!(
        Region::open(&path, &RegionOptions::default()),
        Err(Error::InUse(_))
    ));
    assert_eq!(r1.info().access, Access::ReadOnly);
}

#[test]
fn private_copy_never_changes_the_image() {
    let dir = shm_dir();
    let path = dir.path().join("private.img");
    drop(Region::create(&path, Some(1 << 16), &RegionOptions::default()).unwrap());
    let private = RegionOptions {
        access: Access::PrivateCopy,
        ..RegionOptions::default()
    };
    let view = Region::open(&path, &private).unwrap();
    view.write_bytes(0, b"scratch");
    drop(view);
    let image = Region::open(&path, &private).unwrap();
    let mut back = [1u8; 7];
    image.read_bytes(0, &mut back);
    assert_eq!(back, [0; 7]);
}

#[test]
fn shm_files_fall_back_from_map_sync() {
    let dir = shm_dir();
    let path = dir.path().join("sync.img");
    let region = Region::create(&path, Some(1 << 16), &RegionOptions::default()).unwrap();
    assert!(!region.info().map_sync, "tmpfs is not DAX");
    assert!(region.info().zero_filled);
    assert_eq!(region.info().kind, MappingKind::File);
}

#[test]
fn opening_a_missing_or_odd_path_is_an_error() {
    let missing = Region::open(Path::new("/nonexistent/x.img"), &RegionOptions::default());
    assert!(matches!(missing, Err(Error::Io { .. })));
    let dir = Region::open(Path::new("/dev/shm"), &RegionOptions::default());
    assert!(dir.is_err());
    let null = Region::open(Path::new("/dev/null"), &RegionOptions::default());
    assert!(matches!(null, Err(Error::InvalidArgument(_))), "{null:?}");
}

#[test]
fn flush_kind_parses_and_prints() {
    for kind in [
        FlushKind::Clwb,
        FlushKind::ClflushOpt,
        FlushKind::Clflush,
        FlushKind::None,
    ] {
        assert_eq!(kind.to_string().parse::<FlushKind>(), Ok(kind));
    }
    assert!("wbinvd".parse::<FlushKind>().is_err());
    assert!(FlushKind::detect().is_supported());
}

#[test]
fn the_durable_image_keeps_what_the_storing_threads_fenced() {
    let region = Region::recording(4096).unwrap();
    region.recorder().unwrap().track_durable(vec![0; 4096]);
    region.write_bytes(0, &[1; 8]);
    region.write_bytes(64, &[2; 8]);
    region.flush(0, 8);
    // Another thread's fence does not make this thread's write-back durable.
    std::thread::scope(|s| {
        s.spawn(|| region.fence());
    });
    let image = region.recorder().unwrap().durable_image().unwrap();
    assert_eq!(image[0], 0, "flushed, but only another thread fenced");
    region.fence();
    let image = region.recorder().unwrap().durable_image().unwrap();
    assert_eq!(
        image[0], 1,
        "flushed and fenced by the thread that wrote it back"
    );
    assert_eq!(image[64], 0, "stored, never written back");
    // A line stored again after its write-back keeps only what was written back.
    region.write_bytes(128, &[3; 8]);
    region.flush(128, 8);
    region.write_bytes(128, &[4; 8]);
    region.fence();
    let image = region.recorder().unwrap().durable_image().unwrap();
    assert_eq!(image[128], 3);
    // A newer non-temporal store by another thread wins over an older write-back fenced later.
    region.write_bytes(192, &[5; 8]);
    region.flush(192, 8);
    std::thread::scope(|s| {
        s.spawn(|| {
            region.copy_nt(192, &[6; 8]);
            region.fence();
        });
    });
    region.fence();
    let image = region.recorder().unwrap().durable_image().unwrap();
    assert_eq!(
        image[192], 6,
        "the older store may not land after the newer one"
    );
}

/// A populator makes requested pages of a file mapping ready, on its own thread; none is made
/// for a recording region; stopping joins the thread and drops later requests.
#[test]
fn a_populator_populates_requested_ranges_of_file_mappings_only() {
    assert!(Populator::start(&Region::recording(1 << 20).unwrap()).is_none());
    let dir = shm_dir();
    let path = dir.path().join("img");
    let region = Region::create(&path, Some(8 << 20), &RegionOptions::default()).unwrap();
    let populator = Populator::start(&region).expect("a file mapping gets a populator");
    populator.request(1 << 20, 3 << 20);
    populator.request(6 << 20, 4 << 20); // clipped at the region's end
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while populator.populated_bytes() < 5 << 20 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(populator.populated_bytes(), 5 << 20);
    populator.stop();
    populator.request(0, 1 << 20);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(populator.populated_bytes(), 5 << 20, "no work after stop");
    // The pages hold what they held: populating writes nothing.
    let mut bytes = vec![1u8; 8 << 20];
    region.read_bytes(0, &mut bytes);
    assert!(bytes.iter().all(|&b| b == 0));
}

/// The `VmFlags` of this process's mapping of `path`, from /proc/self/smaps.
fn vm_flags_of(path: &std::path::Path) -> Option<Vec<String>> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = path.to_str().unwrap();
    let mut in_mapping = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            in_mapping = line.ends_with(name);
        } else if in_mapping {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                return Some(flags.split_whitespace().map(String::from).collect());
            }
        }
    }
    None
}

#[test]
fn a_writable_image_asks_for_huge_pages_and_a_read_only_one_does_not() {
    // Only the advice is checked: /dev/shm gives 2 MiB pages only when mounted `huge=advise`
    // (or `within_size`, `always`), which the host decides. A kernel without transparent huge
    // pages refuses the advice, and the mapping works without it.
    if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
        return;
    }
    let dir = shm_dir();
    let path = dir.path().join("huge.img");
    let region = Region::create(&path, Some(4 << 20), &RegionOptions::default()).unwrap();
    let flags = vm_flags_of(&path).expect("the image is mapped");
    assert!(
        flags.iter().any(|f| f == "hg"),
        "MADV_HUGEPAGE asked: {flags:?}"
    );
    drop(region);
    let reader = RegionOptions {
        access: Access::ReadOnly,
        ..RegionOptions::default()
    };
    let _view = Region::open(&path, &reader).unwrap();
    let flags = vm_flags_of(&path).expect("the image is mapped");
    assert!(
        !flags.iter().any(|f| f == "hg"),
        "no advice read-only: {flags:?}"
    );
}
