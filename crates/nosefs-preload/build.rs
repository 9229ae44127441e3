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
}
