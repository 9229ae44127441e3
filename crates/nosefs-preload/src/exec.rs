//! Across exec: the program that replaces this one adopts its inherited noseFS descriptors and
//! its noseFS working directory.
//!
//! Before exec the shim commits everything and unmounts (the new program mounts the image at its
//! first noseFS call), and writes a table of the noseFS descriptors that survive exec (those
//! without close-on-exec) into a memfd left open across it, named by `NOSEFS_EXEC_TABLE`. The
//! new program's start-up code reads the table and registers each descriptor that is still a
//! placeholder (its inode is the anchor memfd's, recorded in the table). The working directory
//! travels in `NOSEFS_CWD`. If exec fails, the process goes on and mounts again on its next call.
//!
//! Table format, one line each: `nosefs-exec 1 <anchor inode>`, then per descriptor
//! `<fd> <ino> <kind f|d|p> <status flags> <offset> <path as hex>`.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use nosefs_core::Errno;
use parking_lot::Mutex;

use crate::fdtable::{self, Kind, OpenFile};
use crate::route;
use crate::state::{self, ENV_AT, ENV_CWD, ENV_EXEC_TABLE, ENV_IMAGE, ENV_OPTIONS};

/// The table of the exec in progress, closed if the exec fails.
static PENDING: Mutex<Option<OwnedFd>> = Mutex::new(None);

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

/// Commits and unmounts, writes the descriptor table, and returns the new program's environment
/// (`env`, or this process's when `None`, with the noseFS variables set).
pub fn prepare(env: Option<Vec<CString>>) -> Result<Vec<CString>, Errno> {
    let mut table = String::new();
    for (fd, file) in fdtable::all() {
        if !crate::ffi::survives_exec(fd) {
            continue;
        }
        let kind = match file.kind {
            Kind::File => 'f',
            Kind::Dir => 'd',
            Kind::Path => 'p',
        };
        let flags = file.flags.load(std::sync::atomic::Ordering::Relaxed);
        let offset = *file.offset.lock();
        table.push_str(&format!(
            "{fd} {} {kind} {flags} {offset} {}\n",
            file.ino,
            hex(&file.path)
        ));
    }
    state::unmount();
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
    let ours = [ENV_EXEC_TABLE, ENV_CWD];
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
    if let Some(cwd) = route::cwd() {
        let mut kv = format!("{ENV_CWD}=").into_bytes();
        kv.extend_from_slice(&cwd);
        vars.extend(CString::new(kv).ok());
    }
    if !table.is_empty() {
        let memfd =
            rustix::fs::memfd_create("nosefs-exec", rustix::fs::MemfdFlags::empty()).map_err(io)?;
        let text = format!("nosefs-exec 1 {}\n{table}", fdtable::anchor_ino()?);
        rustix::io::write(&memfd, text.as_bytes()).map_err(io)?;
        vars.extend(CString::new(format!("{ENV_EXEC_TABLE}={}", memfd.as_raw_fd())).ok());
        *PENDING.lock() = Some(memfd);
    }
    Ok(vars)
}

/// The exec failed: this program goes on (it mounts again at its next noseFS call).
pub fn failed() {
    PENDING.lock().take();
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
    let Some(table) = crate::ffi::take_table(fd) else {
        return;
    };
    let mut lines = table.lines();
    let Some(anchor) = lines
        .next()
        .and_then(|h| h.strip_prefix("nosefs-exec 1 "))
        .and_then(|a| a.parse::<u64>().ok())
    else {
        state::say("the noseFS descriptor table handed over by exec is malformed; inherited noseFS descriptors are not usable");
        return;
    };
    for line in lines {
        let f: Vec<&str> = line.split(' ').collect();
        let parsed = (|| {
            let fd: i32 = f.first()?.parse().ok()?;
            let ino: u64 = f.get(1)?.parse().ok()?;
            let kind = match *f.get(2)? {
                "f" => Kind::File,
                "d" => Kind::Dir,
                _ => Kind::Path,
            };
            let flags: i32 = f.get(3)?.parse().ok()?;
            let offset: u64 = f.get(4)?.parse().ok()?;
            let path = unhex(f.get(5)?)?;
            Some((fd, ino, kind, flags, offset, path))
        })();
        let Some((fd, ino, kind, flags, offset, path)) = parsed else {
            continue;
        };
        if fd < 0 || fd as usize >= fdtable::MAX_FDS || !crate::ffi::is_placeholder(fd, anchor) {
            continue;
        }
        let file = OpenFile::new(ino, kind, flags, path);
        *file.offset.lock() = offset;
        fdtable::insert(fd, Arc::new(file));
    }
}
