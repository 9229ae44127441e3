//! What the daemon lends a client on its socket: the shadow of a file it maps shared
//! ([`op::SHADOW_LEND`], `nosefs_core::file::lent`), and a read-only descriptor of the image for
//! a client the image's owner trusts ([`op::IMAGE_LEND`], `nosefs_core::file::direct`).

use super::*;

/// Lends the image to `conn` if its user owns the image file or is root (who could read the
/// file itself): a read-only descriptor on the socket, numbered by the data zone's offset;
/// where the data zone lies (offset, bytes). EPERM for anyone else.
pub(super) fn lend_image(shared: &Shared, conn: &Conn) -> Result<(u64, u64), Errno> {
    let trusted = |uid: u32| uid == 0 || Some(uid) == shared.image_owner;
    if shared.image_owner.is_none() || !trusted(conn.cred.read().uid) {
        return Err(Errno(libc::EPERM));
    }
    let (image, zone_offset, zone_bytes) = shared.fs.image_for_reading().map_err(|e| e.errno())?;
    send_descriptor(conn, zone_offset, image.as_fd())?;
    Ok((zone_offset, zone_bytes))
}

/// Most bytes of data a file may hold for its shadow to be lent ([`op::SHADOW_LEND`]).
const MAX_LENT_DATA_BYTES: u64 = 1 << 30;

/// Most loans one connection may hold. The shim asks one per file and access a process maps
/// (`nosefs_preload::borrowed`), so an honest process reaches it only with thousands of files
/// mapped at once; a client asking again and again would otherwise grow the daemon's table
/// (and keep every shadow it names) without bound. Past it: EOPNOTSUPP, on which the shim maps
/// through the FUSE mount. Checked before lending, not held across it (a shadow's making may
/// copy a GiB): one connection's threads lending at once may pass it by as many loans as they
/// are, which the shim's own lending, one at a time, never does.
pub const MAX_LOANS_PER_CONNECTION: usize = 4096;

/// Lends file `ino`'s shadow to the client: its memfd goes on the connection's socket with the
/// loan's number, then the loan is the connection's.
pub(super) fn lend_shadow(
    shared: &Shared,
    conn: &Conn,
    ino: u64,
    write: bool,
) -> Result<u64, Errno> {
    if conn.loans.lock().len() >= MAX_LOANS_PER_CONNECTION {
        return Err(Errno(libc::EOPNOTSUPP));
    }
    // A shadow holds the file's data in memory, copied at its making (~0.4-0.7 s per GiB
    // here): a larger file maps through the FUSE mount, whose page cache fills lazily.
    // (The file's data state loaded first, so that `blocks` counts its data, not its size:
    // LMDB's writemap mode sizes a sparse file to its whole map.)
    shared.fs.file_pieces(ino).map_err(|e| e.errno())?;
    let data_bytes = shared.fs.getattr(ino).map_err(|e| e.errno())?.blocks * 512;
    if data_bytes > MAX_LENT_DATA_BYTES {
        return Err(Errno(libc::EOPNOTSUPP));
    }
    let lent = shared.fs.lend_shadow(ino, write).map_err(|e| e.errno())?;
    let loan = conn.next_loan.fetch_add(1, Ordering::Relaxed);
    let sent = lent
        .memfd()
        .map_err(|e| e.errno())
        .and_then(|memfd| send_descriptor(conn, loan, memfd.as_fd()));
    match sent {
        Ok(_) => {
            conn.loans.lock().insert(loan, lent);
            Ok(loan)
        }
        Err(e) => {
            let _ = shared.fs.return_shadow(lent, true);
            Err(e)
        }
    }
}

/// Sends descriptor `fd` on `conn`'s socket with `number` (which the client checks against
/// the reply's, so that each thread takes its own).
fn send_descriptor(conn: &Conn, number: u64, fd: std::os::fd::BorrowedFd<'_>) -> Result<(), Errno> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(Errno::EIO);
    }
    rustix::net::sendmsg(
        &conn.socket,
        &[IoSlice::new(&number.to_le_bytes())],
        &mut control,
        SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
    )
    .map(drop)
    .map_err(|_| Errno::EIO)
}
