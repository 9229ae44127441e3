//! The operations, and a seeded generator of them over a small set of names (so that they
//! collide: a rename lands on an existing name, a write on a directory, a link on a symlink).

/// Names a worker's operations use, relative to its directory. Directories may be made at any of
/// them, so deeper paths appear when a directory is renamed into another.
pub const PATHS: [&str; 12] = [
    "f0", "f1", "f2", "f3", "d0", "d1", "d0/f0", "d0/f1", "d0/d0", "d1/f0", "d1/d0", "d0/d0/f0",
];

/// Names of the directory all workers share (no model: only the errnos are checked).
pub const SHARED_PATHS: [&str; 6] = ["s0", "s1", "s2", "sd", "sd/s0", "sd/s1"];

/// Largest file offset operations aim at.
pub const SPAN_BYTES: u64 = 256 << 10;

/// One call (or a short sequence: open, the call, close).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `pwrite` of `len` bytes of a pattern at `offset` (the file created if missing).
    Write {
        path: &'static str,
        offset: u64,
        len: usize,
        seed: u8,
    },
    /// `write` through an `O_APPEND` descriptor.
    Append {
        path: &'static str,
        len: usize,
        seed: u8,
    },
    /// `pread`, compared with the model.
    Read {
        path: &'static str,
        offset: u64,
        len: usize,
    },
    /// `ftruncate`.
    Truncate { path: &'static str, size: u64 },
    /// `fsync`, or `fdatasync`.
    Sync { path: &'static str, data_only: bool },
    /// `fallocate` in `mode`.
    Fallocate {
        path: &'static str,
        mode: i32,
        offset: u64,
        len: u64,
    },
    /// `copy_file_range` between two files (the target created if missing).
    CopyRange {
        from: &'static str,
        to: &'static str,
        off_in: u64,
        off_out: u64,
        len: u64,
    },
    /// A store through a shared mapping, then `msync`.
    MapStore {
        path: &'static str,
        offset: u64,
        len: usize,
        seed: u8,
    },
    /// `lseek(SEEK_DATA)`: every byte it skips reads as zero.
    SeekData { path: &'static str, offset: u64 },
    /// `unlink`.
    Unlink { path: &'static str },
    /// `mkdir`.
    Mkdir { path: &'static str },
    /// `rmdir`.
    Rmdir { path: &'static str },
    /// `renameat2` with `flags` (0, RENAME_NOREPLACE or RENAME_EXCHANGE).
    Rename {
        from: &'static str,
        to: &'static str,
        flags: u32,
    },
    /// `link`.
    Link {
        from: &'static str,
        to: &'static str,
    },
    /// `symlink` to the target that never exists.
    Symlink { path: &'static str },
    /// `chmod` (follows a symlink).
    Chmod { path: &'static str, perm: u32 },
    /// `utimensat` without following, then `lstat` shows the time.
    Utimens { path: &'static str, t_ns: i64 },
    /// `fsetxattr` of a value of `len` bytes.
    SetXattr {
        path: &'static str,
        name: &'static str,
        len: usize,
        seed: u8,
    },
    /// `fremovexattr`.
    RemoveXattr {
        path: &'static str,
        name: &'static str,
    },
    /// `O_TMPFILE` in the path's directory, written, then named by `linkat(AT_EMPTY_PATH)`.
    Tmpfile {
        path: &'static str,
        len: usize,
        seed: u8,
    },
    /// `lstat`, compared with the model.
    Stat { path: &'static str },
    /// `readdir` of a directory ("." for the worker's own), compared with the model.
    List { path: &'static str },
}

/// Every operation kind by the name `--skip` takes.
pub const KINDS: [&str; 23] = [
    "write",
    "append",
    "read",
    "truncate",
    "fsync",
    "fallocate",
    "zero",
    "shift",
    "copy",
    "mmap",
    "seek",
    "unlink",
    "mkdir",
    "rmdir",
    "rename",
    "link",
    "symlink",
    "chmod",
    "utimens",
    "xattr",
    "tmpfile",
    "stat",
    "readdir",
];

impl Op {
    /// The kind's name (as [`KINDS`] lists it).
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Write { .. } => "write",
            Op::Append { .. } => "append",
            Op::Read { .. } => "read",
            Op::Truncate { .. } => "truncate",
            Op::Sync { .. } => "fsync",
            Op::Fallocate { mode, .. } if mode & SHIFT_MODES != 0 => "shift",
            Op::Fallocate { mode, .. } if mode & libc::FALLOC_FL_ZERO_RANGE != 0 => "zero",
            Op::Fallocate { .. } => "fallocate",
            Op::CopyRange { .. } => "copy",
            Op::MapStore { .. } => "mmap",
            Op::SeekData { .. } => "seek",
            Op::Unlink { .. } => "unlink",
            Op::Mkdir { .. } => "mkdir",
            Op::Rmdir { .. } => "rmdir",
            Op::Rename { .. } => "rename",
            Op::Link { .. } => "link",
            Op::Symlink { .. } => "symlink",
            Op::Chmod { .. } => "chmod",
            Op::Utimens { .. } => "utimens",
            Op::SetXattr { .. } | Op::RemoveXattr { .. } => "xattr",
            Op::Tmpfile { .. } => "tmpfile",
            Op::Stat { .. } => "stat",
            Op::List { .. } => "readdir",
        }
    }
}

/// COLLAPSE_RANGE and INSERT_RANGE, which tmpfs lacks (the kind `shift`).
pub const SHIFT_MODES: i32 = libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE;

const FALLOCATE_MODES: [i32; 5] = [
    0,
    libc::FALLOC_FL_KEEP_SIZE,
    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
    libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
    libc::FALLOC_FL_ZERO_RANGE,
];

/// The bytes a write of `len` from `seed` stores.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i as u8).wrapping_mul(29)) ^ (i >> 9) as u8)
        .collect()
}

/// A seeded xorshift generator of operations.
#[derive(Debug, Clone)]
pub struct Generator {
    state: u64,
    paths: &'static [&'static str],
}

impl Generator {
    /// Operations over `paths`, from `seed`.
    pub fn new(seed: u64, paths: &'static [&'static str]) -> Generator {
        Generator {
            state: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            paths,
        }
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state % n
    }

    fn path(&mut self) -> &'static str {
        self.paths[self.below(self.paths.len() as u64) as usize]
    }

    /// Mostly a name the path list uses for files (a name without `d` last), else any: calls
    /// on files mostly find files, and still now and then a directory or a missing parent.
    fn file_path(&mut self) -> &'static str {
        self.pick(|p| !p.rsplit('/').next().unwrap_or(p).starts_with('d'))
    }

    /// Mostly a name the path list uses for directories.
    fn dir_path(&mut self) -> &'static str {
        self.pick(|p| p.rsplit('/').next().unwrap_or(p).starts_with('d'))
    }

    fn pick(&mut self, prefer: impl Fn(&str) -> bool) -> &'static str {
        for _ in 0..8 {
            let p = self.path();
            if prefer(p) || self.below(5) == 0 {
                return p;
            }
        }
        self.path()
    }

    fn offset(&mut self) -> u64 {
        match self.below(4) {
            0 => 4096 * self.below(SPAN_BYTES / 4096),
            _ => self.below(SPAN_BYTES),
        }
    }

    fn len(&mut self) -> usize {
        match self.below(8) {
            0 => 1 + self.below(64 << 10) as usize,
            1 => 4096,
            _ => 1 + self.below(5000) as usize,
        }
    }

    fn seed(&mut self) -> u8 {
        self.below(256) as u8
    }

    /// The next operation (weighted towards file data, where issue 37's corruption was).
    pub fn next_op(&mut self) -> Op {
        let kind = self.below(40);
        let path = match kind {
            23..=25 | 38 | 39 => self.dir_path(),
            21 | 22 | 26..=29 | 36 | 37 => self.path(),
            _ => self.file_path(),
        };
        match kind {
            0..=5 => Op::Write {
                path,
                offset: self.offset(),
                len: self.len(),
                seed: self.seed(),
            },
            6 | 7 => Op::Append {
                path,
                len: self.len(),
                seed: self.seed(),
            },
            8..=10 => Op::Read {
                path,
                offset: self.offset(),
                len: self.len(),
            },
            11 => Op::Truncate {
                path,
                size: self.offset(),
            },
            12 | 13 => Op::Sync {
                path,
                data_only: self.below(2) == 0,
            },
            14..=16 => {
                let mode = FALLOCATE_MODES[self.below(FALLOCATE_MODES.len() as u64) as usize];
                Op::Fallocate {
                    path,
                    mode,
                    offset: self.offset(),
                    len: self.len() as u64,
                }
            }
            17 => {
                let mode = if self.below(2) == 0 {
                    libc::FALLOC_FL_COLLAPSE_RANGE
                } else {
                    libc::FALLOC_FL_INSERT_RANGE
                };
                // Mostly whole blocks (anything else is EINVAL).
                let unit = if self.below(8) == 0 { 1000 } else { 4096 };
                let offset = unit * self.below(SPAN_BYTES / 4096 / 4);
                Op::Fallocate {
                    path,
                    mode,
                    offset,
                    len: unit * (1 + self.below(4)),
                }
            }
            18 => Op::CopyRange {
                from: path,
                to: self.path(),
                off_in: self.offset(),
                off_out: self.offset(),
                len: self.len() as u64,
            },
            19 => Op::MapStore {
                path,
                offset: self.offset(),
                len: self.len(),
                seed: self.seed(),
            },
            20 => Op::SeekData {
                path,
                offset: self.offset(),
            },
            21 | 22 => Op::Unlink { path },
            23 | 24 => Op::Mkdir { path },
            25 => Op::Rmdir { path },
            26 | 27 => {
                let flags =
                    [0, 0, libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE][self.below(4) as usize];
                Op::Rename {
                    from: path,
                    to: self.path(),
                    flags,
                }
            }
            28 => Op::Link {
                from: path,
                to: self.path(),
            },
            29 => Op::Symlink { path },
            30 => Op::Chmod {
                path,
                perm: [0o600, 0o644, 0o755, 0o700][self.below(4) as usize],
            },
            31 => Op::Utimens {
                path,
                t_ns: 1_000_000_000 + self.below(1 << 40) as i64,
            },
            32 | 33 => Op::SetXattr {
                path,
                name: crate::model::XATTR_NAMES[self.below(2) as usize],
                len: self.below(1500) as usize, // two fit in one ext4 block
                seed: self.seed(),
            },
            34 => Op::RemoveXattr {
                path,
                name: crate::model::XATTR_NAMES[self.below(2) as usize],
            },
            35 => Op::Tmpfile {
                path,
                len: self.len(),
                seed: self.seed(),
            },
            36 | 37 => Op::Stat { path },
            _ => Op::List {
                path: if self.below(2) == 0 { "." } else { path },
            },
        }
    }
}
