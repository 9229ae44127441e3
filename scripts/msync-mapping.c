/* One page stored to and the whole mapping synced, N times: FILE sized FILE_MIB, mapped MAP_MIB
 * long, every page of the file touched and synced first; prints the time per store + msync of
 * the mapping (or, with a fifth argument, + fsync). docs/benchmarks.md ("The whole mapping
 * synced"): cc -O2 -o msync-mapping scripts/msync-mapping.c;
 * nosefs run --image IMG --at DIR -- ./msync-mapping DIR/f FILE_MIB MAP_MIB N [fsync] */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s FILE FILE_MIB MAP_MIB N [fsync]\n", argv[0]);
        return 2;
    }
    long len = atol(argv[2]) << 20, map_len = atol(argv[3]) << 20;
    int n = atoi(argv[4]), use_fsync = argc > 5;
    if (len <= 0 || map_len < len || n <= 0) {
        fprintf(stderr, "FILE_MIB must be positive, MAP_MIB at least FILE_MIB, N positive\n");
        return 2;
    }
    int fd = open(argv[1], O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, len) != 0) {
        perror(argv[1]);
        return 1;
    }
    char *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (long o = 0; o < len; o += 4096)
        m[o] = 1;
    if (msync(m, map_len, MS_SYNC) != 0) {
        perror("msync");
        return 1;
    }
    unsigned long x = 88172645463325252UL;
    double start = now_ns();
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memset(m + (x % (len / 4096)) * 4096, i, 4096);
        if ((use_fsync ? fsync(fd) : msync(m, map_len, MS_SYNC)) != 0) {
            perror("sync");
            return 1;
        }
    }
    printf("file %ld MiB, mapping %ld MiB: %.2f us per store + %s\n", len >> 20, map_len >> 20,
           (now_ns() - start) / n / 1000, use_fsync ? "fsync" : "msync of the mapping");
    return 0;
}
