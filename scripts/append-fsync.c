/* 4 KiB appends to FILE, each followed by fsync (or, with a third argument, none); prints the
 * time per append. The fresh-image measurement of docs/benchmarks.md ("Pages ready before the
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
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) {
        if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) {
            perror("write");
            return 1;
        }
        if (sync && fsync(fd)) {
            perror("fsync");
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double us = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / n;
    printf("%s: %.2f us per 4 KiB %s\n", argv[1], us, sync ? "append+fsync" : "write");
    return close(fd);
}
