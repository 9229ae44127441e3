//! Connections of short processes: request areas reused between clients with the same
//! credentials and never across credentials, and a forked child that does not inherit its
//! parent's area.

use super::*;

/// The inode of the request area this process's connection maps (a memfd's inode is unique
/// while it exists), printed by a client after its first noseFS call.
const AREA_INODE: &str =
    r#"cat "$D/f" /proc/self/maps | awk '/nosefs-requests/ { print $5; exit }'"#;

/// Runs `processes` short clients one after the other (as `uid`, root when 0) and returns the
/// inode of each one's area.
fn area_inodes(m: &Mounted, uid: u32, processes: usize) -> Vec<String> {
    let script = format!("for i in $(seq {processes}); do {AREA_INODE}; sleep 0.1; done");
    let mut c = Command::new("setpriv");
    c.args([
        format!("--reuid={uid}"),
        format!("--regid={uid}"),
        "--clear-groups".to_string(),
    ])
    .args([nosefs(), "run", "--at"])
    .arg(&m.mnt)
    .args(["--", "bash", "-c", &script])
    .current_dir(m.scratch.path())
    .env("D", &m.mnt)
    .env_remove("NOSEFS_IMAGE");
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let inodes: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(inodes.len(), processes, "{}", text(&out));
    inodes
}

#[test]
fn areas_are_reused_between_clients_with_the_same_credentials_and_never_across() {
    if !usable() {
        return;
    }
    let m = mount_with(&["allow_other"]);
    let out = m.run(r#"echo x > "$D/f" && chmod 644 "$D/f""#);
    assert!(out.status.success(), "{}", text(&out));
    let root = area_inodes(&m, 0, 6);
    let nobody = area_inodes(&m, 65534, 6);
    let root_again = area_inodes(&m, 0, 6);
    // Each process ended before the next began (and the daemon had 0.1 s to release it):
    // the areas of one user's processes are one or two, reused.
    let distinct = |v: &[String]| v.iter().collect::<std::collections::HashSet<_>>().len();
    assert!(distinct(&root) < root.len(), "no reuse: {root:?}");
    assert!(distinct(&nobody) < nobody.len(), "no reuse: {nobody:?}");
    for inode in &nobody {
        assert!(
            !root.contains(inode) && !root_again.contains(inode),
            "an area of root's clients went to another user's: {inode} in {root:?} / {root_again:?}"
        );
    }
    m.unmount_and_fsck();
}

#[test]
fn a_forked_child_keeps_what_it_maps_where_its_parents_area_was() {
    if !usable() {
        return;
    }
    let m = mount_with(&[]);
    // The parent connects, finds its area's range, and forks; the child (which does not inherit
    // that mapping) maps its own memory at exactly that range, fills it, then makes its first
    // noseFS call, which gives up the parent's connection: that must not unmap the child's
    // memory.
    let program = r#"
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
    struct stat st;
    if (stat(argv[1], &st) != 0) { perror("stat"); return 1; }
    unsigned long lo = 0, hi = 0;
    char line[512];
    FILE *maps = fopen("/proc/self/maps", "r");
    while (fgets(line, sizeof line, maps))
        if (strstr(line, "nosefs-requests")) { sscanf(line, "%lx-%lx", &lo, &hi); break; }
    fclose(maps);
    if (!lo) { fprintf(stderr, "no area mapped\n"); return 1; }
    pid_t pid = fork();
    if (pid == 0) {
        char *mine = mmap((void *)lo, hi - lo, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (mine != (char *)lo) { perror("the area's range is taken in the child"); _exit(2); }
        memset(mine, 0x5a, hi - lo);
        if (stat(argv[1], &st) != 0) { perror("stat in the child"); _exit(3); }
        for (unsigned long i = 0; i < hi - lo; i += 4096)
            if (mine[i] != 0x5a) _exit(4);
        printf("child kept its memory, file of %ld bytes\n", (long)st.st_size);
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    if (stat(argv[1], &st) != 0) { perror("stat in the parent"); return 1; }
    printf("child exit %d, parent still served\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return 0;
}
"#;
    let dir = m.scratch.path();
    std::fs::write(dir.join("forked.c"), program).unwrap();
    let out = Command::new("cc")
        .arg("-o")
        .arg(dir.join("forked"))
        .arg(dir.join("forked.c"))
        .output()
        .unwrap();
    assert!(out.status.success(), "cc: {}", text(&out));
    let out = m.run(r#"printf 12345 > "$D/f" && ./forked "$D/f""#);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "child kept its memory, file of 5 bytes\nchild exit 0, parent still served\n",
        "{}",
        text(&out)
    );
    m.unmount_and_fsck();
}
