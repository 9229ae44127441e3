/* What a program's syscall() costs: N calls of syscall(SYS_futex, FUTEX_WAKE) with no waiter (as
 * programs wake their own futexes), the mean per call; under `nosefs run` the shim's syscall hook
 * is on that path. docs/benchmarks.md ("The session's hooks on hot paths"):
 * cc -O2 -o syscall-cost scripts/syscall-cost.c; ./syscall-cost; nosefs run --image IMG --at DIR -- ./syscall-cost */
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 2000000, word = 0;
    double started = now_ns();
    for (int i = 0; i < calls; i++) syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
    printf("%.1f ns per syscall(SYS_futex, FUTEX_WAKE) with no waiter\n", (now_ns() - started) / calls);
    return 0;
}
