/* What a record lock costs: N pairs of fcntl(F_SETLK) read lock and unlock of one byte (of 8
 * in turn, from byte 120: SQLite's lock bytes of its -shm index), the mean per call. Through the
 * kernel on any file, and on a noseFS file under the shim (daemon clients: the kernel's lock on
 * the FUSE mount's descriptor; embedded: the shim's own table). docs/benchmarks.md ("Where a
 * SQLite transaction goes as a daemon client"):
 * cc -O2 -o lock-cost scripts/lock-cost.c; nosefs run --at MNT -- ./lock-cost MNT/f */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [PAIRS]\n", argv[0]);
        return 2;
    }
    int pairs = argc > 2 ? atoi(argv[2]) : 200000;
    int fd = open(argv[1], O_CREAT | O_RDWR, 0644);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    struct flock lock = {.l_whence = SEEK_SET, .l_len = 1};
    double started = now_ns();
    for (int i = 0; i < pairs; i++) {
        lock.l_start = 120 + (i & 7);
        lock.l_type = F_RDLCK;
        if (fcntl(fd, F_SETLK, &lock) != 0) {
            perror("lock");
            return 1;
        }
        lock.l_type = F_UNLCK;
        if (fcntl(fd, F_SETLK, &lock) != 0) {
            perror("unlock");
            return 1;
        }
    }
    printf("%.0f ns per lock or unlock\n", (now_ns() - started) / pairs / 2);
    return 0;
}
