/* yield-handover proc|thread N: two processes (or two threads of one) pinned to CPU 0 hand a
 * turn back and forth through shared memory, each calling sched_yield until it is its turn;
 * prints nanoseconds per hand-over: what a daemon client's round trip pays twice when it and
 * the daemon's server thread share a CPU (docs/benchmarks.md, "Where a make job's time goes").
 * cc -O2 -pthread -o yield-handover scripts/yield-handover.c */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static _Atomic long *turn;
static long rounds;

static void pin(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    sched_setaffinity(0, sizeof set, &set);
}

static void play(long me) {
    pin();
    for (long i = 0; i < rounds; i++) {
        while (atomic_load(turn) % 2 != me)
            sched_yield();
        atomic_fetch_add(turn, 1);
    }
}

static void *second(void *unused) {
    (void)unused;
    play(1);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s proc|thread N\n", argv[0]);
        return 2;
    }
    rounds = atol(argv[2]);
    turn = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (turn == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    if (strcmp(argv[1], "proc") == 0) {
        if (fork() == 0) {
            play(1);
            _exit(0);
        }
        play(0);
        wait(NULL);
    } else {
        pthread_t t;
        pthread_create(&t, NULL, second, NULL);
        play(0);
        pthread_join(t, NULL);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%s: %.0f ns per hand-over\n", argv[1],
           ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (2.0 * rounds));
    return 0;
}
