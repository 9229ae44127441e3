//! Asynchronous I/O through the shim, as C programs (`posix_aio.c`, `linux_aio.c` beside this
//! file) compiled and run by a script, on a kernel directory and on noseFS alike.

/// POSIX asynchronous I/O (glibc's aio_read, aio_write, aio_fsync, lio_listio) on a noseFS file
/// and beside a kernel file: results through aio_error and aio_return, aio_suspend and
/// aio_cancel of finished requests, an error, signal and thread notifications, lists of both
/// kinds, waited for and not. Prints the same on a kernel directory.
#[allow(dead_code)]
pub const POSIX_SCRIPT: &str = concat!(
    "cd \"$D\"\ncat > aio.c <<'EOF'\n",
    include_str!("posix_aio.c"),
    "EOF\ncc -Wall -O2 -o aio aio.c -pthread\nK=$(mktemp -d)\n./aio f \"$K/k\"\nrm -rf \"$K\"\n"
);

/// What [`POSIX_SCRIPT`] prints.
#[allow(dead_code)]
pub const POSIX_OUTPUT: &str = "aio_write: 0\nwritten: error 0, 25 bytes\nread: 25 'hello, asynchronous world'\n\
cancel a finished one: all done\npast the end: 0\nfsync: error 0, 0\nbad fsync op: -1 Invalid argument\n\
read on a write-only descriptor: Bad file descriptor, -1\nsignal: 1, SI_ASYNCIO with its value: 1, 'hello'\n\
thread: 3 'async'\nlio_listio wait: 0\n  4 6\nlio_listio nowait, this file only: 0\n\
lio_listio nowait, both: 0\nlist signals: 2\n\
file: AAAABB....hello, asynchronous world............................\nkernel file: CCkernel.......\n";

/// Linux AIO through `syscall()` (as MariaDB calls io_getevents) on a noseFS file: writes,
/// fdatasync, a read signalling an eventfd, a vectored read, a timed-out wait, requests refused at
/// submission (a closed descriptor, a read on a write-only one), a read past the end, io_destroy
/// ending another thread's wait. Prints the same on a kernel directory.
#[allow(dead_code)]
pub const LINUX_SCRIPT: &str = concat!(
    "cd \"$D\"\ncat > kaio.c <<'EOF'\n",
    include_str!("linux_aio.c"),
    "EOF\ncc -Wall -O2 -o kaio kaio.c -pthread\n./kaio f\n"
);

/// What [`LINUX_SCRIPT`] prints.
#[allow(dead_code)]
pub const LINUX_OUTPUT: &str = "io_setup: 0\nio_setup on a used id: Invalid argument\nio_submit: 3\nevents: 3\n  data 1 res 11 obj ok 1\n  data 2 res 6 obj ok 1\n  data 3 res 0 obj ok 1\nio_submit: 2\neventfd: 1\nevents: 2 (64 'first block') (6 'sec' 'ond')\nnothing left, timed out: 0\na closed descriptor: Bad file descriptor\na read on a write-only descriptor: Bad file descriptor\na read past the end: 1\nits event: 1 res 0 data 8\nio_destroy: 0\nafter destroy: Invalid argument\na waiting thread ends at io_destroy: Invalid argument\n";
