/* The variadic libc entry points of the noseFS preload shim. Stable Rust cannot define a
 * C-variadic function, so each of these reads its optional arguments and calls the shim's
 * fixed-arity entry point (nosefs_hook_*, in ffi.rs), which serves noseFS paths and descriptors
 * and hands everything else to the real libc function. They are named nosefs_c_*: a Rust
 * cdylib exports only Rust symbols, so ffi.rs exports `open`, `fcntl`, `execl`, ... as naked
 * functions that jump here with the caller's registers and stack untouched. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <sys/types.h>

int nosefs_hook_openat(int dirfd, const char *path, int flags, mode_t mode);
int nosefs_hook_fcntl(int fd, int cmd, void *arg);
int nosefs_hook_ioctl(int fd, unsigned long request, void *arg);
long nosefs_hook_syscall(long number, long a1, long a2, long a3, long a4, long a5, long a6);

/* O_CREAT and O_TMPFILE are the flags that carry a mode (open(2)). */
static int wants_mode(int flags) {
    return (flags & O_CREAT) != 0 || (flags & __O_TMPFILE) == __O_TMPFILE;
}

#define MODE_ARG(flags, mode)            \
    mode_t mode = 0;                     \
    if (wants_mode(flags)) {             \
        va_list ap;                      \
        va_start(ap, flags);             \
        mode = (mode_t)va_arg(ap, int);  \
        va_end(ap);                      \
    }

int nosefs_c_open(const char *path, int flags, ...) {
    MODE_ARG(flags, mode);
    return nosefs_hook_openat(AT_FDCWD, path, flags, mode);
}

int nosefs_c_open64(const char *path, int flags, ...) {
    MODE_ARG(flags, mode);
    return nosefs_hook_openat(AT_FDCWD, path, flags | O_LARGEFILE, mode);
}

int nosefs_c_openat(int dirfd, const char *path, int flags, ...) {
    MODE_ARG(flags, mode);
    return nosefs_hook_openat(dirfd, path, flags, mode);
}

int nosefs_c_openat64(int dirfd, const char *path, int flags, ...) {
    MODE_ARG(flags, mode);
    return nosefs_hook_openat(dirfd, path, flags | O_LARGEFILE, mode);
}

/* fcntl's third argument is an int or a pointer; reading it as a pointer-sized value and passing
 * it on unchanged is what glibc's own wrappers do. */
int nosefs_c_fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return nosefs_hook_fcntl(fd, cmd, arg);
}

int nosefs_c_fcntl64(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return nosefs_hook_fcntl(fd, cmd, arg);
}

int nosefs_c_ioctl(int fd, unsigned long request, ...) {
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return nosefs_hook_ioctl(fd, request, arg);
}

/* syscall(2): six arguments, however many the caller passed, as glibc's own syscall reads them
 * (the kernel ignores the ones a call does not take). The numbers of the calls the shim serves
 * reach it (nosefs_hook_syscall, ffi/raw.rs, which sends the others on to libc's syscall); the
 * futex calls go straight to libc's syscall, so programs that make them so (the lock libraries)
 * pay nothing for the hook. */
#include <dlfcn.h>
#include <stddef.h>
#include <sys/syscall.h>

long nosefs_c_syscall(long number, ...) {
    va_list ap;
    va_start(ap, number);
    long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long);
    long a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
    va_end(ap);
    if (number != SYS_futex) {
        return nosefs_hook_syscall(number, a1, a2, a3, a4, a5, a6);
    }
    static long (*real_syscall)(long, ...);
    long (*f)(long, ...) = __atomic_load_n(&real_syscall, __ATOMIC_RELAXED);
    if (f == NULL) {
        f = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
        __atomic_store_n(&real_syscall, f, __ATOMIC_RELAXED);
    }
    return f(number, a1, a2, a3, a4, a5, a6);
}

/* The exec family's list forms: gather the arguments, then call the hooked vector forms, which
 * hand noseFS state over to the new program. */
#include <stddef.h>
#include <unistd.h>

extern char **environ;

#define GATHER_ARGS(arg0, ap, argv, extra)                         \
    size_t n = 1;                                                  \
    va_list count;                                                 \
    va_copy(count, ap);                                            \
    while (va_arg(count, char *) != NULL) n++;                     \
    va_end(count);                                                 \
    char *argv[n + 1];                                             \
    argv[0] = (char *)(arg0);                                      \
    for (size_t i = 1; i <= n; i++) argv[i] = va_arg(ap, char *);

int nosefs_c_execl(const char *path, const char *arg0, ...) {
    va_list ap;
    va_start(ap, arg0);
    GATHER_ARGS(arg0, ap, argv, 0);
    va_end(ap);
    return execve(path, argv, environ);
}

int nosefs_c_execlp(const char *file, const char *arg0, ...) {
    va_list ap;
    va_start(ap, arg0);
    GATHER_ARGS(arg0, ap, argv, 0);
    va_end(ap);
    return execvpe(file, argv, environ);
}

int nosefs_c_execle(const char *path, const char *arg0, ...) {
    va_list ap;
    va_start(ap, arg0);
    GATHER_ARGS(arg0, ap, argv, 0);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}
