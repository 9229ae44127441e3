//! Locks the kernel arbitrates for the shim: in daemon mode on kernel descriptors through the
//! FUSE mount (record locks per process and file, flock and OFD locks per description); in
//! embedded mode flock and OFD locks on a kernel description per noseFS description, each of a
//! memfd that stands for the file in the process (record locks there never conflict: one
//! process holds the image).

use super::*;

/// Daemon mode: the kernel descriptor of `fd`'s file on which the process's POSIX record locks
/// are taken (`kernel`), checked against the description's access mode as the kernel checks a
/// lock of type `l_type`, with the description's current offset (for SEEK_CUR and lockf). `None`
/// in embedded mode, where one process holds the image and locks cannot conflict.
///
/// The kernel keeps POSIX locks per process and inode on the FUSE mount's inode, where every
/// process of the machine meets: so locks are honoured between daemon clients, and between a
/// client and a program using the FUSE mount. Not followed: the kernel descriptor is opened by
/// path, so a file renamed or removed since it was opened gets ENODEV.
/// `set`: a lock is set (F_GETLK only tests, and needs no access).
pub fn record_lock_file(
    fd: i32,
    l_type: i32,
    set: bool,
) -> Result<Option<(Arc<KernelFile>, u64)>, Errno> {
    if !state::daemon_mode() {
        return Ok(None);
    }
    let file = file_of(fd)?;
    let (read, write) = match l_type {
        libc::F_RDLCK if set => (true, false),
        libc::F_WRLCK if set => (false, true),
        _ => (false, false),
    };
    if file.kind == Kind::Path || (read && !file.readable()) || (write && !file.writable()) {
        return Err(Errno::EBADF);
    }
    let kernel = kernel::for_file(&file, read, write)?;
    let offset = *file.offset.lock();
    Ok(Some((kernel, offset)))
}

/// The kernel descriptor on which the flock and OFD locks of `fd`'s description are taken (see
/// `OpenFile::lock_fd`), with the description, which keeps the descriptor open. Closing the
/// description's last descriptor closes it, dropping its locks.
///
/// Daemon mode: a descriptor of the file through the FUSE mount, where every process meets.
/// Refused (ENOLCK) while the process holds POSIX record locks on the file: opening it closes a
/// descriptor of the file, which would drop them (`kernel`).
///
/// Embedded mode: a description of a memfd that stands for the file: the same memfd for every
/// description of the file in the process (found through another description's, else made),
/// so the kernel sees two descriptions of one file, as it would on a kernel file system: an
/// flock or an OFD lock through one conflicts with one through the other. A forked child shares
/// the descriptions (`share_locks`), an exec'd program inherits them (`lock_fd_to_hand_over`).
pub fn lock_fd(fd: i32) -> Result<(Arc<OpenFile>, i32), Errno> {
    let file = file_of(fd)?;
    if file.kind == Kind::Path {
        return Err(Errno::EBADF);
    }
    let raw = description_lock_fd(&file)?;
    Ok((file, raw))
}

/// Embedded mode: one description's lock descriptor is made at a time, so that two descriptions
/// of one file locked for the first time at once find the same memfd. Taken before any
/// description's `lock_fd`.
static MAKING_EMBEDDED_LOCK_FD: parking_lot::Mutex<()> = parking_lot::const_mutex(());

/// The kernel descriptor of description `file`, made now if it has none yet (see [`lock_fd`]).
fn description_lock_fd(file: &OpenFile) -> Result<i32, Errno> {
    if !state::daemon_mode() {
        return embedded_lock_fd(file);
    }
    let mut slot = file.lock_fd.lock();
    if slot.is_none() {
        if kernel::locked(file.ino) {
            state::say("an flock or OFD lock on a noseFS file this process holds record locks on, through a description that never locked before, would drop those locks in daemon mode (ENOLCK)");
            return Err(Errno(libc::ENOLCK));
        }
        let flags = access_of(file) | rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::NOCTTY;
        let path = kernel::path_now(file).map_err(|_| Errno(libc::ENOLCK))?;
        let opened = rustix::fs::open(path.as_slice(), flags, rustix::fs::Mode::empty())
            .map_err(|_| Errno(libc::ENOLCK))?;
        kernel::same_file(&opened, file).map_err(|_| Errno(libc::ENOLCK))?;
        *slot = Some(fdtable::LockFd::moved_high(opened).ok_or(Errno(libc::ENOLCK))?);
    }
    Ok(slot.as_ref().map(|f| f.raw()).expect("just set"))
}

/// Embedded mode's [`description_lock_fd`]: a new description of the memfd standing for the
/// file in this process, opened through another description's lock descriptor of the file if
/// one has any, else of a new memfd (the last description of a file to close takes the memfd and
/// its locks with it, as the kernel drops a file's locks with its last description).
fn embedded_lock_fd(file: &OpenFile) -> Result<i32, Errno> {
    let _making = MAKING_EMBEDDED_LOCK_FD.lock();
    let mut slot = file.lock_fd.lock();
    if let Some(held) = slot.as_ref() {
        return Ok(held.raw());
    }
    let same_file = fdtable::all()
        .into_iter()
        .filter(|(_, other)| other.ino == file.ino && !std::ptr::eq(&**other, file))
        .find_map(|(_, other)| other.lock_fd.lock().as_ref().map(|f| f.raw()));
    let enolck = |_| Errno(libc::ENOLCK);
    let access = access_of(file);
    let opened = match same_file {
        Some(raw) => reopen(raw, access),
        None => {
            let flags = rustix::fs::MemfdFlags::CLOEXEC;
            let memfd = rustix::fs::memfd_create("nosefs-lock", flags).map_err(enolck)?;
            reopen(std::os::fd::AsRawFd::as_raw_fd(&memfd), access)
        }
    }
    .map_err(enolck)?;
    *slot = Some(fdtable::LockFd::moved_high(opened).ok_or(Errno(libc::ENOLCK))?);
    Ok(slot.as_ref().map(|f| f.raw()).expect("just set"))
}

/// A new description, with access `access`, of the file kernel descriptor `raw` is open on.
fn reopen(raw: i32, access: rustix::fs::OFlags) -> rustix::io::Result<std::os::fd::OwnedFd> {
    let flags = access | rustix::fs::OFlags::CLOEXEC;
    let path = format!("/proc/self/fd/{raw}");
    rustix::fs::open(path.as_str(), flags, rustix::fs::Mode::empty())
}

/// The access mode of description `file`, for its kernel lock descriptor: the kernel then
/// checks an OFD lock's type against it (a write lock needs a writable description), as it
/// would on the file itself.
fn access_of(file: &OpenFile) -> rustix::fs::OFlags {
    match file.flags.load(Ordering::Relaxed) & libc::O_ACCMODE {
        libc::O_WRONLY => rustix::fs::OFlags::WRONLY,
        libc::O_RDWR => rustix::fs::OFlags::RDWR,
        _ => rustix::fs::OFlags::RDONLY,
    }
}

/// Before a fork: description `file` gets its kernel descriptor now if it has none, so that
/// parent and child, which share the description, lock through one kernel description (made at
/// the first lock instead, each would make its own, and a lock the child took would go when it
/// exits). Skipped in daemon mode where making one would drop the process's record locks on the
/// file.
pub fn share_locks(file: &OpenFile) {
    if file.kind != Kind::Path && file.lock_fd.lock().is_none() && !kernel::locked(file.ino) {
        let _ = description_lock_fd(file);
    }
}

/// At an exec or spawn that hands description `file` to another program: a copy of its kernel
/// descriptor (made now if it has none) that the program inherits, so that both share one
/// kernel description and its flock and OFD locks, as they share the noseFS description (`exec
/// 9>lock; flock 9` in a shell: the lock flock(1) takes stays with the shell's descriptor after
/// flock exits). Not close-on-exec; the caller closes it after the spawn, or if the exec fails.
/// `None` for `O_PATH` descriptions, and in daemon mode where making one would drop the
/// process's record locks on the file (the program then makes its own at its first lock, as
/// before).
pub fn lock_fd_to_hand_over(file: &OpenFile) -> Option<std::os::fd::OwnedFd> {
    if file.kind == Kind::Path {
        return None;
    }
    if file.lock_fd.lock().is_none() && kernel::locked(file.ino) {
        return None;
    }
    description_lock_fd(file).ok()?;
    let held = file.lock_fd.lock();
    // High, out of the way of the numbers a spawn's file actions move descriptors to.
    let copy = rustix::io::fcntl_dupfd_cloexec(held.as_ref()?, fdtable::internal_fd_floor() / 4);
    let copy = copy.ok()?;
    rustix::io::fcntl_setfd(&copy, rustix::io::FdFlags::empty()).ok()?;
    Some(copy)
}

/// A program's descriptor of noseFS description `file` is gone (close, close_range, dup2 over
/// it): daemon mode drops the process's record locks on the file, as POSIX says.
pub fn descriptor_closed(file: Option<Arc<OpenFile>>) {
    if let Some(file) = file {
        let ino = file.ino;
        drop(file);
        kernel::closed(ino);
    }
}
