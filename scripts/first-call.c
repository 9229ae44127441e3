/* What a process's first noseFS call costs under the shim: prints the microseconds of its first
 * stat of PATH (as a daemon client: finding the mount, the connection, the handshake and the
 * request) and of its second (one request). docs/benchmarks.md ("A short process's connection,
 * timed from the client").
 * cc -O2 -o first-call scripts/first-call.c
 * for i in $(seq 200); do nosefs run --at MNT -- ./first-call MNT/file; done | sort -n */
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: first-call PATH\n");
        return 2;
    }
    struct stat st;
    double a = now_us();
    int first = stat(argv[1], &st);
    double b = now_us();
    int second = stat(argv[1], &st);
    double c = now_us();
    printf("%.0f %.0f\n", b - a, c - b);
    return first != 0 || second != 0;
}
