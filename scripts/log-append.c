/* A database log's commits: N appends of LEN bytes (default 130: a RocksDB write-ahead log record
 * of a 100-byte value), each followed by fdatasync; prints the mean time of the write and of the
 * fdatasync. docs/benchmarks.md ("RocksDB in the suite"):
 * cc -O2 -o log-append scripts/log-append.c;
 * nosefs run --image IMG --at DIR -- ./log-append DIR/f 300000 [LEN] */
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

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s FILE N [LEN]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[2]);
    size_t len = argc > 3 ? (size_t)atol(argv[3]) : 130;
    if (n <= 0 || len == 0 || len > 65536) {
        fprintf(stderr, "N must be positive, LEN 1..65536\n");
        return 2;
    }
    int fd = open(argv[1], O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    static char buf[65536];
    memset(buf, 'x', sizeof buf);
    double write_ns = 0, sync_ns = 0;
    for (int i = 0; i < n; i++) {
        double a = now_ns();
        if (write(fd, buf, len) != (ssize_t)len) {
            perror("write");
            return 1;
        }
        double b = now_ns();
        if (fdatasync(fd) != 0) {
            perror("fdatasync");
            return 1;
        }
        write_ns += b - a;
        sync_ns += now_ns() - b;
    }
    printf("write %.0f ns, fdatasync %.0f ns, per commit %.0f ns\n", write_ns / n, sync_ns / n,
           (write_ns + sync_ns) / n);
    return close(fd) != 0;
}
