//! Operations the checker runs, over a small fixed set of names (ACE-style bounded workloads).

use nosefs_core::fs::Fs;
use nosefs_core::namespace::{acl, Owner, RenameFlags, SetAttr, XattrMode, ROOT_INO};
use nosefs_core::Result;

/// One namespace operation, on absolute paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// create(path) with O_EXCL.
    Create(&'static str),
    /// mkdir(path).
    Mkdir(&'static str),
    /// unlink(path).
    Unlink(&'static str),
    /// rmdir(path).
    Rmdir(&'static str),
    /// rename(from, to), plain.
    Rename(&'static str, &'static str),
    /// rename(from, to) with RENAME_EXCHANGE.
    Exchange(&'static str, &'static str),
    /// RENAME_WHITEOUT: the source's name becomes a character device 0:0 (overlayfs).
    Whiteout(&'static str, &'static str),
    /// link(existing, new).
    Link(&'static str, &'static str),
    /// symlink(target, path).
    Symlink(&'static str, &'static str),
    /// chmod(path, mode).
    Chmod(&'static str, u32),
    /// utimens(path, atime and mtime).
    Utimens(&'static str, i64),
    /// pwrite(path, offset, len bytes of a pattern from seed): durable only at the next fsync.
    Write(&'static str, u64, usize, u8),
    /// Append len bytes of a pattern from seed (O_APPEND).
    Append(&'static str, usize, u8),
    /// truncate(path, size): durable on return, with the file's pending writes.
    Truncate(&'static str, u64),
    /// fsync(path).
    Fsync(&'static str),
    /// Map the whole file shared, store 64 bytes of a pattern from seed into each of the first
    /// `pages` pages (within the file's size), msync, unmap: durable and atomic on return, with
    /// the file's pending writes.
    MapSync(&'static str, u64, u8),
    /// fallocate(PUNCH_HOLE | KEEP_SIZE) of `len` bytes at `offset`: durable and atomic on
    /// return, with the file's pending writes.
    PunchHole(&'static str, u64, u64),
    /// setxattr(path, name, len bytes of a pattern from seed).
    SetXattr(&'static str, &'static str, usize, u8),
    /// removexattr(path, name).
    RemoveXattr(&'static str, &'static str),
    /// An access ACL with a named user and group (the mode's group bits become its mask), or
    /// with `true` the same as the default ACL of a directory.
    SetAcl(&'static str, bool),
    /// fallocate(COLLAPSE_RANGE) of `len` bytes at `offset`: durable and atomic on return, with
    /// the file's pending writes.
    CollapseRange(&'static str, u64, u64),
    /// fallocate(INSERT_RANGE) of `len` bytes at `offset`: likewise.
    InsertRange(&'static str, u64, u64),
    /// fallocate(KEEP_SIZE) of `len` bytes at `offset`: the range is reserved, durably on return.
    Reserve(&'static str, u64, u64),
    /// From now on commits queue crowded windows for the compactor instead of rewriting them
    /// (what a started compactor thread sets; nothing on media).
    DeferCompaction,
    /// The compactor's rewrite of every crowded window of the file, in this thread: one commit
    /// per window that replaces its extents and nothing else (pending writes stay pending).
    Compact(&'static str),
    /// The compactor thread's turn at window 0 of the file: copied and handed to the file's
    /// next commit (or committed alone if the file stays idle and the span allows).
    Prepare(&'static str),
    /// O_TMPFILE in the path's directory, len bytes of a pattern from seed written and fsynced
    /// with no name, then linked at the path (AT_EMPTY_PATH) and closed: durable on return.
    Tmpfile(&'static str, usize, u8),
}

impl Op {
    /// A short name for reports: the operation type.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Create(_) => "create",
            Op::Mkdir(_) => "mkdir",
            Op::Unlink(_) => "unlink",
            Op::Rmdir(_) => "rmdir",
            Op::Rename(_, _) => "rename",
            Op::Exchange(_, _) => "exchange",
            Op::Whiteout(_, _) => "whiteout",
            Op::Link(_, _) => "link",
            Op::Symlink(_, _) => "symlink",
            Op::Chmod(_, _) => "chmod",
            Op::Utimens(_, _) => "utimens",
            Op::Write(_, _, _, _) => "write",
            Op::Append(_, _, _) => "append",
            Op::Truncate(_, _) => "truncate",
            Op::Fsync(_) => "fsync",
            Op::MapSync(..) => "msync",
            Op::PunchHole(..) => "punch",
            Op::SetXattr(..) => "setxattr",
            Op::RemoveXattr(..) => "removexattr",
            Op::SetAcl(..) => "setacl",
            Op::Tmpfile(..) => "tmpfile",
            Op::CollapseRange(..) => "collapse",
            Op::InsertRange(..) => "insert",
            Op::Reserve(..) => "reserve",
            Op::DeferCompaction => "defer",
            Op::Compact(..) => "compact",
            Op::Prepare(..) => "prepare",
        }
    }

    /// The file whose pending data this operation changes (a write or append), if any.
    pub fn writes_to(&self) -> Option<&'static str> {
        match self {
            Op::Write(p, ..) | Op::Append(p, ..) | Op::MapSync(p, ..) => Some(p),
            _ => None,
        }
    }

    /// The file this operation commits (fsync or truncate), if any.
    pub fn commits(&self) -> Option<&'static str> {
        match self {
            Op::Fsync(p)
            | Op::Truncate(p, _)
            | Op::MapSync(p, ..)
            | Op::PunchHole(p, ..)
            | Op::CollapseRange(p, ..)
            | Op::InsertRange(p, ..) => Some(p),
            _ => None,
        }
    }

    /// Whether the operation's effect must be durable when it returns (everything but a plain
    /// write or append, which wait for a commit).
    pub fn durable_on_return(&self) -> bool {
        self.writes_to().is_none() || self.commits().is_some()
    }
}

/// The bytes a write of `len` from `seed` stores.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i as u8).wrapping_mul(13)) ^ (i >> 8) as u8)
        .collect()
}

fn split(path: &str) -> (&str, &[u8]) {
    let at = path.rfind('/').expect("absolute path");
    (
        if at == 0 { "/" } else { &path[..at] },
        &path.as_bytes()[at + 1..],
    )
}

fn parent(fs: &Fs, path: &str) -> Result<(u64, Vec<u8>)> {
    let (dir, name) = split(path);
    Ok((
        fs.resolve(ROOT_INO, dir.as_bytes(), true)?.ino,
        name.to_vec(),
    ))
}

fn ino(fs: &Fs, path: &str) -> Result<u64> {
    Ok(fs.resolve(ROOT_INO, path.as_bytes(), false)?.ino)
}

/// The inode `path` names, without following a final symlink.
pub fn ino_of(fs: &Fs, path: &str) -> Result<u64> {
    ino(fs, path)
}

/// Runs `op`; an error (such as EEXIST) is a legitimate outcome, not a checker failure.
pub fn run(fs: &Fs, op: &Op) -> Result<()> {
    let owner = Owner::default();
    match op {
        Op::Create(p) => {
            let (d, n) = parent(fs, p)?;
            fs.create(d, &n, 0o644, owner, true).map(drop)
        }
        Op::Mkdir(p) => {
            let (d, n) = parent(fs, p)?;
            fs.mkdir(d, &n, 0o755, owner).map(drop)
        }
        Op::Unlink(p) => {
            let (d, n) = parent(fs, p)?;
            fs.unlink(d, &n)
        }
        Op::Rmdir(p) => {
            let (d, n) = parent(fs, p)?;
            fs.rmdir(d, &n)
        }
        Op::Rename(a, b) | Op::Exchange(a, b) | Op::Whiteout(a, b) => {
            let ((da, na), (db, nb)) = (parent(fs, a)?, parent(fs, b)?);
            let flags = RenameFlags {
                exchange: matches!(op, Op::Exchange(..)),
                whiteout: matches!(op, Op::Whiteout(..)).then_some(owner),
                ..RenameFlags::default()
            };
            fs.rename(da, &na, db, &nb, flags)
        }
        Op::Link(a, b) => {
            let target = ino(fs, a)?;
            let (d, n) = parent(fs, b)?;
            fs.link(target, d, &n).map(drop)
        }
        Op::Symlink(target, p) => {
            let (d, n) = parent(fs, p)?;
            fs.symlink(d, &n, target.as_bytes(), owner).map(drop)
        }
        Op::Chmod(p, mode) => {
            let change = SetAttr {
                mode: Some(*mode),
                ..SetAttr::default()
            };
            fs.setattr(ino(fs, p)?, &change).map(drop)
        }
        Op::Utimens(p, t) => {
            let change = SetAttr {
                atime_ns: Some(*t),
                mtime_ns: Some(*t),
                ..SetAttr::default()
            };
            fs.setattr(ino(fs, p)?, &change).map(drop)
        }
        Op::Write(p, offset, len, seed) => fs
            .write(ino(fs, p)?, *offset, &pattern(*seed, *len))
            .map(drop),
        Op::Append(p, len, seed) => fs.append(ino(fs, p)?, &pattern(*seed, *len)).map(drop),
        Op::Truncate(p, size) => fs.truncate(ino(fs, p)?, *size),
        Op::Fsync(p) => fs.fsync(ino(fs, p)?),
        Op::MapSync(p, pages, seed) => map_sync(fs, ino(fs, p)?, *pages, *seed),
        Op::PunchHole(p, offset, len) => fs.punch_hole(ino(fs, p)?, *offset, *len),
        Op::SetXattr(p, name, len, seed) => fs.setxattr(
            ino(fs, p)?,
            name.as_bytes(),
            &pattern(*seed, *len),
            XattrMode::Any,
        ),
        Op::RemoveXattr(p, name) => fs.removexattr(ino(fs, p)?, name.as_bytes()),
        Op::CollapseRange(p, offset, len) => fs.collapse_range(ino(fs, p)?, *offset, *len),
        Op::InsertRange(p, offset, len) => fs.insert_range(ino(fs, p)?, *offset, *len),
        Op::Reserve(p, offset, len) => fs.reserve_space(ino(fs, p)?, *offset, *len),
        Op::DeferCompaction => {
            fs.set_deferred_compaction(true);
            Ok(())
        }
        Op::Compact(p) => fs.compact_file(ino(fs, p)?).map(drop),
        Op::Prepare(p) => {
            fs.prepare_for_next_commit(ino(fs, p)?, 0);
            Ok(())
        }
        Op::Tmpfile(p, len, seed) => {
            let (d, n) = parent(fs, p)?;
            let t = fs.create_tmpfile(d, 0o644, owner, true)?;
            fs.open(t.ino)?;
            let named = fs
                .write(t.ino, 0, &pattern(*seed, *len))
                .and_then(|_| fs.fsync(t.ino))
                .and_then(|()| fs.link(t.ino, d, &n).map(drop));
            fs.close(t.ino)?;
            named
        }
        Op::SetAcl(p, default) => {
            let name = if *default { acl::DEFAULT } else { acl::ACCESS };
            fs.setxattr(ino(fs, p)?, name, &named_acl(), XattrMode::Any)
        }
    }
}

/// An ACL granting user 2000 read-write and group 300 read, with a mask of rw- (kernel format).
pub fn named_acl() -> Vec<u8> {
    let entries: [(u16, u16, u32); 6] = [
        (acl::USER_OBJ, 6, 0),
        (acl::USER, 6, 2000),
        (acl::GROUP_OBJ, 4, 0),
        (acl::GROUP, 4, 300),
        (acl::MASK, 6, 0),
        (acl::OTHER, 4, 0),
    ];
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

fn map_sync(fs: &Fs, ino: u64, pages: u64, seed: u8) -> Result<()> {
    const PAGE: u64 = 4096;
    let size = fs.getattr(ino)?.size;
    if size == 0 {
        return fs.fsync(ino);
    }
    let mapping = fs.map(ino, 0, size.div_ceil(PAGE) as usize * PAGE as usize, true)?;
    for page in 0..pages {
        let at = page * PAGE + u64::from(seed % 64);
        if at >= size {
            break;
        }
        let len = (size - at).min(64) as usize;
        mapping.store(at as usize, &pattern(seed.wrapping_add(page as u8), len));
    }
    fs.msync(&mapping)
}

/// The starting tree every workload runs on: files, a directory with a file, a hard link, a
/// symlink and a long name.
pub fn setup() -> Vec<Op> {
    vec![
        Op::Create("/a"),
        Op::Mkdir("/d"),
        Op::Create("/d/c"),
        Op::Mkdir("/e"),
        Op::Link("/a", "/d/h"),
        Op::Symlink("/d/c", "/s"),
        Op::Create("/long-name-that-does-not-fit-inline-in-a-pinode-at-all"),
        Op::Write("/a", 0, 9000, 1),
        Op::Fsync("/a"),
        // Attributes on a file with another name, a directory and a file with data: every
        // removal below takes them along.
        Op::SetXattr("/a", "user.k", 5000, 1),
        Op::SetXattr("/e", "trusted.d", 10, 2),
        Op::SetAcl("/d/c", false),
    ]
}

/// Every operation type alone, each in the variants the issue lists.
pub fn singles() -> Vec<Op> {
    vec![
        Op::Create("/n"),
        Op::Create("/d/n"),
        Op::Mkdir("/m"),
        Op::Unlink("/d/c"),
        Op::Unlink("/a"), // the primary name of a hard-linked file: promotion
        Op::Rmdir("/e"),
        Op::Rename("/a", "/b"),
        Op::Rename("/a", "/e/a"),
        Op::Rename("/a", "/d/c"), // replacing a target
        Op::Rename("/d", "/e/d"), // a directory across parents
        Op::Exchange("/a", "/d"),
        Op::Whiteout("/a", "/e/a"), // across directories, a whiteout left at /a
        Op::Whiteout("/d/c", "/a"), // over a target with another name
        Op::Link("/d/c", "/l"),
        Op::Symlink("/a", "/t"),
        Op::Unlink("/s"),
        Op::Chmod("/a", 0o600),
        Op::Utimens("/d/c", 1_000_000_000),
        Op::Rename(
            "/long-name-that-does-not-fit-inline-in-a-pinode-at-all",
            "/short",
        ),
        Op::Write("/a", 100, 300, 2), // pending only: every crash shows the old data
        Op::Append("/d/c", 3000, 3),
        Op::Truncate("/a", 20_000),     // up: a hole
        Op::Truncate("/a", 1000),       // down: extents dropped and split
        Op::Fsync("/a"),                // nothing pending
        Op::MapSync("/a", 3, 10),       // every page of the file dirtied through a mapping
        Op::PunchHole("/a", 100, 5000), // a hole inside the file's one extent
        Op::Unlink("/a"),               // a file with data (and another name)
        Op::SetXattr("/d/c", "user.new", 300, 4),
        Op::SetXattr("/a", "user.k", 70_000, 5), // replaced by a blob of several extents
        Op::RemoveXattr("/a", "user.k"),         // the last one: the blob goes
        Op::SetAcl("/a", false),                 // the mode changes in the same commit
        Op::SetAcl("/d", true),
        Op::Chmod("/d/c", 0o640), // rewrites the ACL's mask with the mode
        Op::CollapseRange("/a", 4096, 4096), // the rest of the file moves down a block
        Op::InsertRange("/a", 4096, 8192), // a hole opens inside the file's one piece
        Op::Tmpfile("/d/t", 5000, 6), // an orphan from birth, then named
        Op::Tmpfile("/a", 100, 7), // the name exists: freed at close
        Op::Reserve("/a", 0, 40_000), // stored beside the file's attribute, in its blob
        Op::Reserve("/s", 0, 100), // a symlink: refused
        Op::Reserve("/short", 8192, 8192), // no such name
    ]
}

/// File-data sequences: each operation is checked, so the fsync after the writes is the
/// interesting crash point (append, byte-granular overwrite, many extents at once).
pub fn file_sequences() -> Vec<Vec<Op>> {
    vec![
        vec![Op::Append("/a", 4096, 4), Op::Fsync("/a")],
        vec![Op::Write("/a", 1000, 1024, 5), Op::Fsync("/a")],
        vec![Op::Write("/a", 8000, 3000, 6), Op::Fsync("/a")],
        (0..12)
            .map(|i| Op::Write("/a", i * 700 + 3, 100, i as u8))
            .chain([Op::Fsync("/a")])
            .collect(),
        vec![Op::Write("/d/c", 0, 40_000, 7), Op::Fsync("/d/c")],
        vec![Op::Write("/a", 50, 10, 8), Op::Truncate("/a", 30)],
        // Atomic msync: ten dirty pages in one commit, then mapped stores and a pending write
        // committed together.
        vec![
            Op::Write("/d/c", 0, 40_000, 7),
            Op::Fsync("/d/c"),
            Op::MapSync("/d/c", 10, 11),
        ],
        vec![Op::Write("/a", 100, 50, 12), Op::MapSync("/a", 2, 13)],
        // A hole across several extents, with a pending write inside it.
        (0..6)
            .map(|i| Op::Write("/a", i * 1500, 700, 20 + i as u8))
            .chain([Op::Fsync("/a"), Op::Write("/a", 3000, 100, 30)])
            .chain([Op::PunchHole("/a", 1000, 6000)])
            .collect(),
        // Many pieces move in one commit (more extents than a log holds: overflow blocks),
        // with a pending write that moves too.
        (0..70)
            .map(|i| Op::Write("/d/c", i * 600 + 5, 40, i as u8))
            .chain([Op::Fsync("/d/c"), Op::Write("/d/c", 3000, 10, 99)])
            .chain([
                Op::InsertRange("/d/c", 0, 8192),
                Op::CollapseRange("/d/c", 4096, 8192),
            ])
            .collect(),
        // A reservation, then every change that moves or cuts it (each a file commit, then the
        // stored ranges' commit), a write into it, and the file going with its blob.
        vec![
            Op::Reserve("/d/c", 0, 65_536),
            Op::Reserve("/d/c", 100_000, 4096),
            Op::PunchHole("/d/c", 4096, 8192),
            Op::Truncate("/d/c", 90_000),
            Op::InsertRange("/d/c", 4096, 4096),
            Op::CollapseRange("/d/c", 0, 4096),
            Op::Write("/d/c", 20_000, 3000, 40),
            Op::Fsync("/d/c"),
            Op::Unlink("/d/c"),
        ],
        // The compactor: a window of 40 committed pieces left crowded by its commit, then
        // rewritten by its own commit while another write to the file is pending (which the
        // compaction must not make durable), then that write committed.
        crowd("/d/c", 40, 0, 100)
            .chain([
                Op::Fsync("/d/c"),
                Op::Write("/d/c", 200_000, 10, 50),
                Op::Compact("/d/c"),
                Op::Fsync("/d/c"),
            ])
            .collect(),
        // The hand-off: a window copied by the compactor while a write inside it is pending,
        // taken along by the fsync that commits the write.
        crowd("/d/c", 40, 0, 100)
            .chain([
                Op::Fsync("/d/c"),
                Op::Write("/d/c", 50, 1, 60),
                Op::Prepare("/d/c"),
                Op::Fsync("/d/c"),
            ])
            .collect(),
        // The same on a file with another name and attributes, whose 9,000 committed bytes
        // become one of the window's pieces.
        crowd("/a", 36, 9500, 200)
            .chain([Op::Fsync("/a"), Op::Compact("/a")])
            .collect(),
        // Issue 37: a punch that drops a whole committed extent between two kept ones (the
        // list must be relinked around it), and an overwrite punched away before its commit.
        (0..3)
            .map(|i| Op::Write("/d/c", i * 20_000, 5000, 70 + i as u8))
            .chain([Op::Fsync("/d/c"), Op::PunchHole("/d/c", 19_000, 7000)])
            .collect(),
        (0..3)
            .map(|i| Op::Write("/d/c", i * 20_000, 5000, 80 + i as u8))
            .chain([Op::Fsync("/d/c"), Op::Write("/d/c", 20_000, 5000, 90)])
            .chain([Op::PunchHole("/d/c", 19_000, 7000)])
            .collect(),
        // Moves (issue 41): a page rewritten where its last commit put it keeps its extent and
        // moves its data. Fenced data (a whole block), then the file going while the move's log
        // may still hold it (superseded at mount).
        vec![
            Op::Write("/d/c", 0, 12_288, 100),
            Op::Fsync("/d/c"),
            Op::Write("/d/c", 4096, 4096, 101),
            Op::Fsync("/d/c"),
            Op::Write("/d/c", 4096, 4096, 102),
            Op::Fsync("/d/c"),
            Op::Unlink("/d/c"),
        ],
        // A move with checksummed data beside a new extent that shares the moved extent's old
        // block (an append packed in the tail block): that block stays allocated.
        vec![
            Op::Write("/d/c", 0, 8192, 103),
            Op::Fsync("/d/c"),
            Op::Write("/d/c", 0, 3000, 104),
            Op::Fsync("/d/c"),
            Op::Write("/d/c", 8192, 500, 105),
            Op::Write("/d/c", 0, 3000, 106),
            Op::Fsync("/d/c"),
        ],
        // Two moves side by side in one commit (written in reverse order, so their new blocks
        // do not join), each naming the other.
        vec![
            Op::Write("/d/c", 0, 20_480, 107),
            Op::Fsync("/d/c"),
            Op::Write("/d/c", 8192, 4096, 108),
            Op::Write("/d/c", 4096, 4096, 109),
            Op::Fsync("/d/c"),
            Op::Write("/d/c", 8192, 4096, 110),
            Op::Write("/d/c", 4096, 4096, 111),
            Op::Fsync("/d/c"),
        ],
        // Moves that keep the start: an append with checksummed data grows the last extent in
        // place, then a truncate cuts it (its last block freed).
        vec![
            Op::Write("/d/c", 0, 5000, 112),
            Op::Fsync("/d/c"),
            Op::Append("/d/c", 3000, 113),
            Op::Fsync("/d/c"),
            Op::Truncate("/d/c", 6000),
        ],
        // Records rewritten where they were, at byte offsets (LMDB's meta record): each placed
        // at its piece's offset in a new block (the bytes before it unused), committed as a
        // move of the piece's extent.
        vec![
            Op::Write("/d/c", 0, 8192, 114),
            Op::Fsync("/d/c"),
            Op::Write("/d/c", 32, 120, 115),
            Op::Fsync("/d/c"),
            Op::Write("/d/c", 4128, 120, 116),
            Op::Fsync("/d/c"),
            Op::Write("/d/c", 32, 120, 117),
            Op::Fsync("/d/c"),
            Op::Write("/d/c", 4128, 120, 118),
            Op::Fsync("/d/c"),
        ],
        // A log's frames (a 24-byte header, then its page) appended, then rewritten from the
        // first: the first rewrite parts the appended run (a move that cuts it, the rest a new
        // extent), the next moves the frame's own extent.
        (0..3u64)
            .flat_map(|k| frame(k, 119))
            .chain(frame(0, 120))
            .chain(frame(1, 121))
            .chain(frame(0, 122))
            .collect(),
        // The same frames with another file's append between each header and its page, which
        // takes the block after the log's tail block: the page cannot follow its header there,
        // so the header is placed again with it (`Fs::rejoin_placement`), one piece per frame.
        (0..3u64)
            .flat_map(|k| frame_apart(k, 123))
            .chain(frame_apart(0, 124))
            .collect(),
        // A crowded window rewritten into the run it holds (issue 41): a 64 KiB piece cut by 15
        // committed overwrites, then two pending ones that crowd it at their fsync: the
        // committed overwrites' bytes are copied into the run's dead ranges, the pending ones
        // stay (the run still holds the bytes they replace for the media).
        std::iter::once(Op::Write("/d/c", 0, 65_536, 130))
            .chain(std::iter::once(Op::Fsync("/d/c")))
            .chain((0..15).map(|i| Op::Write("/d/c", 700 + i * 1900, 100, 131 + i as u8)))
            .chain([
                Op::Fsync("/d/c"),
                Op::Write("/d/c", 1500, 100, 150),
                Op::Write("/d/c", 40_000, 300, 151),
                Op::Fsync("/d/c"),
                Op::Truncate("/d/c", 30_000),
            ])
            .collect(),
        // A directory's default ACL, inherited by what is made in it.
        vec![
            Op::SetAcl("/d", true),
            Op::Create("/d/n"),
            Op::Mkdir("/d/m"),
        ],
        // Attributes set through one hard link go with the inode's last name.
        vec![
            Op::SetXattr("/d/h", "user.x", 10, 1),
            Op::Unlink("/a"),
            Op::Unlink("/d/h"),
        ],
        // Operations that would commit the file fail (EINVAL past its end, ENOENT) and leave
        // its unsynced append unsynced, through other commits, until its own fsync (seed 335
        // of the random sequences: the checker took a failed insert for a commit).
        vec![
            Op::Append("/d/c", 38, 9),
            Op::InsertRange("/d/c", 8192, 4096),
            Op::CollapseRange("/d/c", 0, 4096),
            Op::Fsync("/m"),
            Op::Chmod("/a", 0o600),
            Op::Fsync("/d/c"),
        ],
    ]
}

/// Frame `k` of a SQLite-style log in `/d/c`: its 24-byte header, its 4 KiB page, fsync.
fn frame(k: u64, fill: u8) -> [Op; 3] {
    let at = 32 + k * 4120;
    [
        Op::Write("/d/c", at, 24, fill),
        Op::Write("/d/c", at + 24, 4096, fill),
        Op::Fsync("/d/c"),
    ]
}

/// [`frame`] with an append of a page to `/a` between the header and the page.
fn frame_apart(k: u64, fill: u8) -> [Op; 5] {
    let [header, page, fsync] = frame(k, fill);
    [
        header,
        Op::Append("/a", 4096, fill),
        page,
        fsync,
        Op::Fsync("/a"),
    ]
}

/// Commits queued for the compactor, then `count` pending writes of `len` bytes 1,500 bytes
/// apart from `first`: one fsync later, window 0 is crowded.
fn crowd(path: &'static str, count: u64, first: u64, len: usize) -> impl Iterator<Item = Op> {
    std::iter::once(Op::DeferCompaction)
        .chain((0..count).map(move |i| Op::Write(path, first + i * 1500, len, i as u8)))
}

/// Every ordered pair of a smaller set of operations over the same names.
pub fn pairs() -> Vec<[Op; 2]> {
    let ops = vec![
        Op::Create("/n"),
        Op::Mkdir("/m"),
        Op::Unlink("/a"),
        Op::Rmdir("/e"),
        Op::Rename("/a", "/n"),
        Op::Rename("/d", "/e/d"),
        Op::Exchange("/a", "/d"),
        Op::Link("/a", "/n"),
        Op::Symlink("/a", "/n"),
        Op::Chmod("/a", 0o600),
        Op::Write("/a", 4000, 500, 9),
        Op::Fsync("/a"),
        Op::Truncate("/a", 2000),
        Op::SetXattr("/a", "user.p", 100, 10),
        Op::RemoveXattr("/a", "user.k"),
    ];
    let mut out = Vec::new();
    for a in &ops {
        for b in &ops {
            out.push([a.clone(), b.clone()]);
        }
    }
    out
}

/// A seeded random sequence of `len` operations over the same names.
pub fn random(seed: u64, len: usize) -> Vec<Op> {
    const PATHS: [&str; 6] = ["/a", "/n", "/d/c", "/d/n", "/e/x", "/m"];
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    (0..len)
        .map(|_| {
            let (p, q) = (PATHS[next(PATHS.len())], PATHS[next(PATHS.len())]);
            // Every operation type that commits file data or names, weighted towards data
            // (the kinds whose mixes corrupted images in issue 37).
            match next(20) {
                11 => Op::Reserve(p, next(9000) as u64, 1 + next(20_000) as u64),
                12 | 13 => Op::PunchHole(p, next(9000) as u64, 1 + next(6000) as u64),
                14 => Op::CollapseRange(p, 4096 * next(3) as u64, 4096),
                15 => Op::InsertRange(p, 4096 * next(3) as u64, 4096),
                16 => Op::Append(p, 1 + next(5000), next(256) as u8),
                17 => Op::Exchange(p, q),
                18 => Op::SetXattr(p, "user.r", 1 + next(6000), next(256) as u8),
                19 => Op::Write(p, next(60_000) as u64, 1 + next(9000), next(256) as u8),
                8 => Op::Write(p, next(9000) as u64, 1 + next(3000), next(256) as u8),
                9 => Op::Fsync(p),
                10 => Op::Truncate(p, next(12_000) as u64),
                0 => Op::Create(p),
                1 => Op::Mkdir(p),
                2 => Op::Unlink(p),
                3 => Op::Rmdir(p),
                4 => Op::Rename(p, q),
                5 => Op::Link(p, q),
                6 => Op::Symlink("/a", p),
                _ => Op::Chmod(p, 0o600),
            }
        })
        .collect()
}
