/* copy-loop DIR N: what `cp SRC DST` asks of the file system, N times in one process: stat of
 * the destination (absent), open of the source, fstat, open of the destination (O_CREAT |
 * O_TRUNC), fstat, read, write, the read that finds the end, two closes. DIR holds the tools
 * workload's tree (dNN/fNNN.c, 20 x 100 files). Prints microseconds per copy: the requests of
 * make's jobs without the processes (docs/benchmarks.md, "Where a make job's time goes").
 * cc -O2 -o copy-loop scripts/copy-loop.c */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s DIR N\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    int n = atoi(argv[2]);
    char src[512], dst[512], buf[16384];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) {
        snprintf(src, sizeof src, "%s/d%02d/f%03d.c", dir, (i / 100) % 20, i % 100);
        snprintf(dst, sizeof dst, "%s/d%02d/f%03d.o%d", dir, (i / 100) % 20, i % 100, i / 2000);
        struct stat st;
        if (stat(dst, &st) == 0) {
            fprintf(stderr, "%s exists\n", dst);
            return 1;
        }
        int s = open(src, O_RDONLY);
        if (s < 0) {
            perror(src);
            return 1;
        }
        fstat(s, &st);
        int d = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (d < 0) {
            perror(dst);
            return 1;
        }
        fstat(d, &st);
        ssize_t r = read(s, buf, sizeof buf);
        if (r < 0 || write(d, buf, r) != r || read(s, buf, sizeof buf) != 0) {
            perror("copy");
            return 1;
        }
        close(s);
        close(d);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.2f us per copy\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / n);
    return 0;
}
