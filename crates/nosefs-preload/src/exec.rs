//! Across exec: the program that replaces this one adopts its inherited noseFS descriptors and
//! its noseFS working directory.
//!
//! Before exec the shim commits everything and unmounts (the new program mounts the image at its
//! first noseFS call), and writes a table of the noseFS descriptors that survive exec (those
//! without close-on-exec) into a memfd left open across it, named by `NOSEFS_EXEC_TABLE`. The
//! new program's start-up code reads the table and registers each descriptor that is still the
//! same placeholder (its kernel inode is the one recorded; a process that adopted descriptors and
//! execs again before mounting hands on its predecessor's placeholders, so the inode is recorded
//! per descriptor, not per process). The working directory
//! travels in `NOSEFS_CWD`. If exec fails, the process goes on and mounts again on its next call.
//!
//! Descriptors that shared one description (dup) share it again, and a description whose offset
//! a fork made shared (`offsets`) keeps its slot: the area's memfd travels with the table.
//!
//! `posix_spawn`, `system` and `popen` hand over the same way (glibc's child execs with its
//! internal execve, which no hook sees): the table is written before the spawn, after the spawn's
//! file actions as the shim's hooks on `posix_spawn_file_actions_add*` recorded them (a dup2
//! onto a descriptor hands the description on under the new number, a close or an open drops
//! it), and the parent keeps its connection or, in embedded mode, gives up the image as at fork.
//!
//! In daemon mode the descriptions that survive are handed over in a ticket (their references
//! held by the daemon until the new program claims them at its first call, or this process
//! ends), and each line carries the daemon's handle, and the number of an inherited copy of the
//! description's kernel descriptor through the FUSE mount, so flock and OFD locks stay with the
//! description across exec as on the kernel (a fork shares it too: it is made before the fork).
//!
//! Table format, one line each: `nosefs-exec 5 <area descriptor or -> <ticket, 0 for none>`,
//! then per descriptor `<fd> <placeholder's kernel inode> <description number> <ino> <handle>
//! <kind f|d|p> <status flags> <offset> <offset slot, 0 if private> <path as hex> <kernel lock
//! descriptor or ->`.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use nosefs_core::Errno;
use parking_lot::Mutex;

use crate::fdtable::{self, Kind, OpenFile};
use crate::offsets::Offset;
use crate::route;
use crate::state::{self, ENV_AT, ENV_CWD, ENV_EXEC_TABLE, ENV_IMAGE, ENV_IMAGE_FD, ENV_OPTIONS};

/// The table and area descriptors of the exec in progress, closed if the exec fails.
static PENDING: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());
/// The daemon ticket of the exec in progress, claimed back if the exec fails.
static PENDING_TICKET: Mutex<u64> = Mutex::new(0);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn io(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error())
}

/// A `posix_spawn` file action that moves descriptors, as the shim's hooks recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAction {
    /// `adddup2(from, to)`: `to` becomes a copy of `from`, kept across exec.
    Dup2 { from: i32, to: i32 },
    /// `addclose(fd)`.
    Close(i32),
    /// `addopen(fd, ...)`: `fd` becomes what the kernel opens (noseFS's no longer).
    Open(i32),
    /// `addclosefrom_np(from)`.
    CloseFrom(i32),
}

/// A `posix_spawn` action that changes the child's working directory (`addchdir_np`,
/// `addfchdir_np`): the absolute logical path of a noseFS directory, or `None` for one of the
/// kernel's (which glibc's own action enters).
pub type ChdirAction = Option<Vec<u8>>;

/// What one recorded action does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// Moves descriptors.
    Files(FileAction),
    /// Changes directory.
    Chdir(ChdirAction),
    /// Embedded mode, `addopen` of a noseFS path: the shim opened it in this process (the
    /// kernel, in the child, would open the prefix's empty directory instead) and glibc's action
    /// became a dup2 of it; closed when the object is destroyed.
    Opened(i32),
    /// Such an open failed with this errno, which the spawn returns, as the child's open would.
    Failed(i32),
}

/// File actions recorded per `posix_spawn_file_actions_t` (by address), for the spawn that
/// uses them.
static RECORDED: Mutex<Vec<(usize, Vec<Recorded>)>> = Mutex::new(Vec::new());

/// Starts (or restarts) the record of the file actions object at `actions`.
/// Returns the descriptors the shim opened for an earlier use of the object, for the caller
/// to close.
pub fn actions_init(actions: usize) -> Vec<i32> {
    let opened = actions_destroy(actions);
    RECORDED.lock().push((actions, Vec::new()));
    opened
}

/// Forgets the file actions object at `actions`; returns the descriptors the shim opened for
/// it (`Recorded::Opened`), for the caller to close.
pub fn actions_destroy(actions: usize) -> Vec<i32> {
    let mut recorded = RECORDED.lock();
    let mut opened = Vec::new();
    recorded.retain(|(a, list)| {
        if *a == actions {
            opened.extend(list.iter().filter_map(|r| match r {
                Recorded::Opened(fd) => Some(*fd),
                _ => None,
            }));
        }
        *a != actions
    });
    opened
}

/// The errno an open the shim made for the object at `actions` failed with, if one did.
pub fn failed_open(actions: usize) -> Option<i32> {
    recorded_actions(actions).into_iter().find_map(|r| match r {
        Recorded::Failed(e) => Some(e),
        _ => None,
    })
}

/// Records one action added to the object at `actions`.
pub fn actions_add(actions: usize, action: Recorded) {
    let mut recorded = RECORDED.lock();
    match recorded.iter_mut().find(|(a, _)| *a == actions) {
        Some((_, list)) => list.push(action),
        // An object initialised before the shim was loaded (none in practice): record anyway.
        None => recorded.push((actions, vec![action])),
    }
}

fn recorded_actions(actions: usize) -> Vec<Recorded> {
    RECORDED
        .lock()
        .iter()
        .find(|(a, _)| *a == actions)
        .map(|(_, list)| list.clone())
        .unwrap_or_default()
}

/// The noseFS directory the last directory change recorded for the object at `actions` enters,
/// if the last one does (a relative `addchdir_np` after it is relative to it).
pub fn recorded_chdir(actions: usize) -> Option<ChdirAction> {
    recorded_actions(actions)
        .into_iter()
        .rev()
        .find_map(|a| match a {
            Recorded::Chdir(dir) => Some(dir),
            _ => None,
        })
}

/// The working directory a child spawned with the actions at `actions` starts in, inside
/// noseFS (`None`: a kernel directory): this process's, or the last directory change's.
pub fn spawn_cwd(actions: usize) -> Option<Vec<u8>> {
    recorded_chdir(actions).unwrap_or_else(route::cwd)
}

/// One descriptor as the new program will see it: its number there, the description, and the
/// placeholder's kernel inode.
struct Inherited {
    fd: i32,
    file: Arc<OpenFile>,
    placeholder: u64,
}

/// The noseFS descriptors the new program inherits: those without close-on-exec, after `actions`
/// (a spawn's file actions, applied in order as the child applies them).
fn inherited(actions: &[FileAction]) -> Vec<Inherited> {
    let mut fds: Vec<(Inherited, bool)> = fdtable::all()
        .into_iter()
        .filter_map(|(fd, file)| {
            let placeholder = crate::sys::kernel_ino(fd)?;
            let survives = crate::sys::survives_exec(fd);
            Some((
                Inherited {
                    fd,
                    file,
                    placeholder,
                },
                survives,
            ))
        })
        .collect();
    for action in actions {
        match *action {
            FileAction::Dup2 { from, to } => {
                let copy = fds
                    .iter()
                    .find(|(i, _)| i.fd == from)
                    .map(|(i, _)| Inherited {
                        fd: to,
                        file: Arc::clone(&i.file),
                        placeholder: i.placeholder,
                    });
                fds.retain(|(i, _)| i.fd != to);
                // dup2 onto itself clears close-on-exec, as any dup2 target has it clear.
                fds.extend(copy.map(|c| (c, true)));
            }
            FileAction::Close(fd) | FileAction::Open(fd) => fds.retain(|(i, _)| i.fd != fd),
            FileAction::CloseFrom(from) => fds.retain(|(i, _)| i.fd < from),
        }
    }
    fds.into_iter()
        .filter(|(_, survives)| *survives)
        .map(|(i, _)| i)
        .collect()
}

/// Who the hand-over is for.
#[derive(Debug, Clone, Copy)]
enum Heir {
    /// The program this process execs: it keeps the pid, so the ticket is tied to it.
    Exec,
    /// A child being spawned: its ticket is tied to its pid once known ([`spawned`]).
    Spawn,
}

/// Commits and unmounts, writes the descriptor table, and returns the new program's environment
/// (`env`, or this process's when `None`, with the noseFS variables set).
pub fn prepare(env: Option<Vec<CString>>) -> Result<Vec<CString>, Errno> {
    hand_over(env, &[], route::cwd(), Heir::Exec).map(|(vars, _)| vars)
}

/// Before `posix_spawn` with the file actions object at `actions` (0: none), `system` or
/// `popen`: writes the descriptor table the child adopts (after the file actions) and returns
/// its environment and the daemon ticket to give [`spawned`].
pub fn prepare_spawn(
    env: Option<Vec<CString>>,
    actions: usize,
) -> Result<(Vec<CString>, u64), Errno> {
    let files: Vec<FileAction> = recorded_actions(actions)
        .into_iter()
        .filter_map(|a| match a {
            Recorded::Files(f) => Some(f),
            _ => None,
        })
        .collect();
    hand_over(env, &files, spawn_cwd(actions), Heir::Spawn)
}

/// After a spawn (`child` its pid, or -1 if it failed or is unknown): the parent closes its
/// copy of the table and ties the ticket to the child (or takes it back).
pub fn spawned(ticket: u64, child: i32) {
    PENDING.lock().clear();
    state::after_fork_in_parent(ticket, child);
}

/// Writes the descriptor table for the new program and returns its environment; `cwd` is its
/// working directory inside noseFS (`None`: the kernel's).
fn hand_over(
    env: Option<Vec<CString>>,
    actions: &[FileAction],
    cwd: Option<Vec<u8>>,
    heir: Heir,
) -> Result<(Vec<CString>, u64), Errno> {
    let mut table = String::new();
    let mut descriptions: Vec<*const OpenFile> = Vec::new();
    let mut any_slot = false;
    let mut handles: Vec<u64> = Vec::new();
    // Per description: the copy of its kernel lock descriptor the new program inherits.
    let mut lock_fds: Vec<Option<OwnedFd>> = Vec::new();
    for Inherited {
        fd,
        file,
        placeholder,
    } in inherited(actions)
    {
        let kind = match file.kind {
            Kind::File => 'f',
            Kind::Dir => 'd',
            Kind::Path => 'p',
        };
        let number = match descriptions.iter().position(|&d| d == Arc::as_ptr(&file)) {
            Some(n) => n,
            None => {
                descriptions.push(Arc::as_ptr(&file));
                handles.push(file.handle);
                lock_fds.push(crate::ops::lock_fd_to_hand_over(&file));
                descriptions.len() - 1
            }
        };
        let lock_fd = lock_fds[number]
            .as_ref()
            .map_or_else(|| "-".to_string(), |fd| fd.as_raw_fd().to_string());
        let flags = file.flags.load(std::sync::atomic::Ordering::Relaxed);
        let offset = *file.offset.lock();
        let slot = file.offset.slot();
        any_slot |= slot != 0;
        table.push_str(&format!(
            "{fd} {placeholder} {number} {} {} {kind} {flags} {offset} {slot} {} {lock_fd}\n",
            file.ino,
            file.handle,
            hex(&file.path)
        ));
    }
    let ticket = state::hold_for_child(&handles);
    match heir {
        Heir::Exec => {
            if ticket != 0 {
                let me = rustix::process::getpid().as_raw_nonzero().get();
                state::with_remote(|r| r.bind(ticket, me));
            }
            *PENDING_TICKET.lock() = ticket;
            state::unmount();
        }
        // This process goes on: it keeps its connection (an embedded image is committed and
        // given up, so the child can mount it).
        Heir::Spawn => state::before_fork(),
    }
    let mut vars: Vec<CString> = match env {
        Some(env) => env,
        None => std::env::vars_os()
            .filter_map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                CString::new(kv).ok()
            })
            .collect(),
    };
    let ours = [ENV_EXEC_TABLE, ENV_CWD, ENV_IMAGE_FD];
    vars.retain(|kv| {
        let name = kv
            .as_bytes()
            .split(|&b| b == b'=')
            .next()
            .unwrap_or_default();
        !ours.iter().any(|o| o.as_bytes() == name)
    });
    // The new program must find the shim and its image even if the caller cleared them.
    for name in ["LD_PRELOAD", ENV_IMAGE, ENV_AT, ENV_OPTIONS] {
        let present = vars
            .iter()
            .any(|kv| kv.as_bytes().starts_with(format!("{name}=").as_bytes()));
        if let (false, Some(value)) = (present, std::env::var_os(name)) {
            let mut kv = format!("{name}=").into_bytes();
            kv.extend_from_slice(value.as_bytes());
            vars.extend(CString::new(kv).ok());
        }
    }
    vars.extend(state::keeper_env().and_then(|kv| CString::new(kv).ok()));
    if let Some(cwd) = cwd {
        let mut kv = format!("{ENV_CWD}=").into_bytes();
        kv.extend_from_slice(&cwd);
        vars.extend(CString::new(kv).ok());
    }
    if !table.is_empty() {
        let mut pending = PENDING.lock();
        let area = if any_slot {
            crate::offsets::descriptor_for_exec()
        } else {
            None
        };
        let area_fd = area
            .as_ref()
            .map_or_else(|| "-".to_string(), |a| a.as_raw_fd().to_string());
        pending.extend(area);
        pending.extend(lock_fds.into_iter().flatten());
        let memfd =
            rustix::fs::memfd_create("nosefs-exec", rustix::fs::MemfdFlags::empty()).map_err(io)?;
        let text = format!("nosefs-exec 5 {area_fd} {ticket}\n{table}");
        rustix::io::write(&memfd, text.as_bytes()).map_err(io)?;
        vars.extend(CString::new(format!("{ENV_EXEC_TABLE}={}", memfd.as_raw_fd())).ok());
        pending.push(memfd);
    }
    Ok((vars, ticket))
}

/// The exec failed: this program goes on (it mounts again at its next noseFS call).
pub fn failed() {
    PENDING.lock().clear();
    state::exec_failed(std::mem::take(&mut *PENDING_TICKET.lock()));
}

/// Reads and closes the descriptor table an exec handed over in memfd `fd`.
fn take_table(fd: i32) -> Option<String> {
    let owned = crate::fdtable::take_handed_over(fd)?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let mut offset = 0;
    while let Ok(n @ 1..) = rustix::io::pread(&owned, &mut buf, offset) {
        out.extend_from_slice(&buf[..n]);
        offset += n as u64;
    }
    String::from_utf8(out).ok()
}

/// One line of the table.
struct Entry {
    fd: i32,
    placeholder: u64,
    number: usize,
    ino: u64,
    handle: u64,
    kind: Kind,
    flags: i32,
    offset: u64,
    slot: u32,
    path: Vec<u8>,
    /// The copy of the description's kernel lock descriptor this program inherited.
    lock_fd: Option<i32>,
}

fn parse_entry(line: &str) -> Option<Entry> {
    let f: Vec<&str> = line.split(' ').collect();
    Some(Entry {
        fd: f.first()?.parse().ok()?,
        placeholder: f.get(1)?.parse().ok()?,
        number: f.get(2)?.parse().ok()?,
        ino: f.get(3)?.parse().ok()?,
        handle: f.get(4)?.parse().ok()?,
        kind: match *f.get(5)? {
            "f" => Kind::File,
            "d" => Kind::Dir,
            _ => Kind::Path,
        },
        flags: f.get(6)?.parse().ok()?,
        offset: f.get(7)?.parse().ok()?,
        slot: f.get(8)?.parse().ok()?,
        path: unhex(f.get(9)?)?,
        lock_fd: f.get(10)?.parse().ok(),
    })
}

/// At start-up: adopt the descriptors and working directory an exec handed over.
pub fn adopt() {
    if let Some(cwd) = std::env::var_os(ENV_CWD) {
        route::set_cwd(Some(cwd.as_bytes().to_vec()));
    }
    let Some(fd) = std::env::var(ENV_EXEC_TABLE)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
    else {
        return;
    };
    std::env::remove_var(ENV_EXEC_TABLE);
    let Some(table) = take_table(fd) else {
        return;
    };
    let mut lines = table.lines();
    let Some((area, ticket)) = lines
        .next()
        .and_then(|h| h.strip_prefix("nosefs-exec 5 "))
        .and_then(|h| h.split_once(' '))
    else {
        state::say("the noseFS descriptor table handed over by exec is malformed; inherited noseFS descriptors are not usable");
        return;
    };
    if let Ok(area_fd) = area.parse::<i32>() {
        crate::offsets::adopt_area(area_fd);
    }
    if let Ok(ticket @ 1..) = ticket.parse::<u64>() {
        state::claim_at_connect(ticket);
    }
    let mut descriptions: Vec<(usize, Arc<OpenFile>)> = Vec::new();
    for e in lines.filter_map(parse_entry) {
        if e.fd < 0
            || e.fd as usize >= fdtable::MAX_FDS
            || crate::sys::kernel_ino(e.fd) != Some(e.placeholder)
        {
            continue;
        }
        let file = match descriptions.iter().find(|(n, _)| *n == e.number) {
            Some((_, file)) => file.clone(),
            None => {
                let mut file = OpenFile::new(e.ino, e.handle, e.kind, e.flags, e.path);
                file.offset = Offset::in_slot(e.slot, e.offset);
                // The kernel description the previous program shared its locks through.
                *file.lock_fd.get_mut() = e
                    .lock_fd
                    .and_then(crate::fdtable::take_handed_over)
                    .and_then(fdtable::LockFd::moved_high);
                let file = Arc::new(file);
                descriptions.push((e.number, file.clone()));
                file
            }
        };
        fdtable::insert(e.fd, file);
    }
}
