//! Bad images give a clear error naming what is wrong, never a panic.

mod common;

use common::*;
use nosefs_core::format::superblock::{self, Superblock, LAYOUT};
use nosefs_core::fsck::{fsck, FsckOptions};
use nosefs_core::image::Image;
use nosefs_core::pmem::Access;
use nosefs_core::Error;
use zerocopy::{FromBytes, IntoBytes};

const SIZE: u64 = 4 << 20;

fn read_primary(t: &TestImage) -> Vec<u8> {
    let bytes = std::fs::read(&t.path).unwrap();
    bytes[..512].to_vec()
}

fn write_primary(t: &TestImage, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&t.path)
        .unwrap();
    f.write_all_at(bytes, 0).unwrap();
}

fn open_err(t: &TestImage) -> Error {
    Image::open(&t.path, Access::ReadOnly).expect_err("the image must be refused")
}

/// Fields whose every value is legal, or that the checksum does not cover.
const FREE_FIELDS: [&str; 5] = ["uuid", "created_ns", "hash_seed", "compat", "state"];

#[test]
fn every_checksummed_field_is_protected_by_the_checksum() {
    for (field, offset, size) in LAYOUT.rows() {
        if field == "state" || field == "checksum" || field == "magic" || field == "version" {
            continue;
        }
        let t = fresh_image(SIZE);
        let mut bytes = read_primary(&t);
        bytes[offset + size - 1] ^= 0x5a;
        write_primary(&t, &bytes);
        let err = open_err(&t).to_string();
        assert!(err.contains("superblock.checksum"), "{field}: {err}");
    }
}

#[test]
fn each_field_with_a_bad_value_is_named_in_the_error() {
    for (field, offset, size) in LAYOUT.rows() {
        if FREE_FIELDS.contains(&field)
            || ["checksum", "ro_compat"].contains(&field)
            || field.starts_with("reserved")
        {
            continue;
        }
        let t = fresh_image(SIZE);
        let mut bytes = read_primary(&t);
        // An absurd value: all ones in the field's last byte and the one before it.
        for b in &mut bytes[offset + size.saturating_sub(2)..offset + size] {
            *b = 0xff;
        }
        let mut sb = Superblock::read_from_bytes(&bytes).unwrap();
        sb.seal();
        write_primary(&t, sb.as_bytes());
        let err = open_err(&t);
        let text = err.to_string();
        let named = match field {
            "magic" => matches!(err, Error::NotAnImage(_)),
            "version" | "incompat" => matches!(err, Error::Unsupported(_)),
            _ => text.contains(&format!("superblock.{field}")),
        };
        assert!(named, "corrupting {field} gave: {text}");
    }
}

#[test]
fn fields_any_value_of_which_is_legal_still_open() {
    for field in ["uuid", "created_ns", "hash_seed", "compat"] {
        let t = fresh_image(SIZE);
        let (_, offset, _) = LAYOUT.rows().into_iter().find(|r| r.0 == field).unwrap();
        let mut bytes = read_primary(&t);
        bytes[offset] ^= 0xff;
        let mut sb = Superblock::read_from_bytes(&bytes).unwrap();
        sb.seal();
        write_primary(&t, sb.as_bytes());
        Image::open(&t.path, Access::ReadOnly).unwrap_or_else(|e| panic!("{field}: {e}"));
    }
}

#[test]
fn unknown_ro_compat_feature_allows_reading_only() {
    let t = fresh_image(SIZE);
    let mut sb = Superblock::read_from_bytes(&read_primary(&t)).unwrap();
    sb.ro_compat = (sb.ro_compat.get() | 1 << 7).into(); // bit 0 is the high-water marks
    sb.seal();
    write_primary(&t, sb.as_bytes());
    let image = Image::open(&t.path, Access::ReadOnly).unwrap();
    assert!(image.geometry().read_only_features);
}

#[test]
fn state_changes_never_break_the_checksum() {
    let t = fresh_image(SIZE);
    {
        let image = open_rw(&t);
        assert!(image.superblock().is_clean());
        image.set_state(false, 5);
    }
    let image = Image::open(&t.path, Access::ReadOnly).unwrap();
    assert!(!image.superblock().is_clean());
    assert_eq!(image.superblock().mount_count(), 5);
}

#[test]
fn truncated_image_is_refused() {
    let t = fresh_image(SIZE);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&t.path)
        .unwrap()
        .set_len(SIZE / 2)
        .unwrap();
    let text = open_err(&t).to_string();
    assert!(
        text.contains("superblock.image_bytes") && text.contains("truncated"),
        "{text}"
    );
}

#[test]
fn tiny_empty_foreign_and_missing_files_are_refused() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        Image::open(&empty, Access::ReadOnly),
        Err(Error::TooSmall { .. })
    ));
    let tiny = dir.path().join("tiny");
    std::fs::write(&tiny, b"noseFS").unwrap();
    assert!(matches!(
        Image::open(&tiny, Access::ReadOnly),
        Err(Error::TooSmall { .. })
    ));
    let foreign = dir.path().join("foreign");
    std::fs::write(&foreign, vec![0x42u8; 1 << 20]).unwrap();
    assert!(matches!(
        Image::open(&foreign, Access::ReadOnly),
        Err(Error::NotAnImage(_))
    ));
    let missing = dir.path().join("missing");
    assert!(matches!(
        Image::open(&missing, Access::ReadOnly),
        Err(Error::Io { .. })
    ));
}

#[test]
fn random_superblocks_never_panic() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for round in 0..500 {
        let t_bytes: Vec<u8> = (0..512)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let mut sb = Superblock::read_from_bytes(&t_bytes).unwrap();
        // Half the rounds keep the magic, version and a good checksum, to reach the zone checks.
        if round % 2 == 0 {
            sb.magic = superblock::MAGIC;
            sb.version = superblock::VERSION.into();
            sb.seal();
        }
        let result = std::panic::catch_unwind(|| {
            nosefs_core::format::layout::Geometry::from_superblock(&sb, 1 << 30)
        });
        assert!(result.is_ok(), "round {round} panicked");
        assert!(
            result.unwrap().is_err(),
            "round {round}: random bytes accepted"
        );
    }
}

#[test]
fn fsck_uses_the_backup_when_the_primary_magic_is_overwritten() {
    let t = fresh_image(SIZE);
    populate(&open_rw(&t));
    let mut bytes = read_primary(&t);
    bytes[..8].copy_from_slice(b"XXXXXXXX");
    write_primary(&t, &bytes);
    let report = fsck(&t.path, FsckOptions::default()).unwrap();
    assert_eq!(report.exit_code(), 4);
    assert!(
        report.problems[0]
            .to_string()
            .starts_with("superblock.magic"),
        "{:?}",
        report.problems
    );
    assert_eq!(
        report.problems.len(),
        1,
        "the rest is checked through the backup and is clean"
    );
    let repaired = fsck(&t.path, FsckOptions { repair: true }).unwrap();
    assert_eq!(repaired.exit_code(), 1);
    let after = fsck(&t.path, FsckOptions::default()).unwrap();
    assert_eq!(after.exit_code(), 0, "{:?}", after.problems);
    assert!(
        !Image::open(&t.path, Access::ReadOnly)
            .unwrap()
            .superblock()
            .is_clean(),
        "a restored superblock asks mount to run recovery"
    );
}

#[test]
fn with_both_superblocks_gone_fsck_is_an_operational_error() {
    let t = fresh_image(SIZE);
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&t.path)
        .unwrap();
    f.write_all_at(b"XXXXXXXX", 0).unwrap();
    f.write_all_at(b"XXXXXXXX", 4096).unwrap();
    let err = fsck(&t.path, FsckOptions::default()).unwrap_err();
    assert!(matches!(err, Error::NotAnImage(_)), "{err}");
}
