# Sourced by fuse-suites.sh and preload-suites.sh: puts pjdfstest 0.2.2 and fsx 0.3.2 on PATH
# (cargo-installed into target/tools on first use) and makes the users and group pjdfstest
# switches to when it tests permissions.
tools="$PWD/target/tools"
export PATH="$tools/bin:$PATH"
command -v pjdfstest >/dev/null 2>&1 || cargo install --locked --quiet --root "$tools" pjdfstest --version 0.2.2
command -v fsx >/dev/null 2>&1 || cargo install --locked --quiet --root "$tools" fsx --version 0.3.2
id tests >/dev/null 2>&1 || echo 'tests:x:::Dummy User for pjdfstest:/:/usr/sbin/nologin' | newusers
getent group nogroup >/dev/null || groupadd nogroup
