/* dlopen for the noseFS preload shim. glibc's dlopen finds its calling object from its return
 * address: a name without a slash is searched by that object's DT_RPATH or DT_RUNPATH, and the
 * object is loaded into its namespace. ffi.rs exports `dlopen` as a naked jump here, and this
 * function reaches the real dlopen by a tail call (a jump, built with -O2 and sibling-call
 * optimisation: build.rs), so the return address the real one sees is still the program's.
 * The one change: a path to a shared object stored in noseFS (embedded mode) becomes the path of
 * a memfd copy of it, which the loader, opening paths itself through the kernel, can open
 * (nosefs_stored_library, in ffi.rs). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

const char *nosefs_stored_library(const char *file);

typedef void *(*dlopen_fn)(const char *, int);

void *nosefs_c_dlopen(const char *file, int flags) {
    static dlopen_fn real;
    if (real == NULL)
        real = (dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
    const char *stored = nosefs_stored_library(file);
    return real(stored != NULL ? stored : file, flags);
}
