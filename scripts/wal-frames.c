/* SQLite's write-ahead log as the file system sees it: frames of a 24-byte header and a 4 KiB
 * page written apart (two pwrites) from byte 32 on, each frame followed by fdatasync, the log
 * overwritten from its start every 1,000 frames (SQLite's checkpoint restarts it). Prints the
 * mean time per frame, of its two writes and of its fdatasync. docs/benchmarks.md ("Where a
 * SQLite transaction goes as a daemon client"):
 * cc -O2 -o wal-frames scripts/wal-frames.c;
 * nosefs run --at MNT -- ./wal-frames MNT/f 50000 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [FRAMES]\n", argv[0]);
        return 2;
    }
    int frames = argc > 2 ? atoi(argv[2]) : 50000;
    int fd = open(argv[1], O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    char header[24], page[4096];
    memset(header, 1, sizeof header);
    memset(page, 7, sizeof page);
    if (pwrite(fd, page, 32, 0) != 32) {
        perror("pwrite");
        return 1;
    }
    double write_ns = 0, sync_ns = 0, started = now_ns();
    for (int i = 0; i < frames; i++) {
        off_t at = 32 + (off_t)(i % 1000) * (sizeof header + sizeof page);
        double a = now_ns();
        if (pwrite(fd, header, sizeof header, at) != sizeof header ||
            pwrite(fd, page, sizeof page, at + sizeof header) != sizeof page) {
            perror("pwrite");
            return 1;
        }
        double b = now_ns();
        if (fdatasync(fd) != 0) {
            perror("fdatasync");
            return 1;
        }
        write_ns += b - a;
        sync_ns += now_ns() - b;
    }
    printf("%.2f us per frame (two writes %.2f, fdatasync %.2f)\n",
           (now_ns() - started) / frames / 1000, write_ns / frames / 1000, sync_ns / frames / 1000);
    return 0;
}
