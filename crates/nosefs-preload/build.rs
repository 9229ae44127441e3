//! Builds the C entry points whose signatures Rust cannot define: libc's variadic functions,
//! and dlopen, which must reach the real one by a jump.

fn main() {
    println!("cargo:rerun-if-changed=src/variadic.c");
    println!("cargo:rerun-if-changed=src/dlopen.c");
    cc::Build::new()
        .file("src/variadic.c")
        .file("src/dlopen.c")
        // dlopen.c's tail call must stay a jump in every profile (see there).
        .opt_level(2)
        .flag_if_supported("-foptimize-sibling-calls")
        .flag_if_supported("-fvisibility=default")
        .warnings(true)
        .compile("nosefs_variadic");
    // The unwinder linked in statically (libgcc_eh), so that libgcc_s is not loaded into every
    // process: its constructor probes the CPU with a dozen CPUID instructions, which trap to the
    // hypervisor in a VM (~4 us each here). Every symbol but the shim's entry points stays local
    // to the library (rustc's version script), so the program's own unwinder is untouched.
    println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
}
