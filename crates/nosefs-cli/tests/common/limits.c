// What stress-ng's file stressors found the shim answering differently from the kernel: the file
// size limit (RLIMIT_FSIZE), readahead, fallocate's refused modes, io_uring set up by number,
// a child made with clone(CLONE_VM) that ends while its parent goes on with its files, and the
// munmap of a mapping of an unlinked file.
// Prints the same lines in a kernel directory and on noseFS.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <dirent.h>
#include <sched.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void said(const char *what, long r) {
    if (r < 0)
        printf("%s: -1 %s\n", what, strerrorname_np(errno));
    else
        printf("%s: %ld\n", what, r);
}

static void file_size_limit(void) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 10000;
    setrlimit(RLIMIT_FSIZE, &lim);
    char buf[8000];
    memset(buf, 'x', sizeof buf);
    int fd = open("limited", O_RDWR | O_CREAT | O_TRUNC, 0644);
    said("write below the limit", write(fd, buf, 8000));
    said("write crossing it", write(fd, buf, 4000));
    said("write at it", write(fd, buf, 1));
    said("empty write past it", pwrite(fd, buf, 0, 20000));
    said("pwrite past it", pwrite(fd, buf, 10, 12000));
    said("ftruncate past it", ftruncate(fd, 20000));
    said("ftruncate below it", ftruncate(fd, 5000));
    said("truncate past it", truncate("limited", 20000));
    said("fallocate past it", fallocate(fd, 0, 0, 20000));
    said("fallocate past it, size kept", fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 20000));
    int src = open("source", O_RDWR | O_CREAT | O_TRUNC, 0644);
    write(src, buf, 5000);
    lseek(src, 0, SEEK_SET);
    lseek(fd, 8000, SEEK_SET);
    said("copy_file_range crossing it", copy_file_range(src, 0, fd, 0, 5000, 0));
    said("its source's offset after", lseek(src, 0, SEEK_CUR));
    said("copy_file_range at it", copy_file_range(src, 0, fd, 0, 5000, 0));
    said("its source's offset after", lseek(src, 0, SEEK_CUR));
    close(src);
    int app = open("limited", O_WRONLY | O_APPEND);
    ftruncate(fd, 9990);
    said("append crossing it", write(app, buf, 100));
    said("append at it", write(app, buf, 100));
    close(app);
    struct stat st;
    fstat(fd, &st);
    printf("size %ld\n", (long)st.st_size);
    setrlimit(RLIMIT_FSIZE, &old);
    said("write after the limit is lifted", pwrite(fd, buf, 100, 30000));
    close(fd);
    signal(SIGXFSZ, SIG_DFL);
}

static void readahead_and_fallocate_modes(void) {
    int rw = open("ra", O_RDWR | O_CREAT | O_TRUNC, 0644);
    int wo = open("ra", O_WRONLY);
    int dir = open(".", O_RDONLY | O_DIRECTORY);
    write(rw, "some bytes to read ahead", 24);
    said("readahead", readahead(rw, 0, 4096));
    said("readahead write-only", readahead(wo, 0, 4096));
    said("readahead directory", readahead(dir, 0, 4096));
    said("punch without keep size", fallocate(rw, FALLOC_FL_PUNCH_HOLE, 0, 4));
    said("collapse with keep size",
         fallocate(rw, FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_KEEP_SIZE, 0, 4096));
    said("insert with keep size",
         fallocate(rw, FALLOC_FL_INSERT_RANGE | FALLOC_FL_KEEP_SIZE, 0, 4096));
    said("fallocate past the largest offset", fallocate(rw, 0, 0x7fffffffffffffffLL, 2));
    close(rw);
    close(wo);
    close(dir);
}

// A read of `fd` through an io_uring made by number; a refused set-up (ENOSYS, as on a kernel
// without io_uring) counts as answered, a ring that cannot read the file does not.
static void io_uring_by_number(int fd) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int ring = syscall(SYS_io_uring_setup, 4, &p);
    if (ring < 0) {
        printf("io_uring: %s\n", errno == ENOSYS ? "answered" : strerrorname_np(errno));
        return;
    }
    size_t sq_bytes = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_bytes = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    char *sq = mmap(0, sq_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_SQ_RING);
    char *cq = mmap(0, cq_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_CQ_RING);
    struct io_uring_sqe *sqes = mmap(0, p.sq_entries * sizeof *sqes, PROT_READ | PROT_WRITE,
                                     MAP_SHARED, ring, IORING_OFF_SQES);
    char data[16] = {0};
    memset(&sqes[0], 0, sizeof sqes[0]);
    sqes[0].opcode = IORING_OP_READ;
    sqes[0].fd = fd;
    sqes[0].addr = (unsigned long)data;
    sqes[0].len = 10;
    unsigned *tail = (unsigned *)(sq + p.sq_off.tail);
    unsigned *array = (unsigned *)(sq + p.sq_off.array);
    array[*tail & *(unsigned *)(sq + p.sq_off.ring_mask)] = 0;
    __atomic_store_n(tail, *tail + 1, __ATOMIC_RELEASE);
    syscall(SYS_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, 0, 0);
    unsigned head = *(unsigned *)(cq + p.cq_off.head);
    struct io_uring_cqe *cqe = (struct io_uring_cqe *)(cq + p.cq_off.cqes) +
                               (head & *(unsigned *)(cq + p.cq_off.ring_mask));
    if (cqe->res == 10 && memcmp(data, "some bytes", 10) == 0)
        printf("io_uring: answered\n");
    else
        printf("io_uring: read %d (%s)\n", cqe->res,
               cqe->res < 0 ? strerrorname_np(-cqe->res) : data);
    close(ring);
}

static char clone_stack[64 * 1024];

static int clone_child(void *arg) {
    (void)arg;
    int fd = open("/dev/null", O_RDONLY);
    close(fd);
    _exit(0);
}

// The descriptors numbered 1000 and up with their inodes, summed: on noseFS the shim's own
// (its connection to the daemon), which a child's end must leave as they were.
static unsigned long high_descriptors(void) {
    unsigned long sum = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int fd = atoi(e->d_name);
        struct stat st;
        if (fd >= 1000 && fstat(fd, &st) == 0)
            sum += (unsigned long)fd * 1000003 + st.st_ino;
    }
    if (d)
        closedir(d);
    return sum;
}

// A child sharing this process's memory and descriptors ends: the parent's files stay usable,
// and its connection stays the one it had.
static void clone_vm_child(void) {
    int fd = open("shared", O_RDWR | O_CREAT | O_TRUNC, 0644);
    write(fd, "before ", 7);
    unsigned long before = high_descriptors();
    pid_t child = clone(clone_child, clone_stack + sizeof clone_stack,
                        CLONE_VM | CLONE_FILES | SIGCHLD, 0);
    int status = 0;
    waitpid(child, &status, __WCLONE);
    printf("clone child: %d\n", WEXITSTATUS(status));
    printf("high descriptors as before: %s\n", high_descriptors() == before ? "yes" : "no");
    said("write after it ended", write(fd, "after", 5));
    said("fsync", fsync(fd));
    char back[16] = {0};
    said("read back", pread(fd, back, sizeof back - 1, 0));
    printf("%s\n", back);
    int again = open("shared", O_RDONLY);
    said("open after it ended", again >= 0 ? 0 : -1);
    close(again);
    close(fd);
}

// stress-ng's fault stressor: a file unlinked, then mapped shared, its descriptor closed, stored
// to and unmapped (the stores have nowhere to go; munmap does not fail for it).
static void unlinked_mapping(void) {
    int fd = open("gone", O_RDWR | O_CREAT | O_TRUNC, 0644);
    posix_fallocate(fd, 0, 1);
    unlink("gone");
    char *p = mmap(0, 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        printf("mmap of an unlinked file: %s\n", strerrorname_np(errno));
        return;
    }
    p[0] = 1;
    madvise(p, 4096, MADV_DONTNEED);
    p[0] = 2;
    said("munmap of an unlinked file", munmap(p, 4096));
}

int main(void) {
    setvbuf(stdout, 0, _IONBF, 0);
    file_size_limit();
    readahead_and_fallocate_modes();
    int fd = open("ra", O_RDONLY);
    io_uring_by_number(fd);
    close(fd);
    clone_vm_child();
    unlinked_mapping();
    return 0;
}
