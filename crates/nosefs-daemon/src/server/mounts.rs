//! The kernel's mount points, for rmdir's EBUSY on a directory something is mounted on through
//! the FUSE mount. /proc/self/mountinfo is read again only when the kernel says the mount table
//! changed (poll on it reports POLLPRI once per change since the last poll), not at every rmdir:
//! reading and parsing it cost ~45 us per rmdir, so `rm -rf` of a tree was rmdir-bound.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek};

use parking_lot::Mutex;
use rustix::event::{PollFd, PollFlags, Timespec};

/// The mount points as last read, and the open table that tells when they changed.
struct MountPoints {
    /// Open since the points were last read (or `None` if it cannot be opened: then every
    /// question reads the table afresh, as before this cache).
    table: Option<File>,
    points: HashSet<Vec<u8>>,
}

static MOUNT_POINTS: Mutex<Option<MountPoints>> = Mutex::new(None);

/// Whether the kernel has something mounted at `path` (absolute, as the kernel names it).
pub(super) fn is_mount_point(path: &[u8]) -> bool {
    let mut cached = MOUNT_POINTS.lock();
    let known = cached.get_or_insert_with(MountPoints::open);
    if known.table.is_none() || known.changed() {
        known.read();
    }
    known.points.contains(path)
}

impl MountPoints {
    fn open() -> MountPoints {
        // Opened before the first read: a change between the two is reported by the next poll.
        let mut known = MountPoints {
            table: File::open("/proc/self/mountinfo").ok(),
            points: HashSet::new(),
        };
        known.read();
        known
    }

    /// Whether the table changed since the last call (or since it was opened).
    fn changed(&self) -> bool {
        let Some(table) = &self.table else {
            return true;
        };
        let mut fds = [PollFd::new(table, PollFlags::PRI)];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // An error of poll itself: read again, to be safe.
        rustix::event::poll(&mut fds, Some(&now)).is_err()
            || fds[0].revents().intersects(PollFlags::PRI | PollFlags::ERR)
    }

    fn read(&mut self) {
        let mut text = String::new();
        let read = match &mut self.table {
            Some(table) => table
                .rewind()
                .and_then(|()| table.read_to_string(&mut text))
                .is_ok(),
            None => false,
        };
        if !read {
            text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        }
        self.points = mount_points(&text);
    }
}

/// The mount points a mountinfo text names (its fifth field, unescaped).
fn mount_points(mountinfo: &str) -> HashSet<Vec<u8>> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4).map(unescape))
        .collect()
}

/// mountinfo's octal escapes (`\040` for a space) undone.
pub(super) fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_the_fifth_field_unescaped() {
        let info = "22 1 0:21 / /proc rw - proc proc rw\n\
                    90 30 0:77 / /mnt/my\\040nose rw - fuse.nosefs /img rw,user_id=0\n";
        let points = mount_points(info);
        assert!(points.contains(&b"/proc"[..]));
        assert!(points.contains(&b"/mnt/my nose"[..]));
        assert_eq!(points.len(), 2);
    }

    #[test]
    fn the_root_is_a_mount_point_and_a_plain_directory_is_not() {
        assert!(is_mount_point(b"/"));
        let dir = std::env::temp_dir().join(format!("nosefs-mounts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(!is_mount_point(dir.as_os_str().as_encoded_bytes()));
        // Asked again with no change in between: answered from the points already read.
        assert!(is_mount_point(b"/"));
        std::fs::remove_dir(&dir).unwrap();
    }
}
