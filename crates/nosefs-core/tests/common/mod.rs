//! Helpers for integration tests: fresh images in /dev/shm and a hand-built populated tree.
//!
//! The tree is written with raw record stores, the way the namespace and file-data code will
//! write it, so that fsck can be tested against a known-good image and then against each
//! corruption of it.

#![allow(dead_code)]

use nosefs_core::format::marks::Table;
use std::path::PathBuf;

use nosefs_core::format::bitmap;
use nosefs_core::format::extent::{self, Extent};
use nosefs_core::format::hash_table::{bucket_of, Bucket};
use nosefs_core::format::layout::{MkfsParams, Zone};
use nosefs_core::format::long_name::LongName;
use nosefs_core::format::pinode::{self, Pinode};
use nosefs_core::image::Image;
use nosefs_core::mkfs::mkfs;
use nosefs_core::namespace::Owner;
use nosefs_core::pmem::Access;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::FromZeros;

/// Root, with no umask: the owner the tests create files as.
pub const OWNER: Owner = Owner {
    uid: 0,
    gid: 0,
    umask: 0,
};

/// A formatted image in a private directory under /dev/shm, removed on drop.
pub struct TestImage {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

pub fn fresh_image(size: u64) -> TestImage {
    let dir = tempfile::tempdir_in("/dev/shm").expect("/dev/shm is writable");
    let path = dir.path().join("test.img");
    let params = MkfsParams {
        image_bytes: size,
        hash_seed: Some(0x5eed),
        ..MkfsParams::default()
    };
    mkfs(&path, &params).expect("mkfs");
    TestImage { dir, path }
}

pub fn open_rw(t: &TestImage) -> Image {
    Image::open(&t.path, Access::ReadWrite).expect("open image")
}

/// Writes `p` at `slot` and links it at the head of its bucket's chain.
pub fn put_pinode(image: &Image, slot: u64, mut p: Pinode, name: &[u8]) {
    let g = image.geometry();
    let bucket = bucket_of(g.hash_seed, g.bucket_count(), p.parent.get(), name);
    p.hash_next = image.bucket(bucket).head;
    write_pinode(image, slot, &p);
    let head = Bucket {
        head: U32::new(slot as u32),
        reserved: U32::new(0),
    };
    image
        .region()
        .store_u64_persist(g.bucket_offset(bucket), head.to_word());
}

/// Raises `table`'s high-water mark past `slot`, as the allocator does before handing it out.
pub fn cover(image: &Image, table: Table, slot: u64) {
    if image.geometry().high_water_marks && slot >= image.mark(table) {
        image.raise_mark(table, slot + 1);
    }
}

pub fn write_pinode(image: &Image, slot: u64, p: &Pinode) {
    cover(image, Table::Pinodes, slot);
    let offset = image.geometry().pinode_offset(slot);
    image.region().write(offset, p);
    image.region().persist(offset, pinode::PINODE_BYTES);
}

pub fn new_pinode(ino: u64, parent: u64, mode: u32, name: &[u8], primary: bool) -> Pinode {
    let mut p = Pinode::new_zeroed();
    p.ino = U64::new(ino);
    p.parent = U64::new(parent);
    let primary_flag = if primary { pinode::FLAG_PRIMARY } else { 0 };
    p.flags = U32::new(pinode::FLAG_VALID | primary_flag);
    p.mode = U32::new(mode);
    p.set_name(name);
    p
}

pub fn write_extent(image: &Image, eno: u64, e: &Extent) {
    cover(image, Table::Extents, eno);
    let offset = image.geometry().extent_offset(eno);
    image.region().write(offset, e);
    image.region().persist(offset, extent::EXTENT_BYTES);
}

pub fn new_extent(
    ino: u64,
    file_offset: u64,
    start_block: u32,
    block_offset: u16,
    length: u32,
) -> Extent {
    let mut e = Extent::new_zeroed();
    e.ino = U64::new(ino);
    e.file_offset = U64::new(file_offset);
    e.flags = U32::new(extent::FLAG_VALID);
    e.start_block = U32::new(start_block);
    e.block_offset = U16::new(block_offset);
    e.length = U32::new(length);
    let blocks = Extent::blocks_needed(u64::from(block_offset), u64::from(length));
    e.block_count = U16::new(blocks as u16);
    e
}

pub fn set_bitmap(image: &Image, blocks: std::ops::Range<u64>, allocated: bool) {
    let mut bm = image.bitmap();
    for b in blocks {
        bitmap::set(&mut bm, b, allocated);
    }
    let span = image.geometry().span(Zone::Bitmap);
    image.region().write_bytes(span.offset, &bm);
    image.region().persist(span.offset, span.count);
}

/// Slots of the populated tree.
pub const DIR_SLOT: u64 = 2;
pub const FILE_SLOT: u64 = 3;
pub const LINK_SLOT: u64 = 4;
pub const LONG_SLOT: u64 = 5;
pub const DIR_INO: u64 = 2;
pub const FILE_INO: u64 = 3;
pub const LONG_INO: u64 = 4;
pub const LONG_RECORD: u64 = 1;

pub fn long_name() -> Vec<u8> {
    (0..200).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Builds `/d/` (dir), `/d/f` (10000-byte file in two extents, one of them sharing a block),
/// `/g` (hard link to `/d/f`), and `/<200-byte name>` (empty file).
pub fn populate(image: &Image) {
    let root_slot = u64::from(image.geometry().root_slot);
    let mut root = image.pinode(root_slot);
    root.nlink = U32::new(3);
    write_pinode(image, root_slot, &root);

    let mut d = new_pinode(DIR_INO, 1, pinode::S_IFDIR | 0o755, b"d", true);
    d.nlink = U32::new(2);
    put_pinode(image, DIR_SLOT, d, b"d");

    let mut f = new_pinode(FILE_INO, DIR_INO, pinode::S_IFREG | 0o644, b"f", true);
    f.nlink = U32::new(2);
    f.size = U64::new(10_000);
    f.extent_head = U32::new(1);
    put_pinode(image, FILE_SLOT, f, b"f");
    // Extent 1: bytes 0..6000 in blocks 0-1; extent 2: bytes 6000..10000 starting mid-block 1.
    let mut e1 = new_extent(FILE_INO, 0, 0, 0, 6000);
    e1.next = U32::new(2);
    let mut e2 = new_extent(FILE_INO, 6000, 1, 2000, 4000);
    e2.prev = U32::new(1);
    write_extent(image, 1, &e1);
    write_extent(image, 2, &e2);
    set_bitmap(image, 0..3, true);

    let g = new_pinode(FILE_INO, 1, pinode::S_IFREG, b"g", false);
    put_pinode(image, LINK_SLOT, g, b"g");

    let name = long_name();
    let mut l = new_pinode(LONG_INO, 1, pinode::S_IFREG | 0o600, &name, true);
    l.nlink = U32::new(1);
    l.long_name = U32::new(LONG_RECORD as u32);
    cover(image, Table::LongNames, LONG_RECORD);
    let record_offset = image.geometry().long_name_offset(LONG_RECORD);
    image.region().write(record_offset, &LongName::new(&name));
    image.region().persist(record_offset, 256);
    put_pinode(image, LONG_SLOT, l, &name);
}

/// Cases a model-based property test runs: `default`, or `NOSEFS_MODEL_CASES` for a long variant.
pub fn model_cases(default: u32) -> u32 {
    std::env::var("NOSEFS_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Checks an image with fsck (it must be clean) and mounts a copy of it with pools for `cpus`.
pub fn fsck_and_mount(bytes: &[u8], cpus: usize) -> nosefs_core::fs::Fs {
    fsck_and_mount_with(bytes, cpus, false)
}

/// [`fsck_and_mount`], choosing how mapped files' written pages are found.
pub fn fsck_and_mount_with(
    bytes: &[u8],
    cpus: usize,
    compare_mapped_pages: bool,
) -> nosefs_core::fs::Fs {
    use nosefs_core::fs::{Fs, MountOptions};
    use nosefs_core::fsck::{fsck_region, FsckOptions};
    use nosefs_core::pmem::Region;
    let report = fsck_region(
        Region::recording_from(bytes).unwrap(),
        FsckOptions::default(),
    )
    .unwrap();
    assert!(report.problems.is_empty(), "fsck: {:#?}", report.problems);
    let image = Image::from_region(Region::recording_from(bytes).unwrap()).unwrap();
    let options = MountOptions {
        cpus: Some(cpus),
        compare_mapped_pages,
        ..MountOptions::default()
    };
    Fs::mount_image(image, &options).unwrap()
}

/// Starts tracking what a power loss would keep, so that a crash remount mounts exactly that:
/// every store not yet written back and fenced by its thread is lost (a lazily cleared directory
/// log's clear among them, whose record is then replayed; a write not yet fsynced).
pub fn track_durable(fs: nosefs_core::fs::Fs) -> nosefs_core::fs::Fs {
    let region = fs.image().region();
    let now = region.snapshot();
    region.recorder().unwrap().track_durable(now);
    fs
}

/// The image a power loss would leave now ([`track_durable`] must be on).
pub fn crash_image(fs: &nosefs_core::fs::Fs) -> Vec<u8> {
    let region = fs.image().region();
    let image = region.recorder().unwrap().durable_image();
    image.expect("durable tracking is on")
}
