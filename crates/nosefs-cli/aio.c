#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t signals, list_signals, code_ok;
static void on_signal(int s, siginfo_t *si, void *u) {
    (void)u;
    if (s == SIGUSR2) { list_signals++; return; }
    signals++;
    code_ok = si->si_code == SI_ASYNCIO && si->si_value.sival_int == 7;
}
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int thread_calls;
static void on_thread(union sigval v) {
    pthread_mutex_lock(&m);
    thread_calls += v.sival_int;
    pthread_cond_signal(&c);
    pthread_mutex_unlock(&m);
}
static void wait_done(struct aiocb *cb) {
    const struct aiocb *l[1] = {cb};
    while (aio_error(cb) == EINPROGRESS) aio_suspend(l, 1, NULL);
}

int main(int argc, char **argv) {
    int fd = open(argv[1], O_CREAT | O_RDWR | O_TRUNC, 0644);
    int k = open(argv[2], O_CREAT | O_RDWR | O_TRUNC, 0644);
    char text[] = "hello, asynchronous world", buf[64] = {0};
    struct aiocb w = {0}, r = {0}, s = {0}, e = {0}, t = {0};
    w.aio_fildes = fd; w.aio_buf = text; w.aio_nbytes = strlen(text); w.aio_offset = 10;
    printf("aio_write: %d\n", aio_write(&w));
    wait_done(&w);
    printf("written: error %d, %zd bytes\n", aio_error(&w), aio_return(&w));
    r.aio_fildes = fd; r.aio_buf = buf; r.aio_nbytes = sizeof buf; r.aio_offset = 10;
    aio_read(&r);
    wait_done(&r);
    printf("read: %zd '%s'\n", aio_return(&r), buf);
    printf("cancel a finished one: %s\n", aio_cancel(fd, &r) == AIO_ALLDONE ? "all done" : "?");
    r.aio_offset = 1000;
    aio_read(&r);
    wait_done(&r);
    printf("past the end: %zd\n", aio_return(&r));
    s.aio_fildes = fd;
    aio_fsync(O_SYNC, &s);
    wait_done(&s);
    printf("fsync: error %d, %zd\n", aio_error(&s), aio_return(&s));
    int bad = aio_fsync(12345, &s);
    printf("bad fsync op: %d %s\n", bad, strerror(errno));
    e.aio_fildes = open(argv[1], O_WRONLY); e.aio_buf = buf; e.aio_nbytes = 4;
    aio_read(&e);
    wait_done(&e);
    printf("read on a write-only descriptor: %s, %zd\n", strerror(aio_error(&e)), aio_return(&e));
    struct sigaction sa = {0};
    sa.sa_sigaction = on_signal; sa.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    memset(buf, 0, sizeof buf);
    r.aio_offset = 10; r.aio_nbytes = 5;
    r.aio_sigevent.sigev_notify = SIGEV_SIGNAL;
    r.aio_sigevent.sigev_signo = SIGUSR1;
    r.aio_sigevent.sigev_value.sival_int = 7;
    aio_read(&r);
    wait_done(&r);
    while (!signals) usleep(1000);
    printf("signal: %d, SI_ASYNCIO with its value: %d, '%s'\n", signals, code_ok, buf);
    t.aio_fildes = fd; t.aio_buf = buf; t.aio_nbytes = 5; t.aio_offset = 17;
    t.aio_sigevent.sigev_notify = SIGEV_THREAD;
    t.aio_sigevent.sigev_notify_function = on_thread;
    t.aio_sigevent.sigev_value.sival_int = 3;
    aio_read(&t);
    pthread_mutex_lock(&m);
    while (!thread_calls) pthread_cond_wait(&c, &m);
    pthread_mutex_unlock(&m);
    printf("thread: %d '%.5s'\n", thread_calls, buf);
    /* One list over this file and a kernel one. */
    struct aiocb l1 = {0}, l2 = {0}, l3 = {0};
    l1.aio_fildes = fd; l1.aio_lio_opcode = LIO_WRITE; l1.aio_buf = "AAAA"; l1.aio_nbytes = 4; l1.aio_offset = 0;
    l2.aio_fildes = k; l2.aio_lio_opcode = LIO_WRITE; l2.aio_buf = "kernel"; l2.aio_nbytes = 6; l2.aio_offset = 2;
    l3.aio_fildes = fd; l3.aio_lio_opcode = LIO_NOP;
    struct aiocb *list[4] = {&l1, &l2, NULL, &l3};
    printf("lio_listio wait: %d\n", lio_listio(LIO_WAIT, list, 4, NULL));
    printf("  %zd %zd\n", aio_return(&l1), aio_return(&l2));
    struct sigevent done = {0};
    done.sigev_notify = SIGEV_SIGNAL; done.sigev_signo = SIGUSR2;
    l1.aio_buf = "BB"; l1.aio_nbytes = 2; l1.aio_offset = 4;
    struct aiocb *ours[1] = {&l1};
    printf("lio_listio nowait, this file only: %d\n", lio_listio(LIO_NOWAIT, ours, 1, &done));
    while (!list_signals) usleep(1000);
    wait_done(&l1);
    l2.aio_buf = "CC"; l2.aio_nbytes = 2; l2.aio_offset = 0;
    printf("lio_listio nowait, both: %d\n", lio_listio(LIO_NOWAIT, list, 2, &done));
    while (list_signals < 2) usleep(1000);
    wait_done(&l1);
    wait_done(&l2);
    printf("list signals: %d\n", list_signals);
    char all[64] = {0}, kall[16] = {0};
    pread(fd, all, sizeof all - 1, 0);
    pread(k, kall, sizeof kall - 1, 0);
    for (int i = 0; i < 63; i++) if (!all[i]) all[i] = '.';
    for (int i = 0; i < 15; i++) if (!kall[i]) kall[i] = '.';
    printf("file: %s\nkernel file: %s\n", all, kall);
    return 0;
}
