/* 4 KiB appends to FILE, each followed by fsync (or, with a third argument, none); prints the
 * time per append, the slowest one and how many took over 1 ms (a fresh page's stall). The fresh-image measurement of docs/benchmarks.md ("Pages ready before the
 * first write"): cc -O2 -o append-fsync scripts/append-fsync.c;
 * nosefs run --image IMG --at DIR -- ./append-fsync DIR/f 50000 [nosync] */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s FILE N [nosync]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[2]);
    int sync = argc < 4;
    int fd = open(argv[1], O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    char buf[4096];
    memset(buf, 7, sizeof buf);
    struct timespec a, b, op_start, op_end;
    double slowest_us = 0;
    int over_1ms = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) {
        clock_gettime(CLOCK_MONOTONIC, &op_start);
        if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) {
            perror("write");
            return 1;
        }
        if (sync && fsync(fd)) {
            perror("fsync");
            return 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &op_end);
        double op_us = ((op_end.tv_sec - op_start.tv_sec) * 1e9 +
                        (op_end.tv_nsec - op_start.tv_nsec)) / 1e3;
        slowest_us = op_us > slowest_us ? op_us : slowest_us;
        over_1ms += op_us > 1000;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double us = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / n;
    printf("%s: %.2f us per 4 KiB %s (slowest %.0f us, %d over 1 ms)\n", argv[1], us,
           sync ? "append+fsync" : "write", slowest_us, over_1ms);
    return close(fd);
}
