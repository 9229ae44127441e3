//! Requests: each decoded (never trusting the client's bytes), checked against the client's
//! credentials and descriptions, and run through the same [`Local`] service the embedded shim
//! uses; the kernel's caches are told what changed before the reply.

use super::loans::{lend_image, lend_shadow};
use super::*;

/// A description this client may use: adopted on first use from another connection of the
/// same family (fork) only through a ticket, so a token is a capability.
pub(super) fn description(shared: &Shared, conn: &Conn, token: u64) -> Result<Description, Errno> {
    if !conn.held.lock().contains(&token) {
        return Err(Errno(libc::EBADF));
    }
    shared
        .descriptions
        .lock()
        .get(&token)
        .copied()
        .ok_or(Errno(libc::EBADF))
}

fn readable(d: &Description) -> Result<u64, Errno> {
    match (d.kind, d.readable) {
        (OpenKind::Dir, _) => Err(Errno::EISDIR),
        (OpenKind::File, true) => Ok(d.ino),
        _ => Err(Errno(libc::EBADF)),
    }
}

fn writable(d: &Description) -> Result<u64, Errno> {
    if d.writable && d.kind == OpenKind::File {
        Ok(d.ino)
    } else {
        Err(Errno(libc::EBADF))
    }
}

/// Walks a path sent with a path operation again, with the client's credentials.
fn rewalk(local: &Local<'_>, d: &mut Dec<'_>) -> Result<Found, Errno> {
    let mut path = d.bytes()?.to_vec();
    let trailing_slash = d.bool()?;
    if d.bool()? {
        path.extend_from_slice(b"/."); // walked again, it names the directory itself again
    }
    match local.walk(path, false)? {
        Walked::Found(mut found) => {
            found.trailing_slash = trailing_slash;
            Ok(found)
        }
        Walked::Outside(_) => Err(Errno::EINVAL),
    }
}

fn ok() -> Enc {
    Enc::new(0)
}

/// Decodes and runs one request. A read puts its data in the reply in place (`data`), behind
/// the head it returns.
pub(super) fn execute(
    shared: &Shared,
    conn: &Conn,
    request: &[u8],
    data: &mut ReplyData<'_>,
) -> Result<Enc, Errno> {
    let room = data.area.payload_bytes();
    let cred = || conn.cred.read().clone();
    let local = Local {
        fs: &shared.fs,
        prefix: &conn.prefix,
        cred: &cred,
    };
    let inval = shared.options.invalidate.as_deref();
    let mut d = Dec::new(request);
    let opcode = d.u32()?;
    let mut reply = ok();
    match opcode {
        op::NOP => {}
        op::RECRED => recred(shared, conn)?,
        op::WALK => {
            let path = d.bytes()?.to_vec();
            let follow = d.bool()?;
            reply.walked(&local.walk(path, follow)?);
        }
        op::WALK_IN => {
            let dir = dir_description(shared, conn, d.u64()?)?;
            let dir_path = d.bytes()?;
            let name = d.bytes()?;
            match local.walk_in(dir.ino, dir_path, name, d.bool()?)? {
                Some(f) => reply.u8(1).found(&f),
                None => reply.u8(0),
            };
        }
        op::OPEN => {
            let found = rewalk(&local, &mut d)?;
            let (flags, mode, umask) = (d.i32()?, d.u32()?, d.u32()?);
            open(
                shared,
                conn,
                &local,
                &found,
                (flags, mode, umask),
                &mut reply,
            )?;
        }
        op::OPEN_IN => {
            let dir = dir_description(shared, conn, d.u64()?)?;
            let (dir_path, name, follow) = (d.bytes()?, d.bytes()?, d.bool()?);
            let (flags, mode, umask) = (d.i32()?, d.u32()?, d.u32()?);
            let mark = reply.buf.len();
            crate::service::open_again(flags, || {
                reply.buf.truncate(mark);
                match local.walk_in(dir.ino, dir_path, name, follow)? {
                    Some(found) => {
                        reply.u8(1).found(&found);
                        Ok(open(
                            shared,
                            conn,
                            &local,
                            &found,
                            (flags, mode, umask),
                            &mut reply,
                        ))
                    }
                    None => {
                        reply.u8(0);
                        Ok(Ok(()))
                    }
                }
            })?;
        }
        op::UNLINK_IN | op::RENAME_IN => {
            let name_in = |d: &mut Dec<'_>| -> Result<Option<Found>, Errno> {
                let dir = dir_description(shared, conn, d.u64()?)?;
                let (dir_path, name) = (d.bytes()?, d.bytes()?);
                local.walk_in(dir.ino, dir_path, name, false)
            };
            let first = name_in(&mut d)?;
            let second = if opcode == op::RENAME_IN {
                Some(name_in(&mut d)?)
            } else {
                None
            };
            // A name the kernel holds may be a mount point: the full walk's request checks it.
            let held = |f: &Option<Found>| f.as_ref().is_some_and(|f| may_be_mounted_on(inval, f));
            let done: Vec<Found> = match (first, second) {
                (a, b) if held(&a) || b.as_ref().is_some_and(held) => Vec::new(),
                (Some(f), None) => {
                    local.unlink(&f)?;
                    vec![f]
                }
                (Some(a), Some(Some(b))) => {
                    local.rename(&a, &b, d.u32()?)?;
                    vec![a, b]
                }
                _ => Vec::new(), // a name needs the full walk: nothing done
            };
            if let Some(i) = inval {
                for f in &done {
                    name_changed(i, f);
                }
            }
            reply.bool(!done.is_empty());
        }
        op::OPEN_PATH => {
            let path = d.bytes()?.to_vec();
            let follow = d.bool()?;
            let (flags, mode, umask) = (d.i32()?, d.u32()?, d.u32()?);
            let mark = reply.buf.len();
            crate::service::open_again(flags, || {
                reply.buf.truncate(mark);
                let walked = local.walk(path.clone(), follow)?;
                reply.walked(&walked);
                Ok(match &walked {
                    Walked::Found(found) => open(
                        shared,
                        conn,
                        &local,
                        found,
                        (flags, mode, umask),
                        &mut reply,
                    ),
                    Walked::Outside(_) => Ok(()),
                })
            })?;
        }
        op::CLOSE => {
            let token = d.u64()?;
            if conn.held.lock().remove(&token) {
                release(shared, token);
            }
        }
        op::READ => {
            let ino = readable(&description(shared, conn, d.u64()?)?)?;
            let offset = d.u64()?;
            let len = d.u32()? as usize;
            let n = data.fill(len, |buf| local.read(ino, offset, buf))?;
            // As `Enc::bytes` would put it: the length, then the bytes (already in place).
            reply.u32(n as u32);
        }
        op::READ_MAPPED => {
            let ino = readable(&description(shared, conn, d.u64()?)?)?;
            let offset = d.u64()?;
            let len = (d.u32()? as usize).min(data.room() - crate::proto::DIRECT_MAP_BYTES);
            // The board follows the file first: the copy's word is then the board's.
            let index = watch_size(shared, conn, ino, true)?;
            let mut map = None;
            let n = data.fill(len, |buf| {
                if index == u32::MAX {
                    return local.read(ino, offset, buf);
                }
                let (n, copy) = shared
                    .fs
                    .read_mapped(ino, offset, buf)
                    .map_err(|e| e.errno())?;
                map = copy;
                Ok(n)
            })?;
            let mut tail = Enc::default();
            tail.direct_map(index, map.as_ref());
            data.append(&tail.buf)?;
            // As READ's: the data's length, then the data (already in place), then the copy.
            reply.u32(n as u32);
        }
        op::IMAGE_LEND => {
            let (zone_offset, zone_bytes) = lend_image(shared, conn)?;
            reply.u64(zone_offset).u64(zone_bytes);
        }
        op::WRITE => {
            let ino = writable(&description(shared, conn, d.u64()?)?)?;
            let offset = d.u64()?;
            let append = d.bool()?;
            let data = d.bytes()?;
            let at = local.write(ino, offset, data, append)?;
            if let Some(i) = inval {
                i.written(ino, at, data);
            }
            reply.u64(at);
        }
        op::FSYNC => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind == OpenKind::File {
                local.fsync(desc.ino)?;
            }
        }
        op::FTRUNCATE => {
            let ino = writable(&description(shared, conn, d.u64()?)?).map_err(|_| Errno::EINVAL)?;
            let size = d.u64()?;
            local.ftruncate(ino, size)?;
            if let Some(i) = inval {
                i.resized(ino, size);
            }
        }
        op::FSTAT => {
            let desc = description(shared, conn, d.u64()?)?;
            reply.attr(&local.fstat(desc.ino)?);
        }
        op::FSETATTR => {
            let desc = description(shared, conn, d.u64()?)?;
            let change = d.setattr()?;
            if change.size.is_some() {
                return Err(Errno::EINVAL);
            }
            local.fsetattr(desc.ino, &change, d.bool()?)?;
            if let Some(i) = inval {
                i.attributes(desc.ino);
            }
        }
        op::READDIR => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind != OpenKind::Dir {
                return Err(Errno::ENOTDIR);
            }
            let cookie = d.u64()?;
            // Each entry costs at most 4 + 255 + 20 bytes: never more than the reply holds.
            let max = (d.u32()? as usize).min((room - 16) / 280).max(1);
            let entries = local.readdir(desc.ino, cookie, max)?;
            reply.u32(entries.len() as u32);
            for e in &entries {
                reply.entry(e);
            }
        }
        op::LISTING_END => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind != OpenKind::Dir {
                return Err(Errno::ENOTDIR);
            }
            reply.u64(local.listing_end(desc.ino)?);
        }
        op::SIZE_WATCH => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind != OpenKind::File {
                return Err(Errno::EINVAL);
            }
            let index = watch_size(shared, conn, desc.ino, false)?;
            reply.u64(u64::from(index));
        }
        op::SHADOW_LEND => {
            let desc = description(shared, conn, d.u64()?)?;
            let ino = readable(&desc)?;
            let write = d.bool()?;
            if write && !desc.writable {
                return Err(Errno(libc::EACCES));
            }
            reply.u64(lend_shadow(shared, conn, ino, write)?);
        }
        op::SHADOW_TAKE | op::SHADOW_RETURN => {
            let loan = d.u64()?;
            let commit = d.bool()?;
            let runs = page_runs(&mut d)?;
            let mut loans = conn.loans.lock();
            let lent = loans.get(&loan).ok_or(Errno(libc::EBADF))?;
            let ino = lent.ino();
            let taken = shared.fs.take_lent_writes(lent, &runs);
            if opcode == op::SHADOW_RETURN {
                let lent = loans.remove(&loan).expect("found above");
                drop(loans);
                shared.fs.return_shadow(lent, true).map_err(|e| e.errno())?;
            } else {
                drop(loans);
            }
            taken.map_err(|e| e.errno())?;
            if commit {
                local.fsync(ino)?;
            }
            if let (Some(i), false) = (inval, runs.is_empty()) {
                i.inode(ino);
            }
        }
        op::PATH_OF => {
            let desc = description(shared, conn, d.u64()?)?;
            reply.bytes(&local.path_of(desc.ino)?);
        }
        op::DATA_MAP => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind != OpenKind::File {
                return Err(Errno::EINVAL);
            }
            let (start, len) = (d.u64()?, d.u64()?);
            // 25 bytes a run: never more than the reply holds.
            let max = (d.u32()? as usize).min((room - 16) / 25);
            let runs = local.data_map(desc.ino, start, len, max)?;
            reply.u32(runs.len() as u32);
            for r in &runs {
                let flags = u8::from(r.last) | (u8::from(r.pending) << 1);
                reply.u64(r.logical).u64(r.physical).u64(r.length).u8(flags);
            }
        }
        op::SEEK_HOLE => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind != OpenKind::File {
                return Err(Errno::EINVAL);
            }
            let at = local.seek_hole(desc.ino, d.u64()?, d.bool()?)?;
            reply.u64(at);
        }
        op::FALLOCATE => {
            let desc = description(shared, conn, d.u64()?)?;
            if desc.kind != OpenKind::File {
                return Err(Errno(libc::ENODEV));
            }
            let ino = writable(&desc)?;
            local.fallocate(ino, d.i32()?, d.i64()?, d.i64()?)?;
            if let Some(i) = inval {
                i.resized(ino, local.fstat(ino)?.size);
            }
        }
        op::TRUNCATE => {
            let found = rewalk(&local, &mut d)?;
            let size = d.i64()?;
            local.truncate(&found, size)?;
            if let (Some(i), Some(a)) = (inval, found.attr) {
                i.resized(a.ino, size as u64);
            }
        }
        op::MKDIR | op::MKNOD | op::SYMLINK | op::LINK => {
            let (found, other) = match opcode {
                op::LINK => {
                    let from = rewalk(&local, &mut d)?;
                    (rewalk(&local, &mut d)?, Some(from))
                }
                _ => (rewalk(&local, &mut d)?, None),
            };
            match opcode {
                op::MKDIR => local.mkdir(&found, d.u32()?, d.u32()?)?,
                op::MKNOD => {
                    let (mode, rdev, umask) = (d.u32()?, d.u64()?, d.u32()?);
                    let attr = local.mknod(&found, mode, rdev, umask)?;
                    reply.attr(&attr);
                }
                op::SYMLINK => local.symlink(d.bytes()?, &found)?,
                _ => {
                    let from = other.expect("link has a source");
                    local.link(&from, &found)?;
                    if let (Some(i), Some(a)) = (inval, from.attr) {
                        i.attributes(a.ino);
                    }
                }
            }
            if let Some(i) = inval {
                i.entry(found.parent, &found.name);
                i.inode(found.parent);
            }
        }
        op::READLINK => {
            let found = rewalk(&local, &mut d)?;
            reply.bytes(&local.readlink(&found)?);
        }
        op::UNLINK | op::RMDIR => {
            let found = rewalk(&local, &mut d)?;
            // The kernel's order: a directory to unlink or a file to rmdir is refused first.
            let dir = found.attr.is_some_and(|a| a.is_dir());
            if dir == (opcode == op::RMDIR) && mounted_on(inval, &found) {
                return Err(Errno(libc::EBUSY));
            }
            if opcode == op::UNLINK {
                local.unlink(&found)?;
            } else {
                let last = d.bytes()?;
                local.rmdir(&found, last)?;
            }
            if let Some(i) = inval {
                name_changed(i, &found);
            }
        }
        op::RENAME => {
            let from = rewalk(&local, &mut d)?;
            let to = rewalk(&local, &mut d)?;
            if mounted_on(inval, &from) || mounted_on(inval, &to) {
                return Err(Errno(libc::EBUSY));
            }
            local.rename(&from, &to, d.u32()?)?;
            if let Some(i) = inval {
                for f in [&from, &to] {
                    name_changed(i, f);
                }
            }
        }
        op::SETATTR => {
            let found = rewalk(&local, &mut d)?;
            let change = d.setattr()?;
            if change.size.is_some() {
                return Err(Errno::EINVAL);
            }
            local.setattr(&found, &change, d.bool()?)?;
            if let (Some(i), Some(a)) = (inval, found.attr) {
                i.attributes(a.ino);
            }
        }
        op::STATFS => {
            let s = local.statfs()?;
            reply
                .u64(s.blocks)
                .u64(s.blocks_free)
                .u64(s.inodes)
                .u64(s.inodes_free);
        }
        op::SYNC_ALL => local.sync_all()?,
        op::FLINK => {
            let desc = description(shared, conn, d.u64()?)?;
            let to = rewalk(&local, &mut d)?;
            local.flink(desc.ino, &to)?;
            if let Some(i) = inval {
                i.entry(to.parent, &to.name);
                i.inode(to.parent);
                i.attributes(desc.ino);
            }
        }
        op::XATTR | op::FXATTR => {
            let (ino, out) = if opcode == op::XATTR {
                let found = rewalk(&local, &mut d)?;
                let call = d.xattr_call()?;
                let ino = found.existing()?.ino;
                (ino, local.xattr(XattrTarget::Path(&found), call)?)
            } else {
                let desc = description(shared, conn, d.u64()?)?;
                if desc.kind == OpenKind::Path {
                    return Err(Errno::EBADF); // as fgetxattr on an O_PATH descriptor
                }
                let call = d.xattr_call()?;
                (desc.ino, local.xattr(XattrTarget::Handle(desc.ino), call)?)
            };
            // A change may change the mode (an ACL), and the kernel caches ACLs with the inode
            // (dropped with its attributes).
            if let Some(i) = inval {
                i.attributes(ino);
            }
            reply.bytes(&out);
        }
        op::HOLD => {
            let n = d.u32()? as usize;
            let mut tokens = Vec::with_capacity(n.min(4096));
            for _ in 0..n {
                let token = d.u64()?;
                description(shared, conn, token)?;
                tokens.push(token);
            }
            let mut descriptions = shared.descriptions.lock();
            for t in &tokens {
                if let Some(desc) = descriptions.get_mut(t) {
                    desc.refs += 1;
                }
            }
            drop(descriptions);
            let ticket = random_token();
            shared.tickets.lock().insert(
                ticket,
                Ticket {
                    tokens,
                    pidfd: None,
                },
            );
            reply.u64(ticket);
        }
        op::CLAIM => {
            let ticket = d.u64()?;
            let n = d.u32()? as usize;
            let mut keep = HashSet::new();
            for _ in 0..n {
                keep.insert(d.u64()?);
            }
            let t = shared.tickets.lock().remove(&ticket).ok_or(Errno::ENOENT)?;
            for token in t.tokens {
                if keep.contains(&token) && conn.held.lock().insert(token) {
                    continue; // the ticket's reference is now this connection's
                }
                release(shared, token);
            }
        }
        op::BIND => {
            let ticket = d.u64()?;
            let pid = d.i32()?;
            if pid <= 0 {
                return Err(Errno::EINVAL); // no process has it
            }
            let pidfd = rustix::process::Pid::from_raw(pid).and_then(|p| {
                rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
            });
            let mut tickets = shared.tickets.lock();
            match (tickets.get_mut(&ticket), pidfd) {
                (Some(t), Some(fd)) => t.pidfd = Some(Arc::new(fd)),
                (Some(_), None) => {
                    drop(tickets);
                    release_ticket(shared, ticket); // the process is gone already
                }
                (None, _) => {} // claimed already
            }
        }
        _ => return Err(Errno(libc::ENOSYS)),
    }
    Ok(reply)
}

/// A description `token` names for `conn` that can hold names (a directory, or an O_PATH one):
/// ENOTDIR for a file.
fn dir_description(shared: &Shared, conn: &Conn, token: u64) -> Result<Description, Errno> {
    let dir = description(shared, conn, token)?;
    if dir.kind == OpenKind::File {
        return Err(Errno::ENOTDIR);
    }
    Ok(dir)
}

/// `open` of a found path for a client: the description, its token held by the connection, the
/// kernel's caches invalidated where a create or truncate changed what they may hold; the
/// reply gets the attributes, the kind and the token.
fn open(
    shared: &Shared,
    conn: &Conn,
    local: &Local<'_>,
    found: &Found,
    (flags, mode, umask): (i32, u32, u32),
    reply: &mut Enc,
) -> Result<(), Errno> {
    let inval = shared.options.invalidate.as_deref();
    let opened = local.open(found, flags, mode, umask)?;
    if found.attr.is_none() {
        if let Some(i) = inval {
            i.entry(found.parent, &found.name);
            i.inode(found.parent);
        }
    } else if flags & libc::O_TRUNC != 0 && opened.kind == OpenKind::File {
        if let Some(i) = inval {
            i.inode(opened.attr.ino);
        }
    }
    let accmode = flags & libc::O_ACCMODE;
    if opened.kind != OpenKind::Path {
        shared.fs.open(opened.attr.ino).map_err(|e| e.errno())?;
    }
    let mut descriptions = shared.descriptions.lock();
    let token = loop {
        let token = shared.tokens.draw();
        if !descriptions.contains_key(&token) {
            break token;
        }
    };
    descriptions.insert(
        token,
        Description {
            ino: opened.attr.ino,
            kind: opened.kind,
            readable: opened.kind != OpenKind::Path
                && (accmode == libc::O_RDONLY || accmode == libc::O_RDWR),
            writable: opened.kind != OpenKind::Path
                && (accmode == libc::O_WRONLY || accmode == libc::O_RDWR),
            refs: 1,
        },
    );
    drop(descriptions);
    conn.held.lock().insert(token);
    reply.attr(&opened.attr).kind(opened.kind).u64(token);
    Ok(())
}

/// The (first page, pages) runs of a SHADOW_TAKE or SHADOW_RETURN, at most [`MAX_RUNS`].
fn page_runs(d: &mut Dec<'_>) -> Result<Vec<(u64, u64)>, Errno> {
    let n = d.u32()? as usize;
    if n > crate::proto::MAX_RUNS {
        return Err(Errno::EINVAL);
    }
    (0..n).map(|_| Ok((d.u64()?, d.u64()?))).collect()
}

/// Whether the kernel may have something mounted on what `found` names.
fn may_be_mounted_on(inval: Option<&dyn Invalidate>, found: &Found) -> bool {
    found
        .attr
        .is_some_and(|a| inval.map_or(true, |i| i.may_be_mounted_on(a.ino)))
}

/// Whether something is mounted through the FUSE mount on what `found` names: the kernel
/// answers EBUSY to its rename, unlink or rmdir (and the daemon's change under the mount would
/// detach it when the kernel's entry is invalidated).
fn mounted_on(inval: Option<&dyn Invalidate>, found: &Found) -> bool {
    may_be_mounted_on(inval, found) && is_mount_point(&found.path)
}

/// The kernel's caches told that name `f` went or changed: its entry, its directory and the
/// attributes of the inode it named.
fn name_changed(i: &dyn Invalidate, f: &Found) {
    i.entry(f.parent, &f.name);
    i.inode(f.parent);
    if let Some(a) = f.attr {
        i.attributes(a.ino);
    }
}
