/* What a short process costs: N times fork, exec of this program as a child that stats PATH (if
 * given) and exits, and wait; prints the mean per process. Under `nosefs run` the child loads
 * the shim, and a PATH on noseFS makes it connect to the daemon and ask once. docs/benchmarks.md
 * ("A process's start under the shim"):
 * With SPAWN=1 in the environment the children are started with posix_spawn (a CLONE_VFORK
 * clone, as make and the shell's pipelines start theirs) instead of fork + execve (git, bash).
 * cc -O2 -o process-start scripts/process-start.c
 * ./process-start 1000; nosefs run --at MNT -- ./process-start 1000 [MNT/file] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <spawn.h>

extern char **environ;

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "child") == 0) {
        struct stat st;
        return argc > 2 && stat(argv[2], &st) != 0;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: %s N [PATH]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]);
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len < 0) {
        perror("readlink");
        return 1;
    }
    self[len] = 0;
    char *child[] = {self, "child", argc > 2 ? argv[2] : NULL, NULL};
    double started = now_ns();
    int spawn = getenv("SPAWN") != NULL;
    for (int i = 0; i < n; i++) {
        pid_t pid;
        if (spawn) {
            if (posix_spawn(&pid, self, NULL, NULL, child, environ) != 0)
                pid = -1;
        } else {
            pid = fork();
            if (pid == 0) {
                execve(self, child, environ);
                _exit(127);
            }
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) < 0 || status != 0) {
            fprintf(stderr, "child %d failed (status %d)\n", i, status);
            return 1;
        }
    }
    printf("%.0f us per process\n", (now_ns() - started) / n / 1000);
    return 0;
}
