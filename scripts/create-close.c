/* create+close of N names in DIR through openat(dirfd, name, O_CREAT) and close; prints ops/s.
 * The two-client-process measurement of docs/benchmarks.md ("Daemon mode: two client
 * processes"): cc -O2 -o create-close scripts/create-close.c; create-close DIR N */
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
    mkdir(dir, 0755);
    int d = open(dir, O_RDONLY | O_DIRECTORY);
    if (d < 0) {
        perror(dir);
        return 1;
    }
    char name[64];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "f%08d", i);
        int fd = openat(d, name, O_CREAT | O_WRONLY, 0644);
        if (fd < 0) {
            perror("openat");
            return 1;
        }
        close(fd);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    printf("%.0f\n", n / s);
    return 0;
}
