//! Which pages back an image file on a tmpfs: a line of `nosefs info`.
//!
//! A tmpfs hands out 4 KiB pages unless mounted `huge=within_size`, `huge=always` or
//! `huge=advise` (noseFS asks for huge pages on its mappings, so `advise` suffices). With 4 KiB
//! pages the first store into each fresh block of the image pays a page fault and the page's
//! allocation; with 2 MiB pages one fault in 512 does (docs/usage.md, "Where an image lives").

use std::path::Path;

/// tmpfs's `f_type` (statfs(2)).
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// The pages backing `image`, when it is a file on a tmpfs.
pub fn describe(image: &Path) -> Option<String> {
    let fs = rustix::fs::statfs(image).ok()?;
    if fs.f_type as u64 != TMPFS_MAGIC {
        return None;
    }
    if forced_host_wide() {
        return Some("2 MiB where memory allows (tmpfs, shmem_enabled force)".into());
    }
    let stat = rustix::fs::statx(
        rustix::fs::CWD,
        image,
        rustix::fs::AtFlags::empty(),
        rustix::fs::StatxFlags::MNT_ID,
    )
    .ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (mount_point, options) = tmpfs_mount(&mountinfo, stat.stx_mnt_id)?;
    Some(match huge_mode(options) {
        Some(mode) => format!("2 MiB where memory allows (tmpfs {mount_point}, huge={mode})"),
        None => format!(
            "4 KiB (tmpfs {mount_point} without huge=: each fresh block's first write faults; \
             docs/usage.md, \"Where an image lives\")"
        ),
    })
}

/// The mount point and super options of mount `id` in a mountinfo table, if it is a tmpfs.
fn tmpfs_mount(mountinfo: &str, id: u64) -> Option<(&str, &str)> {
    mountinfo.lines().find_map(|line| {
        let (mine, rest) = line.split_once(" - ")?;
        let mine: Vec<&str> = mine.split(' ').collect();
        let rest: Vec<&str> = rest.split(' ').collect();
        let (mount_id, mount_point) = (mine.first()?.parse::<u64>().ok()?, *mine.get(4)?);
        (mount_id == id && *rest.first()? == "tmpfs").then_some((mount_point, *rest.get(2)?))
    })
}

/// The huge-page mode of a tmpfs's super options, unless it gives none.
fn huge_mode(options: &str) -> Option<&str> {
    options
        .split(',')
        .filter_map(|o| o.strip_prefix("huge="))
        .find(|&mode| mode != "never" && mode != "deny")
}

/// Whether the host forces huge pages on every tmpfs (`shmem_enabled` set to `force`).
fn forced_host_wide() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .is_ok_and(|s| s.contains("[force]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
24 1 0:22 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw,size=24684096k
31 1 0:33 / /tmp/hugew rw,relatime shared:9 - tmpfs none rw,size=8388608k,huge=within_size
32 1 0:34 / /tmp/hugea rw,relatime shared:10 - tmpfs none rw,size=8388608k,huge=advise
33 1 0:35 / /tmp/never rw,relatime shared:11 - tmpfs none rw,huge=never
40 1 8:1 / /data rw,relatime shared:12 - ext4 /dev/sda1 rw
";

    #[test]
    fn a_tmpfs_is_found_by_its_mount_id_with_its_options() {
        assert_eq!(
            tmpfs_mount(MOUNTINFO, 24),
            Some(("/dev/shm", "rw,size=24684096k"))
        );
        assert_eq!(tmpfs_mount(MOUNTINFO, 40), None, "not a tmpfs");
        assert_eq!(tmpfs_mount(MOUNTINFO, 99), None, "no such mount");
    }

    #[test]
    fn huge_pages_are_given_by_every_mode_but_never_and_deny() {
        let options = |id| tmpfs_mount(MOUNTINFO, id).unwrap().1;
        assert_eq!(huge_mode(options(24)), None);
        assert_eq!(huge_mode(options(31)), Some("within_size"));
        assert_eq!(huge_mode(options(32)), Some("advise"));
        assert_eq!(huge_mode(options(33)), None);
    }
}
