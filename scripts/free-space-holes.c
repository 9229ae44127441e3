/* Allocation with fragmented free space: writes a 400 MB file in 4 KiB blocks, optionally (HOLES
 * = 1) punches every other block of it (50,000 one-block holes in the free space), then times
 * 2,000 appends and 2,000 random overwrites of 8 KiB, each followed by fsync, in a second file.
 * Before the allocator indexed its free runs by length, a fit of two blocks walked every
 * one-block hole below the free space: 8 KiB overwrites took 139-150 us with the holes against
 * 2.6 us without (docs/benchmarks.md, "Free runs indexed by length").
 * cc -O2 -o free-space-holes scripts/free-space-holes.c
 * nosefs mkfs IMG --size 2G; nosefs run --image IMG --at /tmp/fr -- ./free-space-holes /tmp/fr 1 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void check(int ok, const char *what) {
    if (!ok) {
        perror(what);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: free-space-holes DIR HOLES(0|1)\n");
        return 2;
    }
    char path_a[4096], path_b[4096];
    snprintf(path_a, sizeof path_a, "%s/holes-a", argv[1]);
    snprintf(path_b, sizeof path_b, "%s/holes-b", argv[1]);
    int holes = atoi(argv[2]);
    const int blocks = 100000, ops = 2000;
    static char buf[8192];
    memset(buf, 7, sizeof buf);
    int a = open(path_a, O_CREAT | O_RDWR | O_TRUNC, 0644);
    check(a >= 0, "open");
    for (int i = 0; i < blocks; i++)
        check(pwrite(a, buf, 4096, (off_t)i * 4096) == 4096, "pwrite");
    check(fsync(a) == 0, "fsync");
    double t0 = now_us();
    if (holes)
        for (int i = 0; i < blocks; i += 2)
            check(fallocate(a, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)i * 4096, 4096) == 0,
                  "punch");
    check(fsync(a) == 0, "fsync");
    double t1 = now_us();
    int b = open(path_b, O_CREAT | O_RDWR | O_TRUNC, 0644);
    check(b >= 0, "open");
    for (int i = 0; i < ops; i++) {
        check(pwrite(b, buf, 8192, (off_t)i * 8192) == 8192, "pwrite");
        check(fsync(b) == 0, "fsync");
    }
    double t2 = now_us();
    unsigned x = 12345;
    for (int i = 0; i < ops; i++) {
        x = x * 1103515245 + 12345;
        check(pwrite(b, buf, 8192, (off_t)((x >> 8) % ops) * 8192) == 8192, "pwrite");
        check(fsync(b) == 0, "fsync");
    }
    double t3 = now_us();
    printf("holes %d: punching %.0f ms, 8 KiB append + fsync %.2f us, 8 KiB overwrite + fsync %.2f us\n",
           holes, (t1 - t0) / 1e3, (t2 - t1) / ops, (t3 - t2) / ops);
    close(a);
    close(b);
    unlink(path_a);
    unlink(path_b);
    return 0;
}
