//! The two system calls of the transport that rustix does not wrap, and with [`crate::shm`] the
//! crate's only `unsafe`: the supplementary groups of a socket's peer (`SO_PEERGROUPS`) and the
//! description of one mount (`statmount(2)`, Linux 6.8). Both stand in for reading `/proc`
//! text at every connection (tens of microseconds each: a process's start pays them).

use std::os::fd::{AsFd, AsRawFd};

/// The supplementary groups the process at the other end of `socket` had when it connected.
pub fn peer_groups(socket: impl AsFd) -> Option<Vec<u32>> {
    let fd = socket.as_fd().as_raw_fd();
    let mut groups = vec![0u32; 64];
    loop {
        let capacity = groups.len() * 4;
        let mut len = capacity as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` bytes into `groups`, which holds `capacity`
        // bytes, and stores the length it wrote (or, with ERANGE, the length it needs) in `len`.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let needed = len as usize;
        if rc == 0 && needed <= capacity {
            groups.truncate(needed / 4);
            return Some(groups);
        }
        let range = std::io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE);
        if rc == 0 || !range || needed <= capacity || needed > (1 << 20) {
            return None;
        }
        groups.resize(needed.div_ceil(4), 0);
    }
}

/// What `statmount(2)` tells of one mount, the fields the transport asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountFacts {
    /// The device of its superblock.
    pub dev: (u32, u32),
    /// The superblock's magic number.
    pub magic: u64,
    /// The file-system type (`fuse`).
    pub fs_type: Vec<u8>,
    /// The superblock's options, comma-separated (FUSE's name the user that mounted it:
    /// `user_id=`).
    pub options: Vec<u8>,
}

const SYS_STATMOUNT: libc::c_long = 457;
const STATMOUNT_SB_BASIC: u64 = 0x1;
const STATMOUNT_FS_TYPE: u64 = 0x20;
const STATMOUNT_MNT_OPTS: u64 = 0x80;
/// `struct statmount`'s fixed part; its string fields are offsets into what follows.
const STRINGS_AT: usize = 512;

/// The mount whose unique id (`statx`'s `STATX_MNT_ID_UNIQUE`) is `mnt_id`; `None` when the
/// kernel has no `statmount` or does not answer every field asked.
pub fn statmount(mnt_id: u64) -> Option<MountFacts> {
    let mask = STATMOUNT_SB_BASIC | STATMOUNT_FS_TYPE | STATMOUNT_MNT_OPTS;
    // struct mnt_id_req, version 0: size, spare, mnt_id, param (the fields asked for).
    let request: [u64; 3] = [24, mnt_id, mask];
    let mut buf = vec![0u64; 1024];
    // SAFETY: `request` is a valid 24-byte mnt_id_req for the call's whole duration; the kernel
    // writes at most `buf.len() * 8` bytes into `buf` and fails with EOVERFLOW if they do not
    // fit.
    let rc = unsafe {
        libc::syscall(
            SYS_STATMOUNT,
            request.as_ptr(),
            buf.as_mut_ptr(),
            buf.len() * 8,
            0u32,
        )
    };
    if rc != 0 {
        return None;
    }
    let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
    parse_statmount(&bytes, mask)
}

/// The fields of a `struct statmount` the kernel wrote into `bytes`, all of `mask` answered.
fn parse_statmount(bytes: &[u8], mask: u64) -> Option<MountFacts> {
    let u32_at = |at: usize| Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
    let size = u32_at(0)? as usize;
    if u64_at(8)? & mask != mask || size > bytes.len() {
        return None;
    }
    let string = |field: usize| -> Option<Vec<u8>> {
        let start = STRINGS_AT + u32_at(field)? as usize;
        let rest = bytes.get(start..size)?;
        let end = rest.iter().position(|&b| b == 0)?;
        Some(rest[..end].to_vec())
    };
    Some(MountFacts {
        dev: (u32_at(16)?, u32_at(20)?),
        magic: u64_at(24)?,
        fs_type: string(36)?,
        options: string(4)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_pair_knows_its_own_groups() {
        let (a, _b) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let mut own: Vec<u32> = rustix::process::getgroups()
            .unwrap()
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        let mut peer = peer_groups(&a).unwrap();
        own.sort_unstable();
        peer.sort_unstable();
        assert_eq!(peer, own);
    }

    #[test]
    fn statmount_describes_the_root_mount_or_is_absent() {
        let Ok(st) = rustix::fs::statx(
            rustix::fs::CWD,
            c"/",
            rustix::fs::AtFlags::empty(),
            rustix::fs::StatxFlags::from_bits_retain(0x4000),
        ) else {
            return;
        };
        if st.stx_mask & 0x4000 == 0 {
            return; // no unique mount ids: no statmount either
        }
        let facts = statmount(st.stx_mnt_id).expect("a kernel with unique mount ids has statmount");
        assert_eq!(facts.dev, (st.stx_dev_major, st.stx_dev_minor));
        assert!(!facts.fs_type.is_empty());
    }

    #[test]
    fn a_short_or_partial_answer_is_none() {
        assert_eq!(parse_statmount(&[0u8; 16], 1), None);
        let mut bytes = vec![0u8; 600];
        bytes[0..4].copy_from_slice(&600u32.to_ne_bytes());
        bytes[8..16].copy_from_slice(&1u64.to_ne_bytes());
        // Asked for the options too, answered only the basics.
        assert_eq!(parse_statmount(&bytes, 0x81), None);
        // A string offset past the answer.
        bytes[8..16].copy_from_slice(&0xa1u64.to_ne_bytes());
        bytes[36..40].copy_from_slice(&4000u32.to_ne_bytes());
        assert_eq!(parse_statmount(&bytes, 0xa1), None);
    }
}
