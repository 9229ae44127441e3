//! Helpers the end-to-end tests share.

use std::path::Path;
use std::process::Output;

/// A process's status, stdout and stderr, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Asserts that a script run on noseFS (in `ours_dir`) printed what the same script printed on a
/// kernel directory (`plain_dir`; each directory's name reads `$D`), that both succeeded, and
/// that noseFS's run printed nothing on stderr. Returns noseFS's stdout.
pub fn assert_same_as_kernel(
    ours: &Output,
    ours_dir: &Path,
    plain: &Output,
    plain_dir: &Path,
) -> String {
    assert!(
        plain.status.success(),
        "on the kernel directory: {}",
        text(plain)
    );
    let normal = |o: &Output, dir: &Path| {
        String::from_utf8_lossy(&o.stdout).replace(dir.to_str().unwrap(), "$D")
    };
    assert_eq!(
        normal(ours, ours_dir),
        normal(plain, plain_dir),
        "\nunder the shim: {}\non the kernel: {}",
        text(ours),
        text(plain)
    );
    assert!(
        ours.status.success() && ours.stderr.is_empty(),
        "{}",
        text(ours)
    );
    String::from_utf8_lossy(&ours.stdout).into_owned()
}

/// Holes made and found through a frontend: fallocate(1) punching and digging, cp's sparse copy
/// (it asks lseek for SEEK_DATA and SEEK_HOLE), python's lseek; as on a kernel directory.
#[allow(dead_code)]
pub const HOLES_SCRIPT: &str = r#"set -e
cd "$D"
python3 -c "
with open('f', 'wb') as f:
    f.write(b'a' * 1048576); f.write(bytes(1048576)); f.write(b'b' * 1048576)
"
fallocate --punch-hole -o 4096 -l 65536 f
cp f f2
fallocate --dig-holes f2
cp --sparse=always f2 h
python3 -c "
import os
for name, at in (('f', 0), ('f', 70000), ('f2', 0), ('f2', 1048576), ('h', 5000)):
    fd = os.open(name, os.O_RDONLY)
    print(name, at, os.lseek(fd, at, os.SEEK_DATA), os.lseek(fd, at, os.SEEK_HOLE))
    os.close(fd)
"
md5sum f f2 h
"#;

/// A program that renames every entry of a 5,000-entry directory as it lists it: the listing
/// must end (each renamed name comes back at a new place after the cursor).
#[allow(dead_code)]
pub const RENAME_WHILE_LISTING_SCRIPT: &str = r#"set -e
cd "$D"
mkdir d && cd d
python3 -c "
import os
for i in range(5000):
    open('f%d' % i, 'w').close()
seen = set(); n = 0
for e in os.scandir('.'):
    n += 1
    seen.add(e.name)
    os.rename(e.name, e.name + '.renamed')
    if n > 20000:
        break
print(n, len([x for x in seen if not x.endswith('.renamed')]), len(os.listdir('.')))
"
"#;
