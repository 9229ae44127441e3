/* A write-ahead log's commits as RocksDB's (db_bench --sync=1), LevelDB's and Redis's
 * (appendfsync always) make them: an append of SIZE bytes (default 138, a db_bench record),
 * then fdatasync, N times, into a file first given its space with fallocate(KEEP_SIZE) unless
 * FALLOC is 0. Prints the mean per append + fdatasync after 1,000 unmeasured ones.
 * docs/benchmarks.md ("Per process and per log record", 2026-11-27):
 * cc -O2 -o wal-append scripts/wal-append.c
 * ./wal-append /dev/shm/w 20000; nosefs run --image IMG --at MNT -- ./wal-append MNT/w 20000 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int append(int fd, const char *buf, int size) {
    if (write(fd, buf, size) != size || fdatasync(fd) != 0) {
        perror("append");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s PATH N [SIZE [FALLOC]]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    int n = atoi(argv[2]);
    int size = argc > 3 ? atoi(argv[3]) : 138;
    int falloc = argc > 4 ? atoi(argv[4]) : 1;
    static char buf[1 << 16];
    if (n < 1 || size < 1 || size > (int)sizeof buf) {
        fprintf(stderr, "N must be positive and SIZE within 1..%zu\n", sizeof buf);
        return 2;
    }
    memset(buf, 'x', sizeof buf);
    unlink(path);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    if (falloc && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)(n + 1000) * size) != 0) {
        perror("fallocate");
        return 1;
    }
    for (int i = 0; i < 1000; i++)
        if (append(fd, buf, size))
            return 1;
    double started = now_ns();
    for (int i = 0; i < n; i++)
        if (append(fd, buf, size))
            return 1;
    printf("%d-byte append + fdatasync: %.2f us\n", size, (now_ns() - started) / n / 1000);
    close(fd);
    unlink(path);
    return 0;
}
