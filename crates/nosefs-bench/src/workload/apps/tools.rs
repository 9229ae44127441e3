//! `tools`: tar, git, make and rsync on a generated source tree.

use std::io;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use super::{checked, timed, Measured, Place};
use crate::scratch::scratch_dir;

/// The tools' steps, run in the place's directory: (operation, shell command).
const TOOLS_STEPS: [(&str, &str); 5] = [
    ("untar", "mkdir tree && tar -xf \"$TARBALL\" -C tree"),
    (
        "git-commit",
        "cd tree && git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm tree",
    ),
    ("git-clone", "git clone -q tree clone"),
    ("make", "make -s -j2 -C clone"),
    ("rsync", "rsync -a clone/ copy/"),
];

/// Checks after the steps: every output of the build equals its source, the copy equals the
/// clone, and the clone's files are the committed ones.
const TOOLS_CHECK: &str = r#"set -e
cd clone
for f in d*/*.c; do cmp -s "$f" "${f%.c}.out" || { echo "bad build output $f"; exit 1; }; done
git status --porcelain --untracked-files=no | grep -q . && { echo "the clone differs from the commit"; exit 1; }
cd ..
diff -r clone copy >/dev/null || { echo "the rsync copy differs"; exit 1; }
ls clone/d*/*.c | wc -l
"#;

/// The `tools` workload.
pub(super) fn run(place: &Place) -> io::Result<Vec<Measured>> {
    place.many_processes("make -j2, git clone and rsync run several processes at once")?;
    let tarball = source_tarball()?;
    let work = place.dir.join("tools");
    place.run("mkdir", &["-p".as_ref(), work.as_os_str()])?;
    let result = (|| {
        let mut out = Vec::new();
        for (op, script) in TOOLS_STEPS {
            let mut c = place.command("sh");
            c.args(["-c", script])
                .current_dir(&work)
                .env("TARBALL", &tarball);
            let started = Instant::now();
            checked(c, op)?;
            let elapsed_ns = started.elapsed().as_nanos() as u64;
            out.push(timed(op, "2000 files", 0, elapsed_ns, &[elapsed_ns])?);
        }
        let mut check = place.command("sh");
        check.args(["-c", TOOLS_CHECK]).current_dir(&work);
        let files = checked(check, "the tools' check")?;
        if files.trim() != TOOLS_FILES.to_string() {
            return Err(io::Error::other(format!(
                "the build has {} sources, expected {TOOLS_FILES}",
                files.trim()
            )));
        }
        Ok(out)
    })();
    place.run("rm", &["-rf".as_ref(), work.as_os_str()])?;
    let _ = std::fs::remove_file(&tarball);
    result
}

/// Files in the tools' source tree.
const TOOLS_FILES: usize = 2000;

/// Writes the tools' source tree into a tarball in /tmp (the kernel's): 40 directories of 50
/// "sources" of 1-8 KB, and a Makefile whose rule copies each to an output.
fn source_tarball() -> io::Result<PathBuf> {
    let root = scratch_dir("app-tree")?;
    let mut make =
        String::from("SRC := $(wildcard d*/*.c)\nall: $(SRC:.c=.out)\n%.out: %.c\n\tcp $< $@\n");
    let mut x: u64 = 0x9e37_79b9;
    for d in 0..TOOLS_FILES / 50 {
        let dir = root.join(format!("d{d:02}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..50 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = 1024 + (x % 7168) as usize;
            let body: String = (0..len)
                .map(|i| (b'a' + ((x as usize + i) % 26) as u8) as char)
                .collect();
            std::fs::write(dir.join(format!("f{f:02}.c")), body)?;
        }
    }
    make.push('\n');
    std::fs::write(root.join("Makefile"), make)?;
    let tarball = root.with_extension("tar");
    let mut tar = Command::new("tar");
    tar.arg("-cf").arg(&tarball).arg("-C").arg(&root).arg(".");
    checked(tar, "tar -c")?;
    std::fs::remove_dir_all(&root)?;
    Ok(tarball)
}
