/* Calls made by number through syscall(), as programs make them that glibc had no function for
 * when they were written (openat2 still has none), and the ioctls every Linux file system
 * answers (fs/ioctl.c): each prints its result and errno, the same on a kernel directory. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static void say(const char *what, long r) {
    if (r < 0)
        printf("%s: -1 %s\n", what, strerrorname_np(errno));
    else
        printf("%s: %ld\n", what, r);
}

/* FS_IOC_RESVSP's argument (struct space_resv): no header names it for programs. */
struct space_resv {
    int16_t l_type, l_whence;
    int64_t l_start, l_len;
    int32_t l_sysid;
    uint32_t l_pid;
    int32_t l_pad[4];
};
#define FS_IOC_RESVSP64 _IOW('X', 42, struct space_resv)
#define FS_IOC_UNRESVSP64 _IOW('X', 43, struct space_resv)
#define FS_IOC_ZERO_RANGE _IOW('X', 57, struct space_resv)

static void by_number(void) {
    int fd = syscall(SYS_openat, AT_FDCWD, "n", O_RDWR | O_CREAT | O_TRUNC, 0640);
    say("openat", fd >= 0);
    say("write", syscall(SYS_write, fd, "0123456789abcdef", 16));
    say("pwrite64", syscall(SYS_pwrite64, fd, "XY", 2, 4));
    say("lseek", syscall(SYS_lseek, fd, 0, SEEK_SET));
    char buf[64] = {0};
    say("read", syscall(SYS_read, fd, buf, 8));
    printf("  %s\n", buf);
    say("pread64", syscall(SYS_pread64, fd, buf, 4, 12));
    printf("  %.4s\n", buf);
    struct stat st;
    say("fstat", syscall(SYS_fstat, fd, &st));
    printf("  size %lld mode %o\n", (long long)st.st_size, st.st_mode & 07777);
    say("newfstatat", syscall(SYS_newfstatat, AT_FDCWD, "n", &st, 0));
    struct statx sx;
    say("statx", syscall(SYS_statx, AT_FDCWD, "n", 0, STATX_SIZE, &sx));
    printf("  size %llu\n", (unsigned long long)sx.stx_size);
    say("fallocate", syscall(SYS_fallocate, fd, 0, 0, 8192));
    say("ftruncate", syscall(SYS_ftruncate, fd, 100));
    say("fdatasync", syscall(SYS_fdatasync, fd));
    say("fsync", syscall(SYS_fsync, fd));
    /* A copy within the file: apart is fine, overlapping is EINVAL, flags are EINVAL. */
    int64_t in = 0, out = 50;
    say("copy_file_range apart", syscall(SYS_copy_file_range, fd, &in, fd, &out, 16, 0));
    printf("  offsets %lld %lld\n", (long long)in, (long long)out);
    in = 0, out = 8;
    say("copy_file_range overlapping", syscall(SYS_copy_file_range, fd, &in, fd, &out, 16, 0));
    in = 0, out = 70;
    say("copy_file_range flags", syscall(SYS_copy_file_range, fd, &in, fd, &out, 16, 1));
    say("pread64 copy", syscall(SYS_pread64, fd, buf, 16, 50));
    printf("  %.16s\n", buf);
    say("mkdirat", syscall(SYS_mkdirat, AT_FDCWD, "dir", 0750));
    say("symlinkat", syscall(SYS_symlinkat, "n", AT_FDCWD, "link"));
    memset(buf, 0, sizeof buf);
    say("readlinkat", syscall(SYS_readlinkat, AT_FDCWD, "link", buf, sizeof buf));
    printf("  %s\n", buf);
    say("linkat", syscall(SYS_linkat, AT_FDCWD, "n", AT_FDCWD, "dir/hard", 0));
    say("renameat2 noreplace", syscall(SYS_renameat2, AT_FDCWD, "link", AT_FDCWD, "n", RENAME_NOREPLACE));
    say("renameat2 exchange", syscall(SYS_renameat2, AT_FDCWD, "link", AT_FDCWD, "dir", RENAME_EXCHANGE));
    say("fchmodat", syscall(SYS_fchmodat, AT_FDCWD, "n", 0604));
    say("faccessat2", syscall(SYS_faccessat2, AT_FDCWD, "n", W_OK, AT_EACCESS));
    struct timespec times[2] = {{1000000000, 5}, {1200000000, 7}};
    say("utimensat", syscall(SYS_utimensat, AT_FDCWD, "n", times, 0));
    say("stat after", syscall(SYS_newfstatat, AT_FDCWD, "n", &st, 0));
    printf("  mode %o mtime %lld.%ld nlink %ld\n", st.st_mode & 07777, (long long)st.st_mtim.tv_sec,
           st.st_mtim.tv_nsec, (long)st.st_nlink);
    int dfd = syscall(SYS_openat, AT_FDCWD, ".", O_RDONLY | O_DIRECTORY);
    char dents[4096];
    long n = syscall(SYS_getdents64, dfd, dents, sizeof dents);
    int names = 0;
    for (long at = 0; at < n;) {
        unsigned short reclen = *(unsigned short *)(dents + at + 16);
        const char *name = dents + at + 19;
        if (name[0] != '.')
            names++;
        at += reclen;
    }
    printf("getdents64: %d names\n", names);
    /* Where a listing stands, as t_readdir_3 and telldir-minded programs ask it. */
    say("lseek dir SEEK_CUR is past the start", syscall(SYS_lseek, dfd, 0, SEEK_CUR) > 0);
    say("lseek dir SEEK_END", syscall(SYS_lseek, dfd, 0, SEEK_END));
    say("lseek dir rewind", syscall(SYS_lseek, dfd, 0, SEEK_SET));
    say("getdents64 again", syscall(SYS_getdents64, dfd, dents, sizeof dents) == n);
    say("fchdir", syscall(SYS_fchdir, dfd));
    say("close dir", syscall(SYS_close, dfd));
    say("chdir", syscall(SYS_chdir, "link"));
    memset(buf, 0, sizeof buf);
    long len = syscall(SYS_getcwd, buf, sizeof buf);
    const char *last = strrchr(buf, '/');
    printf("getcwd: length matches %d, ends in %s\n", len == (long)strlen(buf) + 1, last ? last : "?");
    say("chdir back", syscall(SYS_chdir, ".."));
    say("unlinkat", syscall(SYS_unlinkat, AT_FDCWD, "link/hard", 0));
    say("unlinkat dir", syscall(SYS_unlinkat, AT_FDCWD, "link", AT_REMOVEDIR));
    struct open_how how = {.flags = O_RDONLY};
    int f2 = syscall(SYS_openat2, AT_FDCWD, "n", &how, sizeof how);
    say("openat2", f2 >= 0);
    memset(buf, 0, sizeof buf);
    say("read openat2", syscall(SYS_read, f2, buf, 4));
    printf("  %s\n", buf);
    how.mode = 0600;
    say("openat2 mode without O_CREAT", syscall(SYS_openat2, AT_FDCWD, "n", &how, sizeof how));
    say("close", syscall(SYS_close, f2));
    say("close again", syscall(SYS_close, f2));
    close(fd);
}

static void ioctls(void) {
    int fd = open("io", O_RDWR | O_CREAT | O_TRUNC, 0644);
    char data[8192];
    memset(data, 'd', sizeof data);
    write(fd, data, sizeof data);
    say("FIOCLEX", ioctl(fd, FIOCLEX));
    printf("  FD_CLOEXEC %d\n", fcntl(fd, F_GETFD) & FD_CLOEXEC);
    say("FIONCLEX", ioctl(fd, FIONCLEX));
    printf("  FD_CLOEXEC %d\n", fcntl(fd, F_GETFD) & FD_CLOEXEC);
    int on = 1;
    say("FIONBIO", ioctl(fd, FIONBIO, &on));
    printf("  O_NONBLOCK %d\n", !!(fcntl(fd, F_GETFL) & O_NONBLOCK));
    on = 0;
    say("FIONBIO off", ioctl(fd, FIONBIO, &on));
    printf("  O_NONBLOCK %d\n", !!(fcntl(fd, F_GETFL) & O_NONBLOCK));
    int bsz = 0;
    say("FIGETBSZ", ioctl(fd, FIGETBSZ, &bsz));
    printf("  %d\n", bsz);
    int64_t qsize = -1;
    struct stat st;
    fstat(fd, &st);
    say("FIOQSIZE", ioctl(fd, FIOQSIZE, &qsize));
    printf("  st_blocks in bytes %d\n", qsize == (int64_t)st.st_blocks * 512);
    struct space_resv r = {.l_whence = SEEK_SET, .l_start = 8192, .l_len = 8192};
    say("FS_IOC_RESVSP64", ioctl(fd, FS_IOC_RESVSP64, &r));
    fstat(fd, &st);
    printf("  size %lld\n", (long long)st.st_size);
    r = (struct space_resv){.l_whence = SEEK_END, .l_start = -8192, .l_len = 100};
    say("FS_IOC_UNRESVSP64 from the end", ioctl(fd, FS_IOC_UNRESVSP64, &r));
    lseek(fd, 200, SEEK_SET);
    r = (struct space_resv){.l_whence = SEEK_CUR, .l_start = -100, .l_len = 10};
    say("FS_IOC_UNRESVSP64 from here", ioctl(fd, FS_IOC_UNRESVSP64, &r));
    r.l_whence = 7;
    say("FS_IOC_ZERO_RANGE bad whence", ioctl(fd, FS_IOC_ZERO_RANGE, &r));
    char back[300];
    pread(fd, back, sizeof back, 0);
    int zeros = 0;
    for (int i = 0; i < (int)sizeof back; i++)
        zeros += back[i] == 0;
    printf("  zero bytes in the first 300: %d\n", zeros);
    int other = open("other", O_RDWR | O_CREAT, 0644);
    say("FICLONE", ioctl(other, FICLONE, fd));
    struct file_clone_range cr = {.src_fd = fd, .src_offset = 0, .src_length = 4096, .dest_offset = 0};
    say("FICLONERANGE", ioctl(other, FICLONERANGE, &cr));
    say("FS_IOC_RESVSP64 on a directory", ioctl(open(".", O_RDONLY), FS_IOC_RESVSP64, &r));
    close(other);
    close(fd);
}

/* Closing every number up to the limit, as some daemons do at start: the shim's own
 * descriptors among them answer EBADF, as numbers not open do, and nothing is said on stderr
 * (which the test asserts empty). */
static void close_everything(void) {
    long limit = sysconf(_SC_OPEN_MAX);
    for (long fd = 3; fd < limit; fd++)
        close((int)fd);
    printf("closed every descriptor\n");
}

int main(void) {
    by_number();
    ioctls();
    fflush(stdout);
    close_everything();
    return 0;
}
