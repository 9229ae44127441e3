use std::collections::BTreeMap;

use super::*;
use crate::format::layout::MkfsParams;
use crate::fs::{Fs, MountOptions, MountReport};
use crate::fsck::{fsck_region, FsckOptions};
use crate::image::Image;
use crate::pmem::Region;

pub(crate) const OWNER: Owner = Owner {
    uid: 1000,
    gid: 100,
    umask: 0,
};

/// A mounted file system on an in-memory image; `remount` simulates a crash when `clean` is false.
pub(crate) struct Harness {
    pub(crate) fs: Option<Fs>,
}

pub(crate) fn fresh(pinodes: Option<u64>) -> Harness {
    fresh_from(MkfsParams {
        pinodes,
        ..MkfsParams::default()
    })
}

/// [`fresh`] with mkfs options of the caller's (the size and hash seed are the harness's).
pub(crate) fn fresh_from(params: MkfsParams) -> Harness {
    let params = MkfsParams {
        image_bytes: 8 << 20,
        hash_seed: Some(7),
        ..params
    };
    let geometry = {
        let mut g = crate::format::layout::Geometry::for_mkfs(&params).unwrap();
        g.hash_seed = 7;
        g
    };
    let region = Region::recording(params.image_bytes).unwrap();
    crate::mkfs::format_region(&region, &geometry, (0, 0)).unwrap();
    Harness {
        fs: Some(mount_two_cpus(Image::from_region(region).unwrap())),
    }
}

/// Mounts with pools for two CPUs, as on this machine.
fn mount_two_cpus(image: Image) -> Fs {
    let options = MountOptions {
        cpus: Some(2),
        ..MountOptions::default()
    };
    Fs::mount_image(image, &options).unwrap()
}

impl Harness {
    pub(crate) fn fs(&self) -> &Fs {
        self.fs.as_ref().unwrap()
    }

    /// Unmounts (or drops, like a crash), checks the image with fsck, and mounts it again.
    pub(crate) fn remount(&mut self, clean: bool) -> MountReport {
        let fs = self.fs.take().unwrap();
        let image = if clean { fs.unmount() } else { fs.image };
        let bytes = image.region().snapshot();
        let report = fsck_region(
            Region::recording_from(&bytes).unwrap(),
            FsckOptions::default(),
        )
        .unwrap();
        assert!(report.problems.is_empty(), "fsck: {:#?}", report.problems);
        let image = Image::from_region(Region::recording_from(&bytes).unwrap()).unwrap();
        self.fs = Some(mount_two_cpus(image));
        self.fs().mount_report().clone()
    }

    /// The whole tree: path → (mode, nlink, ino).
    fn tree(&self) -> BTreeMap<String, (u32, u32, u64)> {
        let mut out = BTreeMap::new();
        self.walk(ROOT_INO, "", &mut out);
        out
    }

    fn walk(&self, dir: u64, prefix: &str, out: &mut BTreeMap<String, (u32, u32, u64)>) {
        let mut entries = Vec::new();
        self.fs()
            .readdir(dir, 0, |e| {
                entries.push(e);
                true
            })
            .unwrap();
        for e in entries.into_iter().skip(2) {
            let path = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
            let attr = self.fs().getattr(e.ino).unwrap();
            out.insert(path.clone(), (attr.mode, attr.nlink, attr.ino));
            if attr.is_dir() {
                self.walk(e.ino, &path, out);
            }
        }
    }
}

pub(crate) fn errno<T: std::fmt::Debug>(r: Result<T>) -> Errno {
    r.expect_err("the operation must fail").errno()
}

#[test]
fn create_lookup_readdir_and_remount() {
    let mut h = fresh(None);
    let f = h.fs().create(ROOT_INO, b"a", 0o644, OWNER, true).unwrap();
    assert_eq!(
        (f.mode, f.nlink, f.uid, f.gid),
        (pinode::S_IFREG | 0o644, 1, 1000, 100)
    );
    assert_eq!(h.fs().lookup(ROOT_INO, b"a").unwrap(), f);
    let d = h.fs().mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
    assert_eq!(h.fs().getattr(ROOT_INO).unwrap().nlink, 3);
    assert_eq!(d.nlink, 2);
    let before = h.tree();
    assert_eq!(before.len(), 2);
    h.remount(true);
    assert_eq!(h.tree(), before, "a clean remount keeps everything");
    h.remount(false);
    assert_eq!(h.tree(), before, "so does recovery after a crash");
    assert_eq!(
        h.fs().resolve(ROOT_INO, b"/d/../a", true).unwrap().ino,
        f.ino
    );
    assert_eq!(
        errno(h.fs().resolve(ROOT_INO, b"/a/x", true)),
        Errno::ENOTDIR
    );
}

#[test]
fn errors_are_posix() {
    let h = fresh(None);
    let fs = h.fs();
    let f = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap();
    assert_eq!(
        errno(fs.create(ROOT_INO, b"f", 0o644, OWNER, true)),
        Errno::EEXIST
    );
    assert_eq!(
        fs.create(ROOT_INO, b"f", 0o600, OWNER, false).unwrap().ino,
        f.ino,
        "O_CREAT without O_EXCL opens"
    );
    assert_eq!(errno(fs.mkdir(ROOT_INO, b"f", 0o755, OWNER)), Errno::EEXIST);
    assert_eq!(errno(fs.lookup(ROOT_INO, b"nope")), Errno::ENOENT);
    assert_eq!(
        errno(fs.create(f.ino, b"x", 0o644, OWNER, true)),
        Errno::ENOTDIR
    );
    assert_eq!(
        errno(fs.create(999, b"x", 0o644, OWNER, true)),
        Errno::ENOENT
    );
    assert_eq!(
        errno(fs.create(ROOT_INO, &[b'n'; 256], 0o644, OWNER, true)),
        Errno::ENAMETOOLONG
    );
    assert_eq!(
        errno(fs.create(ROOT_INO, b"a/b", 0o644, OWNER, true)),
        Errno::EINVAL
    );
    assert_eq!(
        errno(fs.mkdir(ROOT_INO, b"..", 0o755, OWNER)),
        Errno::EEXIST
    );
    assert_eq!(errno(fs.unlink(ROOT_INO, b"nope")), Errno::ENOENT);
    assert_eq!(errno(fs.rmdir(ROOT_INO, b"f")), Errno::ENOTDIR);
    fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
    assert_eq!(errno(fs.unlink(ROOT_INO, b"d")), Errno::EISDIR);
    fs.create(
        fs.lookup(ROOT_INO, b"d").unwrap().ino,
        b"x",
        0o644,
        OWNER,
        true,
    )
    .unwrap();
    assert_eq!(errno(fs.rmdir(ROOT_INO, b"d")), Errno::ENOTEMPTY);
    assert_eq!(errno(fs.rmdir(ROOT_INO, b".")), Errno::EINVAL);
    assert_eq!(
        errno(fs.link(fs.lookup(ROOT_INO, b"d").unwrap().ino, ROOT_INO, b"d2")),
        Errno::EPERM
    );
    assert_eq!(
        errno(fs.mknod(ROOT_INO, b"l", pinode::S_IFLNK | 0o777, 0, OWNER)),
        Errno::EINVAL
    );
}

#[test]
fn long_names_up_to_name_max() {
    let mut h = fresh(None);
    let names: Vec<Vec<u8>> = [40usize, 41, 100, 255]
        .iter()
        .map(|&n| vec![b'x' + (n % 3) as u8; n])
        .collect();
    for name in &names {
        h.fs().create(ROOT_INO, name, 0o644, OWNER, true).unwrap();
    }
    h.remount(false);
    for name in &names {
        h.fs().lookup(ROOT_INO, name).unwrap();
    }
    // A long name that shares the 40-byte prefix of another is a different name.
    let mut twin = names[3].clone();
    twin[254] = b'!';
    assert_eq!(errno(h.fs().lookup(ROOT_INO, &twin)), Errno::ENOENT);
    h.fs()
        .rename(ROOT_INO, &names[3], ROOT_INO, &twin, RenameFlags::default())
        .unwrap();
    h.fs().unlink(ROOT_INO, &names[2]).unwrap();
    h.remount(true);
    h.fs().lookup(ROOT_INO, &twin).unwrap();
    assert_eq!(h.tree().len(), 3);
}

#[test]
fn hard_links_keep_the_inode_when_the_first_name_goes() {
    let mut h = fresh(None);
    let fs = h.fs();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
    let f = fs.create(ROOT_INO, b"first", 0o640, OWNER, true).unwrap();
    assert_eq!(fs.link(f.ino, d.ino, b"second").unwrap().nlink, 2);
    fs.link(f.ino, ROOT_INO, b"third").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 3);
    fs.unlink(ROOT_INO, b"first").unwrap();
    let after = fs.lookup(d.ino, b"second").unwrap();
    assert_eq!((after.ino, after.mode, after.nlink), (f.ino, f.mode, 2));
    h.remount(false);
    let fs = h.fs();
    assert_eq!(fs.lookup(ROOT_INO, b"third").unwrap().nlink, 2);
    fs.setattr(
        f.ino,
        &SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.unlink(d.ino, b"second").unwrap();
    let last = fs.lookup(ROOT_INO, b"third").unwrap();
    assert_eq!(
        (last.ino, last.mode, last.nlink),
        (f.ino, pinode::S_IFREG | 0o600, 1)
    );
    fs.unlink(ROOT_INO, b"third").unwrap();
    assert_eq!(errno(fs.getattr(f.ino)), Errno::ENOENT);
    h.remount(true);
    assert_eq!(h.tree().len(), 1);
}

#[test]
fn rename_moves_replaces_and_keeps_inode_numbers() {
    let mut h = fresh(None);
    let fs = h.fs();
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, OWNER).unwrap();
    let b = fs.mkdir(ROOT_INO, b"b", 0o755, OWNER).unwrap();
    let f = fs.create(a.ino, b"f", 0o644, OWNER, true).unwrap();
    let g = fs.create(b.ino, b"g", 0o644, OWNER, true).unwrap();
    let sub = fs.mkdir(a.ino, b"sub", 0o755, OWNER).unwrap();
    fs.create(sub.ino, b"deep", 0o644, OWNER, true).unwrap();
    // Within a directory.
    fs.rename(a.ino, b"f", a.ino, b"f2", RenameFlags::default())
        .unwrap();
    assert_eq!(fs.lookup(a.ino, b"f2").unwrap().ino, f.ino);
    // Across directories, replacing a file.
    fs.rename(a.ino, b"f2", b.ino, b"g", RenameFlags::default())
        .unwrap();
    assert_eq!(fs.lookup(b.ino, b"g").unwrap().ino, f.ino);
    assert_eq!(
        errno(fs.getattr(g.ino)),
        Errno::ENOENT,
        "the replaced file is gone"
    );
    // A directory across directories: link counts move with it, children stay.
    fs.rename(a.ino, b"sub", b.ino, b"sub", RenameFlags::default())
        .unwrap();
    assert_eq!(
        (
            fs.getattr(a.ino).unwrap().nlink,
            fs.getattr(b.ino).unwrap().nlink
        ),
        (2, 3)
    );
    assert_eq!(
        fs.resolve(ROOT_INO, b"/b/sub/deep", true).unwrap().mode & pinode::S_IFMT,
        pinode::S_IFREG
    );
    assert_eq!(fs.lookup(sub.ino, b"..").unwrap().ino, b.ino);
    // Into its own subtree, onto a non-empty directory, file onto directory and back.
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"b", sub.ino, b"x", RenameFlags::default())),
        Errno::EINVAL
    );
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"a", ROOT_INO, b"b", RenameFlags::default())),
        Errno::ENOTEMPTY
    );
    assert_eq!(
        errno(fs.rename(b.ino, b"g", ROOT_INO, b"a", RenameFlags::default())),
        Errno::EISDIR
    );
    // Onto a directory that contains the source: ENOTEMPTY before the types (Linux's "target
    // should not be an ancestor of source"), for a file too; found by nosefs stress.
    assert_eq!(
        errno(fs.rename(b.ino, b"g", ROOT_INO, b"b", RenameFlags::default())),
        Errno::ENOTEMPTY
    );
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"a", b.ino, b"g", RenameFlags::default())),
        Errno::ENOTDIR
    );
    // Replacing an empty directory.
    fs.rename(ROOT_INO, b"a", sub.ino, b"emptied", RenameFlags::default())
        .unwrap();
    fs.mkdir(ROOT_INO, b"c", 0o755, OWNER).unwrap();
    fs.rename(ROOT_INO, b"c", sub.ino, b"emptied", RenameFlags::default())
        .unwrap();
    assert_eq!(errno(fs.getattr(a.ino)), Errno::ENOENT);
    assert_eq!(fs.getattr(sub.ino).unwrap().nlink, 3);
    let tree = h.tree();
    h.remount(false);
    assert_eq!(h.tree(), tree);
}

#[test]
fn rename_flags() {
    let mut h = fresh(None);
    let fs = h.fs();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap();
    let noreplace = RenameFlags {
        noreplace: true,
        ..RenameFlags::default()
    };
    let exchange = RenameFlags {
        exchange: true,
        ..RenameFlags::default()
    };
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"f", ROOT_INO, b"d", noreplace)),
        Errno::EEXIST
    );
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"f", ROOT_INO, b"none", exchange)),
        Errno::ENOENT
    );
    let both = RenameFlags {
        noreplace: true,
        exchange: true,
        ..RenameFlags::default()
    };
    assert_eq!(
        errno(fs.rename(ROOT_INO, b"f", ROOT_INO, b"d", both)),
        Errno::EINVAL
    );
    // Exchange a file at the root with a directory in it... moved under the directory.
    let inner = fs.create(d.ino, b"inner", 0o644, OWNER, true).unwrap();
    fs.rename(ROOT_INO, b"f", d.ino, b"inner", exchange)
        .unwrap();
    assert_eq!(fs.lookup(ROOT_INO, b"f").unwrap().ino, inner.ino);
    assert_eq!(fs.lookup(d.ino, b"inner").unwrap().ino, f.ino);
    let e = fs.mkdir(ROOT_INO, b"e", 0o755, OWNER).unwrap();
    let file_in_e = fs.create(e.ino, b"x", 0o644, OWNER, true).unwrap();
    fs.rename(ROOT_INO, b"d", e.ino, b"x", exchange).unwrap();
    assert_eq!(
        (
            fs.lookup(e.ino, b"x").unwrap().ino,
            fs.lookup(ROOT_INO, b"d").unwrap().ino
        ),
        (d.ino, file_in_e.ino)
    );
    assert_eq!(
        (
            fs.getattr(ROOT_INO).unwrap().nlink,
            fs.getattr(e.ino).unwrap().nlink
        ),
        (3, 3)
    );
    fs.rename(ROOT_INO, b"d", ROOT_INO, b"d", RenameFlags::default())
        .unwrap();
    let tree = h.tree();
    h.remount(false);
    assert_eq!(h.tree(), tree);
}

#[test]
fn setattr_is_a_new_version_with_the_same_inode() {
    let mut h = fresh(None);
    let f = h
        .fs()
        .create(ROOT_INO, &[b'L'; 90], 0o644, OWNER, true)
        .unwrap();
    let change = SetAttr {
        mode: Some(0o4711),
        uid: Some(5),
        gid: Some(6),
        atime_ns: Some(-5),
        mtime_ns: Some(1 << 40),
        size: None,
    };
    let after = h.fs().setattr(f.ino, &change).unwrap();
    assert_eq!(after.ino, f.ino);
    assert_eq!(
        (
            after.mode,
            after.uid,
            after.gid,
            after.atime_ns,
            after.mtime_ns
        ),
        (pinode::S_IFREG | 0o4711, 5, 6, -5, 1 << 40)
    );
    h.remount(false);
    assert_eq!(
        h.fs().getattr(f.ino).unwrap().mode,
        pinode::S_IFREG | 0o4711
    );
    let root = h
        .fs()
        .setattr(
            ROOT_INO,
            &SetAttr {
                mode: Some(0o700),
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!(root.mode, pinode::S_IFDIR | 0o700);
    h.remount(true);
    assert_eq!(
        h.fs().getattr(ROOT_INO).unwrap().mode,
        pinode::S_IFDIR | 0o700
    );
}

#[test]
fn a_full_pinode_table_gives_enospc_and_stays_consistent() {
    let mut h = fresh(Some(64));
    let mut made = 0;
    let err = loop {
        match h
            .fs()
            .create(ROOT_INO, format!("f{made}").as_bytes(), 0o644, OWNER, true)
        {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err.errno(), Errno::ENOSPC);
    assert_eq!(made, 62, "64 slots less reserved slot 0 and the root");
    h.remount(false);
    h.fs().unlink(ROOT_INO, b"f0").unwrap();
    h.fs()
        .create(ROOT_INO, b"again", 0o644, OWNER, true)
        .unwrap();
    assert_eq!(
        errno(h.fs().create(ROOT_INO, b"more", 0o644, OWNER, true)),
        Errno::ENOSPC
    );
    h.remount(true);
}

#[test]
fn readdir_cursor_neither_skips_nor_repeats_survivors() {
    let h = fresh(None);
    let fs = h.fs();
    for i in 0..50 {
        fs.create(ROOT_INO, format!("keep{i}").as_bytes(), 0o644, OWNER, true)
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut cookie = 0;
    let mut round = 0;
    loop {
        let mut batch = Vec::new();
        fs.readdir(ROOT_INO, cookie, |e| {
            batch.push(e);
            batch.len() < 7
        })
        .unwrap();
        if batch.is_empty() {
            break;
        }
        cookie = batch.last().unwrap().cookie;
        seen.extend(batch.into_iter().map(|e| e.name));
        // Churn between the first batches: new names, and removals of names that are not kept.
        // (Unbounded churn would keep the listing from ever ending.)
        if round < 12 {
            fs.create(
                ROOT_INO,
                format!("tmp{round}").as_bytes(),
                0o644,
                OWNER,
                true,
            )
            .unwrap();
            if round > 0 {
                fs.unlink(ROOT_INO, format!("tmp{}", round - 1).as_bytes())
                    .unwrap();
            }
        }
        round += 1;
        assert!(round < 100, "the listing does not end");
    }
    let keeps: Vec<_> = seen.iter().filter(|n| n.starts_with(b"keep")).collect();
    let unique: std::collections::HashSet<_> = keeps.iter().collect();
    assert_eq!((keeps.len(), unique.len()), (50, 50));
    assert_eq!(&seen[..2], &[b".".to_vec(), b"..".to_vec()]);
}

#[test]
fn threads_in_one_and_in_separate_directories() {
    let mut h = fresh(None);
    let fs = h.fs();
    let dirs: Vec<u64> = (0..2)
        .map(|t| {
            fs.mkdir(ROOT_INO, format!("t{t}").as_bytes(), 0o755, OWNER)
                .unwrap()
                .ino
        })
        .collect();
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let dirs = &dirs;
            scope.spawn(move || {
                let own = dirs[(t % 2) as usize];
                for i in 0..200 {
                    let name = format!("n{t}-{i}");
                    fs.create(own, name.as_bytes(), 0o644, OWNER, true).unwrap();
                    if i % 3 == 0 {
                        fs.rename(
                            own,
                            name.as_bytes(),
                            ROOT_INO,
                            name.as_bytes(),
                            RenameFlags::default(),
                        )
                        .unwrap();
                    } else if i % 3 == 1 {
                        fs.unlink(own, name.as_bytes()).unwrap();
                    }
                }
            });
        }
    });
    let tree = h.tree();
    // Per thread: 67 names renamed to the root, 67 unlinked, 66 left in its own directory.
    assert_eq!(tree.len(), 2 + 4 * (67 + 66));
    h.remount(false);
    assert_eq!(h.tree(), tree);
}

/// Lines left in flight, other than log tails (of either journal) cleared lazily
/// ([`crate::settle`]): a call that returns has made everything else durable.
pub(crate) fn in_flight_besides_clears(fs: &Fs) -> Vec<u64> {
    let g = fs.image().geometry();
    let region = fs.image().region();
    let lines = region.recorder().unwrap().unpersisted_lines();
    lines
        .into_iter()
        .filter(|&line| {
            let is_tail = (1..g.dir_log_count()).any(|log| g.dir_log_offset(log) == line)
                || (1..g.file_log_count()).any(|log| g.file_log_offset(log) == line);
            !(is_tail && region.load_u64(line) == 0)
        })
        .collect()
}

/// Mounts the image a crash would leave after every prefix of one operation's stores: each must
/// recover to a clean image holding the state before or after the operation.
fn crash_at_every_store(setup: impl Fn(&Fs), op: impl Fn(&Fs), name: &[u8]) {
    let h = fresh(None);
    setup(h.fs());
    let base = h.fs().image().region().snapshot();
    let before = h.fs().lookup(ROOT_INO, name).ok().map(|a| a.mode);
    h.fs().image().region().recorder().unwrap().take_events();
    op(h.fs());
    let after = h.fs().lookup(ROOT_INO, name).ok().map(|a| a.mode);
    let events = h.fs().image().region().recorder().unwrap().take_events();
    assert_eq!(
        in_flight_besides_clears(h.fs()),
        Vec::<u64>::new(),
        "the operation left stores in flight"
    );
    let stores: Vec<(u64, Vec<u8>)> = events
        .into_iter()
        .filter_map(|e| match e {
            crate::pmem::Event::Store { offset, bytes, .. }
            | crate::pmem::Event::StoreNt { offset, bytes, .. } => Some((offset, bytes)),
            _ => None,
        })
        .collect();
    for cut in 0..=stores.len() {
        let mut image = base.clone();
        for (offset, bytes) in &stores[..cut] {
            image[*offset as usize..*offset as usize + bytes.len()].copy_from_slice(bytes);
        }
        let region = Region::recording_from(&image).unwrap();
        let fs = Fs::mount_image(
            Image::from_region(region).unwrap(),
            &MountOptions::default(),
        )
        .unwrap_or_else(|e| panic!("cut {cut}: mount failed: {e}"));
        let state = fs.lookup(ROOT_INO, name).ok().map(|a| a.mode);
        assert!(
            state == before || state == after,
            "cut {cut}: {state:?} is neither {before:?} nor {after:?}"
        );
        let recovered = fs.unmount().into_region().snapshot();
        let report = fsck_region(
            Region::recording_from(&recovered).unwrap(),
            FsckOptions::default(),
        )
        .unwrap();
        assert!(
            report.problems.is_empty(),
            "cut {cut} of {}: {:#?}",
            stores.len(),
            report.problems
        );
    }
}

#[test]
fn crash_during_create_mkdir_unlink_rename_chmod() {
    let nothing = |_: &Fs| {};
    crash_at_every_store(
        nothing,
        |fs| {
            fs.create(ROOT_INO, b"x", 0o644, OWNER, true).unwrap();
        },
        b"x",
    );
    crash_at_every_store(
        nothing,
        |fs| {
            fs.mkdir(ROOT_INO, b"x", 0o755, OWNER).unwrap();
        },
        b"x",
    );
    let with_x = |fs: &Fs| {
        fs.create(ROOT_INO, b"x", 0o644, OWNER, true).unwrap();
    };
    crash_at_every_store(with_x, |fs| fs.unlink(ROOT_INO, b"x").unwrap(), b"x");
    crash_at_every_store(
        with_x,
        |fs| {
            fs.rename(ROOT_INO, b"x", ROOT_INO, b"y", RenameFlags::default())
                .unwrap()
        },
        b"x",
    );
    crash_at_every_store(
        with_x,
        |fs| {
            let chmod = SetAttr {
                mode: Some(0o600),
                ..SetAttr::default()
            };
            fs.setattr(fs.lookup(ROOT_INO, b"x").unwrap().ino, &chmod)
                .unwrap();
        },
        b"x",
    );
    let linked = |fs: &Fs| {
        let x = fs.create(ROOT_INO, b"x", 0o644, OWNER, true).unwrap();
        fs.link(x.ino, ROOT_INO, b"y").unwrap();
    };
    crash_at_every_store(linked, |fs| fs.unlink(ROOT_INO, b"x").unwrap(), b"x");
}

#[test]
fn fences_per_operation_are_few() {
    let h = fresh(None);
    // The first create of an image raises the pinode high-water mark (one fence per step of at
    // least 256 slots, format::marks): steady state is what is counted.
    h.fs()
        .create(ROOT_INO, b"warm", 0o644, OWNER, true)
        .unwrap();
    let before = crate::pmem::counters();
    h.fs()
        .create(ROOT_INO, b"counted", 0o644, OWNER, true)
        .unwrap();
    let spent = crate::pmem::counters().since(before);
    assert_eq!(
        spent.fences, 2,
        "commit and apply: the ordering points of the protocol (the clear is settled lazily)"
    );
}

#[test]
fn symlinks_hold_their_target_as_data() {
    let mut h = fresh(None);
    let fs = h.fs();
    let free_blocks = fs.blocks.free_blocks();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
    fs.create(d.ino, b"f", 0o644, OWNER, true).unwrap();
    let l = fs.symlink(ROOT_INO, b"l", b"d/f", OWNER).unwrap();
    assert_eq!((l.mode, l.size, l.nlink), (pinode::S_IFLNK | 0o777, 3, 1));
    assert_eq!(fs.readlink(l.ino).unwrap(), b"d/f");
    assert_eq!(fs.blocks.free_blocks(), free_blocks - 1);
    let long_target = vec![b'x'; SYMLINK_MAX];
    let long = fs
        .symlink(ROOT_INO, &[b'L'; 200], &long_target, OWNER)
        .unwrap();
    assert_eq!(
        errno(fs.symlink(ROOT_INO, b"too", &vec![b'x'; SYMLINK_MAX + 1], OWNER)),
        Errno::ENAMETOOLONG
    );
    assert_eq!(
        errno(fs.symlink(ROOT_INO, b"empty", b"", OWNER)),
        Errno::ENOENT
    );
    assert_eq!(errno(fs.readlink(d.ino)), Errno::EINVAL);
    // Resolution follows links in the middle of a path, and at the end when asked.
    fs.symlink(ROOT_INO, b"dl", b"/d", OWNER).unwrap();
    assert_eq!(
        fs.resolve(ROOT_INO, b"/dl/f", false).unwrap().mode & pinode::S_IFMT,
        pinode::S_IFREG
    );
    assert_eq!(
        fs.resolve(ROOT_INO, b"/l", true).unwrap().mode & pinode::S_IFMT,
        pinode::S_IFREG
    );
    assert_eq!(fs.resolve(ROOT_INO, b"/l", false).unwrap().ino, l.ino);
    fs.symlink(ROOT_INO, b"loop1", b"loop2", OWNER).unwrap();
    fs.symlink(ROOT_INO, b"loop2", b"loop1", OWNER).unwrap();
    assert_eq!(errno(fs.resolve(ROOT_INO, b"/loop1", true)), Errno::ELOOP);
    h.remount(false);
    let fs = h.fs();
    assert_eq!(fs.readlink(long.ino).unwrap(), long_target);
    // Renamed, chowned and hard-linked links keep their data; the last name frees it.
    fs.rename(ROOT_INO, b"l", d.ino, b"l2", RenameFlags::default())
        .unwrap();
    fs.setattr(
        l.ino,
        &SetAttr {
            uid: Some(7),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.link(l.ino, ROOT_INO, b"l3").unwrap();
    fs.unlink(d.ino, b"l2").unwrap();
    assert_eq!(fs.readlink(l.ino).unwrap(), b"d/f");
    h.remount(true);
    let fs = h.fs();
    let before = fs.free_data_blocks();
    fs.unlink(ROOT_INO, b"l3").unwrap();
    fs.rename(
        ROOT_INO,
        b"dl",
        ROOT_INO,
        &[b'L'; 200],
        RenameFlags::default(),
    )
    .unwrap();
    assert_eq!(
        fs.free_data_blocks(),
        before + 2,
        "the unlinked and the replaced link's blocks"
    );
    h.remount(false);
    assert_eq!(h.fs().blocks.free_blocks(), before + 2, "and mount agrees");
}

#[test]
fn crash_during_symlink_create_and_removal() {
    let nothing = |_: &Fs| {};
    crash_at_every_store(
        nothing,
        |fs| {
            fs.symlink(ROOT_INO, b"x", b"some/target", OWNER).unwrap();
        },
        b"x",
    );
    let with_link = |fs: &Fs| {
        fs.symlink(ROOT_INO, b"x", b"some/target", OWNER).unwrap();
    };
    crash_at_every_store(with_link, |fs| fs.unlink(ROOT_INO, b"x").unwrap(), b"x");
}

/// A crash whose cache write-backs persisted the tail but not every record line: the checksum
/// must fail, and mount must discard the commit rather than apply a half-written pinode.
#[test]
fn a_torn_commit_is_discarded_at_mount() {
    use crate::format::layout::Zone;
    let h = fresh(None);
    let base = h.fs().image().region().snapshot();
    h.fs().image().region().recorder().unwrap().take_events();
    h.fs()
        .create(ROOT_INO, b"torn", 0o644, OWNER, true)
        .unwrap();
    let events = h.fs().image().region().recorder().unwrap().take_events();
    let g = h.fs().image().geometry().clone();
    let logs = g.span(Zone::DirJournal);
    let logs = logs.offset..logs.offset + logs.bytes(Zone::DirJournal);
    let pinodes = g.span(Zone::PinodeTable);
    let pinodes = pinodes.offset..pinodes.offset + pinodes.bytes(Zone::PinodeTable);
    // Everything up to the commit store (the first nonzero store to a log's tail word), except
    // the new pinode's lines.
    let mut image = base.clone();
    for e in &events {
        let crate::pmem::Event::Store { offset, bytes, .. } = e else {
            continue;
        };
        if !pinodes.contains(offset) {
            image[*offset as usize..*offset as usize + bytes.len()].copy_from_slice(bytes);
        }
        let tail_store =
            logs.contains(offset) && offset % 512 == 0 && bytes.iter().any(|&b| b != 0);
        if tail_store {
            break;
        }
    }
    let region = Region::recording_from(&image).unwrap();
    let fs = Fs::mount_image(
        Image::from_region(region).unwrap(),
        &MountOptions::default(),
    )
    .unwrap();
    assert_eq!(fs.mount_report().logs_discarded, 1);
    assert_eq!(errno(fs.lookup(ROOT_INO, b"torn")), Errno::ENOENT);
    let after = fs.unmount().into_region().snapshot();
    let report = fsck_region(
        Region::recording_from(&after).unwrap(),
        FsckOptions::default(),
    )
    .unwrap();
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
}

#[test]
fn a_directory_removed_while_open_answers_getattr_until_its_last_close() {
    let h = fresh(None);
    let fs = h.fs();
    let d = fs.mkdir(ROOT_INO, b"d", 0o750, OWNER).unwrap();
    let e = fs.mkdir(ROOT_INO, b"e", 0o700, OWNER).unwrap();
    fs.mkdir(ROOT_INO, b"f", 0o755, OWNER).unwrap();
    fs.open(d.ino).unwrap();
    fs.open(d.ino).unwrap();
    fs.open(e.ino).unwrap();
    fs.rmdir(ROOT_INO, b"d").unwrap();
    // Renamed over: the directory it replaced is removed too.
    fs.rename(ROOT_INO, b"f", ROOT_INO, b"e", RenameFlags::default())
        .unwrap();
    for (ino, mode) in [(d.ino, 0o750), (e.ino, 0o700)] {
        let attr = fs.getattr(ino).unwrap();
        assert_eq!((attr.nlink, attr.mode), (0, pinode::S_IFDIR | mode));
        assert_eq!(errno(fs.readdir(ino, 0, |_| true)), Errno::ENOENT);
    }
    fs.close(d.ino).unwrap();
    assert_eq!(
        fs.getattr(d.ino).unwrap().nlink,
        0,
        "one description still open"
    );
    fs.close(d.ino).unwrap();
    fs.close(e.ino).unwrap();
    assert_eq!(errno(fs.getattr(d.ino)), Errno::ENOENT);
    assert_eq!(errno(fs.getattr(e.ino)), Errno::ENOENT);
    // Not open: gone at once.
    let g = fs.mkdir(ROOT_INO, b"g", 0o755, OWNER).unwrap();
    fs.rmdir(ROOT_INO, b"g").unwrap();
    assert_eq!(errno(fs.getattr(g.ino)), Errno::ENOENT);
}

#[test]
fn a_file_is_found_by_path_again_after_its_names_change() {
    let h = fresh(None);
    let fs = h.fs();
    assert_eq!(fs.path_of(ROOT_INO).unwrap(), b"/");
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, OWNER).unwrap();
    let long = vec![b'n'; NAME_MAX];
    let b = fs.mkdir(a.ino, &long, 0o755, OWNER).unwrap();
    let f = fs.create(b.ino, b"f", 0o644, OWNER, true).unwrap();
    let expected = |top: &[u8], last: &[u8]| [top, b"/", &long, b"/", last].concat();
    assert_eq!(fs.path_of(f.ino).unwrap(), expected(b"/a", b"f"));
    fs.rename(ROOT_INO, b"a", ROOT_INO, b"c", RenameFlags::default())
        .unwrap();
    fs.rename(b.ino, b"f", b.ino, b"g", RenameFlags::default())
        .unwrap();
    assert_eq!(fs.path_of(f.ino).unwrap(), expected(b"/c", b"g"));
    fs.link(f.ino, ROOT_INO, b"h").unwrap();
    fs.unlink(b.ino, b"g").unwrap();
    assert_eq!(fs.path_of(f.ino).unwrap(), b"/h", "another name of it");
    fs.unlink(ROOT_INO, b"h").unwrap();
    assert_eq!(errno(fs.path_of(f.ino)), Errno::ENOENT, "no name left");
}

/// RENAME_WHITEOUT (overlayfs's upper layer): the source's name becomes a character device 0:0
/// in the same commit, across directories and over an existing target; exchange refuses it.
#[test]
fn rename_with_whiteout_leaves_a_device_node_at_the_source() {
    let mut h = fresh(None);
    let fs = h.fs();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, OWNER, true).unwrap();
    fs.create(d.ino, b"old", 0o644, OWNER, true).unwrap();
    let whiteout = RenameFlags {
        whiteout: Some(OWNER),
        ..RenameFlags::default()
    };
    fs.rename(ROOT_INO, b"f", d.ino, b"old", whiteout).unwrap();
    let check = |fs: &Fs| {
        let w = fs.lookup(ROOT_INO, b"f").unwrap();
        assert_eq!(
            (w.mode, w.rdev, w.nlink, w.uid),
            (pinode::S_IFCHR, 0, 1, OWNER.uid)
        );
        assert_eq!(fs.lookup(d.ino, b"old").unwrap().ino, f.ino);
    };
    check(h.fs());
    let both = RenameFlags {
        exchange: true,
        whiteout: Some(OWNER),
        ..RenameFlags::default()
    };
    assert_eq!(
        errno(h.fs().rename(ROOT_INO, b"f", d.ino, b"old", both)),
        Errno::EINVAL
    );
    let tree = h.tree();
    h.remount(false);
    assert_eq!(h.tree(), tree);
    check(h.fs());
    // A whiteout is an ordinary name: it goes with unlink.
    h.fs().unlink(ROOT_INO, b"f").unwrap();
    h.remount(true);
}
