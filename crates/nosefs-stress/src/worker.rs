//! One worker: runs operations in its own directory against the model, and in the shared
//! directory against the other workers, and compares the whole tree with the model as it goes.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::expect::{apply, want, Want};
use crate::model::{parent, Kind, Model, SYMLINK_TARGET, XATTR_NAMES};
use crate::ops::{pattern, Op};
use crate::sys::{self, Sys};

/// Errnos an operation in the shared directory may legitimately give: other workers change its
/// names at any moment.
const SHARED_ERRNOS: [i32; 11] = [
    libc::ENOENT,
    libc::EEXIST,
    libc::ENOTEMPTY,
    libc::EISDIR,
    libc::ENOTDIR,
    libc::EINVAL,
    libc::ELOOP,
    libc::EPERM,
    libc::ENODATA,
    libc::ENXIO,
    libc::EXDEV, // copy_file_range may refuse where it cannot copy
];

/// A worker's directory, and (outside the shared one) its model.
#[derive(Debug)]
pub struct Worker {
    dir: OwnedFd,
    model: Option<Model>,
}

fn errno_name(e: i32) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

fn compare(op: &Op, want: &Want, got: &Sys<()>) -> Result<(), String> {
    if want == got {
        return Ok(());
    }
    let show = |r: &Sys<()>| match r {
        Ok(()) => "success".to_string(),
        Err(e) => format!("errno {e} ({})", errno_name(*e)),
    };
    Err(format!(
        "{op:?}: expected {}, got {}",
        show(want),
        show(got)
    ))
}

impl Worker {
    /// A worker over directory `dir` (opened), checked against a model when `model` is given.
    pub fn new(dir: OwnedFd, model: Option<Model>) -> Worker {
        Worker { dir, model }
    }

    fn d(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// Runs one operation; an answer the model (or the shared directory's rules) does not allow
    /// is an error naming the operation, what was expected and what came. Returns whether the
    /// operation failed (as it had to).
    pub fn step(&mut self, op: &Op) -> Result<bool, String> {
        match self.model.take() {
            Some(mut model) => {
                let r = self.step_modelled(&mut model, op);
                self.model = Some(model);
                r
            }
            None => match self.execute(op, None) {
                Ok(()) => Ok(false),
                Err(e) if SHARED_ERRNOS.contains(&e) => Ok(true),
                Err(e) => Err(format!(
                    "{op:?} in the shared directory: errno {e} ({})",
                    errno_name(e)
                )),
            },
        }
    }

    fn step_modelled(&self, m: &mut Model, op: &Op) -> Result<bool, String> {
        let want = want(m, op);
        let got = self.execute(op, Some(m));
        compare(op, &want, &got)?;
        if want.is_ok() {
            apply(m, op);
        }
        Ok(want.is_err())
    }

    /// Makes the calls of `op`; with the model, also checks what they read against it (before
    /// it is updated).
    fn execute(&self, op: &Op, m: Option<&Model>) -> Sys<()> {
        let d = self.d();
        let rw = libc::O_RDWR | libc::O_NOFOLLOW;
        match *op {
            Op::Write {
                path,
                offset,
                len,
                seed,
            } => {
                let fd = sys::openat(d, path, rw | libc::O_CREAT, 0o644)?;
                sys::pwrite_all(fd.as_fd(), &pattern(seed, len), offset)
            }
            Op::Append { path, len, seed } => {
                let fd = sys::openat(d, path, rw | libc::O_CREAT | libc::O_APPEND, 0o644)?;
                sys::write_all(fd.as_fd(), &pattern(seed, len))
            }
            Op::Read { path, offset, len } => {
                let fd = sys::openat(d, path, rw, 0)?;
                let got = sys::pread_upto(fd.as_fd(), len, offset)?;
                if let Some(m) = m {
                    let data = file_data(m, path);
                    let start = (offset as usize).min(data.len());
                    let end = (offset as usize + len).min(data.len());
                    check_data(op, &got, &data[start..end]);
                }
                Ok(())
            }
            Op::Truncate { path, size } => {
                sys::ftruncate(sys::openat(d, path, rw, 0)?.as_fd(), size)
            }
            Op::Sync { path, data_only } => {
                sys::fsync(sys::openat(d, path, rw, 0)?.as_fd(), data_only)
            }
            Op::Fallocate {
                path,
                mode,
                offset,
                len,
            } => sys::fallocate(sys::openat(d, path, rw, 0)?.as_fd(), mode, offset, len),
            Op::CopyRange {
                from,
                to,
                off_in,
                off_out,
                len,
            } => {
                let src = sys::openat(d, from, rw, 0)?;
                if let Some(m) = m {
                    if m.lookup(to) == m.lookup(from) {
                        return Ok(()); // the same file: the model skips it
                    }
                }
                let dst = sys::openat(d, to, rw | libc::O_CREAT, 0o644)?;
                let copied = sys::copy_range(src.as_fd(), off_in, dst.as_fd(), off_out, len)?;
                if let Some(m) = m {
                    let have = file_data(m, from).len() as u64;
                    let want = len.min(have.saturating_sub(off_in));
                    assert_eq!(copied, want, "{op:?}: bytes copied");
                }
                Ok(())
            }
            Op::MapStore {
                path,
                offset,
                len,
                seed,
            } => {
                let fd = sys::openat(d, path, rw, 0)?;
                let size = sys::lseek(fd.as_fd(), 0, libc::SEEK_END)?;
                let Some((at, n)) = map_range(size, offset, len) else {
                    return Ok(());
                };
                let map_len = size.div_ceil(4096) as usize * 4096;
                sys::map_store(fd.as_fd(), map_len, at, &pattern(seed, n))
            }
            Op::SeekData { path, offset } => {
                let fd = sys::openat(d, path, rw, 0)?;
                let found = sys::lseek(fd.as_fd(), offset, libc::SEEK_DATA);
                if let Some(m) = m {
                    check_seek(op, file_data(m, path), offset, found)?;
                    return Ok(());
                }
                found.map(drop)
            }
            Op::Unlink { path } => sys::unlinkat(d, path, 0),
            Op::Mkdir { path } => sys::mkdirat(d, path, 0o755),
            Op::Rmdir { path } => sys::unlinkat(d, path, libc::AT_REMOVEDIR),
            Op::Rename { from, to, flags } => sys::renameat2(d, from, to, flags),
            Op::Link { from, to } => sys::linkat(d, from, to),
            Op::Symlink { path } => sys::symlinkat(SYMLINK_TARGET, d, path),
            Op::Chmod { path, perm } => sys::fchmodat(d, path, perm),
            Op::Utimens { path, t_ns } => {
                sys::utimensat(d, path, t_ns)?;
                let st = sys::lstatat(d, path)?;
                if m.is_some() {
                    assert_eq!(st.mtime_ns, t_ns, "{op:?}: the modification time set");
                }
                Ok(())
            }
            Op::SetXattr {
                path,
                name,
                len,
                seed,
            } => {
                let fd = sys::openat(d, path, libc::O_RDONLY | libc::O_NOFOLLOW, 0)?;
                sys::fsetxattr(fd.as_fd(), name, &pattern(seed, len))
            }
            Op::RemoveXattr { path, name } => {
                let fd = sys::openat(d, path, libc::O_RDONLY | libc::O_NOFOLLOW, 0)?;
                sys::fremovexattr(fd.as_fd(), name)
            }
            Op::Tmpfile { path, len, seed } => {
                let dir = parent(path).unwrap_or(".");
                let fd = sys::openat(d, dir, libc::O_TMPFILE | libc::O_RDWR, 0o644)?;
                sys::pwrite_all(fd.as_fd(), &pattern(seed, len), 0)?;
                sys::link_fd(fd.as_fd(), d, path)
            }
            Op::Stat { path } => {
                let st = sys::lstatat(d, path)?;
                if let Some(m) = m {
                    let want = m.existing(path).expect("the model found it");
                    assert_eq!(
                        describe_stat(path, &st),
                        describe_node(m, path, want),
                        "{op:?}"
                    );
                }
                Ok(())
            }
            Op::List { path } => {
                let names = sys::list(d, path)?;
                if let Some(m) = m {
                    assert_eq!(names, children(m, path), "{op:?}: the names");
                }
                Ok(())
            }
        }
    }

    /// The whole tree as [`describe`] puts it, read from the file system.
    pub fn describe_tree(&self) -> Sys<Vec<String>> {
        let mut out = Vec::new();
        self.describe_dir(".", &mut out)?;
        Ok(out)
    }

    fn describe_dir(&self, dir: &str, out: &mut Vec<String>) -> Sys<()> {
        let d = self.d();
        for name in sys::list(d, dir)? {
            let path = if dir == "." {
                name
            } else {
                format!("{dir}/{name}")
            };
            let st = sys::lstatat(d, &path)?;
            let mut line = describe_stat(&path, &st);
            match st.mode & libc::S_IFMT {
                libc::S_IFREG => {
                    let fd = sys::openat(d, &path, libc::O_RDONLY | libc::O_NOFOLLOW, 0)?;
                    let data = sys::pread_upto(fd.as_fd(), st.size as usize + 1, 0)?;
                    line.push_str(&format!(" data={:08x}", crc32c::crc32c(&data)));
                    line.push_str(&self.describe_xattrs(&path)?);
                }
                libc::S_IFDIR => line.push_str(&self.describe_xattrs(&path)?),
                libc::S_IFLNK => line.push_str(&format!(" target={}", sys::readlinkat(d, &path)?)),
                _ => {}
            }
            out.push(line);
            if st.mode & libc::S_IFMT == libc::S_IFDIR {
                self.describe_dir(&path, out)?;
            }
        }
        Ok(())
    }

    fn describe_xattrs(&self, path: &str) -> Sys<String> {
        let fd = sys::openat(self.d(), path, libc::O_RDONLY | libc::O_NOFOLLOW, 0)?;
        let mut found = BTreeMap::new();
        for name in XATTR_NAMES {
            match sys::fgetxattr(fd.as_fd(), name) {
                Ok(value) => {
                    found.insert(name.to_string(), value);
                }
                Err(libc::ENODATA) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(xattrs_text(&found))
    }

    /// The model's tree as [`describe`] puts it (the shared directory has none).
    pub fn describe_model(&self) -> Option<Vec<String>> {
        self.model.as_ref().map(describe)
    }
}

/// The part of a description line that `lstat` gives.
fn describe_stat(path: &str, st: &sys::Stat) -> String {
    let kind = match st.mode & libc::S_IFMT {
        libc::S_IFREG => "file",
        libc::S_IFDIR => "dir",
        libc::S_IFLNK => "symlink",
        _ => "other",
    };
    // A directory's size is the file system's own business.
    let size = if kind == "dir" { 0 } else { st.size };
    let perm = if kind == "symlink" {
        0o777
    } else {
        st.mode & 0o7777
    };
    format!("{path} {kind} {perm:o} nlink={} size={size}", st.nlink)
}

fn describe_node(m: &Model, path: &str, id: u64) -> String {
    let node = m.node(id);
    let (kind, size) = match node.kind {
        Kind::File => ("file", node.data.len() as u64),
        Kind::Dir => ("dir", 0),
        Kind::Symlink => ("symlink", SYMLINK_TARGET.len() as u64),
    };
    format!(
        "{path} {kind} {:o} nlink={} size={size}",
        node.perm,
        m.nlink(id, path)
    )
}

fn xattrs_text(x: &BTreeMap<String, Vec<u8>>) -> String {
    let parts: Vec<String> = x
        .iter()
        .map(|(name, value)| format!("{name}:{:08x}", crc32c::crc32c(value)))
        .collect();
    format!(" xattrs=[{}]", parts.join(","))
}

/// The model's tree, one line per name in path order: type, permissions, links, size, a
/// checksum of the data, the symlink's target, the attributes.
pub fn describe(m: &Model) -> Vec<String> {
    m.names()
        .map(|(path, id)| {
            let node = m.node(id);
            let mut line = describe_node(m, path, id);
            match node.kind {
                Kind::File => {
                    line.push_str(&format!(" data={:08x}", crc32c::crc32c(&node.data)));
                    line.push_str(&xattrs_text(&node.xattrs));
                }
                Kind::Dir => line.push_str(&xattrs_text(&node.xattrs)),
                Kind::Symlink => line.push_str(&format!(" target={SYMLINK_TARGET}")),
            }
            line
        })
        .collect()
}

pub(crate) fn file_data<'m>(m: &'m Model, path: &str) -> &'m [u8] {
    &m.node(m.existing(path).expect("the model found it")).data
}

fn check_data(op: &Op, got: &[u8], want: &[u8]) {
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{op:?}: read {} bytes, expected {}; first difference at {first:?}",
            got.len(),
            want.len()
        );
    }
}

/// SEEK_DATA may stop anywhere data could be (a file system may keep zeros as data), but every
/// byte it skips must read as zero, and ENXIO only where nothing but zeros follows.
fn check_seek(op: &Op, data: &[u8], offset: u64, found: Sys<u64>) -> Sys<()> {
    let size = data.len() as u64;
    let zeros = |from: u64, to: u64| data[from as usize..to as usize].iter().all(|&b| b == 0);
    match found {
        Err(libc::ENXIO) if offset >= size || zeros(offset, size) => Ok(()),
        Ok(at) if offset < size && at >= offset && at < size && zeros(offset, at) => Ok(()),
        other => panic!("{op:?}: {other:?} for a file of {size} bytes"),
    }
}

/// The part of a file of `size` bytes a mapped store of `len` at `offset` touches (inside the
/// file: stores past its end do not extend it), as (offset, len).
pub(crate) fn map_range(size: u64, offset: u64, len: usize) -> Option<(usize, usize)> {
    if size == 0 {
        return None;
    }
    let at = offset % size;
    Some((at as usize, len.min((size - at) as usize)))
}

fn children(m: &Model, dir: &str) -> Vec<String> {
    let mut names: Vec<String> = m
        .names()
        .filter(|(name, _)| parent(name) == (if dir == "." { None } else { Some(dir) }))
        .map(|(name, _)| name.rsplit('/').next().unwrap_or(name).to_string())
        .collect();
    names.sort();
    names
}
