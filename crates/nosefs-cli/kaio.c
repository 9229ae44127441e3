#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <stdint.h>

static long io_setup(unsigned n, aio_context_t *c) { return syscall(SYS_io_setup, n, c); }
static long io_destroy(aio_context_t c) { return syscall(SYS_io_destroy, c); }
static long io_submit(aio_context_t c, long n, struct iocb **cbs) { return syscall(SYS_io_submit, c, n, cbs); }
static long io_getevents(aio_context_t c, long min, long max, struct io_event *e, struct timespec *t) {
    return syscall(SYS_io_getevents, c, min, max, e, t);
}
static void prep(struct iocb *cb, int op, int fd, void *buf, size_t n, long long off, unsigned long long data) {
    memset(cb, 0, sizeof *cb);
    cb->aio_lio_opcode = op; cb->aio_fildes = fd; cb->aio_buf = (uintptr_t)buf;
    cb->aio_nbytes = n; cb->aio_offset = off; cb->aio_data = data;
}
static aio_context_t shared;
static void *waiter(void *unused) {
    (void)unused;
    struct io_event e[4];
    long r;
    /* As MariaDB's completion thread: wait until io_destroy ends the context. */
    while ((r = io_getevents(shared, 1, 4, e, NULL)) >= 0) {}
    return (void *)(intptr_t)errno;
}

int main(int argc, char **argv) {
    (void)argc;
    int fd = open(argv[1], O_CREAT | O_RDWR | O_TRUNC, 0644);
    aio_context_t ctx = 0;
    printf("io_setup: %ld\n", io_setup(8, &ctx));
    printf("io_setup on a used id: %s\n", io_setup(8, &ctx) < 0 ? strerror(errno) : "?");
    char a[] = "first block", b[] = "second", got[64] = {0}, x[8] = {0}, y[8] = {0};
    struct iocb w1, w2, s, r, rv, bad;
    prep(&w1, IOCB_CMD_PWRITE, fd, a, strlen(a), 0, 1);
    prep(&w2, IOCB_CMD_PWRITE, fd, b, strlen(b), 4096, 2);
    prep(&s, IOCB_CMD_FDSYNC, fd, NULL, 0, 0, 3);
    struct iocb *three[3] = {&w1, &w2, &s};
    printf("io_submit: %ld\n", io_submit(ctx, 3, three));
    struct io_event ev[8];
    long n = io_getevents(ctx, 3, 8, ev, NULL);
    printf("events: %ld\n", n);
    for (long i = 0; i < n; i++)
        printf("  data %llu res %lld obj ok %d\n", (unsigned long long)ev[i].data, (long long)ev[i].res,
               ev[i].obj == (uintptr_t)three[ev[i].data - 1]);
    int efd = eventfd(0, 0);
    prep(&r, IOCB_CMD_PREAD, fd, got, sizeof got, 0, 4);
    r.aio_flags = IOCB_FLAG_RESFD; r.aio_resfd = efd;
    struct iovec iov[2] = {{x, 3}, {y, 3}};
    prep(&rv, IOCB_CMD_PREADV, fd, iov, 2, 4096, 5);
    struct iocb *two[2] = {&r, &rv};
    printf("io_submit: %ld\n", io_submit(ctx, 2, two));
    uint64_t count = 0;
    read(efd, &count, 8);
    printf("eventfd: %llu\n", (unsigned long long)count);
    struct timespec zero = {0, 0};
    n = io_getevents(ctx, 0, 8, ev, &zero);
    printf("events: %ld (%lld '%s') (%lld '%s' '%s')\n", n, (long long)ev[0].res, got, (long long)ev[1].res, x, y);
    struct timespec short_wait = {0, 20 * 1000 * 1000};
    printf("nothing left, timed out: %ld\n", io_getevents(ctx, 1, 8, ev, &short_wait));
    prep(&bad, IOCB_CMD_PREAD, 9999, got, 4, 0, 6);
    struct iocb *badp[1] = {&bad};
    printf("a closed descriptor: %s\n", io_submit(ctx, 1, badp) < 0 ? strerror(errno) : "submitted");
    int wo = open(argv[1], O_WRONLY);
    prep(&bad, IOCB_CMD_PREAD, wo, got, 4, 0, 7);
    printf("a read on a write-only descriptor: %s\n", io_submit(ctx, 1, badp) < 0 ? strerror(errno) : "submitted");
    int ro = open(argv[1], O_RDONLY);
    prep(&bad, IOCB_CMD_PREAD, ro, got, 4, 1 << 20, 8);
    printf("a read past the end: %ld\n", io_submit(ctx, 1, badp));
    n = io_getevents(ctx, 1, 8, ev, NULL);
    printf("its event: %ld res %lld data %llu\n", n, (long long)ev[0].res, (unsigned long long)ev[0].data);
    printf("io_destroy: %ld\n", io_destroy(ctx));
    printf("after destroy: %s\n", io_getevents(ctx, 0, 1, ev, &zero) < 0 ? strerror(errno) : "?");
    io_setup(4, &shared);
    pthread_t t;
    pthread_create(&t, NULL, waiter, NULL);
    usleep(20000);
    io_destroy(shared);
    void *why;
    pthread_join(t, &why);
    printf("a waiting thread ends at io_destroy: %s\n", strerror((int)(intptr_t)why));
    return 0;
}
