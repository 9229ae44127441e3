//! The model's side of an operation: what the kernel's file systems answer to it on the tree
//! the model holds, in their order of checks ([`want`]), and what a successful one changes
//! ([`apply`]).

use crate::model::{inside, parent, Kind, Model};
use crate::ops::{pattern, Op};
use crate::worker::{file_data, map_range};

/// What `op` must give: success or this errno.
pub(crate) type Want = Result<(), i32>;

/// What opening `path` for reading and writing (`O_NOFOLLOW`) gives, and the file it opens.
fn want_open(m: &Model, path: &str, create: bool) -> Result<Option<u64>, i32> {
    match m.lookup(path)? {
        None if create => Ok(None),
        None => Err(libc::ENOENT),
        Some(id) => match m.node(id).kind {
            Kind::Symlink => Err(libc::ELOOP),
            Kind::Dir => Err(libc::EISDIR),
            Kind::File => Ok(Some(id)),
        },
    }
}

fn want_fallocate(m: &Model, path: &str, mode: i32, offset: u64, len: u64) -> Want {
    let id = want_open(m, path, false)?.expect("no create");
    let size = m.node(id).data.len() as u64;
    let aligned = offset % 4096 == 0 && len % 4096 == 0;
    match mode {
        libc::FALLOC_FL_COLLAPSE_RANGE if !aligned || offset + len >= size => Err(libc::EINVAL),
        libc::FALLOC_FL_INSERT_RANGE if !aligned || offset >= size => Err(libc::EINVAL),
        _ => Ok(()),
    }
}

/// The kernel's order of checks for `renameat2`.
fn want_rename(m: &Model, from: &str, to: &str, flags: u32) -> Want {
    m.check_parent(from)?;
    m.check_parent(to)?;
    let source = m.existing(from)?;
    let target = m.lookup(to)?;
    if flags & libc::RENAME_NOREPLACE != 0 && target.is_some() {
        return Err(libc::EEXIST);
    }
    let exchange = flags & libc::RENAME_EXCHANGE != 0;
    if exchange && target.is_none() {
        return Err(libc::ENOENT);
    }
    if parent(from) != parent(to) {
        if inside(to, from) {
            return Err(libc::EINVAL); // the source may not contain the target
        }
        if inside(from, to) {
            return Err(if exchange {
                libc::EINVAL
            } else {
                libc::ENOTEMPTY
            });
        }
    }
    let Some(target) = target else {
        return Ok(());
    };
    if target == source {
        return Ok(()); // two names of one file: nothing happens
    }
    let (source_dir, target_dir) = (
        m.node(source).kind == Kind::Dir,
        m.node(target).kind == Kind::Dir,
    );
    if exchange {
        return Ok(());
    }
    match (source_dir, target_dir) {
        (true, false) => Err(libc::ENOTDIR),
        (false, true) => Err(libc::EISDIR),
        (true, true) if !m.is_empty_dir(to) => Err(libc::ENOTEMPTY),
        _ => Ok(()),
    }
}

fn want_link(m: &Model, from: &str, to: &str) -> Want {
    let source = m.existing(from)?;
    if m.lookup(to)?.is_some() {
        return Err(libc::EEXIST);
    }
    if m.node(source).kind == Kind::Dir {
        return Err(libc::EPERM);
    }
    Ok(())
}

/// Opening `path` `O_RDONLY | O_NOFOLLOW` (attributes): files and directories.
fn want_attr_target(m: &Model, path: &str) -> Result<u64, i32> {
    let id = m.existing(path)?;
    if m.node(id).kind == Kind::Symlink {
        return Err(libc::ELOOP);
    }
    Ok(id)
}

/// What `op` must give on the tree the model holds.
pub(crate) fn want(m: &Model, op: &Op) -> Want {
    match *op {
        Op::Write { path, .. } | Op::Append { path, .. } => want_open(m, path, true).map(drop),
        Op::Read { path, .. }
        | Op::Truncate { path, .. }
        | Op::Sync { path, .. }
        | Op::MapStore { path, .. } => want_open(m, path, false).map(drop),
        Op::SeekData { path, .. } => want_open(m, path, false).map(drop),
        Op::Fallocate {
            path,
            mode,
            offset,
            len,
        } => want_fallocate(m, path, mode, offset, len),
        Op::CopyRange { from, to, .. } => {
            want_open(m, from, false)?;
            want_open(m, to, true).map(drop)
        }
        Op::Unlink { path } => match m.node(m.existing(path)?).kind {
            Kind::Dir => Err(libc::EISDIR),
            _ => Ok(()),
        },
        Op::Mkdir { path } | Op::Symlink { path } => match m.lookup(path)? {
            Some(_) => Err(libc::EEXIST),
            None => Ok(()),
        },
        Op::Rmdir { path } => match m.node(m.existing(path)?).kind {
            Kind::Dir if !m.is_empty_dir(path) => Err(libc::ENOTEMPTY),
            Kind::Dir => Ok(()),
            _ => Err(libc::ENOTDIR),
        },
        Op::Rename { from, to, flags } => want_rename(m, from, to, flags),
        Op::Link { from, to } => want_link(m, from, to),
        Op::Chmod { path, .. } => match m.node(m.existing(path)?).kind {
            Kind::Symlink => Err(libc::ENOENT), // followed to a target that does not exist
            _ => Ok(()),
        },
        Op::Utimens { path, .. } | Op::Stat { path } => m.existing(path).map(drop),
        Op::SetXattr { path, .. } => want_attr_target(m, path).map(drop),
        Op::RemoveXattr { path, name } => {
            let id = want_attr_target(m, path)?;
            match m.node(id).xattrs.contains_key(name) {
                true => Ok(()),
                false => Err(libc::ENODATA),
            }
        }
        Op::Tmpfile { path, .. } => {
            if let Some(dir) = parent(path) {
                match m.node(m.existing(dir)?).kind {
                    Kind::Dir => {}
                    Kind::File => return Err(libc::ENOTDIR),
                    Kind::Symlink => return Err(libc::ENOENT),
                }
            }
            match m.lookup(path)? {
                Some(_) => Err(libc::EEXIST),
                None => Ok(()),
            }
        }
        Op::List { path: "." } => Ok(()),
        Op::List { path } => match m.node(m.existing(path)?).kind {
            Kind::Dir => Ok(()),
            Kind::File => Err(libc::ENOTDIR),
            Kind::Symlink => Err(libc::ENOENT),
        },
    }
}

fn file_mut<'m>(m: &'m mut Model, path: &str, create: bool) -> &'m mut Vec<u8> {
    let id = match m.lookup(path).expect("checked") {
        Some(id) => id,
        None if create => m.create(path, Kind::File, 0o644),
        None => panic!("{path} must exist"),
    };
    &mut m.node_mut(id).data
}

fn store(data: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let end = offset as usize + bytes.len();
    if data.len() < end {
        data.resize(end, 0);
    }
    data[offset as usize..end].copy_from_slice(bytes);
}

fn apply_fallocate(data: &mut Vec<u8>, mode: i32, offset: u64, len: u64) {
    let (start, end) = (offset as usize, (offset + len) as usize);
    let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
    match mode & !libc::FALLOC_FL_KEEP_SIZE {
        libc::FALLOC_FL_COLLAPSE_RANGE => {
            data.drain(start..end);
        }
        libc::FALLOC_FL_INSERT_RANGE => {
            data.splice(start..start, std::iter::repeat(0).take(len as usize));
        }
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE => {
            let zero_end = end.min(data.len());
            if start < zero_end {
                data[start..zero_end].fill(0);
            }
            if !keep && data.len() < end {
                data.resize(end, 0);
            }
        }
        _ if !keep && data.len() < end => data.resize(end, 0),
        _ => {}
    }
}

/// Applies a successful `op` to the model.
pub(crate) fn apply(m: &mut Model, op: &Op) {
    match *op {
        Op::Write {
            path,
            offset,
            len,
            seed,
        } => store(file_mut(m, path, true), offset, &pattern(seed, len)),
        Op::Append { path, len, seed } => {
            let data = file_mut(m, path, true);
            let at = data.len() as u64;
            store(data, at, &pattern(seed, len));
        }
        Op::Truncate { path, size } => file_mut(m, path, false).resize(size as usize, 0),
        Op::Fallocate {
            path,
            mode,
            offset,
            len,
        } => apply_fallocate(file_mut(m, path, false), mode, offset, len),
        Op::CopyRange {
            from,
            to,
            off_in,
            off_out,
            len,
        } => {
            if m.lookup(from) == m.lookup(to) {
                return;
            }
            let src = file_data(m, from);
            let start = (off_in as usize).min(src.len());
            let end = (off_in + len).min(src.len() as u64) as usize;
            let bytes = src[start..end].to_vec();
            let dst = file_mut(m, to, true);
            if !bytes.is_empty() {
                store(dst, off_out, &bytes);
            }
        }
        Op::MapStore {
            path,
            offset,
            len,
            seed,
        } => {
            let data = file_mut(m, path, false);
            if let Some((at, n)) = map_range(data.len() as u64, offset, len) {
                store(data, at as u64, &pattern(seed, n));
            }
        }
        Op::Unlink { path } | Op::Rmdir { path } => m.remove(path),
        Op::Mkdir { path } => {
            m.create(path, Kind::Dir, 0o755);
        }
        Op::Symlink { path } => {
            m.create(path, Kind::Symlink, 0o777);
        }
        Op::Rename { from, to, flags } => {
            let (source, target) = (m.lookup(from).unwrap(), m.lookup(to).unwrap());
            if source == target {
                return;
            }
            if flags & libc::RENAME_EXCHANGE != 0 {
                m.exchange(from, to);
            } else {
                if target.is_some() {
                    m.remove(to);
                }
                m.rename(from, to);
            }
        }
        Op::Link { from, to } => {
            let id = m.existing(from).unwrap();
            m.link(id, to);
        }
        Op::Chmod { path, perm } => {
            let id = m.existing(path).unwrap();
            m.node_mut(id).perm = perm;
        }
        Op::SetXattr {
            path,
            name,
            len,
            seed,
        } => {
            let id = m.existing(path).unwrap();
            m.node_mut(id)
                .xattrs
                .insert(name.to_string(), pattern(seed, len));
        }
        Op::RemoveXattr { path, name } => {
            let id = m.existing(path).unwrap();
            m.node_mut(id).xattrs.remove(name);
        }
        Op::Tmpfile { path, len, seed } => {
            let id = m.create(path, Kind::File, 0o644);
            m.node_mut(id).data = pattern(seed, len);
        }
        Op::Read { .. }
        | Op::Sync { .. }
        | Op::SeekData { .. }
        | Op::Utimens { .. }
        | Op::Stat { .. }
        | Op::List { .. } => {}
    }
}
